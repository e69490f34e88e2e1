"""Benchmark of the commands users run every day, one command: ``python bench/everyday.py``.

Prints, side by side in one run, each figure from its own process (``os.wait4`` gives the peak RSS):

* ``rdmasim run`` with its default engine of 10^6 and 10^7 4 KiB WRITEs, end to end (results and figures
  included), against the solve alone in a process of its own; the target, from 10^7 WRITEs on, is end to end at
  most twice the solve;
* ``rdmasim perftest ib_write_bw -D 5`` against ``-n`` with the WRITEs that run posted (target: at most twice);
* every shipped scenario with its default engine and with ``--engine event``: wall times, their ratio, the engine
  that ran each variant (from ``manifest.json``) and whether the two results directories hold the same bytes
  (manifests aside, which record the engine); the target is 10x for all but data mode. Beside them, the solve
  alone of every variant with each engine, in one process after its imports: where a command's wall time is mostly
  start-up and writing results, the end-to-end ratio cannot show the engines' difference;
* ``rdmasim --version`` start-up (target 0.5 s; ``bench/startup.py`` measures more lines).

``--quick`` runs 10^5 and 10^6 WRITEs, ``-D 1`` and leaves the shipped scenarios out. ``--against REV`` (repeatable)
measures instead the solve alone of every shipped scenario and of a few perftest lines (:data:`PERFTEST_LINES`) with
the default engine in this checkout and in a git worktree of each REV, side by side, taking the trees in turn, with
the ratio of each REV's time to this checkout's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from duration import operations_run, perftest
from measured import ROOT, rdmasim, timed
from worktrees import checked_out

SOLVE = """
import sys
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario
scenario, _ = load_scenario(sys.argv[1])
run_scenario(scenario, notice=lambda line: None)
"""
WRITES = """schema: 1
name: writes-{n}
seed: 1
nodes: [{{name: a}}, {{name: b}}]
buffers:
  - {{name: src, on: a.host, size: 1MiB}}
  - {{name: dst, on: b.host, size: 1MiB}}
workload: [{{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: {n}, tx_depth: 128}}]
outputs: [bw_vs_size, bw_over_time, latency_cdf]
"""
SOLVES = """
import sys, time
sys.path.insert(0, sys.argv[2])
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
_, _, variants = load_scenario_variants(sys.argv[1])
for engine in sys.argv[3:]:
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        for name, scenario in variants:
            run_scenario(scenario.model_copy(update={"engine": engine}), variant=name, notice=lambda line: None)
        best = min(best, time.perf_counter() - started)
    print(best)
"""
"""Prints the solve alone of every variant of a scenario file (s), with each engine named (the tree's code: its root is
the second argument), the best of two in one process after its imports: the part of a command that the engine
decides."""
PERFTEST_SOLVE = """
import shlex, sys, time
sys.path.insert(0, sys.argv[2])
from sim.cli.perftest import perftest_scenario
from sim.engine.run import run_scenario
scenario = perftest_scenario(shlex.split(sys.argv[1]))
best = float("inf")
for _ in range(2):
    started = time.perf_counter()
    run_scenario(scenario, notice=lambda line: None, operations=False)
    best = min(best, time.perf_counter() - started)
print(best)
"""
"""Prints the solve alone of a perftest command line (the first argument) with the default engine, in the tree whose
root is the second argument, the best of two in one process after its imports."""
PERFTEST_LINES = ("ib_write_bw -b -n 20000", "ib_send_bw -s 64 -n 20000", "ib_write_bw -s 512 -n 100000",
                  "ib_write_bw -a", "ib_send_bw -a", "ib_write_bw -s 64 -n 100000 -Q 100", "ib_write_bw -D 1 -Q 100",
                  "ib_read_bw --use_cuda=0 -n 20000", "ib_read_bw --use_cuda=0 -q 2 -n 20000")
"""perftest lines whose blocks the vectorized core solves in many passes (small messages, both directions at once,
every size, moderated completions, READs into a GPU on one QP and two), which no shipped scenario has."""
TARGET_FROM = 10 ** 7
"""The end-to-end target (at most twice the solve) holds for runs of this many WRITEs and more: below, the
imports and figures every run pays outweigh the solve."""
DATA_MODE = {"rcache_churn.yaml"}
"""Shipped scenarios in data mode, which stays on the event engine."""


def writes(counts: list[int], scratch: Path) -> None:
    print(f"{'rdmasim run, 4 KiB WRITEs':<30} {'end to end s':>12} {'peak RSS':>10} {'solve s':>8} {'ratio':>6}")
    for n in counts:
        path = scratch / f"writes-{n}.yaml"
        path.write_text(WRITES.format(n=n))
        whole, rss, _ = rdmasim("run", str(path), "--out", str(scratch / f"out-{n}"), "--quiet")
        solve, _, _ = timed(["-c", SOLVE, str(path)])
        ratio = whole / solve
        verdict = f"{'met' if ratio <= 2 else 'MISSED'} (at most 2)" if n >= TARGET_FROM else "(no target below 10^7)"
        print(f"{n:<30,} {whole:12.1f} {rss / 2**30:8.2f}Gi {solve:8.1f} {ratio:6.2f}  {verdict}")


def duration(seconds: str) -> None:
    wall, rss, line = perftest("-D", seconds)
    count = operations_run(seconds, line)
    counted, _, _ = perftest("-n", str(count))
    ratio = wall / counted
    print(f"perftest ib_write_bw -D {seconds}: {wall:.1f} s ({rss / 2**20:.0f} MiB), -n {count:,}: {counted:.1f} s, "
          f"ratio {ratio:.2f} {'met' if ratio <= 2 else 'MISSED'} (at most 2)")


def same_bytes(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != "manifest.json")
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name != "manifest.json") \
        and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def shipped(scratch: Path) -> None:
    print(f"\n{'':<24} {'rdmasim run, end to end':^26}  {'the solve alone':^26}")
    print(f"{'scenario':<24} {'default s':>9} {'event s':>8} {'ratio':>6}  {'default s':>9} {'event s':>8} "
          f"{'ratio':>6}  same bytes  engines (variants)")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        default, event = scratch / f"{path.stem}-default", scratch / f"{path.stem}-event"
        fast, _, _ = rdmasim("run", str(path), "--out", str(default), "--quiet")
        slow, _, _ = rdmasim("run", str(path), "--out", str(event), "--quiet", "--engine", "event")
        solve_fast, solve_slow = map(float, timed(["-c", SOLVES, str(path), str(ROOT), "auto", "event"])[2].split())
        engines = json.loads((default / "manifest.json").read_text())["engines"]
        ran = sorted({w["engine"] for e in engines.values() for w in e["workloads"]})
        target = "" if path.name in DATA_MODE else ("  met" if slow / fast >= 10 else "  below 10x")
        print(f"{path.stem:<24} {fast:9.1f} {slow:8.1f} {slow / fast:6.1f}  {solve_fast:9.3f} {solve_slow:8.3f} "
              f"{solve_slow / solve_fast:6.1f}  {str(same_bytes(default, event)):<10}  "
              f"{', '.join(ran)} ({len(engines)}){target}")


def against(revs: list[str], rounds: int = 2) -> None:
    """The solve alone of every shipped scenario and perftest line with the default engine, this checkout against
    each of ``revs`` (the best of ``rounds`` rounds that take the trees in turn, each round the best of two solves)."""
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch, checked_out(revs, scratch) as trees:
        print(f"{'the solve alone, default engine':<32}" + "".join(f"{name[:13]:>14}" for name in trees)
              + "".join(f"{rev[:10] + ' / this':>18}" for rev in revs))
        cases = [(path.stem, lambda tree, name=path.name: [SOLVES, str(tree / "scenarios" / name), str(tree), "auto"])
                 for path in sorted((ROOT / "scenarios").glob("*.yaml"))]
        cases += [(line, lambda tree, line=line: [PERFTEST_SOLVE, line, str(tree)]) for line in PERFTEST_LINES]
        for label, arguments in cases:
            best = dict.fromkeys(trees, float("inf"))
            for _ in range(rounds):
                for name, tree in trees.items():
                    best[name] = min(best[name], float(timed(["-c", *arguments(tree)], cwd=tree)[2]))
            mine = best["this checkout"]
            print(f"{label:<32}" + "".join(f"{s:14.3f}" for s in best.values())
                  + "".join(f"{best[rev] / mine:18.2f}" for rev in revs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^5 and 10^6 WRITEs, -D 1, no shipped scenarios")
    parser.add_argument("--against", action="append", default=[], metavar="REV",
                        help="compare the shipped scenarios' solves with this commit's (repeatable)")
    args = parser.parse_args()
    if args.against:
        against(args.against)
        return
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch:
        writes([10**5, 10**6] if args.quick else [10**6, 10**7], Path(scratch))
        duration("1" if args.quick else "5")
        if not args.quick:
            shipped(Path(scratch))
    start, _, _ = rdmasim("--version")
    print(f"\nrdmasim --version: {start:.2f} s {'met' if start <= 0.5 else 'MISSED'} (at most 0.5)")


if __name__ == "__main__":
    main()

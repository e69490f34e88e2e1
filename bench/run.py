"""Benchmark of the event engine, one command: ``python bench/run.py [--against REV ...]``.

Prints the event engine's simulated RDMA WRITEs per CPU second on the quickstart's write_bw at 4 KiB for this
checkout and, measured side by side in the same run, for each commit ``--against`` names (default ``c515211``,
the commit before the one data path, whose rate the target multiplies), with the ratio to each. A commit is
checked out in a temporary git worktree and measured by the same script in its own process. Machines are shared
and noisy: each figure is the best of ``--rounds`` x ``--repeats`` runs, the rounds taking the trees in turn, and
CPU time (``time.process_time``) is counted rather than wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from worktrees import checked_out

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "c515211"
TARGET_RATIO = 1.5
"""This checkout's rate over the baseline's that the event engine is to reach."""

MEASURE = """
import sys, time
from pathlib import Path
root = Path(sys.argv[1])
sys.path.insert(0, str(root))
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario
iterations, repeats = int(sys.argv[2]), int(sys.argv[3])
scenario, _ = load_scenario(root / "scenarios" / "quickstart.yaml")
work = scenario.workload[0].model_copy(update={"sizes": [4096], "iterations": iterations})
update = {"workload": [work]}
if "engine" in type(scenario).model_fields:
    update["engine"] = "event"
scenario = scenario.model_copy(update=update)
best = float("inf")
for _ in range(repeats):
    started = time.process_time()
    run_scenario(scenario)
    best = min(best, time.process_time() - started)
print(iterations / best)
"""
"""Run as ``python -c MEASURE ROOT ITERATIONS REPEATS`` with ROOT a checkout: prints its best WRITEs per CPU
second (only APIs every compared commit has)."""


def writes_per_second(root: Path, iterations: int, repeats: int) -> float:
    """Best-of-``repeats`` simulated 4 KiB WRITEs per CPU second of the checkout at ``root``, in a new process."""
    out = subprocess.run([sys.executable, "-c", MEASURE, str(root), str(iterations), str(repeats)],
                         capture_output=True, text=True, check=True, cwd=root)
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", action="append", metavar="REV",
                        help=f"a commit to measure beside this checkout (repeatable; default {BASELINE})")
    parser.add_argument("--iterations", type=int, default=30_000, help="WRITEs per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per process")
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree, the trees taken in turn")
    args = parser.parse_args()
    revs = args.against or [BASELINE]
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch, checked_out(revs, scratch) as trees:
        best = dict.fromkeys(trees, 0.0)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                best[name] = max(best[name], writes_per_second(tree, args.iterations, args.repeats))
    print(f"event engine, quickstart write_bw 4 KiB x {args.iterations:,}: simulated WRITEs per CPU second "
          f"(best of {args.rounds * args.repeats})")
    mine = best["this checkout"]
    for name, rate in best.items():
        ratio = "" if name == "this checkout" else f"   this checkout / {name} = {mine / rate:.2f}"
        target = f" (target {TARGET_RATIO})" if name == BASELINE else ""
        print(f"  {name:<14} {rate:>9,.0f}{ratio}{target}")


if __name__ == "__main__":
    main()

"""Benchmark of the vectorized core, one command: ``python bench/fast_core.py``.

Measured side by side in one run and printed with their ratios:

* the quickstart's ``write_bw`` at 4 KiB on the event engine, on the fast engine (end to end: testbed, solve,
  tables) and on the fast core alone (the solve), after checking that both engines give identical tables;
* a 6-stage windowed pipeline (the same recurrences, no shared server) on the fast core and as a
  numba-compiled scalar loop (skipped with a message when numba is absent), after checking they agree;
* memory: 100 M operations of that pipeline solved block by block in a separate process, peak RSS reported;
* an evicted source: ``scenarios/pin_vs_dmabuf.yaml``'s dynamic dma-buf variant (the exporter moves the buffer
  the WRITEs read from) on both engines, identical tables and counters, WRITEs per second of each.
* size: lines of the vectorized core and its planner (``sim/fast/*.py`` and ``sim/engine/planner/plan.py``, as ``wc -l``
  counts them).

Machines are shared and noisy: each figure is the best of ``--repeats`` runs, except the pipeline's ratio to the
compiled loop, which is the median of ``--pairs`` interleaved pairs (fast core, then loop, each the fastest call in
CPU time among repeated solves of the same input over at least ``--sample`` seconds), printed with the pairs'
spread and the ratio of the fastest calls of all.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.core.steps import Claim, Delay, Rebase, Wake  # noqa: E402
from sim.fast import Group, Server, UniformSeries, solve  # noqa: E402
from sim.engine.planner.plan import pipelines  # noqa: E402
from sim.engine.planner.streams import streams  # noqa: E402
from sim.engine.harness import setup_run  # noqa: E402
from sim.engine.run import run_scenario  # noqa: E402
from sim.scenario.scenario_file import load_scenario, load_scenario_variants  # noqa: E402

TARGETS = {"6-stage fast core ops/s": 20e6, "fast/event": 200.0, "fast/numba": 0.6, "evicted fast/event": 50.0,
           "lines": 1500}
STAGES = ((0, 3_000, 3_000, 3_000, 0, True), (1, 70_000, 24_000, 24_000, 550_000, False),
          (2, 75_000, 1_500, 1_500, 150_000, True), (3, 82_800, 0, 0, 300_000, False),
          (4, 77_000, 5_800, 0, 0, True), (5, 3_000, 3_000, 3_000, 150_000, True))
"""(server, service, head, tail, latency, eager) in ps: a WRITE-like path whose wire stage is the bottleneck."""
WINDOW, DOORBELL, POLL = 128, 200_000, 40_000


def best(repeats: int, run) -> float:
    """Shortest wall time of ``repeats`` calls (s)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def rate(ops: int, run, sample: float) -> float:
    """Operations per CPU second of ``run``'s fastest call (``ops`` operations a call) among calls made until
    ``sample`` s of CPU time have passed: a call slowed by other work on the machine does not count."""
    fastest, started = float("inf"), time.process_time()
    while True:
        begin = time.process_time()
        run()
        end = time.process_time()
        fastest = min(fastest, end - begin)
        if end - started >= sample:
            return ops / fastest


def interleaved(ops: int, first, second, pairs: int, sample: float) -> tuple[list[float], list[float]]:
    """Rates (ops/s) of ``first`` and ``second`` measured alternately, ``pairs`` times each, after one warm-up
    call of each; on a shared machine a pair sees much the same load, so their ratio varies less than either."""
    first(), second()
    rates = [(rate(ops, first, sample), rate(ops, second, sample)) for _ in range(pairs)]
    return [a for a, _ in rates], [b for _, b in rates]


def quickstart(iterations: int, engine: str):
    scenario, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    work = scenario.workload[0].model_copy(update={"sizes": [4096], "iterations": iterations})
    return scenario.model_copy(update={"workload": [work], "engine": engine})


def evicted(iterations: int, engine: str):
    """``pin_vs_dmabuf``'s ``dmabuf`` variant with ``iterations`` 1 MiB WRITEs on ``engine``."""
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "pin_vs_dmabuf.yaml")
    scenario = dict(variants)["dmabuf"]
    work = scenario.workload[0].model_copy(update={"iterations": iterations})
    return scenario.model_copy(update={"workload": [work], "engine": engine})


def core_only(iterations: int) -> float:
    """Time of the fast core's solve alone on the quickstart write_bw 4 KiB (testbed built beforehand)."""
    scenario = quickstart(iterations, "fast")
    bed, started, _ = setup_run(scenario, scenario.seed)
    pipes = pipelines(streams(scenario, bed))
    begin = time.perf_counter()
    for _ in solve(pipes.servers, pipes.groups, started):
        pass
    return time.perf_counter() - begin


class Polls:
    """Per-operation poll delays drawn like the event engine's, released as blocks finish."""

    def __init__(self, seed: int) -> None:
        self.series = UniformSeries(np.random.default_rng(seed), POLL)

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        return self.series.take(lo, hi)

    def finished(self, lo: int) -> None:
        self.series.release(lo)


def six_stage(ops: int, seed: int = 1) -> tuple[list[Server], list[Group]]:
    steps = (Delay(DOORBELL), *(Claim(*stage) for stage in STAGES), Rebase(True), Delay(draws="poll"), Wake())
    return [Server(f"s{i}") for i in range(len(STAGES))], [Group(steps, ops, WINDOW, {"poll": Polls(seed)})]


def six_stage_fast(ops: int) -> np.ndarray | None:
    servers, groups = six_stage(ops)
    done = [piece.done for piece in solve(servers, groups)]
    return np.concatenate(done)


def numba_loop():
    """The same recurrence as a compiled scalar loop (None without numba)."""
    try:
        from numba import njit
    except ImportError:
        return None

    @njit(cache=False)
    def loop(stages, polls, window, doorbell):
        n = len(polls)
        free = np.zeros(len(stages), np.int64)
        done = np.empty(n, np.int64)
        for i in range(n):
            post = 0 if i < window else done[i - window]
            head = tail = post + doorbell
            for k in range(len(stages)):
                start = max(head, free[stages[k, 0]])
                finish = max(start + stages[k, 1], tail + stages[k, 3])
                free[stages[k, 0]] = finish
                head, tail = start + stages[k, 2] + stages[k, 4], finish + stages[k, 4]
            end = tail + polls[i]
            done[i] = end if i == 0 else max(end, done[i - 1])
        return done

    table = np.array([stage[:5] for stage in STAGES], np.int64)
    return lambda polls: loop(table, polls, WINDOW, DOORBELL)


def memory_check(ops: int) -> None:
    """Solve ``ops`` operations of the 6-stage pipeline keeping nothing; print time and peak RSS."""
    servers, groups = six_stage(ops)
    count = 0
    started = time.perf_counter()
    for piece in solve(servers, groups):
        count += len(piece.done)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{count} {elapsed} {peak}")


def pipeline(args) -> None:
    """The 6-stage pipeline's rate on the fast core, and its ratio to the compiled loop (interleaved pairs)."""
    n = args.pipeline_ops
    print(f"6-stage pipeline, window {WINDOW} ({n:,} operations):")
    target = TARGETS["6-stage fast core ops/s"]
    compiled = numba_loop()
    if compiled is None:
        fast_rate = n / best(args.repeats, lambda: six_stage_fast(n))
        print(f"  fast core                    {fast_rate:14,.0f} ops/s   (target {target:,.0f})")
        print("  numba scalar loop            skipped: numba is not installed (pip install numba)")
        return
    polls = UniformSeries(np.random.default_rng(1), POLL).take(0, n)
    if not np.array_equal(compiled(polls), six_stage_fast(n)):
        raise SystemExit("numba loop and fast core disagree")
    fast, loop = interleaved(n, lambda: six_stage_fast(n), lambda: compiled(polls), args.pairs, args.sample)
    ratios = [a / b for a, b in zip(fast, loop)]
    print(f"  fast core                    {statistics.median(fast):14,.0f} ops/s   (target {target:,.0f}; "
          f"median of {args.pairs}, {min(fast):,.0f}..{max(fast):,.0f})")
    print(f"  numba scalar loop            {statistics.median(loop):14,.0f} ops/s   "
          f"(median of {args.pairs}, {min(loop):,.0f}..{max(loop):,.0f})")
    print(f"  fast core / numba loop       {statistics.median(ratios):14,.3f} x   (target {TARGETS['fast/numba']}; "
          f"median of {args.pairs} interleaved pairs, {min(ratios):.3f}..{max(ratios):.3f}; "
          f"fastest / fastest {max(fast) / max(loop):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--event-ops", type=int, default=100_000, help="WRITEs for the event engine")
    parser.add_argument("--fast-ops", type=int, default=2_000_000, help="WRITEs for the fast engine")
    parser.add_argument("--pipeline-ops", type=int, default=5_000_000, help="operations of the 6-stage pipeline")
    parser.add_argument("--memory-ops", type=int, default=100_000_000, help="operations of the memory check")
    parser.add_argument("--evicted-ops", type=int, default=100_000, help="WRITEs of the evicted-source run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=9, help="interleaved pairs of the pipeline's ratio")
    parser.add_argument("--sample", type=float, default=0.4, help="CPU seconds of one timing sample (s)")
    parser.add_argument("--pipeline-only", action="store_true", help="measure the 6-stage pipeline only")
    parser.add_argument("--memory-check", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_check:
        return memory_check(args.memory_check)

    if args.pipeline_only:
        return pipeline(args)
    event, fast = (run_scenario(quickstart(args.event_ops, e)) for e in ("event", "fast"))
    pd.testing.assert_frame_equal(event.operations, fast.operations)
    rates = {"event engine": args.event_ops / best(1, lambda: run_scenario(quickstart(args.event_ops, "event"))),
             "fast engine (end to end)": args.fast_ops / best(args.repeats, lambda: run_scenario(
                 quickstart(args.fast_ops, "fast"))),
             "fast core (solve only)": args.fast_ops / min(core_only(args.fast_ops) for _ in range(args.repeats))}
    print(f"quickstart write_bw 4 KiB ({args.event_ops:,} WRITEs identical on both engines):")
    for name, rate in rates.items():
        print(f"  {name:28s} {rate:14,.0f} simulated WRITEs/s")
    print(f"  fast core / event engine     {rates['fast core (solve only)'] / rates['event engine']:14,.1f} x"
          f"   (target {TARGETS['fast/event']:.0f} x)")
    print(f"  fast end to end / event      {rates['fast engine (end to end)'] / rates['event engine']:14,.1f} x")

    pipeline(args)
    n = args.evicted_ops
    event, fast = (run_scenario(evicted(n, e), notice=print) for e in ("event", "fast"))
    pd.testing.assert_frame_equal(event.operations, fast.operations)
    pd.testing.assert_frame_equal(event.events, fast.events)
    if event.counters != fast.counters:
        raise SystemExit(f"counters differ: {event.counters} vs {fast.counters}")
    seconds = {e: best(1 if e == "event" else args.repeats, lambda e=e: run_scenario(evicted(n, e)))
               for e in ("event", "fast")}
    print(f"evicted source: pin_vs_dmabuf dmabuf, {n:,} WRITEs of 1 MiB, {fast.counters['refaults']} re-fault(s), "
          "identical on both engines:")
    for e, t in seconds.items():
        print(f"  {e} engine (end to end)      {n / t:14,.0f} simulated WRITEs/s")
    print(f"  fast / event                 {seconds['event'] / seconds['fast']:14,.1f} x   "
          f"(target {TARGETS['evicted fast/event']:.0f} x)")
    core = [*sorted((ROOT / "sim" / "fast").glob("*.py")), ROOT / "sim" / "engine" / "planner" / "plan.py"]
    lines = sum(len(path.read_text().splitlines()) for path in core)
    print(f"vectorized core: {lines:,} lines in sim/fast/*.py and sim/engine/planner/plan.py "
          f"(target at most {TARGETS['lines']:,})")

    out = subprocess.run([sys.executable, __file__, "--memory-check", str(args.memory_ops)], capture_output=True,
                         text=True, check=True).stdout.split()
    count, elapsed, peak = int(out[0]), float(out[1]), float(out[2])
    print(f"memory: {count:,} operations in blocks in {elapsed:.1f} s ({count / elapsed:,.0f} ops/s), "
          f"peak RSS {peak:.2f} GiB (limit 2 GiB)")


if __name__ == "__main__":
    main()

"""Benchmarks, one command: ``python bench/run.py``.

Prints the event engine's simulated RDMA WRITEs per wall-clock second on the quickstart's write_bw at 4 KiB,
next to the target, measured in this run. Machines are shared and noisy: the best of several repetitions
is reported, and the ratio to the target is what matters.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sim.run import run_scenario
from sim.scenario.scenario_file import load_scenario

ROOT = Path(__file__).resolve().parents[1]
TARGET_WRITES_PER_S = 50_000


def event_engine_writes_per_second(iterations: int, repeats: int) -> float:
    """Best-of-``repeats`` simulated 4 KiB RDMA WRITEs per wall second on the quickstart testbed."""
    scenario, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    work = scenario.workload[0].model_copy(update={"sizes": [4096], "iterations": iterations})
    scenario = scenario.model_copy(update={"workload": [work]})
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        run_scenario(scenario)
        best = max(best, iterations / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000, help="WRITEs per repetition")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rate = event_engine_writes_per_second(args.iterations, args.repeats)
    print(f"event engine, quickstart write_bw 4 KiB: {rate:,.0f} simulated WRITEs per wall second "
          f"(target {TARGET_WRITES_PER_S:,}; ratio {rate / TARGET_WRITES_PER_S:.2f})")


if __name__ == "__main__":
    main()

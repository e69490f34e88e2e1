"""Several QPs at once (perftest -q) on both engines, one command: ``python bench/multi_qp.py``.

The quickstart's ``write_bw`` with ``qps`` 4 and 16 at 4 KiB and 64 KiB, each run on the event engine and on the
vectorized core (``engine: fast``) side by side, their tables checked identical; prints the CPU seconds of each
(best of ``--repeats``) and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.run import run_scenario  # noqa: E402
from sim.scenario.scenario_file import load_scenario  # noqa: E402


def timed(scenario, repeats: int):
    """The run and its least CPU time over ``repeats`` runs (s)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.process_time()
        result = run_scenario(scenario)
        best = min(best, time.process_time() - started)
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000, help="work requests per QP and size")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    base, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    write_bw = base.workload[0]
    print(f"{'qps':>4} {'size':>6} {'event CPU s':>12} {'fast CPU s':>11} {'event/fast':>11}")
    for qps in (4, 16):
        for size in ("4KiB", "64KiB"):
            work = write_bw.model_copy(update={"qps": qps, "iterations": args.iterations,
                                               "sizes": [int(size[:-3]) * 1024]})
            runs = [timed(base.model_copy(update={"workload": [work], "engine": engine}), args.repeats)
                    for engine in ("event", "fast")]
            pd.testing.assert_frame_equal(runs[0][0].operations, runs[1][0].operations)
            pd.testing.assert_frame_equal(runs[0][0].summary, runs[1][0].summary)
            print(f"{qps:>4} {size:>6} {runs[0][1]:>12.2f} {runs[1][1]:>11.2f} {runs[0][1] / runs[1][1]:>11.2f}")


if __name__ == "__main__":
    main()

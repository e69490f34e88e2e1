"""Several QPs at once (perftest -q) on both engines, one command: ``python bench/multi_qp.py``.

The quickstart's ``write_bw`` with ``qps`` 4 and 16 at 4 KiB and 64 KiB, each run on the event engine and on the
vectorized core (``engine: fast``) side by side, their tables checked identical; prints the wall seconds of each
(best of ``--repeats``, :func:`bench.fast_core.best`) and their ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fast_core import best, quickstart  # noqa: E402
from sim.engine.run import run_scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000, help="work requests per QP and size")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"{'qps':>4} {'size':>6} {'event s':>8} {'fast s':>7} {'event/fast':>11}")
    for qps in (4, 16):
        for size in (4096, 65536):
            results, seconds = [], []
            for engine in ("event", "fast"):
                scenario = quickstart(args.iterations, engine)
                work = scenario.workload[0].model_copy(update={"qps": qps, "sizes": [size]})
                scenario = scenario.model_copy(update={"workload": [work]})
                seconds.append(best(args.repeats, lambda: results.append(run_scenario(scenario))))
            pd.testing.assert_frame_equal(results[0].operations, results[-1].operations)
            pd.testing.assert_frame_equal(results[0].summary, results[-1].summary)
            event, fast = seconds
            print(f"{qps:>4} {size // 1024:>4}Ki {event:>8.2f} {fast:>7.2f} {event / fast:>11.2f}")


if __name__ == "__main__":
    main()

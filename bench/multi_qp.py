"""Several QPs at once (perftest -q) on both engines, one command: ``python bench/multi_qp.py``.

The quickstart's ``write_bw`` with ``qps`` 4 and 16 at 4 KiB and 64 KiB, and perftest's ``ib_write_bw -q 16 -s 2``
and ``ib_write_bw -q 8 -a``, whose small messages' QPs post at one picosecond and then claim their NIC at one
picosecond (the vectorized core orders them by their completions' deliveries, :mod:`sim.fast.deliveries`), each
run on the event engine and on the vectorized core (``engine: fast``) side by side, their tables checked
identical; prints the wall seconds of each (best of ``--repeats``, :func:`bench.fast_core.best`) and their ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fast_core import best, quickstart  # noqa: E402
from sim.cli.perftest import perftest_scenario  # noqa: E402
from sim.engine.run import run_scenario  # noqa: E402

PERFTEST = ("ib_write_bw -q 16 -s 2", "ib_write_bw -q 8 -a")
"""perftest command lines run with ``-n`` the iterations."""


def cases(iterations: int):
    """Each case's name and its scenario on a given engine."""
    for qps in (4, 16):
        for size in (4096, 65536):
            def scenario(engine: str, qps=qps, size=size):
                base = quickstart(iterations, engine)
                work = base.workload[0].model_copy(update={"qps": qps, "sizes": [size]})
                return base.model_copy(update={"workload": [work]})
            yield f"quickstart -q {qps} {size // 1024} KiB", scenario
    for line in PERFTEST:
        yield line, lambda engine, line=line: perftest_scenario(
            [*line.split(), "-n", str(iterations)]).model_copy(update={"engine": engine})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000, help="work requests per QP and size")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"{'case':<26} {'event s':>8} {'fast s':>7} {'event/fast':>11}")
    for name, scenario in cases(args.iterations):
        results, seconds = [], []
        for engine in ("event", "fast"):
            made = scenario(engine)
            seconds.append(best(args.repeats, lambda: results.append(run_scenario(made, notice=lambda line: None))))
        pd.testing.assert_frame_equal(results[0].operations, results[-1].operations)
        pd.testing.assert_frame_equal(results[0].summary, results[-1].summary)
        event, fast = seconds
        print(f"{name:<26} {event:>8.2f} {fast:>7.2f} {event / fast:>11.2f}", flush=True)


if __name__ == "__main__":
    main()

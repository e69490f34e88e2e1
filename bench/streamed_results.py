"""Benchmark of streamed results, one command: ``python bench/streamed_results.py``.

Runs the quickstart's ``write_bw`` at 4 KiB on the vectorized core end to end (testbed, solve, per-operation
table, summary, ``write_results``) for ``--ops`` WRITEs (default 10^8) with the table streamed to Parquet row
groups, and prints its wall time and peak RSS against the 2 GiB target. Side by side in the same run, at
``--compare-ops`` WRITEs (default 10^7), the streamed table and the table held whole in memory (no row group
is spooled: the path before streaming), with their ratios. Each measurement runs in its own process, so
``resource.getrusage`` reports that run's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_RSS = 2 * 2**30
"""Peak RSS a 10^8-WRITE run must stay within (bytes)."""


def measure(ops: int, held: bool) -> dict:
    """One run of ``ops`` WRITEs in this process: wall time (s), peak RSS (bytes), rows written."""
    import pyarrow.parquet as pq

    import sim.operations
    from sim.results import write_results
    from sim.run import run_scenario
    from sim.scenario.scenario_file import load_scenario

    if held:
        sim.operations.ROW_GROUP_ROWS = 2**62
    scenario, raw = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    work = scenario.workload[0].model_copy(update={"sizes": [4096], "iterations": ops})
    scenario = scenario.model_copy(update={"workload": [work], "engine": "fast"})
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch:
        started = time.perf_counter()
        result = run_scenario(scenario)
        out = write_results(result, Path(scratch) / "out", raw)
        wall = time.perf_counter() - started
        rows = pq.ParquetFile(out / "metrics.parquet").metadata.num_rows
    return {"wall_s": wall, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "rows": rows,
            "bw_avg_Gbps": float(result.summary["bw_avg_Gbps"].iloc[0])}


def child(ops: int, held: bool) -> dict:
    """:func:`measure` in a fresh process."""
    answer = subprocess.run([sys.executable, __file__, "--child", str(ops), *(["--held"] if held else [])],
                            capture_output=True, text=True, check=True)
    return json.loads(answer.stdout.splitlines()[-1])


def line(label: str, m: dict) -> str:
    return (f"{label:<34} {m['wall_s']:8.1f} s  {m['peak_rss'] / 2**30:6.2f} GiB  {m['rows']:>11,} rows  "
            f"{m['bw_avg_Gbps']:.2f} Gb/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10**8)
    parser.add_argument("--compare-ops", type=int, default=10**7)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--held", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.held)))
        return
    streamed, held = child(args.compare_ops, False), child(args.compare_ops, True)
    big = child(args.ops, False)
    print(line(f"streamed, {args.compare_ops:.0e} WRITEs", streamed))
    print(line(f"held in memory, {args.compare_ops:.0e} WRITEs", held))
    print(f"held/streamed at {args.compare_ops:.0e}: peak RSS x{held['peak_rss'] / streamed['peak_rss']:.2f}, "
          f"wall time x{held['wall_s'] / streamed['wall_s']:.2f}")
    print(line(f"streamed, {args.ops:.0e} WRITEs", big))
    verdict = "within" if big["peak_rss"] <= TARGET_RSS else "ABOVE"
    print(f"peak RSS at {args.ops:.0e} WRITEs: {big['peak_rss'] / 2**30:.2f} GiB, {verdict} the "
          f"{TARGET_RSS / 2**30:.0f} GiB target ({big['peak_rss'] / TARGET_RSS:.2f} of it); "
          f"{args.ops / big['wall_s'] / 1e6:.2f} M WRITEs/s end to end")


if __name__ == "__main__":
    main()

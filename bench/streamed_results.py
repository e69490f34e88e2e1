"""Benchmark of streamed results, one command: ``python bench/streamed_results.py``.

Runs the quickstart's ``write_bw`` at 4 KiB on the vectorized core end to end (testbed, solve, per-operation
table, summary, ``write_results``) for ``--ops`` WRITEs (default 10^8) with the table streamed to Parquet row
groups, and prints its wall time and peak RSS against the 2 GiB target. Side by side in the same run, at
``--compare-ops`` WRITEs (default 10^7): the streamed table, the table held whole in memory (no row group is
spooled), and the code of revision ``--before`` (default ``main``; ``--before ''`` skips it), exported with
``git archive`` and run as it was, with their ratios. Each measurement runs in its own process, so
``resource.getrusage`` reports that run's peak RSS.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("RDMASIM_BENCH_ROOT", str(ROOT)))

TARGET_RSS = 2 * 2**30
"""Peak RSS a 10^8-WRITE run must stay within (bytes)."""


def measure(ops: int, held: bool) -> dict:
    """One run of ``ops`` WRITEs in this process: wall time (s), peak RSS (bytes), rows written."""
    import pyarrow.parquet as pq

    from sim.results.write import write_results
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario

    if held:
        import sim.store.operations

        sim.store.operations.ROW_GROUP_ROWS = 2**62
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


def child(ops: int, held: bool = False, root: Path = ROOT) -> dict:
    """:func:`measure` in a fresh process, importing rdmasim from ``root``."""
    answer = subprocess.run([sys.executable, __file__, "--child", str(ops), *(["--held"] if held else [])],
                            capture_output=True, text=True, check=True, cwd=root,
                            env={**os.environ, "RDMASIM_BENCH_ROOT": str(root)})
    return json.loads(answer.stdout.splitlines()[-1])


def before(revision: str, ops: int) -> dict:
    """:func:`measure` on the code of ``revision`` (exported from this repository)."""
    archive = subprocess.run(["git", "archive", revision, "sim", "models", "scenarios"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory(prefix="rdmasim-before-") as tree:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        return child(ops, root=Path(tree))


def line(label: str, m: dict) -> str:
    return (f"{label:<34} {m['wall_s']:8.1f} s  {m['peak_rss'] / 2**30:6.2f} GiB  {m['rows']:>11,} rows  "
            f"{m['bw_avg_Gbps']:.2f} Gb/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10**8)
    parser.add_argument("--compare-ops", type=int, default=10**7)
    parser.add_argument("--before", default="main", help="revision to measure as it was ('' skips it)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--held", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.held)))
        return
    streamed, held = child(args.compare_ops), child(args.compare_ops, held=True)
    old = before(args.before, args.compare_ops) if args.before else None
    big = child(args.ops)
    n = f"{args.compare_ops:.0e} WRITEs"
    print(line(f"streamed, {n}", streamed))
    print(line(f"held in memory, {n}", held))
    if old:
        print(line(f"{args.before} as it was, {n}", old))
    for label, other in (("held", held), (args.before, old)):
        if other:
            print(f"{label}/streamed at {args.compare_ops:.0e}: "
                  f"peak RSS x{other['peak_rss'] / streamed['peak_rss']:.2f}, "
                  f"wall time x{other['wall_s'] / streamed['wall_s']:.2f}")
    print(line(f"streamed, {args.ops:.0e} WRITEs", big))
    verdict = "within" if big["peak_rss"] <= TARGET_RSS else "ABOVE"
    print(f"peak RSS at {args.ops:.0e} WRITEs: {big['peak_rss'] / 2**30:.2f} GiB, {verdict} the "
          f"{TARGET_RSS / 2**30:.0f} GiB target ({big['peak_rss'] / TARGET_RSS:.2f} of it); "
          f"{args.ops / big['wall_s'] / 1e6:.2f} M WRITEs/s end to end")


if __name__ == "__main__":
    main()

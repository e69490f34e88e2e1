"""Sweep throughput: the same 200-run sweep serially and on a 2-worker dask LocalCluster, side by side.

Each run is a small write_bw scenario of about 75 ms, so that dask's per-task cost is amortized. The cluster
is started, and its workers have imported rdmasim, before anything is timed; both sweeps write their results
to fresh directories and must give identical tables. Prints both wall times and the speedup, next to the
speedup that pure-Python work on as many processes gets on the machine at that moment (other jobs sharing
the CPUs lower both).

    python bench/sweep_dask.py [--runs 200] [--workers 2] [--iterations 1800] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from sim.sweep import run_sweep

BASE = """schema: 1
name: bench-base
nodes:
  - {{name: a}}
  - {{name: b}}
buffers:
  - {{name: src, on: a.host, size: 1MiB}}
  - {{name: dst, on: b.host, size: 1MiB}}
workload:
  - {{kind: write_bw, name: bw, from: src, to: dst, sizes: [4KiB], iterations: {iterations}}}
"""
SWEEP = """schema: 1
kind: sweep
name: bench
base: base.yaml
seed: 1
repetitions: {repetitions}
grid:
  buffers.src.register: [pinned, odp]
  workload.bw.sizes.0: [256B, 4KiB, 16KiB, 64KiB, 1MiB]
"""
POINTS = 10
"""Grid points of the sweep; repetitions make up the number of runs."""


def _import_rdmasim() -> None:
    import sim.sweep.execute  # noqa: F401


def _burn(n: int = 6_000_000) -> float:
    """Pure-Python work; returns its own duration."""
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return time.perf_counter() - started


def _ceiling(client, workers: int) -> float:
    """The speedup ``workers`` processes can get on this machine now (other jobs share its CPUs): one burn
    alone against ``workers`` burns at once on the cluster."""
    alone = _burn()
    started = time.perf_counter()
    client.gather(client.map(_burn, [6_000_000] * workers, pure=False))
    return workers * alone / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs in the sweep (a multiple of 10)")
    parser.add_argument("--workers", type=int, default=2, help="dask worker processes")
    parser.add_argument("--iterations", type=int, default=1800, help="WRITEs per run (sets a run's length)")
    parser.add_argument("--repeats", type=int, default=1, help="alternate serial and dask sweeps this many "
                        "times and keep the best of each (shared machines are noisy)")
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    times: dict[str, list[float]] = {"serial": [], "dask": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "base.yaml").write_text(BASE.format(iterations=args.iterations))
        sweep = root / "sweep.yaml"
        sweep.write_text(SWEEP.format(repetitions=max(1, args.runs // POINTS)))
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            client.run(_import_rdmasim)
            ceiling = _ceiling(client, args.workers)
            print(f"load average before timing: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
                  f"{args.workers} processes of pure-Python work run {ceiling:.2f}x as fast as one")
            tables = {}
            for repeat in range(args.repeats):
                for name, options in (("serial", {}), ("dask", {"executor": "dask",
                                                                "scheduler": cluster.scheduler_address})):
                    started = time.perf_counter()
                    tables[name] = run_sweep(sweep, root / f"{name}{repeat}", progress=False, **options).table
                    times[name].append(time.perf_counter() - started)
        pd.testing.assert_frame_equal(tables["serial"], tables["dask"])
    serial_s, dask_s = min(times["serial"]), min(times["dask"])
    runs = len(tables["serial"])
    print(f"{runs} runs, {serial_s / runs * 1e3:.0f} ms per run serially" +
          (f" (best of {args.repeats})" if args.repeats > 1 else ""))
    print(f"serial:                          {serial_s:6.2f} s")
    print(f"dask, {args.workers} workers (LocalCluster):    {dask_s:6.2f} s")
    print(f"speedup: {serial_s / dask_s:.2f}x (identical tables); {serial_s / dask_s / ceiling:.0%} of the "
          f"{ceiling:.2f}x the CPUs allowed")


if __name__ == "__main__":
    main()

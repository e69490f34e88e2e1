"""Benchmark of the managed-memory model: ``python bench/gpu_faults.py``.

Prints simulated GPU faults per wall-clock second and peak memory (tracemalloc, numpy included) for a
managed allocation the size of an H200 (141 GB, 34 M pages of 4 KiB): a sequential sweep, uniformly random
accesses, and a thrashing sweep of a 2x oversubscribed range. Machines are shared and noisy: the best of
several repetitions is reported.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from sim.core import PS_PER_S

from models.gpu.managed import ManagedMemory
from models.gpu.workloads import random_access, sequential

GiB = 1 << 30


def measure(label: str, build, pattern_of, repeats: int) -> None:
    """Best-of-``repeats`` faults per wall second of ``pattern_of(mm)`` on a fresh ``build()``, then one
    more run under tracemalloc for the peak memory (range state + pattern + temporaries)."""
    best = 0.0
    for _ in range(repeats):
        mm = build()
        pattern = pattern_of(mm)
        started = time.perf_counter()
        stats = mm.gpu_access(pattern)
        best = max(best, stats.faults / (time.perf_counter() - started))
    tracemalloc.start()
    mm = build()
    mm.gpu_access(pattern_of(mm))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{label:<44} {stats.faults:>10,} faults {stats.batches:>7,} batches  {best:>12,.0f} faults/wall-s  "
          f"simulated {stats.total_ps / PS_PER_S:8.3f} s  state {mm.state_nbytes() / 1e6:6.0f} MB  "
          f"peak {peak / 1e6:6.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    h200 = 141 * 10**9
    measure("141 GB range, sequential sweep of 16 GiB", lambda: ManagedMemory(h200),
            lambda mm: sequential(16 * GiB // 4096), args.repeats)
    measure("141 GB range, 1 M random accesses", lambda: ManagedMemory(h200),
            lambda mm: random_access(mm.n_pages, 1_000_000, rng=np.random.default_rng(7)), args.repeats)
    measure("8 GiB range on 4 GiB of GPU, 2 sweeps (thrash)",
            lambda: ManagedMemory(8 * GiB, gpu_capacity=4 * GiB),
            lambda mm: sequential(mm.n_pages, repetitions=2), args.repeats)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Measure the per-call fixed costs of unified memory: small prefetches and sparse first touches.

Standalone companion of ``measure_um.py`` (whose ``Bench`` it reuses: CuPy, CUDA events, the same kernels
and prefetch binding); no rdmasim import. Usage::

    python3 calib/gpu_um/measure_um_edges.py --out h200_um_edges.json [--reps 15]

On a 64 MiB managed buffer (``cudaMallocManaged``, populated by the CPU, migrated back to the host before
every timed repetition):

* ``prefetch``: ``cudaMemPrefetchAsync`` host->GPU and GPU->host of 4 KiB, 64 KiB, 2 MiB and 16 MiB
  (the fixed cost of one call is what the smallest sizes show).
* ``touch_blocks``: a kernel writes 4 B at the start of each of K distinct 2 MiB VA blocks, K = 1, 2, 4, 8, 32
  (host-resident: fault-driven migration; GPU-resident: the kernel's own time).
* ``touch_pages``: K 4 KiB pages of one VA block, K = 1, 16, 256.
* ``fresh``: on a managed buffer just allocated and never touched (nothing to migrate: the GPU populates
  zeroed pages), one touch and 32 touches at 2 MiB stride; a new allocation per repetition.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_um import Bench, _summary, companion_arguments, environment, finish  # noqa: E402 - sibling script

KIB, MIB = 1 << 10, 1 << 20


def fresh_touch(bench: Bench, size: int, count: int) -> dict:
    cp = bench.cp
    samples = []
    saved = bench.ptr
    try:
        for _ in range(bench.reps):
            bench.ptr = cp.cuda.runtime.mallocManaged(size, 1)
            try:
                samples.append(bench.gpu_time(bench.touch(2 * MIB, count)))
            finally:
                cp.cuda.runtime.free(bench.ptr)
    finally:
        bench.ptr = saved
    return _summary(samples)


def main() -> None:
    args = companion_arguments(__doc__, reps=15, timeout_s=120)
    import cupy as cp

    size = 64 * MIB
    bench = Bench(cp, size, args.reps)
    result = {"method": __doc__, "env": environment(cp), "reps": args.reps, "size_bytes": size,
              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prefetch_backend": bench.pf.backend}
    started = time.perf_counter()
    try:
        result["prefetch"] = [{"bytes": n, "h2d": bench.prefetch(n, "h2d"), "d2h": bench.prefetch(n, "d2h")}
                              for n in (4 * KIB, 64 * KIB, 2 * MIB, 16 * MIB)]
        result["touch_blocks"] = [
            {"va_blocks": k, "faulted": bench.timed(bench.touch(2 * MIB, k), resident_on="host"),
             "resident": bench.timed(bench.touch(2 * MIB, k), resident_on="gpu")} for k in (1, 2, 4, 8, 32)]
        result["touch_pages"] = [
            {"pages": k, "faulted": bench.timed(bench.touch(4 * KIB, k), resident_on="host"),
             "resident": bench.timed(bench.touch(4 * KIB, k), resident_on="gpu")} for k in (1, 16, 256)]
        result["fresh"] = [{"va_blocks": k, "faulted": fresh_touch(bench, size, k)} for k in (1, 32)]
    finally:
        finish(result, bench, started, args.out)
    json.dump({k: v for k, v in result.items() if k != "method"}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

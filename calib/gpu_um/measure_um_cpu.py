#!/usr/bin/env python3
"""Measure the CPU's sparse reads of host-resident managed memory: the cost of one read against the stride.

Standalone companion of ``measure_um.py`` (whose ``Bench`` it reuses); no rdmasim import. Usage::

    python3 calib/gpu_um/measure_um_cpu.py --out h200_um_cpu.json [--reps 15]

``measure_um.py`` timed the CPU reading one byte every 4 KiB, 64 KiB and 2 MiB of a host-resident 1 GiB managed
range (``cpu_fault_back[].host_resident``), each stride on its own. Here every stride from 4 KiB to 8 MiB
(doubling) runs in one process, interleaved repetition by repetition so that the machine is shared. Each timed
read is ``int(view[::stride].sum())`` (NumPy), timed with ``time.perf_counter``:

* ``managed``: the managed range (``cudaMallocManaged``, populated by the CPU), prefetched whole to the host
  (``cudaMemPrefetchAsync``) before each read, as ``measure_um.py`` did.
* ``managed_flushed``: the same, with a 256 MiB ordinary buffer read between the prefetch and the timed read, so
  that no page-table line or TLB entry of the range is left in the CPU's caches.
* ``heap``: the same reads of a 1 GiB NumPy buffer in ordinary memory (transparent huge pages not requested),
  populated by the CPU: whether managed memory reads cost what ordinary memory does.
* ``call``: a read of one byte of the managed range (prefetched back first): the read expression's own start,
  which every strided read also pays once.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_um import Bench, _summary, companion_arguments, environment, finish  # noqa: E402 - sibling script

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
STRIDES = tuple(4 * KIB << k for k in range(12))  # 4 KiB .. 8 MiB
FLUSH_BYTES = 256 * MIB
ITEMS = ("managed", "managed_flushed", "heap")


def heap_buffer(size: int) -> np.ndarray:
    """``size`` bytes of ordinary memory in 4 KiB pages where NumPy lets the huge-page request be turned off."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            __import__(module, fromlist=["_set_madvise_hugepage"])._set_madvise_hugepage(False)
            break
        except (ImportError, AttributeError):
            continue
    buffer = np.empty(size, dtype=np.uint8)
    buffer[:] = 1
    return buffer


def timed_read(view: np.ndarray) -> float:
    started = time.perf_counter()
    int(view.sum())
    return time.perf_counter() - started


def strided(bench: Bench, heap: np.ndarray, flush: np.ndarray, reps: int) -> dict:
    """Per item and stride, the reads' times (seconds) over ``reps`` repetitions taken round-robin."""
    samples = {(item, s): [] for item in ITEMS for s in STRIDES}
    calls = []
    for _ in range(reps):
        for stride in STRIDES:
            bench.to_host()
            samples[("managed", stride)].append(timed_read(bench.host[::stride]))
            bench.to_host()
            int(flush.sum())
            samples[("managed_flushed", stride)].append(timed_read(bench.host[::stride]))
            int(flush.sum())
            samples[("heap", stride)].append(timed_read(heap[::stride]))
        bench.to_host()
        calls.append(timed_read(bench.host[:1]))
    rows = {item: [] for item in ITEMS}
    for (item, stride), times in samples.items():
        rows[item].append({"stride": stride, "reads": bench.size // stride, **_summary(times)})
    return {**rows, "call": _summary(calls)}


def main() -> None:
    args = companion_arguments(__doc__, reps=15, timeout_s=240)
    import cupy as cp

    bench = Bench(cp, GIB, args.reps)
    result = {"method": __doc__, "env": environment(cp), "reps": args.reps, "size_bytes": GIB,
              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prefetch_backend": bench.pf.backend}
    for name in ("enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}", encoding="utf-8") as handle:
                result[f"thp_{name}"] = handle.read().strip()
        except OSError as error:
            result[f"thp_{name}"] = str(error)
    started = time.perf_counter()
    try:
        result.update(strided(bench, heap_buffer(GIB), heap_buffer(FLUSH_BYTES), args.reps))
    finally:
        finish(result, bench, started, args.out)
    for item in ITEMS:
        for row in result.get(item, []):
            print(f"{item:16s} {row['stride'] // KIB:5d} KiB {row['median_s'] / row['reads'] * 1e9:8.1f} ns/read"
                  f"  [{row['min_s'] * 1e3:.3f}-{row['max_s'] * 1e3:.3f} ms]")
    print("call", result.get("call"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Measure GPU allocation costs on one NVIDIA GPU: cudaMalloc/cudaFree and the VMM path vs size.

Standalone: needs CuPy (for cudaMalloc/cudaFree through ``cupy.cuda.runtime``, which calls the CUDA runtime
directly, no CuPy pool) and libcuda through ctypes for the driver's virtual-memory API; no rdmasim import.
Usage::

    python3 calib/gpu_alloc/measure_alloc.py --out h200_alloc.json [--reps 5]

What is measured (wall clock, ``time.perf_counter`` around each call; every call is synchronous or followed
by ``cudaDeviceSynchronize`` inside the timed span, so the time is what the calling thread waits):

* ``malloc``: ``cudaMalloc(N)`` then ``cudaFree``, N = 2 MiB .. 64 GiB (sizes above 80 % of free HBM are
  skipped); ``reps`` repetitions per size, all samples kept (the first one separately as ``first_s``).
* ``vmm``: ``cuMemCreate(N)`` (pinned device memory, granularity-aligned), ``cuMemAddressReserve``,
  ``cuMemMap``, ``cuMemSetAccess`` (read-write for the device), then ``cuMemUnmap``, ``cuMemRelease``,
  ``cuMemAddressFree``; each call timed on its own.

A context is created and warmed (one 2 MiB allocation) before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import Cuda  # noqa: E402
from host_facts import cuda_environment  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 512 * MIB, 2 * GIB, 8 * GIB, 32 * GIB, 64 * GIB]


def timed_cycle(cuda: Cuda, size: int) -> dict:
    """One create/reserve/map/access/unmap/release/free cycle of pinned device memory; seconds per call (each
    followed by ``cuCtxSynchronize`` inside its timed span)."""
    out = {}

    def timed(name: str, call):
        started = time.perf_counter()
        made = call()
        cuda.ok("cuCtxSynchronize")
        out[name] = time.perf_counter() - started
        return made

    rc, handle = timed("cuMemCreate", lambda: cuda.vmm_create(size))
    if rc:
        raise RuntimeError(f"cuMemCreate: {cuda.error_name(rc)}")
    ptr = timed("cuMemAddressReserve", lambda: cuda.reserve(size))
    timed("cuMemMap", lambda: cuda.map(ptr, size, handle, access=False))
    timed("cuMemSetAccess", lambda: cuda.set_access(ptr, size))
    timed("cuMemUnmap", lambda: cuda.unmap(ptr, size))
    timed("cuMemRelease", lambda: cuda.release(handle))
    timed("cuMemAddressFree", lambda: cuda.address_free(ptr, size))
    return out


def _summary(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "first_s": samples[0], "samples_s": samples}


def measure_malloc(cp, size: int, reps: int) -> dict:
    rt = cp.cuda.runtime
    alloc, free = [], []
    for _ in range(reps):
        started = time.perf_counter()
        ptr = rt.malloc(size)
        rt.deviceSynchronize()
        alloc.append(time.perf_counter() - started)
        started = time.perf_counter()
        rt.free(ptr)
        rt.deviceSynchronize()
        free.append(time.perf_counter() - started)
    return {"bytes": size, "cudaMalloc": _summary(alloc), "cudaFree": _summary(free)}


def measure_vmm(cuda: Cuda, granularity: int, size: int, reps: int) -> dict:
    size = -(-size // granularity) * granularity
    cycles = [timed_cycle(cuda, size) for _ in range(reps)]
    return {"bytes": size, **{name: _summary([c[name] for c in cycles]) for name in cycles[0]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--timeout-s", type=int, default=150, help="abort the whole run after this long")
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    import cupy as cp

    rt = cp.cuda.runtime
    rt.free(rt.malloc(2 * MIB))  # context creation and warm-up, untimed
    free_bytes, total_bytes = rt.memGetInfo()
    result = {"method": __doc__, "env": cuda_environment(cp), "reps": args.reps,
              "free_bytes": free_bytes, "total_bytes": total_bytes, "malloc": [], "vmm": [], "errors": []}
    sizes = [s for s in SIZES if s <= 0.8 * free_bytes]
    started = time.perf_counter()
    try:
        for size in sizes:
            result["malloc"].append(measure_malloc(cp, size, args.reps))
        cuda = Cuda(cp.cuda.Device().id)
        granularity = result["vmm_granularity"] = cuda.granularity(cuda.prop())
        for size in sizes:
            result["vmm"].append(measure_vmm(cuda, granularity, size, args.reps))
    except Exception as exc:  # noqa: BLE001 - keep what was measured
        result["errors"].append(repr(exc))
    finally:
        result["elapsed_s"] = time.perf_counter() - started
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    for kind in ("malloc", "vmm"):
        for row in result[kind]:
            print(kind, row["bytes"] // MIB, "MiB",
                  {k: round(v["median_s"] * 1e3, 3) for k, v in row.items() if isinstance(v, dict)})
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

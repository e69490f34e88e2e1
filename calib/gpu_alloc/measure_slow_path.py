#!/usr/bin/env python3
"""Measure when a large GPU allocation takes the driver's slow path, and what one small cuMemCreate costs.

Standalone: CuPy for ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime``, no pool) and libcuda through ctypes
(``calib/cuda_vmm.py``) for the VMM calls; no rdmasim import. Usage::

    python3 calib/gpu_alloc/measure_slow_path.py --out h200_slow_path.json

Wall clock (``time.perf_counter``) around each call; every call is synchronous or followed by a device
synchronize inside the timed span, except where an item says ``nosync``.

* ``sync_floor``: an empty ``cuCtxSynchronize`` (what the timed span adds to a call), 200 times.
* ``small``: 2 MiB ``cuMemCreate`` + ``cuMemRelease`` and 2 MiB ``cudaMalloc`` + ``cudaFree``, 200 cycles each,
  with and without the synchronize in the span; and 200 2 MiB ``cuMemCreate`` held at once, then released.
* ``back_to_back``: for 16, 32 and 64 GiB (what fits in 80 % of free memory), 8 cycles of allocate then free
  with nothing between them, for ``cudaMalloc`` and for ``cuMemCreate``/``cuMemRelease``.
* ``after_wait``: 64 GiB (or the largest size that fits), allocate and free, then wait W seconds before the next
  allocation, W = 0, 0.05, 0.1, 0.2, 0.4, 1.0, 3 cycles each: if the slow path is the driver finishing the
  previous free's work (scrubbing), its time falls as W grows.
* ``fresh``: the first allocation of the largest size right after the context warm-up (pages this process never
  held), timed before everything else.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import Cuda, cupy_started  # noqa: E402
from host_facts import cuda_environment, run_and_save  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
WAITS_S = (0.0, 0.05, 0.1, 0.2, 0.4, 1.0)


class Allocator:
    """One way to allocate and free device memory, each call timed (seconds)."""

    def __init__(self, kind: str, cp, cuda: Cuda) -> None:
        self.kind, self.cp, self.cuda = kind, cp, cuda

    def _timed(self, call, sync: bool) -> tuple[float, object]:
        started = time.perf_counter()
        made = call()
        if sync:
            self.cuda.ok("cuCtxSynchronize")
        return time.perf_counter() - started, made

    def alloc(self, size: int, sync: bool = True) -> tuple[float, object]:
        if self.kind == "cudaMalloc":
            return self._timed(lambda: self.cp.cuda.runtime.malloc(size), sync)
        seconds, (rc, handle) = self._timed(lambda: self.cuda.vmm_create(size), sync)
        if rc:
            raise RuntimeError(f"cuMemCreate({size}): {self.cuda.error_name(rc)}")
        return seconds, handle

    def free(self, made, sync: bool = True) -> float:
        if self.kind == "cudaMalloc":
            return self._timed(lambda: self.cp.cuda.runtime.free(made), sync)[0]
        return self._timed(lambda: self.cuda.release(made), sync)[0]


def cycles(allocator: Allocator, size: int, n: int, wait_s: float = 0.0, sync: bool = True) -> dict:
    """``n`` allocate/free cycles, waiting ``wait_s`` after each free."""
    alloc_s, free_s = [], []
    for _ in range(n):
        seconds, made = allocator.alloc(size, sync)
        alloc_s.append(seconds)
        free_s.append(allocator.free(made, sync))
        time.sleep(wait_s)
    return {"call": allocator.kind, "bytes": size, "wait_s": wait_s, "sync": sync, "alloc_s": alloc_s,
            "free_s": free_s}


def held(allocator: Allocator, size: int, n: int) -> dict:
    """``n`` allocations held at once, then freed in order."""
    made = [allocator.alloc(size) for _ in range(n)]
    return {"call": allocator.kind, "bytes": size, "alloc_s": [m[0] for m in made],
            "free_s": [allocator.free(m[1]) for m in made]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=int, default=240, help="abort the whole run after this long")
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    cp, _, cuda, free_bytes, total_bytes = cupy_started()
    sizes = [s for s in (16 * GIB, 32 * GIB, 64 * GIB) if s <= 0.8 * free_bytes]
    largest = sizes[-1]
    result = {"method": __doc__, "env": cuda_environment(cp), "free_bytes": free_bytes, "total_bytes": total_bytes,
              "granularity": cuda.granularity(cuda.prop()), "errors": []}
    malloc, vmm = Allocator("cudaMalloc", cp, cuda), Allocator("cuMemCreate", cp, cuda)

    def measure(out: dict) -> None:
        out["fresh"] = cycles(malloc, largest, 1)
        floor = []
        for _ in range(200):
            t0 = time.perf_counter()
            cuda.ok("cuCtxSynchronize")
            floor.append(time.perf_counter() - t0)
        out["sync_floor_s"] = floor
        out["small"] = [cycles(a, 2 * MIB, 200, sync=s) for a in (vmm, malloc) for s in (True, False)]
        out["small_held"] = [held(a, 2 * MIB, 200) for a in (vmm, malloc)]
        out["back_to_back"] = [cycles(a, s, 8) for a in (malloc, vmm) for s in sizes]
        out["after_wait"] = [cycles(a, largest, 3, wait_s=w) for a in (malloc, vmm) for w in WAITS_S]

    run_and_save(measure, result, args.out)
    print("fresh", result.get("fresh"))
    for key in ("small", "small_held", "back_to_back", "after_wait"):
        for row in result.get(key, []):
            print(key, row["call"], row["bytes"] // MIB, "MiB", "wait", row.get("wait_s"), "sync", row.get("sync"),
                  "alloc ms", [round(x * 1e3, 3) for x in row["alloc_s"][:12]],
                  "free ms", [round(x * 1e3, 2) for x in row["free_s"][:8]])
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

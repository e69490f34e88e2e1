#!/usr/bin/env python3
"""Measure which back-to-back large cudaMalloc calls take the driver's slow path, as the allocation's size and the
memory left free vary.

Standalone: CuPy for ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime``, no pool) and libcuda through ctypes
(``calib/cuda_vmm.py``) for the synchronize; no rdmasim import. Usage::

    python3 calib/gpu_alloc/measure_alternation.py --out h100_alternation.json

``measure_slow_path.py`` found the slow calls (about 4-5 ms per GiB) alternating with fast ones in back-to-back
allocate-then-free cycles: every 4th call at 16 GiB, every 2nd at 32 and 64 GiB, with most of the memory free
and cleared. This run separates the two things that change with the size: the size itself, and the memory the
cycles leave free. Every call is followed by a device synchronize inside its timed span; each cycle records when
its allocation and its free started (seconds from the case's start, ``time.perf_counter``), so that a replay can
place the frees' clearing in time.

* ``by_size``: 16 cycles at each of 8, 12, 16, 24 and 32 GiB (those within 45 % of free memory), nothing held.
* ``by_room``: 16 cycles of 16 GiB with a ballast allocation holding all free memory but ``room`` (72, 56, 48,
  40, 32 and 24 GiB, those below free memory), allocated before the case and freed after it.

Each case starts after a pause of ``--pause-s`` (default 1.5 s), long enough for the frees before it to be cleared
(about 3 ms per GiB).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import Cuda, paused_start  # noqa: E402
from host_facts import run_and_save  # noqa: E402

GIB = 1 << 30
SIZES_GIB = (8, 12, 16, 24, 32)
ROOMS_GIB = (72, 56, 48, 40, 32, 24)
ROOM_SIZE_GIB = 16
CYCLES = 16


def cycles(rt, cuda: Cuda, size: int, n: int) -> dict:
    """``n`` allocate-then-free cycles of ``size`` bytes with nothing between them: per cycle, when the allocation
    and the free started (s from the first) and how long each took (s)."""
    began = time.perf_counter()
    rows = {"alloc_at_s": [], "alloc_s": [], "free_at_s": [], "free_s": []}
    for _ in range(n):
        t0 = time.perf_counter()
        pointer = rt.malloc(size)
        cuda.ok("cuCtxSynchronize")
        t1 = time.perf_counter()
        rt.free(pointer)
        cuda.ok("cuCtxSynchronize")
        t2 = time.perf_counter()
        rows["alloc_at_s"].append(t0 - began)
        rows["alloc_s"].append(t1 - t0)
        rows["free_at_s"].append(t1 - began)
        rows["free_s"].append(t2 - t1)
    return {"bytes": size, **rows}


def main() -> None:
    args, rt, cuda, result = paused_start(__doc__, timeout_s=240)
    free_bytes = result["free_bytes"]

    def measure(out: dict) -> None:
        out["by_size"] = []
        for gib in SIZES_GIB:
            if gib * GIB <= 0.45 * free_bytes:
                time.sleep(args.pause_s)
                out["by_size"].append(cycles(rt, cuda, gib * GIB, CYCLES))
        out["by_room"] = []
        for room in ROOMS_GIB:
            time.sleep(args.pause_s)
            free_now = rt.memGetInfo()[0]
            if room * GIB >= free_now:
                continue
            ballast = rt.malloc(free_now - room * GIB)
            cuda.ok("cuCtxSynchronize")
            time.sleep(args.pause_s)
            try:
                case = cycles(rt, cuda, ROOM_SIZE_GIB * GIB, CYCLES)
            finally:
                rt.free(ballast)
                cuda.ok("cuCtxSynchronize")
            out["by_room"].append({"room_bytes": room * GIB, "ballast_bytes": free_now - room * GIB, **case})

    run_and_save(measure, result, args.out)
    for key in ("by_size", "by_room"):
        for row in result.get(key, []):
            print(key, row["bytes"] // GIB, "GiB", "room", row.get("room_bytes", 0) // GIB, "GiB",
                  "alloc ms", [round(x * 1e3, 1) for x in row["alloc_s"]],
                  "free ms", [round(x * 1e3, 1) for x in row["free_s"][:4]])
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Measure how much more than its size an allocation wants free and already cleared before it goes through at once.

Standalone: CuPy for ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime``, no pool) and libcuda through ctypes
(``calib/cuda_vmm.py``) for the synchronize; no rdmasim import. Usage::

    python3 calib/gpu_alloc/measure_headroom.py --out h100_headroom.json

``measure_alternation.py`` found 16 GiB cycles with 48 or 32 GiB left free waiting at every other call, where the
memory free and cleared was exactly 16 GiB: the clearing queue lets such a call through. Here a ballast allocation
leaves ``2 x size + extra`` free; each probe allocates ``size``, frees it and at once allocates ``size`` again, so
that the second allocation finds ``size + extra`` free and cleared beside the free just made. Where ``extra`` is
below what the driver wants, the probe waits for that free's clearing (about 3 ms per GiB); above it, it takes
under a millisecond. Per ``extra`` the run records the free memory the driver reports after the ballast
(``cudaMemGetInfo``) and before each probe, and each call's time (a device synchronize inside the timed span).
Each probe starts after a pause of ``--pause-s`` (default 1.5 s), long enough for earlier frees to be cleared.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import paused_start  # noqa: E402
from host_facts import run_and_save  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
SIZE_GIB = 16
EXTRAS_MIB = (0, 2, 4, 8, 16, 32, 64, 128, 512, 2048)
PROBES = 3


def timed(cuda, call) -> tuple[float, object]:
    """``call()`` and a device synchronize, timed together (s), with what the call returned."""
    began = time.perf_counter()
    made = call()
    cuda.ok("cuCtxSynchronize")
    return time.perf_counter() - began, made


def main() -> None:
    args, rt, cuda, result = paused_start(__doc__, timeout_s=300)
    size = SIZE_GIB * GIB
    result["bytes"] = size

    def measure(out: dict) -> None:
        out["extras"] = []
        for extra_mib in EXTRAS_MIB:
            time.sleep(args.pause_s)
            free_now = rt.memGetInfo()[0]
            room = 2 * size + extra_mib * MIB
            ballast = rt.malloc(free_now - room)
            cuda.ok("cuCtxSynchronize")
            row = {"extra_bytes": extra_mib * MIB, "room_bytes": room, "free_after_ballast": rt.memGetInfo()[0],
                   "first_s": [], "free_s": [], "free_before_probe": [], "probe_s": []}
            try:
                for _ in range(PROBES):
                    time.sleep(args.pause_s)
                    took, first = timed(cuda, lambda: rt.malloc(size))
                    row["first_s"].append(took)
                    row["free_s"].append(timed(cuda, lambda: rt.free(first))[0])
                    row["free_before_probe"].append(rt.memGetInfo()[0])
                    took, probe = timed(cuda, lambda: rt.malloc(size))
                    row["probe_s"].append(took)
                    rt.free(probe)
                    cuda.ok("cuCtxSynchronize")
            finally:
                rt.free(ballast)
                cuda.ok("cuCtxSynchronize")
            out["extras"].append(row)

    run_and_save(measure, result, args.out)
    for row in result.get("extras", []):
        print(f"extra {row['extra_bytes'] // MIB:5} MiB: free after the ballast {row['free_after_ballast'] / MIB:.0f}"
              f" MiB (room {row['room_bytes'] / MIB:.0f}), before the probes "
              f"{[round(f / MIB) for f in row['free_before_probe']]} MiB; probe ms "
              f"{[round(x * 1e3, 2) for x in row['probe_s']]}, first ms {[round(x * 1e3, 2) for x in row['first_s']]}")
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

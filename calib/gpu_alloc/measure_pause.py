#!/usr/bin/env python3
"""Measure what a cudaMalloc costs after the process paused: how long a pause, which sizes, and what removes it.

Standalone: CuPy for ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime``, no pool) and one tiny kernel; no rdmasim
import. Usage::

    python3 calib/gpu_alloc/measure_pause.py --out h200_pause.json

Wall clock (``time.perf_counter``) around each call, a device synchronize inside the timed span; memory to spare in
every case (no ballast), so that no allocation waits for freed memory to be cleared. Each cycle starts
``SETTLE_S`` after the previous one ended.

* ``after_free``: allocate and free X (2 MiB, 1, 8, 32 GiB), sleep W (0 .. 1 s), time an allocation of X.
* ``no_free``: allocate 8 GiB and keep it, sleep W, time a second 8 GiB: whether the cost needs a free before it.
* ``busy_gpu``: as ``after_free`` at 8 GiB, but through the pause a one-thread kernel and a synchronize run every
  millisecond: whether a GPU kept awake removes the cost.
* ``busy_cpu``: the same, but the thread spins on the clock through the pause, calling nothing.
* ``kernel_first``: after the pause, time one tiny kernel with its synchronize, then the allocation: whether the
  first GPU work after a pause takes the cost instead.
* ``twice``: after the pause, time two 8 GiB allocations back to back: whether the second pays again.
* ``threshold``: as ``after_free`` at 32 GiB, with W around the time its clearing takes (~0.1 s): whether the cost
  starts when the freed memory is cleared.
* ``two_sizes``: free 8 GiB, then 32 GiB, sleep W, time a 1 GiB allocation: whether the cost follows the memory
  cleared by then (8 GiB after ~25 ms, 40 GiB after ~125 ms).

``--cases`` picks some of them (all by default).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from host_facts import cuda_environment, run_and_save  # noqa: E402

GIB = 1 << 30
SETTLE_S = 0.3
REPEATS = 4
WAITS_S = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0)
CASES = ("after_free", "no_free", "busy_gpu", "busy_cpu", "kernel_first", "twice", "threshold", "two_sizes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=int, default=280)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    import cupy as cp

    rt = cp.cuda.runtime
    cell = cp.zeros(1, dtype=cp.float32)

    def tiny_kernel():
        cell.__iadd__(1)
        rt.deviceSynchronize()

    tiny_kernel()
    rt.free(rt.malloc(2 << 20))

    def timed(call):
        t = time.perf_counter()
        out = call()
        rt.deviceSynchronize()
        return time.perf_counter() - t, out

    def alloc(n):
        return timed(lambda: rt.malloc(n))

    def pause(w, mode):
        end = time.perf_counter() + w
        if mode == "sleep":
            time.sleep(w)
        while time.perf_counter() < end:
            if mode == "gpu":
                tiny_kernel()
                time.sleep(0.001)

    def cycle(size, w, mode="sleep", kernel_first=False, second=False):
        time.sleep(SETTLE_S)
        a, p = alloc(size)
        f, _ = timed(lambda: rt.free(p))
        pause(w, mode)
        row = {"gib": size / GIB, "wait_s": w, "first_alloc_s": a, "free_s": f}
        if kernel_first:
            row["kernel_s"], _ = timed(tiny_kernel)
        row["alloc_s"], q = alloc(size)
        if second:
            row["second_alloc_s"], q2 = alloc(size)
            rt.free(q2)
        rt.free(q)
        return row

    free0, total = rt.memGetInfo()
    result = {"method": __doc__, "env": cuda_environment(cp), "free_bytes": free0, "total_bytes": total,
              "errors": []}

    def after_free(out):
        for size in (2 << 20, GIB, 8 * GIB, 32 * GIB):
            waits = WAITS_S if size == 8 * GIB else (0.0, 0.01, 0.05, 0.3, 1.0)
            for w in waits:
                for _ in range(REPEATS):
                    out.append(cycle(size, w))

    def no_free(out):
        for w in (0.0, 0.05, 0.3, 1.0):
            for _ in range(REPEATS):
                time.sleep(SETTLE_S)
                a, p = alloc(8 * GIB)
                time.sleep(w)
                s, q = alloc(8 * GIB)
                rt.free(q)
                rt.free(p)
                out.append({"gib": 8, "wait_s": w, "first_alloc_s": a, "alloc_s": s})

    def threshold(out):
        for w in (0.05, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.15, 0.2):
            for _ in range(3):
                out.append(cycle(32 * GIB, w))

    def two_sizes(out):
        for w in (0.0, 0.01, 0.04, 0.06, 0.09, 0.15, 0.2, 0.4):
            for _ in range(3):
                time.sleep(SETTLE_S)
                a, p = alloc(8 * GIB)
                b, q = alloc(32 * GIB)
                f1, _ = timed(lambda: rt.free(p))
                f2, _ = timed(lambda: rt.free(q))
                pause(w, "sleep")
                s, r = alloc(GIB)
                rt.free(r)
                out.append({"wait_s": w, "first_allocs_s": [a, b], "frees_s": [f1, f2], "alloc_s": s})

    variants = {"busy_gpu": {"mode": "gpu"}, "busy_cpu": {"mode": "spin"}, "kernel_first": {"kernel_first": True},
                "twice": {"second": True}}

    def measure(out):
        for key in args.cases.split(","):
            if key in variants:
                out[key] = [cycle(8 * GIB, w, **variants[key]) for w in (0.05, 0.3) for _ in range(REPEATS)]
            else:
                out[key] = []
                {"after_free": after_free, "no_free": no_free, "threshold": threshold,
                 "two_sizes": two_sizes}[key](out[key])

    run_and_save(measure, result, args.out)
    for key in CASES:
        for row in result.get(key, []):
            print(key, {k: ([round(x * 1e3, 2) for x in v] if isinstance(v, list) else
                            round(v * 1e3, 2) if k.endswith("_s") else v) for k, v in row.items()})
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

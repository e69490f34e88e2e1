#!/usr/bin/env python3
"""Measure how a GPU's freed memory comes back for a new cudaMalloc: how fast, in what order, and after idling.

Standalone: CuPy for ``cudaMalloc``/``cudaFree`` (``cupy.cuda.runtime``, no pool); no rdmasim import. Usage::

    python3 calib/gpu_alloc/measure_scrub.py --out h200_scrub.json

Wall clock (``time.perf_counter``) around each call, a device synchronize inside the timed span. A ``ballast``
allocation holds all free memory but ``room`` bytes, so that a new allocation larger than what was never freed
must take memory a free just released. Between cases the run sleeps ``DRAIN_S`` (every free's work done).

* ``progress``: room 66 GiB; allocate and free 64 GiB, sleep ``d`` (0, 0.1, 0.2 s), then time an allocation of
  ``k`` GiB (8, 32, 62): whether freed memory comes back a little at a time (the wait grows with ``k``) or all
  at once (the wait does not depend on ``k``), and how the wait falls with ``d``.
* ``sizes``: room X + 2 GiB; allocate and free X (8, 16, 32, 64 GiB), then at once allocate X: the wait per GiB.
* ``two_frees``: room 66 GiB; allocate two 32 GiB, free both, then at once allocate 62 GiB: whether two frees'
  work runs one after the other (twice one's wait) or side by side (one's wait).
* ``idle``: no ballast; allocate and free 8 GiB, sleep W (0, 0.05, 0.1, 0.3, 1.0 s), time the next 8 GiB
  allocation: whether an allocation after the GPU idled costs more than one right after a free.
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
DRAIN_S = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=int, default=280)
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    import cupy as cp

    rt = cp.cuda.runtime
    rt.free(rt.malloc(2 << 20))

    def timed_alloc(n):
        t = time.perf_counter()
        p = rt.malloc(n)
        rt.deviceSynchronize()
        return time.perf_counter() - t, p

    def timed_free(p):
        t = time.perf_counter()
        rt.free(p)
        rt.deviceSynchronize()
        return time.perf_counter() - t

    def with_room(room, body):
        time.sleep(DRAIN_S)
        free, _ = rt.memGetInfo()
        ballast = rt.malloc(free - room)
        try:
            return body()
        finally:
            rt.free(ballast)

    free0, total = rt.memGetInfo()
    result = {"method": __doc__, "env": cuda_environment(cp), "free_bytes": free0, "total_bytes": total,
              "errors": []}

    def measure(out):
        out["progress"] = []
        for d in (0.0, 0.1, 0.2):
            for k in (8, 32, 62):
                def body():
                    a, p = timed_alloc(64 * GIB)
                    f = timed_free(p)
                    time.sleep(d)
                    s, q = timed_alloc(k * GIB)
                    rt.free(q)
                    return {"delay_s": d, "k_gib": k, "first_alloc_s": a, "free_s": f, "alloc_s": s}
                out["progress"].append(with_room(66 * GIB, body))
        out["sizes"] = []
        for x in (8, 16, 32, 64):
            for _ in range(2):
                def body():
                    a, p = timed_alloc(x * GIB)
                    f = timed_free(p)
                    s, q = timed_alloc(x * GIB)
                    rt.free(q)
                    return {"gib": x, "first_alloc_s": a, "free_s": f, "alloc_s": s}
                out["sizes"].append(with_room((x + 2) * GIB, body))
        out["two_frees"] = []
        for _ in range(2):
            def body():
                a1, p1 = timed_alloc(32 * GIB)
                a2, p2 = timed_alloc(32 * GIB)
                f1, f2 = timed_free(p1), timed_free(p2)
                s, q = timed_alloc(62 * GIB)
                rt.free(q)
                return {"allocs_s": [a1, a2], "frees_s": [f1, f2], "alloc_s": s}
            out["two_frees"].append(with_room(66 * GIB, body))
        out["idle"] = []
        time.sleep(DRAIN_S)
        for w in (0.0, 0.05, 0.1, 0.3, 1.0):
            for _ in range(3):
                a, p = timed_alloc(8 * GIB)
                f = timed_free(p)
                time.sleep(w)
                s, q = timed_alloc(8 * GIB)
                rt.free(q)
                out["idle"].append({"wait_s": w, "first_alloc_s": a, "free_s": f, "alloc_s": s})

    run_and_save(measure, result, args.out)
    for key in ("progress", "sizes", "two_frees", "idle"):
        for row in result.get(key, []):
            print(key, {k: (round(v * 1e3, 2) if isinstance(v, float) and k.endswith("_s") and k not in ("delay_s", "wait_s") else v) for k, v in row.items()})
    print("errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

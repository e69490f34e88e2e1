#!/usr/bin/env python3
"""Measure whether a sparse first touch's fixed cost depends on the size of the managed range it faults in.

Standalone companion of ``measure_um.py`` (whose ``Bench`` it reuses); no rdmasim import. Usage::

    python3 calib/gpu_um/measure_um_range.py --out h200_um_range.json [--reps 15]

``measure_um.py`` ran its touches on a 1 GiB range and ``measure_um_edges.py`` on a 64 MiB one, each on its own
machine; one touch cost ~0.11-0.27 ms on the first and ~0.05-0.07 ms on the second. Here both, and the sizes
between and beyond, run in one process, interleaved repetition by repetition so that the machine and the
driver's state are shared: for each range size (64 MiB, 256 MiB, 1 GiB, 4 GiB; managed, populated by the CPU)
and each repetition, the whole range is prefetched back to the host, then a kernel writes 4 B at the start of
K 2 MiB VA blocks (K = 1, 8) and is timed with CUDA events.

* ``touch``: that, per size and K.
* ``touch_after_partial``: the same, but only the touched blocks are prefetched back to the host before each
  repetition (the range's other blocks stay where the last repetition left them): if the cost follows the
  range's size only through the state the whole-range prefetch leaves, this separates it.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_um import Bench, _summary, companion_arguments, environment, finish  # noqa: E402 - sibling script

MIB, GIB = 1 << 20, 1 << 30
SIZES = (64 * MIB, 256 * MIB, GIB, 4 * GIB)
TOUCHED_BLOCKS = (1, 8)


def interleaved(benches: list[Bench], reps: int, partial: bool) -> list[dict]:
    """Per size and K, the touch's time (seconds) over ``reps`` repetitions taken round-robin over the sizes."""
    samples = {(b.size, k): [] for b in benches for k in TOUCHED_BLOCKS}
    for _ in range(reps):
        for k in TOUCHED_BLOCKS:
            for bench in benches:
                if partial:
                    bench.pf.to_host(bench.ptr, k * 2 * MIB)
                    bench.dev.synchronize()
                else:
                    bench.to_host()
                samples[(bench.size, k)].append(bench.gpu_time(bench.touch(2 * MIB, k)))
    return [{"range_bytes": size, "va_blocks": k, "faulted": _summary(s)} for (size, k), s in samples.items()]


def main() -> None:
    args = companion_arguments(__doc__, reps=15, timeout_s=150)
    import cupy as cp

    free_bytes = cp.cuda.runtime.memGetInfo()[0]
    sizes = [s for s in SIZES if sum(x for x in SIZES if x <= s) <= free_bytes // 4]  # never near the free VRAM
    benches = [Bench(cp, size, args.reps) for size in sizes]
    result = {"method": __doc__, "env": environment(cp), "reps": args.reps, "sizes": sizes,
              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    started = time.perf_counter()
    try:
        result["touch"] = interleaved(benches, args.reps, partial=False)
        result["touch_after_partial"] = interleaved(benches, args.reps, partial=True)
    finally:
        for bench in benches[1:]:
            bench.close()
        finish(result, benches[0], started, args.out)
    for key in ("touch", "touch_after_partial"):
        for row in result.get(key, []):
            print(key, row["range_bytes"] // MIB, "MiB", "K", row["va_blocks"], row["faulted"])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Measure what an application pays before it registers a large untouched buffer: its own page faults (one write
per 4 KiB page from user space) and a NUMA probe of every page (``move_pages(2)`` with no target nodes, which
returns each page's node), then pinning the present pages with ``pin_user_pages`` (io_uring fixed buffers,
``ibv_reg_mr``'s pinning call and flags).

Standalone: libc through ctypes; no rdmasim import. Usage::

    python3 calib/host_pin/measure_numa_probe.py --out probe.json [--sizes-mib 1024,4096,16384,32768] [--reps 2]

Each repetition maps a fresh anonymous private 4 KiB-page range (``MADV_NOHUGEPAGE``), writes one byte per page
(timed: ``touch_s``), asks ``move_pages`` for every page's node in calls of ``--chunk`` pages (timed:
``probe_s``), pins the range (timed: ``pin_s``) and unpins it. Times are ``time.perf_counter`` around each step.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import time

import numpy as np

from measure_pin import MIB, Mapping, Uring, _ok, libc

SYS_MOVE_PAGES = 279  # x86-64


def probe(ptr: int, size: int, chunk: int) -> float:
    """Every page's node through move_pages(2), ``chunk`` pages a call (s)."""
    pages = size // 4096
    addrs = np.empty(chunk, dtype=np.uint64)  # the page addresses, as move_pages' array of pointers
    status = np.empty(chunk, dtype=np.int32)
    base = np.arange(chunk, dtype=np.uint64) * 4096
    started = time.perf_counter()
    for first in range(0, pages, chunk):
        n = min(chunk, pages - first)
        addrs[:n] = base[:n] + np.uint64(ptr + first * 4096)
        _ok(libc.syscall(SYS_MOVE_PAGES, 0, ctypes.c_ulong(n), ctypes.c_void_p(addrs.ctypes.data), None,
                         ctypes.c_void_p(status.ctypes.data), 0), "move_pages")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes-mib", default="1024,4096,16384,32768")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1 << 16, help="pages per move_pages call")
    args = parser.parse_args()
    ring = Uring()
    rows = []
    for size in (int(m) * MIB for m in args.sizes_mib.split(",")):
        for _ in range(args.reps):
            m = Mapping(size, "4k")
            try:
                started = time.perf_counter()
                m.prefault()
                touch = time.perf_counter() - started
                probed = probe(m.ptr, size, args.chunk)
                started = time.perf_counter()
                ring.pin(m.ptr, size)
                pinned = time.perf_counter() - started
                ring.unpin(m.ptr, size)
            finally:
                m.close()
            rows.append({"bytes": size, "touch_s": touch, "probe_s": probed, "pin_s": pinned})
            print(size // MIB, "MiB", {k: round(v, 3) for k, v in rows[-1].items() if k != "bytes"}, flush=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"method": __doc__, "env": {"uname": platform.platform(), "python": platform.python_version(),
                                              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                              "chunk_pages": args.chunk}, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()

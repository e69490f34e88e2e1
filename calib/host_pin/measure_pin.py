#!/usr/bin/env python3
"""Measure host-memory pinning cost by page size and path: mlock, cudaHostRegister, pin_user_pages.

Standalone: libc through ctypes, CuPy only for cudaHostRegister (skipped if CuPy is missing); no rdmasim
import. Usage (as root: it reserves hugetlbfs pages through /proc/sys/vm/nr_hugepages)::

    python3 calib/host_pin/measure_pin.py --out h200_host_pinning.json [--reps 5] [--sizes-mib 2,16,128,1024,4096]
        [--paths mlock,cudaHostRegister,pin_user_pages] [--backings 4k,thp,hugetlb]

Backing (``pages``), each a fresh anonymous private mapping per repetition:

* ``4k``: ``mmap`` + ``madvise(MADV_NOHUGEPAGE)``: 4 KiB base pages.
* ``thp``: ``mmap`` 2 MiB-aligned + ``madvise(MADV_HUGEPAGE)``: transparent huge pages (the share of the
  range that ended up huge is read from ``/proc/self/smaps`` and recorded as ``huge_fraction``).
* ``hugetlb``: ``mmap(MAP_HUGETLB | MAP_HUGE_2MB)`` from the hugetlbfs pool (reserved first).

Paths (``path``), each timed with ``time.perf_counter`` around the pin call and around the unpin call:

* ``mlock`` / ``munlock``.
* ``cudaHostRegister(ptr, n, 0)`` / ``cudaHostUnregister`` (pins, then maps the pages for the GPU).
* ``pin_user_pages``: ``io_uring_register(IORING_REGISTER_BUFFERS)`` / ``IORING_UNREGISTER_BUFFERS``. The
  kernel pins fixed buffers with ``pin_user_pages_fast(FOLL_WRITE | FOLL_LONGTERM)``, the same call and
  flags as ``ib_umem_get`` behind ``ibv_reg_mr``, then builds one bio_vec per page or per huge folio (mlx5
  builds its scatter list instead). One iovec per GiB (io_uring's limit per buffer).

``prefaulted`` true: every page was written once before the pin, so the pin only pins (that first write is
timed on its own as ``touch_s``: the user-space faults an application takes on its buffer); false: the pin faults
the pages in (allocation and zeroing included).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import signal
import statistics
import subprocess
import time

import numpy as np

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
PROT_RW, MAP_PRIVATE_ANON, MAP_HUGETLB, MAP_HUGE_2MB = 0x3, 0x22, 0x40000, 21 << 26
MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15
SYS_IO_URING_SETUP, SYS_IO_URING_REGISTER = 425, 427
IORING_REGISTER_BUFFERS, IORING_UNREGISTER_BUFFERS = 0, 1

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
for _name in ("munmap", "mlock", "munlock"):
    getattr(libc, _name).argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.syscall.restype = ctypes.c_long


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class Mapping:
    """One fresh anonymous mapping of ``size`` bytes backed by ``pages`` (``4k``, ``thp``, ``hugetlb``)."""

    def __init__(self, size: int, pages: str) -> None:
        self.size, self.pages = size, pages
        flags = MAP_PRIVATE_ANON | (MAP_HUGETLB | MAP_HUGE_2MB if pages == "hugetlb" else 0)
        self.span = size + (2 * MIB if pages == "thp" else 0)
        base = libc.mmap(None, self.span, PROT_RW, flags, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap {pages} {size}: {os.strerror(err)}")
        self.base = base
        self.ptr = -(-base // (2 * MIB)) * (2 * MIB) if pages == "thp" else base
        if pages != "hugetlb":
            _ok(libc.madvise(self.ptr, size, MADV_HUGEPAGE if pages == "thp" else MADV_NOHUGEPAGE), "madvise")

    def prefault(self) -> None:
        view = np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(self.ptr))
        view[::4096] = 1

    def huge_fraction(self) -> float:
        """Share of the range backed by huge pages (hugetlb: 1 by construction)."""
        if self.pages == "hugetlb":
            return 1.0
        with open("/proc/self/smaps", encoding="ascii") as handle:
            inside = False
            for line in handle:
                head = line.split()[0]
                if "-" in head and ":" not in head:
                    start, end = (int(x, 16) for x in head.split("-"))
                    inside = start <= self.ptr < end
                elif inside and head == "AnonHugePages:":
                    return int(line.split()[1]) * KIB / self.size
        return 0.0

    def close(self) -> None:
        libc.munmap(self.base, self.span)


class Uring:
    """An io_uring instance used only to pin and unpin fixed buffers."""

    def __init__(self) -> None:
        params = ctypes.create_string_buffer(120)
        fd = libc.syscall(SYS_IO_URING_SETUP, 8, params)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"io_uring_setup: {os.strerror(err)}")
        self.fd = fd

    def pin(self, ptr: int, size: int) -> None:
        chunks = [IoVec(ptr + off, min(GIB, size - off)) for off in range(0, size, GIB)]
        array = (IoVec * len(chunks))(*chunks)
        _ok(libc.syscall(SYS_IO_URING_REGISTER, self.fd, IORING_REGISTER_BUFFERS, array, len(chunks)),
            "IORING_REGISTER_BUFFERS")

    def unpin(self, ptr: int, size: int) -> None:
        _ok(libc.syscall(SYS_IO_URING_REGISTER, self.fd, IORING_UNREGISTER_BUFFERS, None, 0),
            "IORING_UNREGISTER_BUFFERS")


def paths(cupy_rt) -> dict:
    """name -> (pin, unpin) callables taking (ptr, size)."""
    out = {"mlock": (lambda p, n: _ok(libc.mlock(p, n), "mlock"), lambda p, n: _ok(libc.munlock(p, n), "munlock"))}
    if cupy_rt is not None:
        out["cudaHostRegister"] = (lambda p, n: cupy_rt.hostRegister(p, n, 0), lambda p, n: cupy_rt.hostUnregister(p))
    try:
        ring = Uring()
        out["pin_user_pages"] = (ring.pin, ring.unpin)
    except OSError as exc:
        out["pin_user_pages_error"] = repr(exc)
    return out


def measure(size: int, pages: str, name: str, pin, unpin, prefaulted: bool, reps: int) -> dict:
    pin_s, unpin_s, huge, touch_s = [], [], [], []
    for _ in range(reps):
        m = Mapping(size, pages)
        try:
            if prefaulted:
                started = time.perf_counter()
                m.prefault()
                touch_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            pin(m.ptr, size)
            pin_s.append(time.perf_counter() - started)
            huge.append(m.huge_fraction())
            started = time.perf_counter()
            unpin(m.ptr, size)
            unpin_s.append(time.perf_counter() - started)
        finally:
            m.close()
    return {"bytes": size, "pages": pages, "path": name, "prefaulted": prefaulted,
            "pin_s": statistics.median(pin_s), "pin_min_s": min(pin_s), "pin_samples_s": pin_s,
            "unpin_s": statistics.median(unpin_s), "unpin_min_s": min(unpin_s), "huge_fraction": min(huge),
            **({"touch_samples_s": touch_s} if touch_s else {})}


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError as exc:
        return repr(exc)


def reserve_hugetlb(count: int) -> int:
    try:
        with open("/proc/sys/vm/nr_hugepages", "w", encoding="ascii") as handle:
            handle.write(str(count))
    except OSError:
        pass
    return int(_read("/proc/sys/vm/nr_hugepages") or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-bytes", type=int, default=4 * GIB)
    parser.add_argument("--sizes-mib", default="2,16,128,1024,4096", help="sizes to pin, MiB, comma separated")
    parser.add_argument("--timeout-s", type=int, default=200, help="stop measuring after this long")
    parser.add_argument("--paths", default="mlock,cudaHostRegister,pin_user_pages", help="pin paths, comma separated")
    parser.add_argument("--backings", default="4k,thp,hugetlb", help="page backings, comma separated")

    def stop(*_):
        raise TimeoutError("time limit reached")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(args.timeout_s)
    try:
        import cupy
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1 << 20))
        rt, cupy_version = cupy.cuda.runtime, cupy.__version__
    except Exception:  # noqa: BLE001 - measure the host paths without CUDA
        rt, cupy_version = None, None
    sizes = [s for s in (int(m) * MIB for m in args.sizes_mib.split(",")) if s <= args.max_bytes]
    backings = args.backings.split(",")
    got = reserve_hugetlb(max(sizes) // (2 * MIB) + 16) if "hugetlb" in backings else 0
    wanted = args.paths.split(",")
    available = {k: v for k, v in paths(rt).items() if k in wanted or k.removesuffix("_error") in wanted}
    result = {"method": __doc__, "env": {
        "uname": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "cupy": cupy_version, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "page_size": mmap.PAGESIZE, "thp_enabled": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"), "hugetlb_pages_reserved": got,
        "io_uring_disabled": _read("/proc/sys/kernel/io_uring_disabled"), "nproc": os.cpu_count(),
        "cpu": subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo"], capture_output=True,
                              text=True).stdout.strip(),
        "paths_unavailable": {k: v for k, v in available.items() if k.endswith("_error")}},
        "reps": args.reps, "rows": [], "errors": []}
    started = time.perf_counter()
    try:
        for size in sizes:
            reps = args.reps if size <= 128 * MIB else max(2, args.reps // 2)
            for pages in backings:
                if pages == "hugetlb" and size > got * 2 * MIB:
                    continue
                for name, pair in available.items():
                    if name.endswith("_error"):
                        continue
                    for prefaulted in (True, False):
                        try:
                            result["rows"].append(measure(size, pages, name, *pair, prefaulted, reps))
                        except OSError as exc:
                            result["errors"].append(f"{size} {pages} {name} {prefaulted}: {exc!r}")
    except TimeoutError as exc:
        result["errors"].append(repr(exc))
    finally:
        result["elapsed_s"] = time.perf_counter() - started
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    for row in result["rows"]:
        print(row["bytes"] // MIB, "MiB", row["pages"], row["path"], "prefaulted" if row["prefaulted"] else "cold",
              f"pin {row['pin_s'] * 1e3:.3f} ms unpin {row['unpin_s'] * 1e3:.3f} ms huge {row['huge_fraction']:.2f}")
    print("env", json.dumps(result["env"]), "errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

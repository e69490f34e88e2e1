#!/usr/bin/env python3
"""Record the argument rules of the CUDA driver's virtual-memory calls on one NVIDIA GPU, and what a dma-buf export
of VMM memory needs: the CUresult of each call in each case, and free VRAM around a release while mapped.

Standalone: libcuda through ctypes only (``calib/cuda_vmm.py``); no rdmasim import. Usage::

    python3 calib/dmabuf_export/measure_vmm_rules.py --out vmm_rules.json

Every case starts from a fresh 4 MiB handle (``cuMemCreate``, pinned device memory) and an 8 MiB reservation
(``cuMemAddressReserve``) unless it says otherwise, and cleans up after itself; G is the minimum granularity.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import (CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_LOCATION_TYPE_DEVICE, AccessDesc,  # noqa: E402
                      Cuda, MemLocation)
from host_facts import command_output  # noqa: E402

MIB = 1 << 20
DMA_BUF_FD = 1


class Rules:
    """The calls with their CUresult names (no raising), on ``cuda``'s device."""

    def __init__(self, cuda: Cuda) -> None:
        self.cuda = cuda
        self.g = cuda.granularity(cuda.prop())

    def name(self, rc: int) -> str:
        return self.cuda.result(rc)["name"]

    def create(self, size: int, flags: int = 0) -> tuple[str, int]:
        handle = ctypes.c_ulonglong()
        prop = self.cuda.prop()
        rc = self.cuda.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                            ctypes.c_ulonglong(flags))
        return self.name(rc), handle.value

    def reserve(self, size: int, alignment: int = 0, addr: int = 0, flags: int = 0) -> tuple[str, int]:
        ptr = ctypes.c_ulonglong()
        rc = self.cuda.call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size),
                            ctypes.c_size_t(alignment), ctypes.c_ulonglong(addr), ctypes.c_ulonglong(flags))
        return self.name(rc), ptr.value

    def map(self, ptr: int, size: int, handle: int, offset: int = 0, flags: int = 0) -> str:
        return self.name(self.cuda.call("cuMemMap", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size),
                                        ctypes.c_size_t(offset), ctypes.c_ulonglong(handle),
                                        ctypes.c_ulonglong(flags)))

    def access(self, ptr: int, size: int) -> str:
        desc = AccessDesc(location=MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, self.cuda.dev),
                          flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return self.name(self.cuda.call("cuMemSetAccess", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size),
                                        ctypes.byref(desc), ctypes.c_size_t(1)))

    def unmap(self, ptr: int, size: int) -> str:
        return self.name(self.cuda.call("cuMemUnmap", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size)))

    def release(self, handle: int) -> str:
        return self.name(self.cuda.call("cuMemRelease", ctypes.c_ulonglong(handle)))

    def address_free(self, ptr: int, size: int) -> str:
        return self.name(self.cuda.call("cuMemAddressFree", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size)))

    def export(self, ptr: int, size: int, flags: int = 0) -> tuple[str, int]:
        fd = ctypes.c_int(-1)
        rc = self.cuda.call("cuMemGetHandleForAddressRange", ctypes.byref(fd), ctypes.c_ulonglong(ptr),
                            ctypes.c_size_t(size), DMA_BUF_FD, ctypes.c_ulonglong(flags))
        return self.name(rc), fd.value


def cases(r: Rules) -> dict:
    """Each case's CUresult names, in the order the calls were made."""
    g, out = r.g, {}

    def fresh(handle_size: int = 2 * MIB * 2, va_size: int = 8 * MIB) -> tuple[int, int]:
        rc, handle = r.create(handle_size)
        rc2, ptr = r.reserve(va_size)
        assert rc == rc2 == "CUDA_SUCCESS", (rc, rc2)
        return handle, ptr

    def done(handle: int, ptr: int, va_size: int = 8 * MIB, *mapped: tuple[int, int]) -> None:
        for start, size in mapped:
            r.unmap(start, size)
        r.release(handle)
        r.address_free(ptr, va_size)

    rc, handle = r.create(g + 4096)
    out["create size G + 4 KiB"] = rc
    if rc == "CUDA_SUCCESS":
        r.release(handle)
    rc, handle = r.create(g, flags=1)
    out["create flags 1"] = rc
    if rc == "CUDA_SUCCESS":
        r.release(handle)
    for label, size, align in (("reserve size G + 4 KiB", g + 4096, 0), ("reserve size 4 KiB", 4096, 0),
                               ("reserve alignment 3", g, 3), ("reserve alignment 2G", g, 2 * g)):
        rc, ptr = r.reserve(size, align)
        out[label] = rc
        if rc == "CUDA_SUCCESS":
            out[label + ": aligned to 2G"] = ptr % (2 * g) == 0
            r.address_free(ptr, size)
    handle_size = 2 * g
    for label, va_off, size, off, flags in (
            ("map half the handle", 0, g, 0, 0), ("map at handle offset G", 0, g, g, 0),
            ("map at VA offset 4 KiB", 4096, handle_size, 0, 0), ("map more than the handle", 0, 4 * g, 0, 0),
            ("map past the reservation", 6 * MIB, handle_size, 0, 0), ("map flags 1", 0, handle_size, 0, 1),
            ("map whole handle at VA offset 2G", 2 * g, handle_size, 0, 0)):
        handle, ptr = fresh(handle_size)
        rc = out[label] = r.map(ptr + va_off, size, handle, off, flags)
        done(handle, ptr, 8 * MIB, *([(ptr + va_off, size)] if rc == "CUDA_SUCCESS" else []))
    handle, ptr = fresh(handle_size)
    r.map(ptr, handle_size, handle)
    out["map over a mapped range"] = r.map(ptr, handle_size, handle)
    out["map the same handle again elsewhere"] = r.map(ptr + handle_size, handle_size, handle)
    out["unmap both mappings in one call"] = r.unmap(ptr, 2 * handle_size)
    if out["unmap both mappings in one call"] != "CUDA_SUCCESS":
        r.unmap(ptr, handle_size), r.unmap(ptr + handle_size, handle_size)
    done(handle, ptr)
    handle, ptr = fresh(handle_size)
    r.map(ptr, handle_size, handle)
    out["set access on a half-mapped range"] = r.access(ptr, 2 * handle_size)
    out["set access on a sub-range"] = r.access(ptr, g)
    for label, start, size in (("export a sub-range at offset 4 KiB", ptr + 4096, 4096),
                               ("export a half-mapped range", ptr, 2 * handle_size)):
        out[label], fd = r.export(start, size)
        if out[label] == "CUDA_SUCCESS":
            os.close(fd)
    out["unmap a sub-range"] = r.unmap(ptr, g)
    out["address free with a mapping in it"] = r.address_free(ptr, 8 * MIB)
    if out["address free with a mapping in it"] != "CUDA_SUCCESS":
        r.unmap(ptr, handle_size)
        out["address free, wrong size"] = r.address_free(ptr, 4 * MIB)
        out["address free inside the reservation"] = r.address_free(ptr + 4 * MIB, 4 * MIB)
        r.address_free(ptr, 8 * MIB)
    r.release(handle)
    # release while mapped: the memory stays until the unmap
    size = 1 << 30
    free0 = r.cuda.mem_free()
    rc, handle = r.create(size)
    _, ptr = r.reserve(size)
    r.map(ptr, size, handle)
    r.access(ptr, size)
    free1 = r.cuda.mem_free()
    out["release while mapped"] = r.release(handle)
    free2 = r.cuda.mem_free()
    rc, fd = r.export(ptr, size)
    out["export after release, still mapped"] = rc
    out["unmap after release"] = r.unmap(ptr, size)
    free3 = r.cuda.mem_free()
    if rc == "CUDA_SUCCESS":
        os.close(fd)
    free4 = r.cuda.mem_free()
    r.address_free(ptr, size)
    out["free_bytes 1 GiB: before, mapped, released while mapped, unmapped (fd open), fd closed"] = [
        free0, free1, free2, free3, free4]
    return out


def start(method: str) -> tuple[str, Rules, dict]:
    """A VMM measurement script's start: the ``--out`` path its command line names, the calls on device 0, and
    the run's record before its cases (``method``, the script's docstring; the granularity; the driver, host and
    GPU it runs on)."""
    parser = argparse.ArgumentParser(description=method.splitlines()[0])
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    r = Rules(Cuda(0))
    version = ctypes.c_int()
    r.cuda.ok("cuDriverGetVersion", ctypes.byref(version))
    return out, r, {"method": method, "granularity": r.g,
                    "env": {"driver_api": version.value, "uname": platform.platform(),
                            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                                   "--format=csv"])}}


def main() -> None:
    out, r, result = start(__doc__)
    try:
        result["cases"] = cases(r)
    except Exception as exc:  # noqa: BLE001 - keep what was recorded
        result["error"] = repr(exc)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

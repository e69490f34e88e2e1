#!/usr/bin/env python3
"""Record how far a cuMemMap may reach past the reservation it starts in, on one NVIDIA GPU: the CUresult of maps
at growing offsets past an 8 MiB reservation's end, where the next reservations land, what the driver says of a
map that crosses into a neighbour reservation or lies in address space never reserved, and whether such a mapping
can be used (access set, memset, exported, freed).

Standalone: libcuda through ctypes only (``calib/cuda_vmm.py``, ``measure_vmm_rules.Rules``); no rdmasim import.
Usage::

    python3 calib/dmabuf_export/measure_vmm_reach.py --out vmm_reach.json

Every case starts from a fresh 4 MiB handle (``cuMemCreate``, pinned device memory) and cleans up after itself;
G is the minimum granularity (2 MiB on the GPUs measured so far).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_vmm_rules import Rules, start  # noqa: E402

MIB = 1 << 20
HANDLE = 4 * MIB
RESERVED = 8 * MIB
PAST_END_MIB = (6, 7, 8, 10, 16, 32, 64, 128, 512, 1024, 2048, 4096)
"""Offsets from the reservation's start at which the 4 MiB handle is mapped (MiB); from 6 on the map runs past
the 8 MiB reservation's end, from 8 on it lies wholly past it."""


def use(r: Rules, ptr: int, size: int) -> dict:
    """What a successful map at ``ptr`` allows: access set, a memset of its bytes, its allocation range as the
    driver reports it, and a dma-buf export of it."""
    out = {"access": r.access(ptr, size)}
    out["memset"] = r.name(r.cuda.call("cuMemsetD8_v2", ctypes.c_ulonglong(ptr), ctypes.c_ubyte(7),
                                       ctypes.c_size_t(size)))
    r.cuda.call("cuCtxSynchronize")
    base, length = ctypes.c_ulonglong(), ctypes.c_size_t()
    rc = r.cuda.call("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(length), ctypes.c_ulonglong(ptr))
    out["address range"] = {"result": r.name(rc), "base offset": base.value - ptr if rc == 0 else None,
                            "size": length.value if rc == 0 else None}
    out["export"], fd = r.export(ptr, size)
    if out["export"] == "CUDA_SUCCESS":
        os.close(fd)
    return out


def past_end(r: Rules) -> dict:
    """Map the handle at each offset of :data:`PAST_END_MIB` into a fresh 8 MiB reservation."""
    out = {}
    for mib in PAST_END_MIB:
        rc, handle = r.create(HANDLE)
        _, ptr = r.reserve(RESERVED)
        at = ptr + mib * MIB
        case = out[f"{mib} MiB"] = {"map": r.map(at, HANDLE, handle)}
        if case["map"] == "CUDA_SUCCESS":
            case.update(use(r, at, HANDLE))
            case["address free with the mapping in place"] = r.address_free(ptr, RESERVED)
            case["unmap"] = r.unmap(at, HANDLE)
            if case["address free with the mapping in place"] != "CUDA_SUCCESS":
                case["address free after the unmap"] = r.address_free(ptr, RESERVED)
        else:
            r.address_free(ptr, RESERVED)
        r.release(handle)
    return out


def lengths(r: Rules) -> dict:
    """Maps that start inside a reservation and run past its end by more: handles of growing size at 6 MiB into
    an 8 MiB reservation, a 4 MiB handle at the start of a 2 MiB one, and a map whose tail would fall on a
    neighbour reservation's mapping."""
    out = {}
    for mib in (16, 64, 256):
        rc, handle = r.create(mib * MIB)
        _, ptr = r.reserve(RESERVED)
        case = out[f"{mib} MiB handle at 6 MiB"] = {"map": r.map(ptr + 6 * MIB, mib * MIB, handle)}
        if case["map"] == "CUDA_SUCCESS":
            case.update(use(r, ptr + 6 * MIB, mib * MIB))
            case["unmap"] = r.unmap(ptr + 6 * MIB, mib * MIB)
        r.address_free(ptr, RESERVED)
        r.release(handle)
    rc, handle = r.create(HANDLE)
    _, ptr = r.reserve(2 * MIB)
    case = out["4 MiB handle at the start of a 2 MiB reservation"] = {"map": r.map(ptr, HANDLE, handle)}
    if case["map"] == "CUDA_SUCCESS":
        case.update(use(r, ptr, HANDLE))
        case["unmap"] = r.unmap(ptr, HANDLE)
    r.address_free(ptr, 2 * MIB)
    _, first = r.reserve(RESERVED)
    _, second = r.reserve(RESERVED, addr=first + RESERVED)
    other = r.create(HANDLE)[1]
    if second == first + RESERVED and r.map(second, HANDLE, other) == "CUDA_SUCCESS":
        rc = out["map whose tail falls on the next reservation's mapping"] = r.map(first + 6 * MIB, HANDLE, handle)
        if rc == "CUDA_SUCCESS":
            r.unmap(first + 6 * MIB, HANDLE)
        r.unmap(second, HANDLE)
    r.release(other)
    for ptr in (first, second):
        r.address_free(ptr, RESERVED)
    r.release(handle)
    return out


def neighbours(r: Rules) -> dict:
    """Where consecutive reservations land, and a map from one into the next."""
    out = {}
    for size in (2 * MIB, RESERVED, 64 * MIB):
        ptrs = [r.reserve(size)[1] for _ in range(4)]
        out[f"gaps between four {size // MIB} MiB reservations (MiB)"] = [(b - a) / MIB for a, b in
                                                                           zip(ptrs, ptrs[1:])]
        for ptr in ptrs:
            r.address_free(ptr, size)
    rc, handle = r.create(HANDLE)
    _, first = r.reserve(RESERVED)
    _, second = r.reserve(RESERVED, addr=first + RESERVED)
    out["second reservation asked right after the first"] = {"at the asked address": second == first + RESERVED}
    if second == first + RESERVED:
        at = first + 6 * MIB
        case = out["map across the two reservations"] = {"map": r.map(at, HANDLE, handle)}
        if case["map"] == "CUDA_SUCCESS":
            case.update(use(r, at, HANDLE))
            case["unmap"] = r.unmap(at, HANDLE)
    for ptr in (first, second):
        r.address_free(ptr, RESERVED)
    r.release(handle)
    rc, handle = r.create(HANDLE)
    _, ptr = r.reserve(RESERVED)
    r.address_free(ptr, RESERVED)  # the address space is reserved no longer
    case = out["map in a reservation already freed"] = {"map": r.map(ptr, HANDLE, handle)}
    if case["map"] == "CUDA_SUCCESS":
        case.update(use(r, ptr, HANDLE))
        case["unmap"] = r.unmap(ptr, HANDLE)
    r.release(handle)
    return out


def main() -> None:
    out, r, result = start(__doc__)
    for name, measure in (("past the end", past_end), ("lengths", lengths), ("neighbours", neighbours)):
        try:
            result[name] = measure(r)
        except Exception as exc:  # noqa: BLE001 - keep what was recorded
            result[name + " error"] = repr(exc)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

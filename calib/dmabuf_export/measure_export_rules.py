#!/usr/bin/env python3
"""Measure the dma-buf export rules of one NVIDIA GPU by allocation type and mapping type, and what freeing
exported memory does to VRAM and to the next allocation's address.

Standalone: libcuda through ctypes only; no rdmasim import. Usage::

    python3 calib/dmabuf_export/measure_export_rules.py --out export_rules.json

What is recorded (every CUresult as its number and name):

* ``exports``: ``cuMemGetHandleForAddressRange(DMA_BUF_FD, flags)`` for flags 0, 1
  (``CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE``), 2 and 0x80000000 on: a ``cuMemAlloc`` allocation; VMM
  allocations (``cuMemCreate`` + reserve + map + set access) with ``gpuDirectRDMACapable`` 0 and 1 and
  ``requestedHandleTypes`` none and POSIX fd; a VMM range mapped but without access set; a VA range covering two
  VMM allocations mapped back to back; a reserved range with nothing mapped; ``cuMemAllocManaged`` and
  ``cuMemHostAlloc`` memory. Each successful export's wall time and ``/proc`` fdinfo size are kept.
* ``free_after_export``: free VRAM (``cuMemGetInfo``) around ``cuMemFree`` of an exported 1 GiB ``cuMemAlloc``
  allocation while its fd is open, after the fd is closed, and the address the next 1 GiB allocation gets in
  each state; the same for a VMM allocation released (``cuMemUnmap`` + ``cuMemRelease``) while exported.
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
from cuda_vmm import Cuda  # noqa: E402
from host_facts import command_output  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
DMA_BUF_FD = 1
FLAG_PCIE = 1
FLAGS = (0, FLAG_PCIE, 2, 0x80000000)
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ATTACH_GLOBAL = 1


def export(cuda: Cuda, ptr: int, size: int, flags: int) -> dict:
    """``cuMemGetHandleForAddressRange`` of ``[ptr, +size)`` as a dma-buf fd with ``flags``: its result, time and
    the fd's size (the fd is left open, under ``fd``)."""
    fd = ctypes.c_int(-1)
    started = time.perf_counter()
    rc = cuda.call("cuMemGetHandleForAddressRange", ctypes.byref(fd), ctypes.c_ulonglong(ptr),
                   ctypes.c_size_t(size), DMA_BUF_FD, ctypes.c_ulonglong(flags))
    out = {"flags": flags, "result": cuda.result(rc)}
    if rc == 0:
        out["s"] = time.perf_counter() - started
        out["fdinfo_size"] = _fdinfo_size(fd.value)
        out["fd"] = fd.value
    return out


def _fdinfo_size(fd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("size:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _close(entry: dict) -> dict:
    fd = entry.pop("fd", None)
    if fd is not None:
        os.close(fd)
    return entry


def export_all(cuda: Cuda, case: str, ptr: int, size: int) -> list[dict]:
    return [{"case": case, "bytes": size, **_close(export(cuda, ptr, size, flags))} for flags in FLAGS]


def exports(cuda: Cuda) -> list[dict]:
    rows = []
    size = 64 * MIB
    ptr = cuda.mem_alloc(size)
    rows += export_all(cuda, "cuMemAlloc", ptr, size)
    cuda.ok("cuMemFree_v2", ctypes.c_ulonglong(ptr))
    for rdma in (0, 1):
        for handle_types, label in ((0, "no handle types"), (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "posix fd")):
            case = f"cuMemCreate gpuDirectRDMACapable={rdma}, {label}"
            gran = cuda.granularity(cuda.prop(rdma, handle_types))
            vsize = -(-size // gran) * gran
            rc, handle = cuda.vmm_create(vsize, rdma, handle_types)
            if rc:
                rows.append({"case": case, "bytes": vsize, "cuMemCreate": cuda.result(rc)})
                continue
            va = cuda.reserve(vsize)
            cuda.map(va, vsize, handle)
            rows += export_all(cuda, case, va, vsize)
            cuda.unmap(va, vsize)
            cuda.release(handle)
            cuda.address_free(va, vsize)
    rc, handle = cuda.vmm_create(size, 1)
    va = cuda.reserve(size)
    cuda.map(va, size, handle, access=False)
    rows += export_all(cuda, "cuMemCreate mapped, no cuMemSetAccess", va, size)
    cuda.unmap(va, size)
    cuda.release(handle)
    cuda.address_free(va, size)
    half = 32 * MIB
    va = cuda.reserve(size)
    handles = []
    for i in range(2):
        _, h = cuda.vmm_create(half, 1)
        cuda.map(va + i * half, half, h)
        handles.append(h)
    rows += export_all(cuda, "one VA range over two cuMemCreate allocations", va, size)
    rows += export_all(cuda, "first of two cuMemCreate allocations", va, half)
    for i, h in enumerate(handles):
        cuda.unmap(va + i * half, half)
        cuda.release(h)
    rows += export_all(cuda, "reserved VA range, nothing mapped", va, size)
    cuda.address_free(va, size)
    managed = ctypes.c_ulonglong()
    cuda.ok("cuMemAllocManaged", ctypes.byref(managed), ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL)
    rows += export_all(cuda, "cuMemAllocManaged", managed.value, size)
    cuda.ok("cuMemFree_v2", managed)
    host = ctypes.c_void_p()
    cuda.ok("cuMemHostAlloc", ctypes.byref(host), ctypes.c_size_t(size), 0)
    rows += export_all(cuda, "cuMemHostAlloc", host.value, size)
    cuda.ok("cuMemFreeHost", host)
    return rows


def free_after_export(cuda: Cuda) -> dict:
    size = GIB
    out: dict = {"bytes": size}
    base_free = cuda.mem_free()
    ptr = cuda.mem_alloc(size)
    exp = export(cuda, ptr, size, 0)
    out["cuMemAlloc"] = {"ptr": ptr, "export": {k: v for k, v in exp.items() if k != "fd"},
                         "free_bytes_before": base_free, "free_bytes_allocated": cuda.mem_free()}
    cuda.ok("cuMemFree_v2", ctypes.c_ulonglong(ptr))
    out["cuMemAlloc"]["free_bytes_after_free_fd_open"] = cuda.mem_free()
    again = export(cuda, ptr, size, 0)
    out["cuMemAlloc"]["export_freed_range"] = _close(again)
    nxt = cuda.mem_alloc(size)
    out["cuMemAlloc"]["next_alloc_fd_open"] = {"ptr": nxt, "same_address": nxt == ptr,
                                               "free_bytes": cuda.mem_free()}
    cuda.ok("cuMemFree_v2", ctypes.c_ulonglong(nxt))
    os.close(exp["fd"])
    time.sleep(0.05)
    out["cuMemAlloc"]["free_bytes_after_close"] = cuda.mem_free()
    nxt = cuda.mem_alloc(size)
    out["cuMemAlloc"]["next_alloc_fd_closed"] = {"ptr": nxt, "same_address": nxt == ptr}
    cuda.ok("cuMemFree_v2", ctypes.c_ulonglong(nxt))

    rc, handle = cuda.vmm_create(size, 1)
    va = cuda.reserve(size)
    cuda.map(va, size, handle)
    before = cuda.mem_free()
    exp = export(cuda, va, size, 0)
    cuda.unmap(va, size)
    cuda.release(handle)
    vmm = {"export": {k: v for k, v in exp.items() if k != "fd"}, "free_bytes_mapped": before,
           "free_bytes_after_release_fd_open": cuda.mem_free()}
    os.close(exp["fd"])
    time.sleep(0.05)
    vmm["free_bytes_after_close"] = cuda.mem_free()
    cuda.address_free(va, size)
    out["vmm"] = vmm
    return out


def environment(cuda: Cuda) -> dict:
    version = ctypes.c_int()
    cuda.ok("cuDriverGetVersion", ctypes.byref(version))
    name = ctypes.create_string_buffer(256)
    cuda.ok("cuDeviceGetName", name, 256, cuda.dev)
    return {"gpu": name.value.decode(), "cuda_driver": version.value, "uname": platform.uname()._asdict(),
            "nvidia_smi": command_output(["nvidia-smi", "--query-gpu=driver_version,memory.total,memory.free",
                                          "--format=csv"]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cuda = Cuda()
    result = {"env": environment(cuda), "exports": exports(cuda), "free_after_export": free_after_export(cuda)}
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""The CUDA driver API for the measurement scripts that call libcuda through ctypes: its virtual-memory structures
(``cuda.h``: ``CUmemLocation``, ``CUmemAllocationProp`` with its ``allocFlags``, ``CUmemAccessDesc``) and
:class:`Cuda`, the calls they make."""

import argparse
import ctypes
import signal

CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 1, 1, 3


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", MemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


class Cuda:
    """The driver-API calls the scripts use, on ``device``'s primary context (the one the CUDA runtime and CuPy use);
    ``call`` returns the CUresult, ``ok`` raises on failure."""

    def __init__(self, device: int = 0) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ok("cuInit", 0)
        dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self.ok("cuDeviceGet", ctypes.byref(dev), device)
        self.dev = dev.value
        self.ok("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.dev)
        self.ok("cuCtxSetCurrent", self.ctx)

    def call(self, name: str, *args) -> int:
        return int(getattr(self.lib, name)(*args))

    def ok(self, name: str, *args) -> None:
        rc = self.call(name, *args)
        if rc:
            raise RuntimeError(f"{name}: {self.error_name(rc)}")

    def error_name(self, rc: int) -> str:
        text = ctypes.c_char_p()
        self.lib.cuGetErrorName(rc, ctypes.byref(text))
        return text.value.decode() if text.value else str(rc)

    def result(self, rc: int) -> dict:
        return {"code": rc, "name": self.error_name(rc) if rc else "CUDA_SUCCESS"}

    def mem_free(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.ok("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value

    def mem_alloc(self, size: int) -> int:
        ptr = ctypes.c_ulonglong()
        self.ok("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
        return ptr.value

    def prop(self, rdma: int = 0, handle_types: int = 0) -> AllocationProp:
        """Pinned device memory on the device, ``gpuDirectRDMACapable`` ``rdma``, exportable as ``handle_types``."""
        return AllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED, requestedHandleTypes=handle_types,
                              location=MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, self.dev),
                              allocFlags=AllocFlags(gpuDirectRDMACapable=rdma))

    def granularity(self, prop: AllocationProp) -> int:
        gran = ctypes.c_size_t()
        self.ok("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop), 0)
        return gran.value

    def vmm_create(self, size: int, rdma: int = 0, handle_types: int = 0) -> tuple[int, int]:
        """``cuMemCreate``: its CUresult and the handle."""
        handle = ctypes.c_ulonglong()
        prop = self.prop(rdma, handle_types)
        rc = self.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                       ctypes.c_ulonglong(0))
        return rc, handle.value

    def reserve(self, size: int) -> int:
        ptr = ctypes.c_ulonglong()
        self.ok("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
        return ptr.value

    def map(self, ptr: int, size: int, handle: int, access: bool = True) -> None:
        """``cuMemMap``, then (``access``) :meth:`set_access`."""
        self.ok("cuMemMap", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0))
        if access:
            self.set_access(ptr, size)

    def set_access(self, ptr: int, size: int) -> None:
        """``cuMemSetAccess``: read-write for the device."""
        desc = AccessDesc(location=MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, self.dev),
                          flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        self.ok("cuMemSetAccess", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size), ctypes.byref(desc),
                ctypes.c_size_t(1))

    def unmap(self, ptr: int, size: int) -> None:
        self.ok("cuMemUnmap", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))

    def release(self, handle: int) -> None:
        self.ok("cuMemRelease", ctypes.c_ulonglong(handle))

    def address_free(self, ptr: int, size: int) -> None:
        self.ok("cuMemAddressFree", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))


def cupy_started():
    """CuPy with its context created and warmed up (untimed), for the scripts that allocate through it: the cupy
    module, its runtime, :class:`Cuda` on the same device, and the device's free and total memory (bytes)."""
    import cupy as cp

    runtime = cp.cuda.runtime
    runtime.free(runtime.malloc(2 << 20))
    free_bytes, total_bytes = runtime.memGetInfo()
    return cp, runtime, Cuda(cp.cuda.Device().id), free_bytes, total_bytes


def paused_start(doc: str, timeout_s: int):
    """The start of a script that times allocations with a pause before each case: its command line (``--out``,
    ``--pause-s``, default 1.5 s, and ``--timeout-s``, after which an alarm aborts the run), CuPy started
    (:func:`cupy_started`) and the result's header (the script's method, the environment, the device's free and
    total memory, the pause). Returns (the arguments, CuPy's runtime, :class:`Cuda`, the result)."""
    from host_facts import cuda_environment

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--pause-s", type=float, default=1.5, help="pause before each case (s)")
    parser.add_argument("--timeout-s", type=int, default=timeout_s, help="abort the whole run after this long")
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    cp, runtime, cuda, free_bytes, total_bytes = cupy_started()
    return args, runtime, cuda, {"method": doc, "env": cuda_environment(cp), "free_bytes": free_bytes,
                                 "total_bytes": total_bytes, "pause_s": args.pause_s, "errors": []}

#!/usr/bin/env python3
"""Measure unified (managed) memory on one NVIDIA GPU: fault-driven migration, prefetch, sparse touches.

Standalone: needs CuPy (NVRTC kernels, events) and the CUDA runtime; no rdmasim import. Writes one JSON
file whose ``method`` field says how every number was taken. Usage::

    python3 calib/gpu_um/measure_um.py --out h200_managed_memory.json [--reps 7]

What is measured (all on managed memory from ``cudaMallocManaged(..., cudaMemAttachGlobal)``; before each
timed repetition the whole range is migrated back to the host with ``cudaMemPrefetchAsync(..., host)``, so
every page is resident on the CPU and unmapped from the GPU; CUDA events time the GPU-side work):

* ``first_touch``: a grid-stride kernel reads every 16 B of N bytes resident on the host (fault-driven
  migration of the whole range), N = 2, 16, 64, 256 MiB and 1 GiB; the same kernel on GPU-resident data is the
  compute-only baseline.
* ``prefetch``: ``cudaMemPrefetchAsync`` of N bytes host->GPU and GPU->host (same N). The binding is
  CuPy's where it works, else ctypes against libcudart with the CUDA 13 signature (``cudaMemLocation``).
* ``sparse``: one thread per touched word writes 4 B every ``stride`` bytes of 1 GiB, strides 4 KiB,
  64 KiB and 2 MiB (262144, 16384 and 512 touches).
* ``blocks``: one touch at the start of each of the first K 2 MiB VA blocks, K = 1, 8, 64, 256 (cost per
  fault batch and per VA block).
* ``block_heads``: one touch on each of the first M 4 KiB pages of every 2 MiB block (M = 64 .. 384 of
  512), then a full read: the follow-up time shows whether the rest of each block was prefetched
  (UVM's 51 % threshold).
* ``sparse[].then``: the same sparse touch followed by a full read (what the touch left on the host).
* ``cpu_fault_back``: with 1 GiB resident on the GPU, the CPU reads one byte every 4 KiB, 64 KiB or
  2 MiB (wall-clock), then one byte of every 4 KiB page (what the first pass left on the GPU); baseline:
  the same reads when host-resident.

Never allocates more managed memory than ``--max-bytes`` (default 1 GiB), far below free HBM, so the GPU is
never oversubscribed (oversubscribing managed memory on a shared machine can hang the GPU).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from cuda_vmm import MemLocation  # noqa: E402  (the runtime's cudaMemLocation has the same layout)
from host_facts import command_output  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

KERNELS = r"""
extern "C" __global__ void read_all(const int4* p, long long n16, int* out) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    int acc = 0;
    for (; i < n16; i += step) { int4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    if (acc == 0x5eed1234) out[0] = acc;
}
extern "C" __global__ void touch(int* p, long long stride_words, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) p[i * stride_words] += 1;
}
extern "C" __global__ void touch_head(int* p, long long pages_per_block, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) p[((i / pages_per_block) * 512 + i % pages_per_block) * 1024] += 1;
}
"""


class Prefetcher:
    """cudaMemPrefetchAsync through whichever binding works here (CUDA 13 changed its signature)."""

    def __init__(self, cp, device: int) -> None:
        self.cp, self.device, self.backend, self.errors = cp, device, None, {}
        self._lib = None
        ctypes_name = "ctypes_v2" if cp.cuda.runtime.runtimeGetVersion() >= 13000 else "ctypes_v1"
        probe = cp.cuda.runtime.mallocManaged(2 * MIB, 1)
        try:
            for name in ("cupy", ctypes_name):
                try:
                    self.backend = name
                    self.to_gpu(probe, 2 * MIB)
                    self.to_host(probe, 2 * MIB)
                    cp.cuda.Device(device).synchronize()
                    return
                except Exception as exc:  # noqa: BLE001 - try the next binding
                    self.errors[name] = repr(exc)
            raise RuntimeError(f"no working cudaMemPrefetchAsync binding: {self.errors}")
        finally:
            cp.cuda.runtime.free(probe)

    def _cudart(self):
        if self._lib is None:
            names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
            try:
                from cuda.pathfinder import load_nvidia_dynamic_lib
                names.insert(0, load_nvidia_dynamic_lib("cudart").abs_path)
            except Exception:  # noqa: BLE001 - fall back to the loader's search path
                pass
            for name in names:
                try:
                    self._lib = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
        return self._lib

    def _prefetch(self, ptr: int, nbytes: int, target: int) -> None:
        stream = self.cp.cuda.get_current_stream().ptr
        if self.backend == "cupy":
            self.cp.cuda.runtime.memPrefetchAsync(ptr, nbytes, target, stream)
            return
        lib = self._cudart()
        if self.backend == "ctypes_v2":  # CUDA >= 13: (ptr, count, cudaMemLocation, flags, stream)
            loc = MemLocation(2, 0) if target < 0 else MemLocation(1, target)
            fn = lib.cudaMemPrefetchAsync
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, MemLocation, ctypes.c_uint, ctypes.c_void_p]
            rc = fn(ptr, nbytes, loc, 0, stream)
        else:  # CUDA <= 12: (ptr, count, dstDevice, stream)
            fn = lib.cudaMemPrefetchAsync
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            rc = fn(ptr, nbytes, target, stream)
        if rc != 0:
            raise RuntimeError(f"cudaMemPrefetchAsync returned {rc}")

    def to_gpu(self, ptr: int, nbytes: int) -> None:
        self._prefetch(ptr, nbytes, self.device)

    def to_host(self, ptr: int, nbytes: int) -> None:
        self._prefetch(ptr, nbytes, -1)  # cudaCpuDeviceId


def _summary(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "reps": len(samples)}


class Bench:
    """One managed buffer, the kernels and the timing helpers."""

    def __init__(self, cp, size: int, reps: int) -> None:
        self.cp, self.size, self.reps = cp, size, reps
        self.dev = cp.cuda.Device()
        self.pf = Prefetcher(cp, self.dev.id)
        self.ptr = cp.cuda.runtime.mallocManaged(size, 1)
        self.host = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(self.ptr))
        self.host[:] = 1  # first touch by the CPU: every page populated and resident on the host
        module = cp.RawModule(code=KERNELS)
        self.k_read, self.k_touch = module.get_function("read_all"), module.get_function("touch")
        self.k_head = module.get_function("touch_head")
        self.out = cp.zeros(1, dtype=cp.int32)
        self.sms = self.dev.attributes["MultiProcessorCount"]

    def close(self) -> None:
        self.cp.cuda.runtime.free(self.ptr)

    def to_host(self) -> None:
        self.pf.to_host(self.ptr, self.size)
        self.dev.synchronize()

    def to_gpu(self) -> None:
        self.pf.to_gpu(self.ptr, self.size)
        self.dev.synchronize()

    def gpu_time(self, launch) -> float:
        start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        return self.cp.cuda.get_elapsed_time(start, end) / 1e3

    def read_all(self, nbytes: int):
        n16 = nbytes // 16
        blocks = max(1, min(self.sms * 8, (n16 + 255) // 256))
        return lambda: self.k_read((blocks,), (256,), (self.cp.uint64(self.ptr), np.int64(n16), self.out))

    def touch(self, stride: int, count: int):
        blocks = (count + 255) // 256
        return lambda: self.k_touch((blocks,), (min(256, count),),
                                    (self.cp.uint64(self.ptr), np.int64(stride // 4), np.int64(count)))

    def touch_head(self, pages_per_block: int):
        count = pages_per_block * (self.size // (2 * MIB))
        return lambda: self.k_head(((count + 255) // 256,), (256,),
                                   (self.cp.uint64(self.ptr), np.int64(pages_per_block), np.int64(count)))

    def timed(self, launch, *, resident_on: str) -> dict:
        samples = []
        for _ in range(self.reps):
            self.to_host() if resident_on == "host" else self.to_gpu()
            samples.append(self.gpu_time(launch))
        return _summary(samples)

    def timed_then_read(self, launch) -> dict:
        """Host-resident start; time ``launch`` then a full read of the buffer (what it left on the host)."""
        first, then = [], []
        for _ in range(self.reps):
            self.to_host()
            first.append(self.gpu_time(launch))
            then.append(self.gpu_time(self.read_all(self.size)))
        return {"touch": _summary(first), "followup_read_all": _summary(then)}

    def prefetch(self, nbytes: int, direction: str) -> dict:
        samples = []
        for _ in range(self.reps):
            if direction == "h2d":
                self.to_host()
                samples.append(self.gpu_time(lambda: self.pf.to_gpu(self.ptr, nbytes)))
            else:
                self.to_host()
                self.pf.to_gpu(self.ptr, nbytes)
                self.dev.synchronize()
                samples.append(self.gpu_time(lambda: self.pf.to_host(self.ptr, nbytes)))
        return _summary(samples)

    def cpu_page_read(self, *, resident_on: str, stride: int = 4096) -> dict:
        """CPU reads one byte every ``stride`` bytes; then (GPU-resident start) one byte of every page."""
        first, then = [], []
        for _ in range(self.reps):
            self.to_host() if resident_on == "host" else self.to_gpu()
            started = time.perf_counter()
            int(self.host[::stride].sum())
            first.append(time.perf_counter() - started)
            started = time.perf_counter()
            int(self.host[::4096].sum())
            then.append(time.perf_counter() - started)
        return {"read": _summary(first), "followup_4k_read": _summary(then)}


def environment(cp) -> dict:
    rt = cp.cuda.runtime
    attrs = cp.cuda.Device().attributes
    name = rt.getDeviceProperties(0)["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else name,
        "cuda_runtime": rt.runtimeGetVersion(), "cuda_driver": rt.driverGetVersion(),
        "cupy": cp.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "uname": platform.platform(),
        "concurrent_managed_access": attrs.get("ConcurrentManagedAccess"),
        "pageable_memory_access": attrs.get("PageableMemoryAccess"),
        "smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,"
                               "pcie.link.gen.current,pcie.link.width.current", "--format=csv"]),
    }


def finish(result: dict, bench: Bench, started: float, out: str) -> None:
    """End a run, finished or not: its elapsed time into ``result``, the bench's memory freed, ``result`` written
    to ``out``."""
    result["elapsed_s"] = time.perf_counter() - started
    bench.close()
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)


def companion_arguments(doc: str, reps: int, timeout_s: int) -> argparse.Namespace:
    """A companion script's command line (``--out``, ``--reps``, ``--timeout-s``); arms the timeout (SIGALRM
    aborts the whole run)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--timeout-s", type=int, default=timeout_s, help="abort the whole run after this long")
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--max-bytes", type=int, default=GIB)
    parser.add_argument("--timeout-s", type=int, default=240, help="abort the whole run after this long")
    args = parser.parse_args()
    signal.alarm(args.timeout_s)
    import cupy as cp

    size = args.max_bytes
    result = {"method": __doc__, "env": environment(cp), "reps": args.reps, "size_bytes": size}
    bench = Bench(cp, size, args.reps)
    result["prefetch_backend"] = bench.pf.backend
    result["prefetch_backend_errors"] = bench.pf.errors
    started = time.perf_counter()
    try:
        sizes = [s for s in (2 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB) if s <= size]
        result["first_touch"] = [
            {"bytes": n, "faulted": bench.timed(bench.read_all(n), resident_on="host"),
             "resident": bench.timed(bench.read_all(n), resident_on="gpu")} for n in sizes]
        result["prefetch"] = [{"bytes": n, "h2d": bench.prefetch(n, "h2d"), "d2h": bench.prefetch(n, "d2h")}
                              for n in sizes]
        result["sparse"] = [
            {"stride": st, "touches": size // st, "faulted": bench.timed(bench.touch(st, size // st),
                                                                         resident_on="host"),
             "resident": bench.timed(bench.touch(st, size // st), resident_on="gpu"),
             "then": bench.timed_then_read(bench.touch(st, size // st))}
            for st in (4 * KIB, 64 * KIB, 2 * MIB)]
        result["blocks"] = [
            {"va_blocks": k, "faulted": bench.timed(bench.touch(2 * MIB, k), resident_on="host")}
            for k in (1, 8, 64, 256) if k * 2 * MIB <= size]
        result["block_heads"] = [{"pages_per_block": m, **bench.timed_then_read(bench.touch_head(m))}
                                 for m in (64, 192, 256, 288, 384)]
        result["cpu_fault_back"] = [
            {"bytes": size, "stride": st, "gpu_resident": bench.cpu_page_read(resident_on="gpu", stride=st),
             "host_resident": bench.cpu_page_read(resident_on="host", stride=st)}
            for st in (4 * KIB, 64 * KIB, 2 * MIB)]
    finally:
        finish(result, bench, started, args.out)
    json.dump({k: v for k, v in result.items() if k != "method"}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

"""GPU memory: presets, the VRAM allocator with eviction hooks, copy engines, unified (managed) memory.

Modules: :mod:`~models.gpu.presets` (H200, H100, A100, MI300X), :mod:`~models.gpu.device_memory` (cudaMalloc-like
allocator, fragmentation, ``register_evictable``, memory pressure), :mod:`~models.gpu.bar1` (the BAR1 aperture
peer mappings hold), :mod:`~models.gpu.copy_engine`
(calibrated host <-> device copies), :mod:`~models.gpu.managed` (per-page residency, fault batches,
prefetch, eviction), :mod:`~models.gpu.prefetch_tree` (what a fault batch prefetches),
:mod:`~models.gpu.workloads` (access patterns and metrics rows),
:mod:`~models.gpu.um_calibration` (the H200 measurements as model experiments).

Examples
--------
>>> vram = DeviceMemory.from_params(gpu_params("h200"))
>>> buf = vram.malloc(4 << 30)
>>> vram.register_evictable(buf, lambda alloc: CopyEngines().copy_ps(alloc.size, "d2h"))
>>> pressure = vram.apply_pressure(vram.capacity - (2 << 30), chunk=1 << 30)
>>> [a.id for a in pressure.evicted] == [buf.id], round(pressure.cost_ps / 1e9, 1)
(True, 77.5)
>>> um = ManagedMemory(1 << 30)
>>> um.gpu_access(sequential(um.n_pages)).batches
1024
"""

from models.gpu.bar1 import BAR1_PAGE, Bar1Aperture, Bar1Exhausted
from models.gpu.copy_engine import COPY_PRESETS, CopyCost, CopyEngines, fit_copy_cost
from models.gpu.device_memory import (Allocation, DeviceMemory, EvictionPolicy, GpuOutOfMemory, LruEviction,
                                      MemoryStats, PressureResult)
from models.gpu.managed import UVM_PRESETS, ManagedMemory, UvmParams, UvmStats
from models.gpu.presets import GPU_PRESETS, GpuParams, gpu_params
from models.gpu.workloads import (block_heads, concurrent_warps, growing_working_set, random_access,
                                  run_pattern, sequential, strided)

__all__ = [
    "Allocation", "BAR1_PAGE", "Bar1Aperture", "Bar1Exhausted",
    "COPY_PRESETS", "CopyCost", "CopyEngines", "DeviceMemory", "EvictionPolicy", "GPU_PRESETS",
    "GpuOutOfMemory", "GpuParams", "LruEviction", "ManagedMemory", "MemoryStats", "PressureResult",
    "UVM_PRESETS", "UvmParams", "UvmStats", "block_heads", "concurrent_warps", "fit_copy_cost", "gpu_params",
    "growing_working_set", "random_access", "run_pattern", "sequential", "strided",
]

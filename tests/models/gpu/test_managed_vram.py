"""Managed memory on a GPU shares VRAM with the GPU's other allocations: a managed range's faults take memory
from the allocator, so on the dynamic (amd) profile they evict unpinned dma-buf buffers, while on nvidia the
range only gets free memory and then evicts its own pages."""

import pytest

from models.dmabuf import DmaBufCore, FdTable
from models.gpu import GpuOutOfMemory, gpu_params
from models.gpu.managed import ManagedMemory
from models.gpu.workloads import sequential
from models.dmabuf.gpu_export import Gpu
from sim.core import Environment

MiB = 1 << 20


def _gpu(vendor: str, capacity: int = 64 * MiB) -> Gpu:
    return Gpu("g", vendor, gpu_params("mi300x" if vendor == "amd" else "h200"), DmaBufCore(Environment()),
               capacity=capacity)


def test_a_range_takes_vram_as_it_faults_and_gives_it_back():
    gpu = _gpu("nvidia")
    mm, taken = gpu.managed("job", 16 * MiB)
    assert mm.capacity_pages == 0 and gpu.memory.used == 0
    stats = mm.gpu_access(sequential(mm.n_pages // 2))
    assert gpu.memory.used == 8 * MiB == sum(a.size for a in taken) == mm.capacity_pages * 4096
    assert stats.pages_evicted == 0
    gpu.free_managed(taken)
    assert gpu.memory.used == 0 and not taken


def test_amd_faults_evict_an_exported_buffer():
    gpu = _gpu("amd")
    buffer = gpu.malloc("rdma", 48 * MiB)
    gpu.export(buffer, FdTable())
    mm, _ = gpu.managed("job", 32 * MiB)
    stats = mm.gpu_access(sequential(mm.n_pages))
    assert gpu.evictions == 1 and buffer.exporter.dmabuf.placement.value == "SYSTEM"
    assert stats.pages_evicted == 0 and mm.resident_bytes() == 32 * MiB
    assert stats.evict_ps >= gpu.copy.engines.copy_ps(48 * MiB, "d2h")  # the faults waited for the move


def test_nvidia_faults_only_take_free_memory_then_evict_their_own_pages():
    gpu = _gpu("nvidia")
    buffer = gpu.malloc("rdma", 48 * MiB)
    gpu.export(buffer, FdTable())
    mm, taken = gpu.managed("job", 32 * MiB)
    stats = mm.gpu_access(sequential(mm.n_pages, repetitions=2))
    assert gpu.evictions == 0 and buffer.exporter.dmabuf.placement.value == "VRAM"
    assert sum(a.size for a in taken) == 16 * MiB and mm.resident_bytes() <= 16 * MiB
    assert stats.pages_evicted > 0 and mm.thrashed_pages() > 0  # oversubscribed: it thrashes itself


def test_a_pinned_dmabuf_is_never_evicted_for_managed_memory():
    gpu = _gpu("amd")
    buffer = gpu.malloc("rdma", 48 * MiB)
    gpu.memory.pin(buffer.vram)
    mm, _ = gpu.managed("job", 32 * MiB)
    mm.gpu_access(sequential(mm.n_pages))
    assert gpu.evictions == 0 and mm.resident_bytes() <= 16 * MiB


def test_no_memory_at_all_fails_the_faulting_batch():
    gpu = _gpu("nvidia", capacity=4 * MiB)
    gpu.malloc("all", 4 * MiB)
    mm, _ = gpu.managed("job", 8 * MiB)
    with pytest.raises(GpuOutOfMemory):
        mm.gpu_access(sequential(mm.n_pages))


def test_a_fixed_capacity_range_never_asks_for_memory():
    mm = ManagedMemory(8 * MiB, gpu_capacity=4 * MiB)
    assert mm.gpu_access(sequential(mm.n_pages)).pages_evicted > 0 and mm.grow is None

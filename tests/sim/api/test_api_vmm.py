"""The script's CUDA virtual-memory calls (GPU.mem_* and GPU.export_range): each on the clock at its calibrated H200
time, a range over two allocations exported and registered, a release with the fd open keeping the VRAM (the H200's
measurement, models/data/h200_dmabuf_export_rules.json), and the calls refused off NVIDIA."""

import json
from pathlib import Path

import pytest

from models.gpu.alloc_cost import ALLOC_PRESETS, AllocCosts
from sim.api import Access, CudaError, DmaBufMR, MappedRange, PD, Context, ProtocolError, Testbed, VmmHandle

RULES = json.loads((Path(__file__).parents[3] / "models/data/h200_dmabuf_export_rules.json").read_text())
SPANNING = next(row["results"] for row in RULES["exports"] if row["case"] == "one VA range over two cuMemCreate "
                "allocations")
MiB = 1 << 20


def h200(data: bool = False):
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}}, data=data)
    return bed, bed.gpu("a.gpu0")


def test_each_vmm_call_takes_its_calibrated_time():
    bed, gpu = h200()
    costs, size = AllocCosts(ALLOC_PRESETS["h200"]), 64 * MiB

    def timed(call, action):
        start = bed.now_ps
        made = action()
        assert bed.now_ps - start == costs.call_ps(call, size) > 0, call
        return made

    handle = timed("cuMemCreate", lambda: gpu.mem_create(size))
    assert isinstance(handle, VmmHandle)
    ptr = timed("cuMemAddressReserve", lambda: gpu.mem_address_reserve(size))
    timed("cuMemMap", lambda: gpu.mem_map(ptr, size, handle))
    timed("cuMemSetAccess", lambda: gpu.mem_set_access(ptr, size))
    timed("cuMemUnmap", lambda: gpu.mem_unmap(ptr, size))
    timed("cuMemRelease", lambda: gpu.mem_release(handle))
    timed("cuMemAddressFree", lambda: gpu.mem_address_free(ptr, size))


def test_a_refused_call_raises_the_drivers_result():
    bed, gpu = h200()
    with pytest.raises(CudaError) as info:
        gpu.mem_create(gpu.granularity + 4096)
    assert info.value.result == "CUDA_ERROR_INVALID_VALUE" and "granularity" in str(info.value)


def test_a_range_over_two_allocations_exports_registers_and_holds_both_until_closed():
    """Two allocations mapped back to back export as one dma-buf (the H200: "one VA range over two cuMemCreate
    allocations" succeeded with flags 0); an MR registers it; unmapped and released with the fd and the MR
    open, the VRAM stays (free_after_export.cuMemCreate) until both go."""
    bed, gpu = h200()
    g, free = gpu.granularity, gpu.free_bytes
    handles = [gpu.mem_create(g), gpu.mem_create(g)]
    ptr = gpu.mem_address_reserve(2 * g)
    for i, h in enumerate(handles):
        gpu.mem_map(ptr + i * g, g, h)
    gpu.mem_set_access(ptr, 2 * g)
    dmabuf = gpu.export_range(ptr, 2 * g)
    assert isinstance(dmabuf.buffer, MappedRange) and dmabuf.size == 2 * g and dmabuf.buffer.addr == ptr
    with pytest.raises(CudaError) as info:
        gpu.export_range(ptr, 2 * g, flags=1)   # CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE on x86
    assert info.value.result == SPANNING["1"] and SPANNING["0"] == "CUDA_SUCCESS"
    pd = PD(Context(bed, "a"))
    mr = DmaBufMR(pd, 2 * g, Access.LOCAL_WRITE | Access.REMOTE_READ, dmabuf=dmabuf)
    gpu.mem_unmap(ptr, 2 * g)
    for h in handles:
        gpu.mem_release(h)
    gpu.mem_address_free(ptr, 2 * g)
    assert free - gpu.free_bytes == 2 * g
    dmabuf.close()
    assert free - gpu.free_bytes == 2 * g     # the MR keeps its own reference
    mr.close()
    assert gpu.free_bytes == free


def test_data_mode_reaches_the_allocations_bytes_through_the_range():
    bed, gpu = h200(data=True)
    g = gpu.granularity
    handle, ptr = gpu.mem_create(2 * g), gpu.mem_address_reserve(2 * g)
    gpu.mem_map(ptr, 2 * g, handle)
    whole = gpu.export_range(ptr, 2 * g)
    whole.buffer.write(b"abc", 3, offset=g)
    tail = gpu.export_range(ptr + g, g)
    assert tail.buffer.read(3) == b"abc"


def test_vmm_calls_are_nvidia_only():
    bed = Testbed({"a": {"gpus": [{"preset": "mi300x"}]}}, data=False)
    with pytest.raises(ProtocolError, match="NVIDIA"):
        bed.gpu("a.gpu0").mem_create(2 * MiB)

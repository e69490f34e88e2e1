"""The CUDA virtual-memory objects (models/libs/cuda_vmm.py) against the CUDA Driver API's documented rules (13.4,
group__CUDA__VA: cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
cuMemAddressFree), the H200's export measurements (models/data/h200_dmabuf_export_rules.json) and its answers to the
same calls' argument rules (calib/dmabuf_export/raw/h200_vmm_rules.json), which win where the two differ."""

import json
from pathlib import Path

import pytest

from models.dmabuf import DmaBufCore, FdTable, KernelConfig
from models.dmabuf.gpu_export import CudaError, Gpu
from models.gpu import gpu_params
from models.libs.cuda_vmm import CudaVmm
from sim.core import Environment

RULES = json.loads((Path(__file__).parents[3] / "models/data/h200_dmabuf_export_rules.json").read_text())
MEASURED = {row["case"]: row["results"] for row in RULES["exports"]}
GRANULARITY = json.loads((Path(__file__).parents[3] / "calib/gpu_alloc/raw/h200_run1.json").read_text())[
    "vmm_granularity"]
H200 = json.loads((Path(__file__).parents[3] / "calib/dmabuf_export/raw/h200_vmm_rules.json").read_text())["cases"]
"""The CUresult of each case of calib/dmabuf_export/measure_vmm_rules.py on an H200 (2026-12-05, driver 580)."""
REACHES = [json.loads((Path(__file__).parents[3] / f"calib/dmabuf_export/raw/{name}.json").read_text())
           for name in ("h100_vmm_reach_run1", "h100_vmm_reach_run2", "h200_vmm_reach")]
"""calib/dmabuf_export/measure_vmm_reach.py on two fresh H100 machines and an H200, one driver (2026-12-05): maps
that reach past their reservation."""
MiB = 1 << 20


def make_gpu() -> Gpu:
    """An H200 of 1 GiB on x86 (not coherent), driver 580."""
    return Gpu("a.gpu0", "nvidia", gpu_params("h200"), DmaBufCore(Environment(), KernelConfig(version="6.18")),
               capacity=1 << 30)


@pytest.fixture
def vmm():
    v = CudaVmm(make_gpu())
    v.fds = FdTable("app")
    return v


def invalid(call, *args, result="CUDA_ERROR_INVALID_VALUE", **kwargs) -> CudaError:
    with pytest.raises(CudaError) as info:
        call(*args, **kwargs)
    assert info.value.result == result
    return info.value


def mapped_pair(vmm):
    """Two allocations of one granule mapped back to back in one reservation: (ptr, handles)."""
    g = vmm.granularity
    handles = [vmm.mem_create(g), vmm.mem_create(g)]
    ptr = vmm.address_reserve(2 * g)
    for i, h in enumerate(handles):
        vmm.mem_map(ptr + i * g, g, h)
    return ptr, handles


def test_the_granularity_is_the_h200s():
    """cuMemGetAllocationGranularity(MINIMUM) read 2 MiB on the H200 (calib/gpu_alloc/raw/h200_run1.json)."""
    assert CudaVmm(make_gpu()).granularity == GRANULARITY == 2 * MiB


def test_cumemcreate_takes_only_granular_sizes_and_zero_flags(vmm):
    """cuMemCreate: "The size of this allocation must be a multiple of the value given via
    cuMemGetAllocationGranularity"; "flags for future use, must be zero now"."""
    invalid(vmm.mem_create, vmm.granularity + 4096)
    invalid(vmm.mem_create, 0)
    invalid(vmm.mem_create, vmm.granularity, flags=1)
    used = vmm.gpu.memory.used
    vmm.mem_create(3 * vmm.granularity)
    assert vmm.gpu.memory.used == used + 3 * vmm.granularity


def test_cumemcreate_beyond_vram_is_out_of_memory(vmm):
    with pytest.raises(CudaError) as info:
        vmm.mem_create(-(-(vmm.gpu.capacity + 1) // vmm.granularity) * vmm.granularity)
    assert info.value.result == "CUDA_ERROR_OUT_OF_MEMORY"


def test_cumemaddressreserve_rules(vmm):
    """"The address parameter must be a multiple of the host page size and the alignment must be a power of two or
    zero"; flags "must be zero"; a reservation honours its alignment. The size, which the documentation also asks
    only to be a multiple of the host page size, must be one of the granularity on the H200: 4 KiB and
    2 MiB + 4 KiB were CUDA_ERROR_INVALID_VALUE."""
    g = vmm.granularity
    assert H200["reserve size 4 KiB"] == H200["reserve size G + 4 KiB"] == "CUDA_ERROR_INVALID_VALUE"
    invalid(vmm.address_reserve, 4096)
    invalid(vmm.address_reserve, g + 4096)
    invalid(vmm.address_reserve, 4096 + 1)
    invalid(vmm.address_reserve, g, addr=4096 + 8)
    invalid(vmm.address_reserve, vmm.granularity, alignment=3)
    invalid(vmm.address_reserve, vmm.granularity, flags=1)
    a = vmm.address_reserve(vmm.granularity, alignment=64 * MiB)
    b = vmm.address_reserve(vmm.granularity)
    assert a % (64 * MiB) == 0 and (b >= a + vmm.granularity or b + vmm.granularity <= a)


def test_cumemmap_rules(vmm):
    """cuMemMap: ptr and size multiples of the granularity, inside a reservation, "only ... on VA range reservations
    that are not currently mapped", flags zero (CUDA_ERROR_INVALID_VALUE); offset "currently must be zero", and the
    H200 mapped only whole handles: a nonzero offset, half the handle and more than it were
    CUDA_ERROR_NOT_SUPPORTED."""
    g = vmm.granularity
    assert {H200[case] for case in ("map at handle offset G", "map half the handle", "map more than the handle")} \
        == {"CUDA_ERROR_NOT_SUPPORTED"}
    assert H200["map at VA offset 4 KiB"] == H200["map flags 1"] == H200["map over a mapped range"] == \
        "CUDA_ERROR_INVALID_VALUE"
    handle, ptr = vmm.mem_create(2 * g), vmm.address_reserve(4 * g)
    invalid(vmm.mem_map, ptr, 2 * g, handle, offset=g, result="CUDA_ERROR_NOT_SUPPORTED")
    invalid(vmm.mem_map, ptr, g, handle, result="CUDA_ERROR_NOT_SUPPORTED")          # half the handle
    invalid(vmm.mem_map, ptr, 4 * g, handle, result="CUDA_ERROR_NOT_SUPPORTED")      # more than the handle
    invalid(vmm.mem_map, ptr + 4096, 2 * g, handle)
    invalid(vmm.mem_map, ptr, 2 * g + 4096, handle)
    invalid(vmm.mem_map, ptr, 2 * g, handle, flags=1)
    vmm.mem_map(ptr, 2 * g, handle)
    invalid(vmm.mem_map, ptr + g, 2 * g, handle)          # over a mapped range
    vmm.mem_map(ptr + 2 * g, 2 * g, handle)               # the same handle mapped twice
    assert handle.mappings == 2


def test_set_access_takes_whole_mappings(vmm):
    """On the H200, cuMemSetAccess over a half-mapped range and over a sub-range of one mapping were both
    CUDA_ERROR_INVALID_VALUE."""
    assert H200["set access on a half-mapped range"] == H200["set access on a sub-range"] == \
        "CUDA_ERROR_INVALID_VALUE"
    g = vmm.granularity
    handle, ptr = vmm.mem_create(2 * g), vmm.address_reserve(4 * g)
    vmm.mem_map(ptr, 2 * g, handle)
    invalid(vmm.set_access, ptr, 4 * g)
    invalid(vmm.set_access, ptr, g)
    vmm.set_access(ptr, 2 * g)
    assert vmm.mapped(ptr, 2 * g)[0].access


def test_cumemunmap_takes_whole_mappings_and_leaves_a_reservation(vmm):
    """"cuMemUnmap cannot unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap"; afterwards "the
    address range is converted to an address reservation" and a new mapping starts with no access."""
    g = vmm.granularity
    handle, ptr = vmm.mem_create(2 * g), vmm.address_reserve(2 * g)
    vmm.mem_map(ptr, 2 * g, handle)
    vmm.set_access(ptr, 2 * g)
    invalid(vmm.mem_unmap, ptr, g)
    vmm.mem_unmap(ptr, 2 * g)
    invalid(vmm.mem_unmap, ptr, 2 * g)
    vmm.mem_map(ptr, 2 * g, handle)
    assert not vmm.mapped(ptr, 2 * g)[0].access


def test_release_while_mapped_frees_at_the_last_unmap(vmm):
    """cuMemRelease: "The memory allocation will be freed when all outstanding mappings to the memory are unmapped
    and when all outstanding references to the handle ... are also released"."""
    used = vmm.gpu.memory.used
    ptr, (first, second) = mapped_pair(vmm)
    vmm.mem_release(first)
    assert vmm.gpu.memory.used == used + 2 * vmm.granularity
    invalid(vmm.mem_release, first)
    vmm.mem_unmap(ptr, 2 * vmm.granularity)
    assert vmm.gpu.memory.used == used + vmm.granularity   # the second is not released
    vmm.mem_release(second)
    assert vmm.gpu.memory.used == used


def test_address_free_must_match_the_reservation_and_be_unmapped(vmm):
    """cuMemAddressFree: "The size must match what was given to memAddressReserve and the ptr given must match what
    was returned"."""
    g = vmm.granularity
    ptr, _ = mapped_pair(vmm)
    invalid(vmm.address_free, ptr, 2 * g)       # mappings left
    vmm.mem_unmap(ptr, 2 * g)
    invalid(vmm.address_free, ptr, g)
    invalid(vmm.address_free, ptr + g, g)
    vmm.address_free(ptr, 2 * g)
    invalid(vmm.address_free, ptr, 2 * g)


@pytest.mark.parametrize("flags", [0, 1, 2, 0x80000000])
def test_exports_follow_the_h200(vmm, flags):
    """The H200's exports of VMM memory by flags: one allocation mapped without cuMemSetAccess, two mapped back to
    back, the first of them, a reserved range with nothing mapped."""
    g = vmm.granularity
    ptr, _ = mapped_pair(vmm)
    empty = vmm.address_reserve(2 * g)
    cases = {"cuMemCreate mapped, no cuMemSetAccess": (ptr, g), "one VA range over two cuMemCreate allocations":
             (ptr, 2 * g), "first of two cuMemCreate allocations": (ptr, g),
             "reserved VA range, nothing mapped": (empty, 2 * g)}
    for case, (start, size) in cases.items():
        try:
            vmm.export(start, size, vmm.fds, flags)
            result = "CUDA_SUCCESS"
        except CudaError as exc:
            result = exc.result
        assert result == MEASURED[case][str(flags)], case


def test_a_released_range_keeps_its_vram_while_exported(vmm):
    """The H200 (free_after_export.cuMemCreate): unmapped and released while its dma-buf is open, a VMM allocation's
    VRAM stays allocated; it comes back when the fd closes. An export over two allocations holds both."""
    measured = RULES["free_after_export"]["cuMemCreate"]
    used = vmm.gpu.memory.used
    ptr, handles = mapped_pair(vmm)
    _, fd = vmm.export(ptr, 2 * vmm.granularity, vmm.fds)
    vmm.mem_unmap(ptr, 2 * vmm.granularity)
    for h in handles:
        vmm.mem_release(h)
    held = vmm.gpu.memory.used - used
    assert (held == 2 * vmm.granularity) == (measured["free_bytes_after_unmap_release_fd_open"]
                                              == measured["free_bytes_mapped"])
    vmm.fds.close(fd)
    assert (vmm.gpu.memory.used == used) == (measured["free_bytes_after_close"] > measured["free_bytes_mapped"])


def test_a_sub_range_of_a_mapping_exports_and_a_half_mapped_one_does_not(vmm):
    """On the H200, cuMemGetHandleForAddressRange of 4 KiB at offset 4 KiB into a mapping exported; a range half of
    which was mapped was CUDA_ERROR_INVALID_VALUE."""
    assert H200["export a sub-range at offset 4 KiB"] == "CUDA_SUCCESS"
    assert H200["export a half-mapped range"] == "CUDA_ERROR_INVALID_VALUE"
    g = vmm.granularity
    handle, ptr = vmm.mem_create(2 * g), vmm.address_reserve(4 * g)
    vmm.mem_map(ptr, 2 * g, handle)
    view, fd = vmm.export(ptr + 4096, 4096, vmm.fds)
    assert fd >= 0 and view.size == 4096
    invalid(vmm.export, ptr, 4 * g, vmm.fds)


def test_a_map_across_back_to_back_reservations_is_one_mapping():
    """The driver mapped (and set access on, memset and exported) 4 MiB at 6 MiB into an 8 MiB reservation with a
    second reserved right after it; neither reservation can be freed while the mapping lies in it."""
    for reach in REACHES:
        across = reach["neighbours"]["map across the two reservations"]
        assert across["map"] == across["access"] == across["export"] == across["unmap"] == "CUDA_SUCCESS"
        assert reach["past the end"]["6 MiB"]["address free with the mapping in place"] == "CUDA_ERROR_INVALID_VALUE"
    vmm = CudaVmm(make_gpu())
    fds = FdTable("app")
    handle, first = vmm.mem_create(4 * MiB), vmm.address_reserve(8 * MiB)
    second = vmm.address_reserve(8 * MiB, addr=first + 8 * MiB)
    assert second == first + 8 * MiB
    vmm.mem_map(first + 6 * MiB, 4 * MiB, handle)
    vmm.set_access(first + 6 * MiB, 4 * MiB)
    view, _ = vmm.export(first + 6 * MiB, 4 * MiB, fds)
    assert view.size == 4 * MiB
    for ptr in (first, second):
        invalid(vmm.address_free, ptr, 8 * MiB)
    vmm.mem_unmap(first + 6 * MiB, 4 * MiB)
    for ptr in (first, second):
        vmm.address_free(ptr, 8 * MiB)


def test_maps_into_address_space_nobody_reserved_are_refused():
    """What the driver refused on every machine is refused: a map that starts past the reservation's end, in a
    freed reservation, on a neighbour's mapping, or 2 MiB past a 2 MiB reservation. What it accepted past the end
    depends on its own address-space heap, not on the map (58 MiB past an 8 MiB reservation passed on one machine
    of three): refused too, as the documentation's "from a prior cuMemAddressReserve" asks."""
    for reach in REACHES:
        past, lengths = reach["past the end"], reach["lengths"]
        refused = [past[f"{mib} MiB"]["map"] for mib in (8, 16, 1024, 4096)] + [
            lengths["4 MiB handle at the start of a 2 MiB reservation"]["map"],
            lengths["map whose tail falls on the next reservation's mapping"],
            reach["neighbours"]["map in a reservation already freed"]["map"]]
        assert set(refused) == {"CUDA_ERROR_INVALID_VALUE"}
        assert past["6 MiB"]["map"] == lengths["16 MiB handle at 6 MiB"]["map"] == "CUDA_SUCCESS"
    assert [reach["lengths"]["64 MiB handle at 6 MiB"]["map"] for reach in REACHES] == [
        "CUDA_ERROR_INVALID_VALUE", "CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE"]
    vmm = CudaVmm(make_gpu())
    handle = vmm.mem_create(4 * MiB)
    ptr = vmm.address_reserve(8 * MiB)
    for at in (ptr + 8 * MiB, ptr + 16 * MiB, ptr + 6 * MiB):
        invalid(vmm.mem_map, at, 4 * MiB, handle)
    small = vmm.address_reserve(2 * MiB)
    invalid(vmm.mem_map, small, 4 * MiB, handle)
    vmm.address_free(small, 2 * MiB)
    invalid(vmm.mem_map, small, 2 * MiB, vmm.mem_create(2 * MiB))  # freed
    neighbour = vmm.address_reserve(8 * MiB, addr=ptr + 8 * MiB)
    vmm.mem_map(neighbour, 4 * MiB, vmm.mem_create(4 * MiB))
    invalid(vmm.mem_map, ptr + 6 * MiB, 4 * MiB, handle)  # its tail on the neighbour's mapping
    vmm.mem_map(ptr + 4 * MiB, 4 * MiB, handle)
    assert [m.addr for m in vmm.mapped(ptr + 4 * MiB, 8 * MiB)] == [ptr + 4 * MiB, neighbour]

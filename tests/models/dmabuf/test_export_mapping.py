"""The mapping type of NVIDIA's dma-buf export: the export rules against what an H200 returned, what the PCIe
mapping does on a coherent platform, and freeing exported memory against the H200's VRAM and addresses."""

import json
from pathlib import Path

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, FdTable, KernelConfig, dma_buf_dynamic_attach,
                           dma_buf_map_attachment)
from models.dmabuf.exporters import MappingType
from models.dmabuf.gpu_export import CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE, CudaError, Gpu
from models.gpu import gpu_params
from models.libs.cuda_process import CudaProcess
from sim.engine.build import RegistrationFailed
from sim.core import Environment, VerbsError
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario

MiB = 1 << 20
DATA = json.loads((Path(__file__).parents[3] / "models/data/h200_dmabuf_export_rules.json").read_text())
P2P = DmaBufAttachOps(move_notify=lambda attach: None, allow_peer2peer=True)
NOT_DEVICE_MEMORY = ("cuMemAllocManaged", "cuMemHostAlloc", "reserved VA range, nothing mapped")
DEVICE_MEMORY = [case for case in DATA["exports"] if case["case"] not in NOT_DEVICE_MEMORY]


def _gpu(*, coherent=False, driver="580", override="default", common_switch=True) -> Gpu:
    core = DmaBufCore(Environment(), KernelConfig(version="6.18"))
    gpu = Gpu("a.gpu0", "nvidia", gpu_params("h200"), core, capacity=1 << 30, driver=driver, coherent=coherent,
              topology_check_override=override)
    gpu.common_switch = lambda dev: common_switch
    return gpu


def _export(gpu: Gpu, flags: int, size: int = 64 * MiB) -> str:
    try:
        gpu.export(gpu.malloc(f"x{len(gpu.allocations)}", size), FdTable("app"), flags=flags)
    except CudaError as err:
        return err.result
    return "CUDA_SUCCESS"


def test_every_kind_of_device_memory_measured_the_same_on_the_h200():
    """The model's rule takes no allocation kind: cudaMalloc and every cuMemCreate variant answered alike."""
    results = {json.dumps(case["results"], sort_keys=True) for case in DEVICE_MEMORY}
    assert len(DEVICE_MEMORY) == 8 and len(results) == 1
    assert all(set(case["results"].values()) == {"CUDA_ERROR_INVALID_VALUE"} for case in DATA["exports"]
               if case["case"] in NOT_DEVICE_MEMORY)  # no device allocation there: every flag fails alike


@pytest.mark.parametrize("flags", sorted(DATA["flags"], key=int))
def test_the_export_rules_are_the_measured_ones(flags):
    measured = DEVICE_MEMORY[0]["results"][flags]
    assert _export(_gpu(), int(flags)) == measured


def test_the_pcie_mapping_needs_cuda_12_8_and_a_coherent_platform():
    pcie = CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE
    assert _export(_gpu(driver="565"), pcie) == "CUDA_ERROR_INVALID_VALUE"  # the flag is unknown before 570
    assert _export(_gpu(driver="570"), pcie) == "CUDA_ERROR_NOT_SUPPORTED"
    assert _export(_gpu(driver="570", coherent=True), pcie) == "CUDA_SUCCESS"


def _attach(gpu: Gpu, flags: int):
    alloc = gpu.malloc("buf", 64 * MiB)
    gpu.export(alloc, FdTable("app"), flags=flags)
    exporter = alloc.exporter
    attach = dma_buf_dynamic_attach(exporter.dmabuf, "mlx5_0", P2P)
    exporter.dmabuf.resv.lock("mlx5_0")
    try:
        return exporter, dma_buf_map_attachment(attach).segments[0][0]
    finally:
        exporter.dmabuf.resv.unlock("mlx5_0")


def test_on_a_coherent_platform_the_pcie_mapping_hands_out_bar1_without_the_iommu():
    default, pages = _attach(_gpu(coherent=True), 0)
    pcie, bar1 = _attach(_gpu(coherent=True), CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)
    assert default.mapping_type is MappingType.DEFAULT and not default.skip_iommu
    assert pcie.mapping_type is MappingType.FORCE_PCIE and pcie.skip_iommu
    assert pages >= 0x40_0000_0000_0000 > bar1  # C2C pages for the default mapping, BAR1 PFNs for PCIe


@pytest.mark.parametrize("override, common_switch, attaches", [
    ("default", True, True), ("default", False, False), ("allow", False, True), ("deny", True, False)])
def test_a_pcie_mapped_export_attaches_peers_of_its_iommu_group_unless_overridden(override, common_switch, attaches):
    gpu = _gpu(coherent=True, override=override, common_switch=common_switch)
    if attaches:
        assert _attach(gpu, CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)[0].skip_iommu
    else:
        with pytest.raises(VerbsError, match="ENOTSUPP.*topology not supported for mapping type FORCE_PCIE"):
            _attach(gpu, CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)
    _attach(_gpu(coherent=True, override=override, common_switch=common_switch), 0)  # the default mapping: no check


def test_freeing_exported_memory_matches_the_h200():
    """cudaFree with the dma-buf open keeps the VRAM and gives the next allocation the same address; closing the fd
    returns the VRAM; exporting the freed range fails."""
    measured = DATA["free_after_export"]["cuMemAlloc"]
    size = DATA["free_after_export"]["bytes"]
    gpu = Gpu("a.gpu0", "nvidia", gpu_params("h200"), DmaBufCore(Environment(), KernelConfig()), capacity=4 << 30)
    proc, table = CudaProcess(gpu), FdTable("app")
    free_before = gpu.memory.capacity - gpu.memory.used
    buf = proc.malloc(size)
    fd = gpu.export(buf.alloc, table)
    allocated = gpu.memory.capacity - gpu.memory.used
    proc.free(buf)
    held = (gpu.memory.capacity - gpu.memory.used) == allocated
    assert held == (measured["free_bytes_after_free_fd_open"] == measured["free_bytes_allocated"])
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        gpu.export(buf.alloc, table)
    assert measured["export_of_freed_range"] == "CUDA_ERROR_INVALID_VALUE"
    again = proc.malloc(size)
    assert (again.addr == buf.addr) == measured["next_alloc_same_address_fd_open"]
    assert allocated - (gpu.memory.capacity - gpu.memory.used) == (
        measured["free_bytes_after_free_fd_open"] - measured["free_bytes_with_next_alloc_fd_open"])
    proc.free(again)
    table.close(fd)
    assert (gpu.memory.capacity - gpu.memory.used == free_before) == (
        measured["free_bytes_after_close"] == measured["free_bytes_before"])


def _scenario(gpu: dict, export_mapping: str = "pcie", topology: str = "switch") -> Scenario:
    return Scenario.model_validate({
        "schema": 1, "name": "mapping", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": "h200", "memory": "1GiB"} | gpu], "topology": topology},
                  {"name": "b"}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": "4MiB", "register": "dmabuf",
                     "export_mapping": export_mapping}, {"name": "h", "on": "b.host", "size": "4MiB"}],
        "workload": [{"kind": "write_bw", "from": "g", "to": "h", "sizes": ["64KiB"], "iterations": 20}]})


def test_a_scenario_asking_for_the_pcie_mapping_on_x86_fails_its_registration_as_the_h200_did():
    with pytest.raises(RegistrationFailed, match="CUDA_ERROR_NOT_SUPPORTED"):
        run_scenario(_scenario({}))


@pytest.mark.parametrize("topology, override, refused", [
    ("switch", "default", False), ("root_complex", "default", True), ("root_complex", "allow", False)])
def test_a_coherent_scenario_registers_the_pcie_mapping_where_the_driver_allows_the_peer(topology, override, refused):
    scenario = _scenario({"coherent": True, "topology_check_override": override}, topology=topology)
    if refused:
        with pytest.raises(RegistrationFailed, match="FORCE_PCIE"):
            run_scenario(scenario)
    else:
        result = run_scenario(scenario)
        assert result.summary["errors"].sum() == 0
        assert result.testbed.gpus["a.gpu0"].allocations["g"].exporter.skip_iommu


def test_the_mapping_type_belongs_to_dma_buf_registrations():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="mapping type is a flag of the dma-buf export"):
        Scenario.model_validate(_scenario({}).model_dump(by_alias=True) | {"buffers": [
            {"name": "g", "on": "a.gpu0", "size": "4MiB", "register": "peermem", "export_mapping": "pcie"},
            {"name": "h", "on": "b.host", "size": "4MiB"}]})


@pytest.mark.parametrize("argv, code, said", [
    (["--use_cuda_dmabuf", "--use_data_direct", "--nic", "connectx8"], 1, "CUDA_ERROR_NOT_SUPPORTED"),  # asks PCIe
    (["--use_cuda_dmabuf", "--use_cuda_pcie_mapping"], 1, "CUDA_ERROR_NOT_SUPPORTED"),
    (["--use_cuda_dmabuf", "--use_data_direct", "--nic", "connectx8", "--coherent-gpu"], 0, "BW average"),
    (["--use_cuda_dmabuf", "--use_cuda_pcie_mapping", "--coherent-gpu", "--gpu-topology", "root_complex"], 1,
     "topology not supported for mapping type FORCE_PCIE"),
    (["--use_cuda_pcie_mapping"], 2, "CUDA PCIe mapping requires DMA-BUF"),
])
def test_perftest_pcie_mapping_lines(argv, code, said):
    from tests.conftest import perftest_streams

    got, report, errors = perftest_streams(["ib_write_bw", "-s", "64K", "-n", "20", "--use_cuda", *argv])
    assert got == code and said in (report if code == 0 else errors), errors

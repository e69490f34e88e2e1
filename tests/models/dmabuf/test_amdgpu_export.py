"""amdgpu's dma-buf exporter: peer-to-peer per PCIe path at attach, where an unpinned buffer is when mapped, and
where a pin puts it by kernel version and configuration."""

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, FdTable, KernelConfig, Placement, dma_buf_dynamic_attach,
                           dma_buf_map_attachment, dma_buf_pin)
from models.dmabuf.gpu_export import Gpu, pin_outcome
from models.gpu import gpu_params
from models.pcie.topology import ROOT_COMPLEX_PRESETS, RootComplexParams, build_topology, pci_p2pdma_distance
from sim.core import Environment, VerbsError
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario

MiB = 1 << 20


@pytest.mark.parametrize("layout, root, reachable", [
    ("switch", "server", True), ("switch", "intel_client", True),            # a common switch always works
    ("root_complex", "server", True), ("root_complex", "intel_client", False),  # through a host bridge
    ("cross_socket", "server", False),                                       # across host bridges
])
def test_pci_p2pdma_distance_follows_the_path(layout, root, reachable):
    graph = build_topology(layout, root=RootComplexParams(**ROOT_COMPLEX_PRESETS[root]))
    assert (pci_p2pdma_distance(graph, "gpu0", "nic0") >= 0) is reachable


def _amd(distance, kernel="6.18", move_notify=True):
    core = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=move_notify, version=kernel))
    gpu = Gpu("g", "amd", gpu_params("mi300x"), core, capacity=1 << 30)
    gpu.peer_distance = lambda dev: distance
    alloc = gpu.malloc("x", 64 * MiB)
    gpu.export(alloc, FdTable("app"))
    return core, alloc.exporter


def _map(exporter, attach):
    exporter.dmabuf.resv.lock(attach.dev)
    try:
        return dma_buf_map_attachment(attach)
    finally:
        exporter.dmabuf.resv.unlock(attach.dev)


@pytest.mark.parametrize("distance, p2p_asked, p2p, placement", [
    (2, True, True, Placement.VRAM),        # peer-to-peer: an unpinned VRAM buffer stays in VRAM
    (-1, True, False, Placement.SYSTEM),    # no P2P path: attach clears peer2peer, map moves it to GTT
    (2, False, False, Placement.SYSTEM),    # an importer that cannot take peer memory
])
def test_amdgpu_attach_and_map(distance, p2p_asked, p2p, placement):
    core, exporter = _amd(distance)
    notified = []
    attach = dma_buf_dynamic_attach(exporter.dmabuf, "mlx5_0", DmaBufAttachOps(notified.append, p2p_asked))
    assert attach.peer2peer is p2p
    sgt = _map(exporter, attach)
    assert exporter.dmabuf.placement is sgt.placement is placement
    assert notified == ([] if placement is Placement.VRAM else [attach])  # the move notified the importers


@pytest.mark.parametrize("kernel, move_notify, distance, placement, setting", [
    ("6.14", True, 2, Placement.SYSTEM, "predates 6.15"),        # before f5e7fabd1f5c every pin lands in GTT
    ("6.15", True, 2, Placement.VRAM, "pins into VRAM"),         # from 6.15: VRAM when every attachment is P2P
    ("6.15", True, -1, Placement.SYSTEM, "cannot do peer-to-peer"),  # one attachment without P2P keeps GTT
    ("6.18", False, 2, Placement.SYSTEM, "CONFIG_DMABUF_MOVE_NOTIFY is off"),
])
def test_amdgpu_pins_where_kernel_and_config_say(kernel, move_notify, distance, placement, setting):
    core, exporter = _amd(distance, kernel, move_notify)
    gpu_free = exporter.alloc.memory.capacity - exporter.alloc.memory.used
    attach = dma_buf_dynamic_attach(exporter.dmabuf, "efa_0", DmaBufAttachOps(lambda a: None, True))
    exporter.dmabuf.resv.lock("efa_0")
    dma_buf_pin(attach)
    sgt = dma_buf_map_attachment(attach)
    exporter.dmabuf.resv.unlock("efa_0")
    assert sgt.placement is exporter.dmabuf.placement is placement
    assert setting in exporter.pin_placement.reason and setting in pin_outcome(exporter.alloc)
    migrated = placement is Placement.SYSTEM
    assert exporter.pin_migrated is migrated and exporter.dmabuf.generation == int(migrated)
    assert exporter.alloc.vram.resident is not migrated  # a pin into GTT gives the VRAM back
    freed = exporter.alloc.memory.capacity - exporter.alloc.memory.used - gpu_free
    assert freed == (exporter.alloc.vram.size if migrated else 0)


def test_a_competing_allocation_fits_once_a_pin_moved_the_buffer_to_system_memory():
    for move_notify, fits in ((True, False), (False, True)):
        core = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=move_notify, version="6.18"))
        gpu = Gpu("g2", "amd", gpu_params("mi300x"), core, capacity=1 << 30)
        alloc = gpu.malloc("x", 512 * MiB)
        gpu.export(alloc, FdTable("app"))
        attach = dma_buf_dynamic_attach(alloc.exporter.dmabuf, "efa_0", DmaBufAttachOps(lambda a: None, True))
        alloc.exporter.dmabuf.resv.lock("efa_0")
        dma_buf_pin(attach)
        alloc.exporter.dmabuf.resv.unlock("efa_0")
        assert gpu.pressure(768 * MiB) is fits


def test_a_gtt_pin_of_a_buffer_pinned_in_vram_fails_as_amdgpu_bo_pin_does():
    core, exporter = _amd(2, "6.18", True)
    first = dma_buf_dynamic_attach(exporter.dmabuf, "efa_0", DmaBufAttachOps(lambda a: None, True))
    exporter.dmabuf.resv.lock("efa_0")
    dma_buf_pin(first)
    exporter.dmabuf.resv.unlock("efa_0")
    second = dma_buf_dynamic_attach(exporter.dmabuf, "efa_1", DmaBufAttachOps(lambda a: None, False))
    exporter.dmabuf.resv.lock("efa_1")
    with pytest.raises(VerbsError) as err:
        dma_buf_pin(second)
    exporter.dmabuf.resv.unlock("efa_1")
    assert err.value.errno == "EINVAL" and exporter.dmabuf.placement is Placement.VRAM


@pytest.mark.parametrize("layout, target", [("switch", "gpu0"), ("cross_socket", "mem0")])
def test_a_dynamic_mr_on_an_amd_gpu_across_sockets_lands_in_host_memory(layout, target):
    result = run_scenario(Scenario.model_validate({
        "schema": 1, "name": "p2p", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": "mi300x"}], "topology": layout,
                   "kernel": {"version": "6.18", "dmabuf_move_notify": True}}, {"name": "b"}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": "4MiB", "register": "dmabuf"},
                    {"name": "h", "on": "b.host", "size": "4MiB"}],
        "workload": [{"kind": "write_bw", "from": "h", "to": "g", "sizes": ["64KiB"], "iterations": 20}]}))
    mr = result.testbed.registrations["g"].mr
    assert mr.backing.target(0) == target and result.summary["errors"].sum() == 0

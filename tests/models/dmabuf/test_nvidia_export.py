"""NVIDIA's dma-buf exporter: which importers attach and map, per driver branch and platform, and how long an
exported buffer lives."""

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, FdTable, KernelConfig, StaticExporter, check_dma,
                           dma_buf_attach, dma_buf_dynamic_attach, dma_buf_map_attachment)
from models.dmabuf.gpu_export import Gpu
from models.gpu import gpu_params
from sim.core import Environment, VerbsError

MiB = 1 << 20
NO_P2P = DmaBufAttachOps(move_notify=lambda attach: None, allow_peer2peer=False)
P2P = DmaBufAttachOps(move_notify=lambda attach: None, allow_peer2peer=True)


def _errno(exporter, importer_ops):
    """Where attach-then-map fails ('attach: ERRNO', 'map: ERRNO') or 'ok', and the mapping's first address."""
    try:
        attach = (dma_buf_attach(exporter.dmabuf, "mlx5_0") if importer_ops is None
                  else dma_buf_dynamic_attach(exporter.dmabuf, "mlx5_0", importer_ops))
    except VerbsError as err:
        return f"attach: {err.errno}", None
    exporter.dmabuf.resv.lock("mlx5_0")
    try:
        sgt = dma_buf_map_attachment(attach)
    except VerbsError as err:
        return f"map: {err.errno}", None
    finally:
        exporter.dmabuf.resv.unlock("mlx5_0")
    return "ok", sgt.segments[0][0]


@pytest.mark.parametrize("driver, importer, coherent, topology_ok, outcome", [
    ("580", NO_P2P, False, True, "attach: ENOTSUPP"),  # a dynamic importer without peer2peer
    ("575", NO_P2P, False, True, "map: ENOMEM"),       # no attach op: the map fails, the core says ENOMEM
    ("580", None, False, True, "ok"),                  # a static importer is accepted
    ("575", None, False, True, "ok"),
    ("580", NO_P2P, True, True, "ok"),                 # coherent: the memory has struct pages
    ("580", P2P, False, False, "attach: ENOTSUPP"),    # the driver refuses the PCI topology
    ("575", P2P, False, False, "ok"),                  # which the older driver did not check
    ("580", P2P, True, False, "ok"),                   # no topology check on a coherent platform
])
def test_nv_dma_buf_attach_and_map(driver, importer, coherent, topology_ok, outcome):
    core = DmaBufCore(Environment(), KernelConfig(version="6.18"))
    nv = StaticExporter(core, MiB, driver=driver, coherent=coherent, pci_topology_supported=lambda dev: topology_ok)
    got, address = _errno(nv, importer)
    assert got == outcome
    if got == "ok":  # BAR1 (peer MMIO) unless coherent
        assert (address >= 0x40_0000_0000_0000) is coherent


def test_the_driver_branch_boundary_is_580():
    core = DmaBufCore(Environment())
    attach_ops = {v: StaticExporter(core, MiB, driver=v).dmabuf.ops.attach is not None
                  for v in ("575.64.05", "580", "580.65.06", "595.45.04")}
    assert attach_ops == {"575.64.05": False, "580": True, "580.65.06": True, "595.45.04": True}


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_freeing_an_exported_allocation_keeps_the_buffer_until_its_release(vendor):
    core = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=True))
    gpu = Gpu("g", vendor, gpu_params("h200" if vendor == "nvidia" else "mi300x"), core, capacity=1 << 30)
    table = FdTable("app")
    alloc = gpu.malloc("x", 64 * MiB)
    fd = gpu.export(alloc, table)
    attach = dma_buf_dynamic_attach(alloc.exporter.dmabuf, "mlx5_0", P2P)
    alloc.exporter.dmabuf.resv.lock("mlx5_0")
    sgt = dma_buf_map_attachment(attach)
    alloc.exporter.dmabuf.resv.unlock("mlx5_0")
    used = gpu.memory.used
    gpu.free(alloc)
    assert gpu.memory.used == used and "x" not in gpu.allocations
    check_dma(sgt)  # the exported buffer is still valid: nothing was invalidated or moved
    from models.dmabuf import dma_buf_detach, dma_buf_unmap_attachment_unlocked

    dma_buf_unmap_attachment_unlocked(attach, sgt)
    dma_buf_detach(alloc.exporter.dmabuf, attach)
    table.close(fd)  # the last reference: the dma-buf is released and with it the memory
    assert alloc.exporter.dmabuf.released and gpu.memory.used == used - alloc.vram.size


def test_freeing_an_allocation_never_exported_gives_the_memory_back_at_once():
    gpu = Gpu("g", "nvidia", gpu_params("h200"), DmaBufCore(Environment()), capacity=1 << 30)
    alloc = gpu.malloc("x", 64 * MiB)
    gpu.free(alloc)
    assert gpu.memory.used == 0

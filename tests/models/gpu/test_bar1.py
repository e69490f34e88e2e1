"""BAR1 as a resource: peer-memory pages and NVIDIA dma-buf maps hold it, give it back, and fail past it (peer
memory EFAULT, dma-buf ENOMEM) while VRAM is still free."""

import pytest

from models.dmabuf.gpu_export import Gpu
from models.gpu import BAR1_PAGE, gpu_params
from models.verbs.dmabuf import ibv_reg_dmabuf_mr
from models.verbs.peermem import ibv_reg_mr_peermem, peermem_reclaim
from models.verbs.mr import ibv_dereg_mr
from sim.core import VerbsError
from tests.models.ib.test_dmabuf_mr import RW, Bed

MiB = 1 << 20
APERTURE = 256 * MiB


def _bed(**gpu):
    bed = Bed()
    node = bed.nodes[1]
    gpu = Gpu("b.gpu0", "nvidia", gpu_params("h200", bar1_bytes=APERTURE), node.kernel, **gpu)
    return bed, node, gpu


def _dmabuf_mr(bed, node, gpu, alloc):
    fd = gpu.export(alloc, node.fds)
    return ibv_reg_dmabuf_mr(bed.pds[1], 0, alloc.size, alloc.addr, fd, RW)


def test_a_peer_memory_mr_holds_whole_64k_pages_of_bar1_until_deregistration():
    bed, node, gpu = _bed()
    mr = ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("a", 4 * MiB), 0, 100 * MiB // 64 + 1, RW)
    assert mr.backing.bar1_bytes == gpu.bar1.used == -(-(100 * MiB // 64 + 1) // BAR1_PAGE) * BAR1_PAGE
    ibv_dereg_mr(mr)
    assert gpu.bar1.used == 0 and mr.backing.bar1_bytes == 0


def test_peer_memory_past_bar1_fails_with_efault_while_vram_is_free_and_pins_nothing():
    """nvidia-peermem's probe fails, so it declines the range and ib_umem_get cannot pin a GPU address."""
    bed, node, gpu = _bed()
    first = ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("a", 200 * MiB), 0, 200 * MiB, RW)
    second = gpu.malloc("b", 100 * MiB)
    translations = node.nic.translations
    with pytest.raises(VerbsError, match="BAR1 exhausted") as err:
        ibv_reg_mr_peermem(bed.pds[1], second, 0, 100 * MiB, RW)
    assert err.value.errno == "EFAULT" and err.value.call == "ibv_reg_mr"
    assert gpu.capacity - gpu.memory.used > 100 * MiB                   # VRAM is not what ran out
    assert not second.pinned_by and node.nic.translations == translations  # the failed call left nothing behind
    ibv_dereg_mr(first)
    assert ibv_reg_mr_peermem(bed.pds[1], second, 0, 100 * MiB, RW).backing.bar1_bytes == 100 * MiB


def test_the_free_callback_gives_the_aperture_back():
    bed, node, gpu = _bed()
    mr = ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("a", 64 * MiB), 0, 64 * MiB, RW)
    peermem_reclaim(mr, bed.env.now)
    assert gpu.bar1.used == 0


def test_a_dmabuf_map_past_bar1_fails_ibv_reg_dmabuf_mr_with_enomem():
    bed, node, gpu = _bed()
    held = _dmabuf_mr(bed, node, gpu, gpu.malloc("a", 192 * MiB))
    assert held.backing.bar1_bytes == gpu.bar1.used == 192 * MiB
    with pytest.raises(VerbsError, match="BAR1 exhausted") as err:
        _dmabuf_mr(bed, node, gpu, gpu.malloc("b", 128 * MiB))
    assert err.value.errno == "ENOMEM" and gpu.bar1.used == 192 * MiB
    ibv_dereg_mr(held)
    assert gpu.bar1.used == 0


def test_attachments_of_one_dmabuf_share_its_mapping_and_each_export_maps_its_own():
    bed, node, gpu = _bed()
    alloc = gpu.malloc("a", 64 * MiB)
    fd = gpu.export(alloc, node.fds)
    one, two = (ibv_reg_dmabuf_mr(bed.pds[1], 0, alloc.size, alloc.addr, fd, RW) for _ in range(2))
    assert gpu.bar1.used == 64 * MiB and one.backing.bar1_bytes == two.backing.bar1_bytes == 64 * MiB
    ibv_dereg_mr(one)
    assert gpu.bar1.used == 64 * MiB                                      # the other attachment still maps it
    again = _dmabuf_mr(bed, node, gpu, alloc)                            # a second export: a second mapping
    assert gpu.bar1.used == 128 * MiB
    ibv_dereg_mr(two)
    ibv_dereg_mr(again)
    assert gpu.bar1.used == 0


def test_a_coherent_platform_reaches_the_memory_without_bar1():
    bed, node, gpu = _bed(coherent=True)
    peer = ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("a", 512 * MiB), 0, 512 * MiB, RW)
    mr = _dmabuf_mr(bed, node, gpu, gpu.malloc("b", 512 * MiB))
    assert gpu.bar1.used == 0 and peer.backing.bar1_bytes == mr.backing.bar1_bytes == 0

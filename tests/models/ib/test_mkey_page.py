"""Translation granularity: one page-size rule per path (mlx5 dma-buf PAGE_SIZE, peer memory 64 KiB, host
backing pages, other drivers' best page size), the MTT entries it gives, and what the NIC's table holds."""

import pytest
from hypothesis import given, settings, strategies as st

from models.dmabuf.gpu_export import Gpu
from models.gpu import gpu_params
from models.host import HostParams
from models.ib.mkey_page import (EXPORTER_RUN, ib_umem_find_best_pgsz, ib_umem_num_dma_blocks, mkey_page_size,
                                 page_segments)
from models.nic.device import DeviceAttrs
from models.nic.nic import NicParams
from models.nic.wqe import Access
from models.verbs.peermem import ibv_reg_mr_peermem
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr
from sim.core import VerbsError
from tests.models.ib.test_dmabuf_mr import RW, SIZE, Bed
from tests.properties import examples

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MLX5 = NicParams()
EFA = NicParams(device=DeviceAttrs(vendor_id=0x1D0F, page_size_cap=(1 << 22) - 4096))  # 4 KiB .. 2 MiB
TABLE = [  # (device, layout page, iova, is_dmabuf, entry bytes)
    (MLX5, 4 * KiB, 0, False, 4 * KiB),           # pinned host memory, 4 KiB pages
    (MLX5, 2 * MiB, 0x1000, False, 2 * MiB),      # THP: the first entry starts at the huge page under the iova
    (MLX5, 64 * KiB, 0, False, 64 * KiB),         # peer memory: nvidia_p2p_get_pages' 64 KiB pages
    (MLX5, 64 * KiB, 0, True, 4 * KiB),           # dma-buf on mlx5: PAGE_SIZE whatever the layout
    (MLX5, EXPORTER_RUN, 0, True, 4 * KiB),
    (EFA, EXPORTER_RUN, 0, True, 2 * MiB),        # efa: ib_umem_find_best_pgsz within its page_size_cap
    (EFA, EXPORTER_RUN, 0x3000, True, 4 * KiB),   # ... and an iova whose low bits differ from the layout's
]


@pytest.mark.parametrize("device, page, iova, is_dmabuf, expected", TABLE)
def test_one_function_decides_the_page_size_of_every_path(device, page, iova, is_dmabuf, expected):
    offset = 0x1000 if iova == 0x1000 else 0  # the layout's first byte sits at this offset of its page
    segments = page_segments(offset, 64 * MiB, page)
    assert mkey_page_size(device, iova, segments, is_dmabuf=is_dmabuf) == expected


def test_an_odp_mr_keeps_its_umem_page_even_over_huge_pages():
    huge = page_segments(0, 64 * MiB, 2 * MiB)
    assert mkey_page_size(MLX5, 0, huge, is_dmabuf=False, odp_page=4 * KiB) == 4 * KiB
    assert mkey_page_size(MLX5, 0, huge, is_dmabuf=False) == 2 * MiB


def test_best_page_size_is_bounded_by_the_span_and_by_discontiguous_pages():
    assert ib_umem_find_best_pgsz(page_segments(0, 8 * KiB, 2 * MiB), MLX5.device.page_size_cap, 0) == 8 * KiB
    assert ib_umem_find_best_pgsz(page_segments(0, 8 * MiB, 64 * KiB), MLX5.device.page_size_cap, 0) == 64 * KiB
    contiguous = [(0x40_0000_0000, 8 * MiB)]
    assert ib_umem_find_best_pgsz(contiguous, MLX5.device.page_size_cap, 0) == 8 * MiB
    assert ib_umem_find_best_pgsz(contiguous, 4 * KiB, 0) == 4 * KiB   # the device takes only 4 KiB
    assert ib_umem_find_best_pgsz(contiguous, 64 * KiB, 0x100) == 0    # no page passes offset 0x100 onward


@pytest.mark.parametrize("kernel", ["5.12", "6.1", "6.14", "6.18", "7.1"])
def test_mlx5_maps_dmabuf_mrs_with_page_size_entries_on_every_kernel(kernel):
    bed = Bed(kernel=kernel)
    mr = bed.reg()
    nic = bed.nodes[1].nic
    assert mr.page_size == 4 * KiB and mr.mtt_entries == SIZE // (4 * KiB)
    assert nic.translations == mr.mtt_entries and mr.backing.pages == mr.mtt_entries  # a re-map's UMR writes them
    ibv_dereg_mr(mr)
    assert nic.translations == 0


def _gpu_bed():
    bed = Bed()
    node = bed.nodes[1]
    gpu = Gpu("b.gpu0", "nvidia", gpu_params("h200"), node.kernel)
    return bed, node, gpu


def test_peer_memory_needs_a_sixteenth_of_the_entries_of_the_same_dmabuf_mr():
    bed, node, gpu = _gpu_bed()
    alloc = gpu.malloc("buf", GiB)
    peer = ibv_reg_mr_peermem(bed.pds[1], alloc, 0, GiB, RW)
    assert peer.page_size == 64 * KiB and peer.mtt_entries == GiB // (64 * KiB)
    assert node.nic.translations == peer.mtt_entries
    dmabuf_entries = ib_umem_num_dma_blocks(0, GiB, mkey_page_size(MLX5, 0, page_segments(0, GiB, 64 * KiB),
                                                                   is_dmabuf=True))
    assert dmabuf_entries == 16 * peer.mtt_entries
    ibv_dereg_mr(peer)
    assert node.nic.translations == 0


def test_the_translation_table_limit_counts_entries_of_each_mr_page_size():
    """A table of 2**14 entries holds a 1 GiB peer-memory MR (2**14 x 64 KiB) but not a 65 MiB host MR of
    4 KiB pages (16640 entries)."""
    bed = Bed()
    node = bed.nodes[1]
    node.nic.params = NicParams(max_translations=GiB // (64 * KiB))
    gpu = Gpu("b.gpu0", "nvidia", gpu_params("h200"), node.kernel)
    peer = ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("buf", GiB), 0, GiB, Access.LOCAL_WRITE)
    assert node.nic.translations == node.nic.params.max_translations
    ibv_dereg_mr(peer)
    host = node.host.allocate("h", 65 * MiB)
    with pytest.raises(VerbsError, match="translation table full"):
        ibv_reg_mr(bed.pds[1], host.addr, 65 * MiB, Access.LOCAL_WRITE)


def test_huge_host_pages_shrink_a_pinned_mr_entries():
    for pages, page in (("4k", 4 * KiB), ("thp", 2 * MiB)):
        params = HostParams(pages=pages)
        segments = page_segments(0, GiB, params.mtt_page_size)
        assert ib_umem_num_dma_blocks(0, GiB, mkey_page_size(MLX5, 0, segments, is_dmabuf=False)) == GiB // page


@settings(max_examples=examples(60), deadline=None)
@given(first=st.integers(0, 64), offset=st.integers(0, 15), pages=st.integers(1, 40),
       page_shift=st.sampled_from([12, 16, 21]), tail=st.integers(0, 15))
def test_the_best_page_size_is_the_largest_that_passes_every_entry(first, offset, pages, page_shift, tail):
    """The brute-force definition: the largest power of two (4 KiB up) such that each entry's DMA address agrees
    with its virtual address below it, every entry but the last ends on it, and no page is wider than the span
    needs (the smallest page, 4 KiB, always may be)."""
    page = 1 << page_shift
    virt = first * page + offset * 4096
    length = max(1, (pages - 1) * page + tail * 4096 + 1)
    segments = page_segments(virt, length, page)
    best = ib_umem_find_best_pgsz(segments, MLX5.device.page_size_cap, virt)

    def passes(size):
        va, span_bits = virt, ((length - 1 + virt) ^ virt).bit_length()
        for i, (dma, n) in enumerate(segments):
            if (dma ^ va) % size or (i < len(segments) - 1 and (va + n) % size):
                return False
            va += n
        return size <= max(4096, 1 << span_bits)
    assert passes(best) and not passes(2 * best)
    assert ib_umem_num_dma_blocks(virt, length, best) * best >= length


def _register(bed, node, path: str, *, fail: bool = False):
    """Register 2 MiB on node b by ``path``; ``fail``: so that its pinning step (the umem) fails."""
    if path == "host":
        node.host.params = HostParams(memlock_limit=4 * KiB if fail else None)
        return ibv_reg_mr(bed.pds[1], node.host.allocate(f"h{len(node.nic.mrs)}", SIZE).addr, SIZE, RW)
    if path == "dmabuf":
        return bed.reg(length=SIZE, fd=999 if fail else bed.fd)
    gpu = Gpu("b.gpu0", "nvidia", gpu_params("h200", **({"bar1_bytes": SIZE // 2} if fail else {})), node.kernel)
    return ibv_reg_mr_peermem(bed.pds[1], gpu.malloc("buf", SIZE), 0, SIZE, RW)


@pytest.mark.parametrize("path", ["host", "dmabuf", "peermem"])
def test_every_registration_reserves_its_entries_first_and_records_its_key_last(path):
    """One rule for ibv_reg_mr, ibv_reg_dmabuf_mr and the peer-memory path: a full table refuses the MR with ENOMEM
    before anything is pinned, a failed pin gives the entries back, and only a registered MR is in the key
    table, at its key, holding its entries."""
    bed, node, _ = _gpu_bed()
    before = (node.nic.translations, dict(node.nic.mrs))
    node.nic.params = NicParams(max_translations=node.nic.translations + 1)
    with pytest.raises(VerbsError) as full:
        _register(bed, node, path)
    assert full.value.errno == "ENOMEM" and "translation table full" in str(full.value)
    node.nic.params = NicParams()
    with pytest.raises(VerbsError) as failed:
        _register(bed, node, path, fail=True)
    assert "translation table full" not in str(failed.value)
    assert (node.nic.translations, node.nic.mrs) == before
    mr = _register(bed, node, path)
    assert node.nic.mrs == {**before[1], mr.lkey: mr} and mr.lkey == mr.rkey
    assert node.nic.translations == before[0] + mr.mtt_entries > before[0]

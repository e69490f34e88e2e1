"""The page size of an MR's translation entries, and how many entries the MR needs.

One function decides the page size of every registration, :func:`mkey_page_size`, as the kernel decides it:

* **dma-buf MRs on mlx5** get ``PAGE_SIZE`` (4 KiB) entries, whatever the exporter's layout:
  ``alloc_cacheable_mr`` (drivers/infiniband/hw/mlx5/mr.c) takes :func:`mlx5_umem_dmabuf_default_pgsz` for a
  dma-buf umem, because the mkey must hold any scatterlist the exporter hands out after a move. It has returned
  ``PAGE_SIZE`` since dma-buf MRs arrived (5.12, "RDMA/mlx5: Support dma-buf based userspace memory region")
  and still does in the newest mr.c read (the FRMR-pool rework of 2025, ``_mlx5_frmr_pool_alloc``); the
  data-direct path (6.12) registers through the same function. No kernel has used larger dma-buf pages, so
  :mod:`models.versions` holds no boundary for it.
* **ODP MRs** keep the ODP umem's page (``PAGE_SIZE``).
* **every other umem** (pinned host memory, peer memory) gets the largest page :func:`ib_umem_find_best_pgsz`
  finds in its DMA layout (mlx5: ``mlx5_umem_mkc_find_best_pgsz``, 4 KiB up to 2^43 B). Host memory's layout is
  its backing's pages (4 KiB, THP or hugetlbfs, :class:`~models.host.HostParams`). Peer memory's is the GPU's
  64 KiB pages: ``nvidia_p2p_get_pages`` hands out ``NVRM_P2P_PAGESIZE_BIG_64K`` pages
  (kernel-open/nvidia/nv-p2p.c, ``nv_p2p_get_pages``) and nvidia-peermem's ``nv_dma_map`` puts each in its own
  scatterlist entry, so the best page size is 64 KiB: 16 times fewer entries than the same MR through mlx5's
  dma-buf path.
* **dma-buf MRs on the other drivers** (efa, irdma) run :func:`ib_umem_find_best_pgsz` over the exporter's
  scatterlist with the device's ``page_size_cap``. The model's exporters are contiguous per
  :data:`EXPORTER_RUN` (an assumption: the GPUs' 2 MiB allocation unit; neither nv-dmabuf nor amdgpu promises
  more).

Examples
--------
>>> mlx5, gpu_pages = NicParams(), page_segments(0, 1 << 30, 64 << 10)
>>> mkey_page_size(mlx5, 0, gpu_pages, is_dmabuf=True), mkey_page_size(mlx5, 0, gpu_pages, is_dmabuf=False)
(4096, 65536)
>>> ib_umem_num_dma_blocks(0, 1 << 30, 4096) // ib_umem_num_dma_blocks(0, 1 << 30, 65536)
16
"""

from __future__ import annotations

from collections.abc import Sequence

from models.ib.mr_checks import MELLANOX_VENDOR_ID, PAGE_SIZE
from models.nic.nic import NicParams

MLX5_MKC_PAGE_SIZES = ((1 << 44) - 1) & ~(PAGE_SIZE - 1)
"""Page sizes an mlx5 MTT mkey takes (``mlx5_umem_mkc_find_best_pgsz`` with 5 bits of log_page_size above
4 KiB, ``__mlx5_log_page_size_to_bitmap``): 4 KiB up to 2^43 bytes."""
EXPORTER_RUN = 2 << 20
"""Bytes of an exported GPU buffer the model takes as physically contiguous and aligned (one GPU allocation
page); it matters only to drivers that look at the exporter's layout (not mlx5)."""

Segments = Sequence[tuple[int, int]]
"""A umem's DMA layout: ``(dma_address, length)`` of each scatterlist entry, in order, covering the MR's bytes
from its first (the first entry starts at the first byte's DMA address)."""


def page_segments(virt: int, length: int, page: int) -> list[tuple[int, int]]:
    """The layout of ``[virt, virt+length)`` backed by ``page``-byte pages that lie anywhere in DMA space, each
    page's address differing from its virtual address at the page bit (no two pages known to be contiguous).

    At most three entries: the first page's part, the whole pages after it as one entry, the last page's part.
    Folding the whole pages changes no answer of :func:`ib_umem_find_best_pgsz`: every page already limits it to
    ``page`` through its address, and the boundaries folded away are all multiples of ``page``.
    """
    end = virt + length
    first_end = min(end, (virt // page + 1) * page)
    last_start = max(first_end, (end - 1) // page * page)
    spans = [(virt, first_end), (first_end, last_start), (last_start, end)]
    return [(start ^ page, stop - start) for start, stop in spans if stop > start]


def ib_umem_find_best_pgsz(segments: Segments, pgsz_bitmap: int, virt: int) -> int:
    """``ib_umem_find_best_pgsz`` (drivers/infiniband/core/umem.c): the largest page size of ``pgsz_bitmap``
    through which every entry of ``segments`` passes the virtual address ``virt`` onward to its DMA address
    (the low bits of both agree), no larger than the MR's span needs; 0 when none does. This is the form before
    mainline began skipping entries DMA-contiguous with the previous one; both give the same answer for the
    layouts the model builds, whose pages are not contiguous (:func:`page_segments`)."""
    length = sum(n for _, n in segments)
    mask = pgsz_bitmap & ~((1 << ((length - 1 + virt) ^ virt).bit_length()) - 1)  # GENMASK(63, bits_per(..))
    va = virt
    for i, (dma, n) in enumerate(segments):
        mask |= dma ^ va
        va += n
        if i != len(segments) - 1:  # the next entry starts at this va: its low bits must be zero
            mask |= va
    if mask:
        pgsz_bitmap &= (1 << ((mask & -mask).bit_length())) - 1  # GENMASK(count_trailing_zeros(mask), 0)
    return 1 << (pgsz_bitmap.bit_length() - 1) if pgsz_bitmap else 0


def mlx5_umem_dmabuf_default_pgsz() -> int:
    """``mlx5_umem_dmabuf_default_pgsz``: dma-buf mkeys are fixed at ``PAGE_SIZE`` (the iova's alignment was
    checked on entry to ``UVERBS_METHOD_REG_DMABUF_MR``)."""
    return PAGE_SIZE


def mkey_page_size(device: NicParams, virt: int, segments: Segments, *, is_dmabuf: bool,
                   odp_page: int | None = None) -> int:
    """Bytes one translation entry of an MR on ``device`` covers: on mlx5, ``alloc_cacheable_mr``'s choice
    (:func:`mlx5_umem_dmabuf_default_pgsz` for a dma-buf umem, else ``mlx5_umem_mkc_find_best_pgsz``); on another
    driver :func:`ib_umem_find_best_pgsz` with the device's ``page_size_cap`` for every umem. An ODP umem has its
    own page (``ib_umem_find_best_pgsz`` returns ``BIT(umem_odp->page_shift)``).

    :param virt: the MR's iova.
    :param segments: the umem's DMA layout (:func:`page_segments` for page-granular backings).
    :param odp_page: the ODP umem's page size; None: not an ODP MR.
    """
    if odp_page is not None:
        return odp_page
    if device.device.vendor_id != MELLANOX_VENDOR_ID:
        return ib_umem_find_best_pgsz(segments, device.device.page_size_cap, virt)
    if is_dmabuf:
        return mlx5_umem_dmabuf_default_pgsz()
    return ib_umem_find_best_pgsz(segments, MLX5_MKC_PAGE_SIZES, virt)


def ib_umem_num_dma_blocks(virt: int, length: int, page_size: int) -> int:
    """``ib_umem_num_dma_blocks``: translation entries of ``[virt, virt+length)`` in ``page_size`` pages."""
    return -(-(virt + length) // page_size) - virt // page_size

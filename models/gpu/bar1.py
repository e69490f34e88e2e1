"""The GPU's BAR1 aperture: the window of the PCI bus through which peers (the NIC) reach device memory, a
resource separate from VRAM.

Peer access maps device memory into BAR1 and holds the mapping while the peer may use it:

* **peer memory**: ``nvidia_p2p_get_pages`` (kernel-open/nvidia/nv-p2p.c, ``nv_p2p_get_pages`` ->
  ``rm_p2p_get_pages``) maps the pinned 64 KiB pages for the registration's life, until
  ``nvidia_p2p_put_pages`` or the driver's free callback;
* **dma-buf**: NVIDIA's ``map_dma_buf`` (kernel-open/nvidia/nv-dmabuf.c, ``nv_dma_buf_map`` ->
  ``nv_dma_buf_get_phys_addresses`` -> ``rm_dma_buf_map_mem_handle``) maps the exported handles when the first
  attachment maps and unmaps them with the last ``unmap_dma_buf`` (``phys_refcount``); each export is its own
  dma-buf with its own mapping. On a coherent platform the default mapping hands out the memory's own pages and
  BAR1 is not used.

A mapping holds whole 64 KiB pages (:data:`BAR1_PAGE`, the p2p page ``NVRM_P2P_PAGESIZE_BIG_64K``; the page size
of RM's dma-buf mappings is not published, the same is taken). Past the aperture RM fails the mapping, and
``nvidia_p2p_get_pages`` returns -ENOMEM (``nvidia_p2p_map_status``: ``NV_ERR_NO_MEMORY`` and
``NV_ERR_INSUFFICIENT_RESOURCES``). What the registration reports differs by path:

* ``ibv_reg_mr`` through nvidia-peermem fails with **EFAULT**: the client's ``nv_mem_acquire`` probes the range
  with ``nvidia_p2p_get_pages``, takes the failure for "not mine" (kernel-open/nvidia-peermem/nvidia-peermem.c),
  so no peer client claims it and ``ib_umem_get`` returns the error of pinning it as host memory (a GPU address
  has no CPU mapping): the same errno as a range the GPU driver does not know;
* ``ibv_reg_dmabuf_mr`` fails with **ENOMEM**: ``nv_dma_buf_map`` returns NULL, which ``dma_buf_map_attachment``
  turns into -ENOMEM.

Either way VRAM may still be free.

Examples
--------
>>> bar1 = Bar1Aperture(256 << 20)
>>> bar1.map("mr1", 100 << 20, call="nvidia_p2p_get_pages") >> 20
100
>>> try:
...     bar1.map("mr2", 200 << 20, call="nvidia_p2p_get_pages")
... except Bar1Exhausted as exc:
...     print(exc)
nvidia_p2p_get_pages: ENOMEM: BAR1 exhausted: 200MiB more needed, 156MiB of 256MiB free
>>> bar1.unmap("mr1"), bar1.used
(104857600, 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core import SimError, format_size

BAR1_PAGE = 64 << 10
"""Bytes of one BAR1 mapping page: the GPU's big page, as ``nvidia_p2p_get_pages`` hands pages out."""


class Bar1Exhausted(SimError):
    """A mapping does not fit in what is left of the BAR1 aperture (RM's ``NV_ERR_NO_MEMORY``, errno ENOMEM)."""

    errno = "ENOMEM"

    def __init__(self, needed: int, free: int, size: int, *, call: str) -> None:
        self.needed, self.free = needed, free
        self.rule = (f"BAR1 exhausted: {format_size(needed)} more needed, {format_size(free)} of "
                     f"{format_size(size)} free")
        """The rule broken, without the call."""
        super().__init__(f"{call}: ENOMEM: {self.rule}")


@dataclass
class Bar1Aperture:
    """One GPU's BAR1: who holds how much of it.

    :param size: aperture bytes; None: unbounded (unknown size, or large enough that it is never the limit).
    """

    size: int | None
    mappings: dict[str, int] = field(default_factory=dict)
    """Bytes each holder (an MR's pin owner, a dma-buf) has mapped."""

    @property
    def used(self) -> int:
        """Bytes mapped (whole pages)."""
        return sum(self.mappings.values())

    def map(self, holder: str, nbytes: int, *, call: str) -> int:
        """Map ``nbytes`` for ``holder`` (rounded up to whole :data:`BAR1_PAGE` pages); return the bytes held.

        :raises Bar1Exhausted: the pages do not fit in what is free.
        """
        held = -(-nbytes // BAR1_PAGE) * BAR1_PAGE
        if self.size is not None and self.used + held > self.size:
            raise Bar1Exhausted(held, self.size - self.used, self.size, call=call)
        self.mappings[holder] = self.mappings.get(holder, 0) + held
        return held

    def unmap(self, holder: str) -> int:
        """Give back everything ``holder`` mapped; return how many bytes (0 when it holds none)."""
        return self.mappings.pop(holder, 0)

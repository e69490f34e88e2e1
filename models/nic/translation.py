"""What a NIC access through a memory region reaches: the interface of an MR's backing and the bytes behind it.

A pinned host MR has no backing (always translatable, its bytes in the process's host buffer); the other
registration modes (:mod:`models.ib`) subclass :class:`MrBacking`. Data mode: host memory keeps one array per
buffer (``HostMemory.data``), a GPU allocation its ``data``, an exported dma-buf its exporter's ``storage``
(one array per placement generation); a backing says which array the NIC reaches now, so an importer that
ignored ``move_notify`` still reads and writes the old generation's array — stale bytes, not the buffer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:  # only annotations name numpy: validating a scenario imports this module
    import numpy as np

RegMode = Literal["pinned", "odp", "peermem", "dmabuf", "dmabuf-pinned"]
"""How a buffer is registered: the scenario's ``register`` values and every :class:`MrBacking`'s ``mode``."""
DmabufImporter = Literal["dynamic", "pinned"]
"""How the driver imports a dma-buf (``NicParams.dmabuf``): dynamic (move_notify + re-fault) or pinned."""
DMABUF_MODE: dict[str, RegMode] = {"dynamic": "dmabuf", "pinned": "dmabuf-pinned"}
"""The registration mode each kind of dma-buf importer gives (the one place the two vocabularies meet)."""


class Fault(NamedTuple):
    """A NIC page fault; the handler makes the translation valid at ``ready_ps``."""

    ready_ps: int
    pages: int
    """Pages the handler mapped."""


class MrBacking:
    """Base of the non-pinned registration modes (see :mod:`models.ib.mr_backing`)."""

    mode: RegMode = "pinned"
    decides: str | None = None
    """What a NIC access through this backing decides at run time beyond the moves a scenario's events make, in
    words (:attr:`sim.core.steps.Check.decides`); None: nothing."""
    pinned_bytes = 0
    """Bytes this registration keeps pinned (reported per mode)."""
    vram = "gpu0"
    """The vertex, in its node's PCIe topology, of the GPU whose memory a GPU backing reaches (set per GPU on a
    server with several)."""
    bar1_bytes = 0
    """Bytes of the GPU's BAR1 aperture its mapping holds (:mod:`models.gpu.bar1`)."""

    def translate(self, now_ps: int, offset: int, length: int):
        """Answer a NIC access to ``[offset, offset+length)`` of the MR at ``now_ps``: None (valid), a
        :class:`Fault` or a :class:`~models.nic.wqe.WcStatus` (the access fails)."""
        raise NotImplementedError

    def release(self, now_ps: int) -> int:
        """Tear the backing down at deregistration; return the time it costs (ps)."""
        return 0

    def epoch(self) -> tuple:
        """A value that changes whenever the answers of :meth:`translate` (or where the NIC's accesses land)
        may have changed: comparing it across a stretch of time tells whether anything moved the MR."""
        return ()

    def target(self, now_ps: int) -> str:
        """Where the NIC's accesses land at ``now_ps`` in a node's PCIe topology: ``mem0`` (host memory) or
        :attr:`vram` (the GPU's memory)."""
        return "mem0"

    def reached_bytes(self, mr) -> tuple[np.ndarray, int] | None:
        """Data mode: the array the NIC reaches through ``mr`` now and the index of the MR's first byte in it;
        None for the process's host buffer."""
        return None


def mr_bytes(mr, addr: int, length: int) -> np.ndarray:
    """A writable view of ``[addr, addr+length)`` (in the MR's iova space) of
    :class:`~models.verbs.mr.MemoryRegion` ``mr`` as the NIC reaches it now (a DM MR: the device memory's bytes)."""
    offset = addr - mr.iova
    if mr.dm is not None:
        return mr.dm.data[mr.dm_offset + offset: mr.dm_offset + offset + length]
    reached = mr.backing.reached_bytes(mr) if mr.backing is not None else None
    if reached is None:
        host, va = mr.pd.context.node.host, mr.addr + offset
        buf = next(b for b in host.buffers.values() if b.addr <= va < b.addr + host.mapped_length(b))
        reached = host.data[buf.name], mr.addr - buf.addr
    array, base = reached
    return array[base + offset: base + offset + length]


def write_payload(mr, addr: int, payload) -> None:
    """Data mode: the NIC writes ``payload`` through ``mr``'s translation now (nothing when ``payload`` is None:
    data mode is off)."""
    if payload is not None:
        mr_bytes(mr, addr, len(payload))[:] = payload


def lookup_mr(qp, key: int):
    """The MR that ``key`` names for an access by ``qp`` (a :class:`~models.verbs.qp.QueuePair`: its own lkeys, or
    the rkeys of requests reaching it), or None: no MR of the QP's NIC owns the key, or that MR's protection domain
    is not the QP's (rxe_mr.c ``lookup_mr``: ``mr_pd(mr) != pd``; mlx5 refuses an mkey of another PD the same
    way). A local access then completes IBV_WC_LOC_PROT_ERR, a remote one is NAKed."""
    mr = qp.node.nic.lookup(key)
    return mr if mr is not None and mr.pd is qp.pd else None

"""The RDMA core's dma-buf importer (drivers/infiniband/core/umem_dmabuf.c, mainline semantics).

``ib_umem_dmabuf_get`` attaches dynamically without mapping; ``ib_umem_dmabuf_get_pinned`` also pins and
maps under the reservation lock; ``ib_umem_dmabuf_get_pinned_revocable_and_lock`` (7.1) does so as an importer
that accepts revocation and returns with the lock held, for the driver to install its revoke callback with
``ib_umem_dmabuf_set_revoke_locked``; ``map_pages`` is idempotent and waits for the exporter's KERNEL fences with
the lock held; ``revoke`` runs the driver's callback, unmaps (and unpins) once; ``release`` revokes, detaches and
drops the reference.
Calls run in the NIC driver's context (its device name), or in the task that invoked them when called from
a callback (``move_notify`` runs in the exporter's task, which holds the lock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.core import ProtocolError, VerbsError

from models.dmabuf import (DmaBufAttachment, DmaBufAttachOps, DmaDataDirection, FdTable, SgTable, dma_buf_detach,
                           dma_buf_dynamic_attach, dma_buf_get, dma_buf_map_attachment, dma_buf_pin, dma_buf_put,
                           dma_buf_unmap_attachment, dma_buf_unpin)
from models.dmabuf.resv import DmaResvUsage, dma_resv_assert_held, dma_resv_wait_timeout
from models.versions import KernelBehaviour

U64 = 2**64


@dataclass(eq=False)
class IbUmemDmabuf:
    """``struct ib_umem_dmabuf``: the MR's view of an attached dma-buf range."""

    attach: DmaBufAttachment
    offset: int
    length: int
    writable: bool
    sgt: SgTable | None = None
    """The current mapping; None while unmapped or invalidated."""
    ready_ps: int = 0
    """When the last map's fence wait finished: the mapping's contents are valid from then on."""
    pinned: bool = False
    revoked: bool = False
    revoked_at_ps: int = 0
    """When a revoked umem stopped translating: its driver's revoke callback invalidated the key in hardware, or,
    without one, its pages were unmapped (the exporter's clock: the revocation runs ahead of the run's own)."""
    private: Any = None
    """The driver's MR (mlx5 clears it at deregistration so a late move_notify is ignored)."""
    pinned_revoke: Callable[[], None] | None = None
    """The driver's revoke callback of a pinned revocable umem (irdma: invalidate the key in hardware); set under
    the lock by :func:`ib_umem_dmabuf_set_revoke_locked`, called at most once, before the unmap."""
    stats: dict = field(default_factory=lambda: {"maps": 0, "unmaps": 0})

    @property
    def dev(self) -> str:
        """The importing device (the driver context)."""
        return self.attach.dev

    @property
    def resv(self):
        """The buffer's reservation lock."""
        return self.attach.dmabuf.resv


def _task(umem: IbUmemDmabuf) -> str:
    """The running task: the caller of an enclosing call (a callback), else the NIC driver."""
    return umem.attach.dmabuf.core.context(None, umem.dev)


def _held_task(umem: IbUmemDmabuf, call: str) -> str:
    """The running task, which must hold the buffer's reservation lock for ``call``."""
    ctx = _task(umem)
    dma_resv_assert_held(umem.resv, ctx, call)
    return ctx


def ib_umem_dmabuf_get(dev: str, offset: int, size: int, fdtable: FdTable, fd: int, access_writable: bool,
                       ops: DmaBufAttachOps | None, kernel: KernelBehaviour) -> IbUmemDmabuf:
    """Take a reference on the dma-buf behind ``fd`` and attach to it dynamically (no mapping yet, except the
    map at attach of 5.7 to 6.14, whose errors are this call's).

    :raises VerbsError: ``EINVAL`` for an overflowing range, missing ops (before 7.1: ops without
        move_notify), a range past the buffer or length 0; ``EBADF``/``EINVAL`` from ``dma_buf_get``; the
        exporter's attach errno.
    """
    call = "ib_umem_dmabuf_get"
    if offset < 0 or size < 0 or offset + size >= U64:
        raise VerbsError("EINVAL", f"offset {offset} + size {size} overflows (check_add_overflow)", call=call)
    if ops is None or (ops.move_notify is None and not kernel.invalidate_optional):
        raise VerbsError("EINVAL", "importer ops without move_notify", call=call)
    dmabuf = dma_buf_get(fdtable, fd, caller=dev)
    if dmabuf.size < offset + size:
        dma_buf_put(dmabuf, caller=dev)
        raise VerbsError("EINVAL", f"range [{offset}, {offset + size}) runs past the dma-buf's {dmabuf.size} "
                         "bytes", call=call)
    if size == 0:
        dma_buf_put(dmabuf, caller=dev)
        raise VerbsError("EINVAL", "length 0: the umem spans no pages", call=call)
    umem = IbUmemDmabuf(None, offset, size, access_writable)  # type: ignore[arg-type]
    try:
        umem.attach = dma_buf_dynamic_attach(dmabuf, dev, ops, umem, caller=dev)
    except VerbsError:
        dma_buf_put(dmabuf, caller=dev)
        raise
    return umem


def ib_umem_dmabuf_map_pages(umem: IbUmemDmabuf) -> int:
    """Map the buffer (if not mapped) and wait for the exporter's KERNEL fences; caller holds the lock
    (drivers/infiniband/core/umem_dmabuf.c: the 5.16 copy waits for the exclusive fence with
    ``dma_fence_wait``; from 5.19, f30bceab16d1, ``dma_resv_wait_timeout(KERNEL, MAX_SCHEDULE_TIMEOUT)``).

    On 5.19 the function returns that wait's value: ``MAX_SCHEDULE_TIMEOUT`` (``LONG_MAX``) narrowed to the
    ``int`` return is -1, so every map, though done, reports ``-EPERM`` to its caller, with the sg table left
    mapped. The fix of August 2022 (on v6.0-rc1) returns 0.

    Returns the time the fences have signaled (the mapping is usable from then on), in ps.

    :raises ProtocolError: the lock is not held.
    :raises VerbsError: ``EINVAL`` after revoke; the exporter's map errno; ``EPERM`` on 5.19.
    """
    call = "ib_umem_dmabuf_map_pages"
    ctx = _held_task(umem, call)
    if umem.revoked:
        raise VerbsError("EINVAL", "the umem was revoked", call=call)
    core = umem.attach.dmabuf.core
    if umem.sgt is None:
        umem.sgt = dma_buf_map_attachment(umem.attach, DmaDataDirection.BIDIRECTIONAL, caller=ctx)
        umem.stats["maps"] += 1
    if core.config.behaviour.waits_kernel_fences:
        wait, usage = "dma_resv_wait_timeout(KERNEL)", DmaResvUsage.KERNEL
    else:  # 5.12-5.18: dma_fence_wait(dma_resv_excl_fence(resv))
        wait, usage = "dma_fence_wait(excl)", DmaResvUsage.WRITE
    ready = dma_resv_wait_timeout(umem.resv, usage, now_ps=core.now_ps(ctx))
    core.instant(ctx, "FencesWaited", wait=wait, until_ps=max(ready, core.now_ps(ctx)))
    core.wait_until(ctx, ready)
    umem.ready_ps = ready
    if core.config.behaviour.map_pages_returns_wait_value:
        raise VerbsError("EPERM", "returned dma_resv_wait_timeout()'s MAX_SCHEDULE_TIMEOUT as an int, -1 "
                         f"(kernel {core.config.version}; fixed in 6.0)", call=call)
    return ready


def ib_umem_dmabuf_unmap_pages(umem: IbUmemDmabuf) -> None:
    """Drop the mapping (no-op when unmapped); caller holds the lock."""
    ctx = _held_task(umem, "ib_umem_dmabuf_unmap_pages")
    if umem.sgt is None:
        return
    dma_buf_unmap_attachment(umem.attach, umem.sgt, DmaDataDirection.BIDIRECTIONAL, caller=ctx)
    umem.sgt = None
    umem.stats["unmaps"] += 1


def ib_umem_dmabuf_unsupported_move_notify(attach: DmaBufAttachment) -> None:
    """The pinned importers' stub (before 7.1): it only warns."""
    attach.dmabuf.core.warn(attach.dev, "ib_umem_dmabuf_unsupported_move_notify: Invalidate callback should not "
                            "be called when memory is pinned")


def ib_umem_dmabuf_attach_pinned_ops(kernel: KernelBehaviour) -> DmaBufAttachOps:
    """``ib_umem_dmabuf_attach_pinned_ops``: peer-to-peer, with the warning stub before 7.1 and no op from then."""
    return DmaBufAttachOps(move_notify=None if kernel.invalidate_optional else ib_umem_dmabuf_unsupported_move_notify,
                           allow_peer2peer=True, name="ib_umem_dmabuf_unsupported_move_notify")


def ib_umem_dmabuf_get_pinned(dev: str, offset: int, size: int, fdtable: FdTable, fd: int,
                              access_writable: bool, kernel: KernelBehaviour) -> IbUmemDmabuf:
    """Attach, pin and map under the lock (drivers without page faults: EFA, irdma, bnxt_re...). It exists from
    5.16 (1e4df4a21c5a), as do its first callers (the uverbs handler refuses earlier kernels,
    :mod:`models.verbs.dmabuf`).

    A pin failure unlocks and releases. A map failure, from 5.16 to 6.19, unpins, unlocks and releases the umem,
    whose release unpins again because ``pinned`` is still set (and unmaps only after both unpins); from 7.0
    ("RDMA/umem: Fix double dma_buf_unpin in failure path") the release alone unmaps and unpins once.

    :raises VerbsError: as :func:`ib_umem_dmabuf_get`, or the exporter's pin/map errno.
    """
    umem = _get_pinned_and_lock(dev, offset, size, fdtable, fd, access_writable,
                                ib_umem_dmabuf_attach_pinned_ops(kernel), kernel)
    umem.resv.unlock(dev)
    return umem


def ib_umem_dmabuf_attach_pinned_revocable_ops() -> DmaBufAttachOps:
    """``ib_umem_dmabuf_attach_pinned_revocable_ops``: peer-to-peer, and an invalidate op that revokes the umem, so
    :func:`~models.dmabuf.revoke.dma_buf_attach_revocable` holds and revoking exporters (VFIO) admit it."""
    return DmaBufAttachOps(move_notify=lambda attach: ib_umem_dmabuf_revoke_locked(attach.importer_priv),
                           allow_peer2peer=True, name="ib_umem_dmabuf_revoke_locked")


def ib_umem_dmabuf_get_pinned_revocable_and_lock(dev: str, offset: int, size: int, fdtable: FdTable, fd: int,
                                                 access_writable: bool, kernel: KernelBehaviour) -> IbUmemDmabuf:
    """Attach, pin and map as a pinned importer that accepts revocation, and return with the reservation lock held
    (Jacob Moroni's "RDMA/umem: Add pinned revocable dmabuf import interface", 7.1): the driver then installs its
    revoke callback with :func:`ib_umem_dmabuf_set_revoke_locked` and unlocks, so a concurrent revocation cannot
    find the callback half set. Failures are those of :func:`ib_umem_dmabuf_get_pinned`, with the lock dropped.

    :raises ProtocolError: the kernel predates 7.1.
    :raises VerbsError: as :func:`ib_umem_dmabuf_get_pinned`.
    """
    if not kernel.has_pinned_revocable_umem:
        raise ProtocolError(f"ib_umem_dmabuf_get_pinned_revocable_and_lock does not exist in kernel {kernel.version} "
                            "(added in 7.1)")
    return _get_pinned_and_lock(dev, offset, size, fdtable, fd, access_writable,
                                ib_umem_dmabuf_attach_pinned_revocable_ops(), kernel)


def ib_umem_dmabuf_set_revoke_locked(umem: IbUmemDmabuf, revoke: Callable[[], None]) -> None:
    """Install the driver's revoke callback (``ib_umem_dmabuf_set_revoke_locked``): it must stop the hardware's
    access before it returns; called at most once, on revocation or at release.

    :raises ProtocolError: the running task does not hold the reservation lock.
    """
    _held_task(umem, "ib_umem_dmabuf_set_revoke_locked")
    umem.pinned_revoke = revoke


def _get_pinned_and_lock(dev: str, offset: int, size: int, fdtable: FdTable, fd: int, access_writable: bool,
                         ops: DmaBufAttachOps, kernel: KernelBehaviour) -> IbUmemDmabuf:
    """``ib_umem_dmabuf_get_pinned_and_lock``: attach with ``ops``, lock, pin and map; return with the lock held."""
    umem = ib_umem_dmabuf_get(dev, offset, size, fdtable, fd, access_writable, ops, kernel)
    umem.resv.lock(dev)
    try:
        dma_buf_pin(umem.attach, caller=dev)
    except VerbsError:
        umem.resv.unlock(dev)
        ib_umem_dmabuf_release(umem)
        raise
    umem.pinned = True
    try:
        ib_umem_dmabuf_map_pages(umem)
    except VerbsError:
        if kernel.pinned_map_failure_unpins_twice:
            dma_buf_unpin(umem.attach, caller=dev)  # err_unpin; the release below unpins again
        umem.resv.unlock(dev)
        ib_umem_dmabuf_release(umem)
        raise
    return umem


def ib_umem_dmabuf_revoke_locked(umem: IbUmemDmabuf) -> None:
    """Revoke with the lock held by the running task (the helper of "RDMA/umem: Move umem dmabuf revoke logic into
    helper function", and the revocable importers' invalidate op): once, run the driver's revoke callback, unmap,
    unpin, and refuse further maps.

    :raises ProtocolError: the running task does not hold the lock.
    """
    ctx = _held_task(umem, "ib_umem_dmabuf_revoke_locked")
    if umem.revoked:
        return
    core = umem.attach.dmabuf.core
    if umem.pinned_revoke is not None:
        umem.pinned_revoke()
        umem.revoked_at_ps = core.now_ps(ctx)
    ib_umem_dmabuf_unmap_pages(umem)
    if umem.pinned_revoke is None:
        umem.revoked_at_ps = core.now_ps(ctx)
    if umem.pinned:
        dma_buf_unpin(umem.attach, caller=ctx)
        umem.pinned = False
    umem.revoked = True


def ib_umem_dmabuf_revoke(umem: IbUmemDmabuf) -> None:
    """:func:`ib_umem_dmabuf_revoke_locked` with the lock taken and dropped around it.

    :raises ProtocolError: the kernel predates 6.12 (no revoke).
    """
    if not umem.attach.dmabuf.core.config.behaviour.has_revoke:
        raise ProtocolError(f"ib_umem_dmabuf_revoke does not exist in kernel "
                            f"{umem.attach.dmabuf.core.config.version} (added in 6.12)")
    umem.resv.lock(umem.dev)
    try:
        ib_umem_dmabuf_revoke_locked(umem)
    finally:
        umem.resv.unlock(umem.dev)


def ib_umem_dmabuf_release(umem: IbUmemDmabuf) -> None:
    """Revoke (before 6.12: lock, unmap, unpin, unlock), detach (which takes the lock itself) and drop the
    MR's dma-buf reference."""
    dmabuf = umem.attach.dmabuf
    if dmabuf.core.config.behaviour.has_revoke:
        ib_umem_dmabuf_revoke(umem)
    else:
        umem.resv.lock(umem.dev)
        try:
            ib_umem_dmabuf_unmap_pages(umem)
            if umem.pinned:
                dma_buf_unpin(umem.attach, caller=umem.dev)
                umem.pinned = False
        finally:
            umem.resv.unlock(umem.dev)
    dma_buf_detach(dmabuf, umem.attach, caller=umem.dev)
    dma_buf_put(dmabuf, caller=umem.dev)

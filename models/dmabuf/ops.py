"""The dma-buf core calls (drivers/dma-buf/dma-buf.c, mainline semantics): argument checks, errnos, locking.

Outcomes, as the kernel has them:

* an errno return raises :class:`~sim.core.VerbsError` with the errno name;
* a broken locking rule or a call sequence the kernel only survives by luck (use after release, double
  unmap) raises :class:`~sim.core.ProtocolError`; taking a lock that is held raises
  :class:`~sim.core.DeadlockError`;
* a call the kernel completes while silently leaking (detach with live mappings) does what the kernel does,
  then raises :class:`~sim.core.InvariantViolation` naming the leak;
* a WARN that lets the call go on is appended to ``core.warnings``.

Each optional ``caller`` names the context making the call (see :mod:`models.dmabuf.core`).
"""

from __future__ import annotations

from typing import Any

from sim.core import DeadlockError, InvariantViolation, ProtocolError, VerbsError

from models.dmabuf.core import (DmaBuf, DmaBufAttachment, DmaBufAttachOps, DmaBufCore, DmaBufOps,
                                DmaDataDirection, SgTable)
from models.dmabuf.fd import FdTable
from models.dmabuf.resv import DmaResv, DmaResvUsage, dma_resv_assert_held, dma_resv_wait_timeout

IMPORTER_HOLDS = ("dma-buf locking convention: importers hold the reservation lock while they call "
                  "dma_buf_pin, dma_buf_unpin, dma_buf_map_attachment and dma_buf_unmap_attachment")
EXPORTER_HOLDS = "dma-buf locking convention: the exporter holds the reservation lock while it calls dma_buf_move_notify"
CALLER_MUST_NOT_HOLD = ("dma-buf locking convention: attach, detach and the *_unlocked calls take the reservation "
                        "lock themselves, so the caller must not hold it")


def _assert_not_held(resv: DmaResv, ctx: str, call: str) -> None:
    if resv.holder == ctx and resv.sleep_until_ps is None:
        raise DeadlockError(f"{call}: self-deadlock: {ctx} holds {resv.name}; rule: {CALLER_MUST_NOT_HOLD}")


def _lock(resv: DmaResv, ctx: str, call: str) -> None:
    """Check, then take the lock the way the call itself would (no side effects when it cannot)."""
    _assert_not_held(resv, ctx, call)
    if resv.blocks_forever:
        why = (f", which {resv.sleep_reason} and never wakes" if resv.sleep_reason
               else "; synchronous calls cannot block")
        raise DeadlockError(f"{call}: {ctx} would wait forever for {resv.name}, held by {resv.holder}{why}")


def _check_alive(dmabuf: DmaBuf, call: str) -> None:
    if dmabuf.released:
        raise ProtocolError(f"{call}: use after release: {dmabuf.name} was released when its last file "
                            "reference was dropped")


def _check_attached(attach: DmaBufAttachment, call: str) -> None:
    _check_alive(attach.dmabuf, call)
    if attach.detached:
        raise ProtocolError(f"{call}: use after free: the attachment of {attach.dev} to "
                            f"{attach.dmabuf.name} was detached")


def _lock_required(attach: DmaBufAttachment) -> bool:
    """Map and unmap need the lock: always from 6.2; before, only when importer or exporter is dynamic."""
    dmabuf = attach.dmabuf
    return (dmabuf.core.config.behaviour.static_importers_lock or attach.importer_ops is not None
            or dmabuf.ops.pin is not None)


def dma_buf_is_dynamic(dmabuf: DmaBuf) -> bool:
    """The exporter can pin, so it may move the buffer while unpinned."""
    return dmabuf.ops.pin is not None


def dma_buf_attachment_is_dynamic(attach: DmaBufAttachment) -> bool:
    """The importer handles ``move_notify``."""
    return attach.importer_ops is not None


def dma_buf_export(core: DmaBufCore, ops: DmaBufOps | None, size: int, *, priv: Any, exp_name: str) -> DmaBuf:
    """Create a buffer holding one file reference, owned by the caller (``exp_name``'s context).

    :raises VerbsError: ``EINVAL`` (with a WARN) when ``priv`` or a mandatory op (map_dma_buf,
        unmap_dma_buf, release) is missing, or when only one of pin/unpin is given.
    """
    call = "dma_buf_export"
    if ops is None or priv is None or None in (ops.map_dma_buf, ops.unmap_dma_buf, ops.release):
        rule = "exporters must supply priv, map_dma_buf, unmap_dma_buf and release"
        core.warn(exp_name, f"{call}: WARN_ON: {rule}")
        raise VerbsError("EINVAL", rule, call=call)
    if (ops.pin is None) != (ops.unpin is None):
        rule = "pin and unpin come as a pair"
        core.warn(exp_name, f"{call}: WARN_ON: {rule}")
        raise VerbsError("EINVAL", rule, call=call)
    with core.call(exp_name, call, size=size):
        core.spend(exp_name, core.costs.export_ps)
        ino = core.next_ino()
        return DmaBuf(core, ops, size, priv, exp_name, ino, DmaResv(f"dmabuf{ino}.resv", core=core))


def dma_buf_dynamic_attach(dmabuf: DmaBuf | None, dev: str, importer_ops: DmaBufAttachOps | None,
                           importer_priv: Any = None, *, caller: str | None = None) -> DmaBufAttachment:
    """Attach device ``dev``; ``importer_ops=None`` makes a static importer. Takes the lock itself.

    :raises VerbsError: ``EINVAL`` for a missing buffer or device, and (with a WARN) for importer ops
        without ``move_notify``; the exporter's errno when its ``attach`` refuses.
    :raises DeadlockError: the lock is held (by the caller: self-deadlock).
    :raises ProtocolError: the buffer was released.
    """
    return _attach(dmabuf, dev, importer_ops, importer_priv, caller, "dma_buf_dynamic_attach")


def dma_buf_attach(dmabuf: DmaBuf | None, dev: str, *, caller: str | None = None) -> DmaBufAttachment:
    """Attach a static importer (no ``move_notify``: the buffer is pinned while mapped); errors as
    :func:`dma_buf_dynamic_attach`."""
    return _attach(dmabuf, dev, None, None, caller, "dma_buf_attach")


def _attach(dmabuf: DmaBuf | None, dev: str, importer_ops: DmaBufAttachOps | None, importer_priv: Any,
            caller: str | None, call: str) -> DmaBufAttachment:
    """``dma_buf_dynamic_attach`` (drivers/dma-buf/dma-buf.c, read in the 6.x mainline copies of the code index and
    the 2025-2026 patches to it): the exporter's attach op runs unlocked, then the lock is taken around the list
    insertion; from 5.7 to 6.14 a mismatch of dynamic importer and exporter also maps (and pins) the buffer here
    and caches the sg table (:func:`_map_at_attach`)."""
    if dmabuf is None or not dev:
        raise VerbsError("EINVAL", "a buffer and an importing device are required", call=call)
    core = dmabuf.core
    ctx = core.context(caller, dev)
    if (importer_ops is not None and importer_ops.move_notify is None
            and not core.config.behaviour.invalidate_optional):
        rule = "dynamic importers must provide move_notify"
        core.warn(ctx, f"{call}: WARN_ON: {rule}")
        raise VerbsError("EINVAL", rule, call=call)
    _check_alive(dmabuf, call)
    with core.call(ctx, call, dmabuf=dmabuf.name, dev=dev, dynamic=importer_ops is not None):
        attach = DmaBufAttachment(dmabuf, dev, importer_ops, importer_priv,
                                  peer2peer=importer_ops is not None and importer_ops.allow_peer2peer)
        if dmabuf.ops.attach is not None:
            try:
                dmabuf.ops.attach(dmabuf, attach)
            except VerbsError as err:
                raise VerbsError(err.errno, f"exporter {dmabuf.exp_name} refused the attachment: {err.rule}",
                                 call=call) from err
        _lock(dmabuf.resv, ctx, call)
        core.spend(ctx, core.costs.attach_ps)
        dmabuf.attachments.append(attach)
        if (core.config.behaviour.maps_at_attach
                and dma_buf_attachment_is_dynamic(attach) != dma_buf_is_dynamic(dmabuf)):
            _map_at_attach(attach, ctx, call)
        return attach


def _map_at_attach(attach: DmaBufAttachment, ctx: str, call: str) -> None:
    """5.7 to 6.14: map for a static importer of a dynamic exporter (pinning under the lock) or a dynamic importer
    of a static exporter (unlocked), and cache the sg table in ``attach.sgt``. A map error undoes the attachment
    and is the attach's errno (so ``ib_umem_dmabuf_get`` reports it)."""
    dmabuf = attach.dmabuf
    dynamic = dma_buf_is_dynamic(dmabuf)
    if dynamic:
        dmabuf.resv.lock(ctx)
    try:
        attach.sgt = _map_dma_buf(attach, DmaDataDirection.BIDIRECTIONAL, ctx, call, pin=dynamic)
    except VerbsError:
        dmabuf.attachments.remove(attach)
        attach.detached = True
        if dmabuf.ops.detach is not None:
            dmabuf.ops.detach(dmabuf, attach)
        raise
    finally:
        if dynamic:
            dmabuf.resv.unlock(ctx)


def dma_buf_detach(dmabuf: DmaBuf, attach: DmaBufAttachment, *, caller: str | None = None) -> None:
    """Remove ``attach`` (drivers/dma-buf/dma-buf.c): under the lock it unmaps the sg table cached at attach
    (5.7 to 6.14, unpinning for a dynamic exporter) and unlinks the attachment; the exporter's detach op runs
    after the unlock. It does not look for mappings or pins the importer still holds: they leak.

    :raises DeadlockError: the lock is held (by the caller: self-deadlock).
    :raises ProtocolError: released buffer, attachment of another buffer (the kernel WARNs and leaks it),
        attachment already detached.
    :raises InvariantViolation: after the detach is done, when the importer left mappings or pins behind (the
        kernel's outcome: they leak, and the exporter keeps the buffer pinned).
    """
    call = "dma_buf_detach"
    _check_alive(dmabuf, call)
    if attach.dmabuf is not dmabuf:
        raise ProtocolError(f"{call}: WARN_ON: the attachment belongs to {attach.dmabuf.name}, not "
                            f"{dmabuf.name}; the kernel returns and leaks it")
    _check_attached(attach, call)
    core = dmabuf.core
    ctx = core.context(caller, attach.dev)
    with core.call(ctx, call, dmabuf=dmabuf.name, dev=attach.dev):
        _lock(dmabuf.resv, ctx, call)
        if attach.sgt is not None:
            _unmap_dma_buf(attach, attach.sgt, attach.sgt.direction, ctx)
            attach.sgt = None
        dmabuf.attachments.remove(attach)
        attach.detached = True
        if dmabuf.ops.detach is not None:
            dmabuf.ops.detach(dmabuf, attach)
        core.spend(ctx, core.costs.detach_ps)
    if attach.mappings or attach.pin_count > 0:
        raise InvariantViolation(f"{call}: {attach.dev} detached from {dmabuf.name} with {len(attach.mappings)} "
                                 f"mapping(s) and {attach.pin_count} pin(s) left: the kernel frees the attachment "
                                 "and leaks them (unmap and unpin before detach)")


def dma_buf_pin(attach: DmaBufAttachment, *, caller: str | None = None) -> None:
    """Pin the backing storage in place for ``attach``; a no-op in the exporter when it cannot pin.

    A static importer pinning gets a WARN and the pin goes ahead.

    :raises ProtocolError: the caller does not hold the lock; released buffer or detached attachment.
    :raises VerbsError: the exporter's errno when its pin fails.
    """
    call = "dma_buf_pin"
    _check_attached(attach, call)
    core, resv = attach.dmabuf.core, attach.dmabuf.resv
    ctx = core.context(caller, attach.dev)
    with core.call(ctx, call, dmabuf=attach.dmabuf.name, dev=attach.dev):
        if attach.importer_ops is None:
            core.warn(ctx, f"{call}: WARN_ON(!attach->importer_ops): static importer {attach.dev} pins; "
                      "only dynamic importers may pin")
        dma_resv_assert_held(resv, ctx, call, IMPORTER_HOLDS)
        if attach.dmabuf.ops.pin is not None:
            attach.dmabuf.ops.pin(attach)
        attach.pin_count += 1
        core.spend(ctx, core.costs.pin_ps)


def dma_buf_unpin(attach: DmaBufAttachment, *, caller: str | None = None) -> None:
    """Drop one pin of ``attach``: the core calls the exporter's unpin whatever the count (it keeps none, so an
    extra unpin reaches the exporter; ``attach.pin_count`` goes negative to show it).

    :raises ProtocolError: the caller does not hold the lock; released buffer or detached attachment.
    """
    call = "dma_buf_unpin"
    _check_attached(attach, call)
    core, resv = attach.dmabuf.core, attach.dmabuf.resv
    ctx = core.context(caller, attach.dev)
    with core.call(ctx, call, dmabuf=attach.dmabuf.name, dev=attach.dev):
        if attach.importer_ops is None:
            core.warn(ctx, f"{call}: WARN_ON(!attach->importer_ops): static importer {attach.dev} unpins")
        dma_resv_assert_held(resv, ctx, call, IMPORTER_HOLDS)
        if attach.dmabuf.ops.unpin is not None:
            attach.dmabuf.ops.unpin(attach)
        attach.pin_count -= 1
        core.spend(ctx, core.costs.pin_ps)


def dma_buf_pin_on_map(attach: DmaBufAttachment) -> bool:
    """The map pins: the exporter can pin and the importer is static or move_notify is compiled out."""
    return (attach.dmabuf.ops.pin is not None
            and (attach.importer_ops is None or not attach.dmabuf.core.config.move_notify_enabled))


def dma_buf_map_attachment(attach: DmaBufAttachment,
                           direction: DmaDataDirection = DmaDataDirection.BIDIRECTIONAL, *,
                           caller: str | None = None) -> SgTable:
    """Map the buffer for ``attach``'s device; a static importer also waits for the KERNEL fences here.

    :raises ProtocolError: the caller does not hold the lock; released buffer or detached attachment.
    :raises VerbsError: the exporter's pin errno (an ``EBUSY`` also WARNs); ``ENOMEM`` when the exporter
        cannot map.
    """
    call = "dma_buf_map_attachment"
    _check_attached(attach, call)
    dmabuf = attach.dmabuf
    core = dmabuf.core
    ctx = core.context(caller, attach.dev)
    with core.call(ctx, call, dmabuf=dmabuf.name, dev=attach.dev, bytes=dmabuf.size):
        if _lock_required(attach):
            dma_resv_assert_held(dmabuf.resv, ctx, call, IMPORTER_HOLDS)
        if attach.sgt is not None:  # cached at attach (5.7 to 6.14)
            if direction is not attach.sgt.direction and attach.sgt.direction is not DmaDataDirection.BIDIRECTIONAL:
                raise VerbsError("EBUSY", "the sg table cached at attach has another direction", call=call)
            return attach.sgt
        return _map_dma_buf(attach, direction, ctx, call, pin=dma_buf_pin_on_map(attach))


def _map_dma_buf(attach: DmaBufAttachment, direction: DmaDataDirection, ctx: str, call: str, *,
                 pin: bool) -> SgTable:
    """Pin (when ``pin``) and call the exporter's map; a static importer waits for the KERNEL fences."""
    dmabuf = attach.dmabuf
    core = dmabuf.core
    if pin:
        try:
            dmabuf.ops.pin(attach)
        except VerbsError as err:
            if err.errno == "EBUSY":
                core.warn(ctx, f"{call}: WARN_ON_ONCE: exporter {dmabuf.exp_name} made the buffer "
                          "inaccessible (pin -EBUSY) while an attachment needs it")
            raise
        core.instant(ctx, "BufferPinned", dmabuf=dmabuf.name, on="map")
    try:
        segments = dmabuf.ops.map_dma_buf(attach, direction)
    except VerbsError as err:  # an ERR_PTR: the exporter's errno
        if pin:
            dmabuf.ops.unpin(attach)
        raise VerbsError(err.errno, f"exporter {dmabuf.exp_name} could not map {dmabuf.name}: {err.rule}",
                         call=call) from err
    if segments is None:
        if pin:
            dmabuf.ops.unpin(attach)
        raise VerbsError("ENOMEM", f"exporter {dmabuf.exp_name} could not map {dmabuf.name}", call=call)
    core.spend(ctx, core.costs.map_ps + core.costs.map_page_ps * core.costs.pages(dmabuf.size))
    ready = dma_resv_wait_timeout(dmabuf.resv, DmaResvUsage.KERNEL, now_ps=core.now_ps(ctx))
    if attach.importer_ops is None:
        core.wait_until(ctx, ready)
    sgt = SgTable(attach, direction, dmabuf.placement, dmabuf.generation, segments, ready, pin)
    attach.mappings.append(sgt)
    return sgt


def dma_buf_unmap_attachment(attach: DmaBufAttachment, sgt: SgTable,
                             direction: DmaDataDirection = DmaDataDirection.BIDIRECTIONAL, *,
                             caller: str | None = None) -> None:
    """Unmap ``sgt``; drops the pin its map took.

    :raises ProtocolError: the caller does not hold the lock; released buffer or detached attachment; an
        sg table of another attachment, already unmapped, or unmapped with another direction (DMA API).
    """
    call = "dma_buf_unmap_attachment"
    _check_attached(attach, call)
    if sgt.attach is not attach:
        raise ProtocolError(f"{call}: the sg table was mapped for {sgt.attach.dev}, not {attach.dev}")
    if sgt.unmapped:
        raise ProtocolError(f"{call}: double unmap of an sg table of {attach.dmabuf.name}")
    if direction is not sgt.direction:
        raise ProtocolError(f"{call}: DMA API: unmapped {direction.name} but mapped {sgt.direction.name}")
    dmabuf = attach.dmabuf
    core = dmabuf.core
    ctx = core.context(caller, attach.dev)
    with core.call(ctx, call, dmabuf=dmabuf.name, dev=attach.dev):
        if _lock_required(attach):
            dma_resv_assert_held(dmabuf.resv, ctx, call, IMPORTER_HOLDS)
        if sgt is attach.sgt:  # cached at attach: unmapped only by detach
            return
        _unmap_dma_buf(attach, sgt, direction, ctx)


def _unmap_dma_buf(attach: DmaBufAttachment, sgt: SgTable, direction: DmaDataDirection, ctx: str) -> None:
    """Call the exporter's unmap and drop the pin the map took."""
    dmabuf = attach.dmabuf
    core = dmabuf.core
    dmabuf.ops.unmap_dma_buf(attach, sgt, direction)
    sgt.unmapped = True
    attach.mappings.remove(sgt)
    if sgt.pinned_on_map:
        dmabuf.ops.unpin(attach)
    core.spend(ctx, core.costs.unmap_ps + core.costs.unmap_page_ps * core.costs.pages(sgt.nbytes))


def _locked(attach: DmaBufAttachment, call: str, caller: str | None, action):
    """Run ``action(ctx)`` with the reservation lock taken and dropped around it (the ``_unlocked`` calls)."""
    _check_attached(attach, call)
    resv, core = attach.dmabuf.resv, attach.dmabuf.core
    ctx = core.context(caller, attach.dev)
    _lock(resv, ctx, call)
    resv.lock(ctx)
    try:
        return action(ctx)
    finally:
        resv.unlock(ctx)


def dma_buf_map_attachment_unlocked(attach: DmaBufAttachment,
                                    direction: DmaDataDirection = DmaDataDirection.BIDIRECTIONAL, *,
                                    caller: str | None = None) -> SgTable:
    """:func:`dma_buf_map_attachment` with the lock taken and dropped around it.

    :raises DeadlockError: the lock is held (by the caller: self-deadlock).
    """
    return _locked(attach, "dma_buf_map_attachment_unlocked", caller,
                   lambda ctx: dma_buf_map_attachment(attach, direction, caller=ctx))


def dma_buf_unmap_attachment_unlocked(attach: DmaBufAttachment, sgt: SgTable,
                                      direction: DmaDataDirection = DmaDataDirection.BIDIRECTIONAL, *,
                                      caller: str | None = None) -> None:
    """:func:`dma_buf_unmap_attachment` with the lock taken and dropped around it.

    :raises DeadlockError: the lock is held (by the caller: self-deadlock).
    """
    _locked(attach, "dma_buf_unmap_attachment_unlocked", caller,
            lambda ctx: dma_buf_unmap_attachment(attach, sgt, direction, caller=ctx))


def dma_buf_move_notify(dmabuf: DmaBuf, *, caller: str | None = None) -> None:
    """Tell every dynamic importer the buffer is about to move; static importers are skipped (they pin), and from
    7.1 so are importers without the op. The core does not look at pins: a pinned importer's own op decides.

    Each notified importer costs ``move_notify_ps``.

    :raises ProtocolError: the caller (default: the exporter) does not hold the lock; released buffer.
    """
    call = ("dma_buf_invalidate_mappings" if dmabuf.core.config.behaviour.invalidate_name == "invalidate_mappings"
            else "dma_buf_move_notify")
    _check_alive(dmabuf, call)
    core = dmabuf.core
    ctx = core.context(caller, dmabuf.exp_name)
    with core.call(ctx, call, dmabuf=dmabuf.name):
        dma_resv_assert_held(dmabuf.resv, ctx, call, EXPORTER_HOLDS)
        dmabuf.invalidations += 1
        for attach in list(dmabuf.attachments):
            if attach.importer_ops is None or attach.importer_ops.move_notify is None:
                continue
            with core.call(ctx, attach.importer_ops.name, dev=attach.dev):
                core.spend(ctx, core.costs.move_notify_ps)
                core.instant(ctx, "MappingInvalidated", dmabuf=dmabuf.name, dev=attach.dev,
                             callback=core.config.behaviour.invalidate_name, live_mappings=len(attach.mappings))
                attach.importer_ops.move_notify(attach)


def get_dma_buf(dmabuf: DmaBuf) -> None:
    """Take a file reference on ``dmabuf`` (``get_file(&dmabuf->file)``: no lock, no cost); drop it with
    :func:`dma_buf_put`."""
    dmabuf.refcount += 1


def dma_buf_put(dmabuf: DmaBuf, *, caller: str | None = None) -> None:
    """Drop a file reference (``fput``); the last one releases the buffer: the exporter's ``release`` (a WARN if
    still attached). ``fput`` defers the release until the task leaves the kernel, so a put under the lock does
    not deadlock; the model's exporters take no lock in ``release``, so it runs at once.

    :raises ProtocolError: the buffer was already released (use after free / refcount underflow).
    """
    call = "dma_buf_put"
    _check_alive(dmabuf, call)
    core = dmabuf.core
    ctx = core.context(caller, "task")
    with core.call(ctx, call, dmabuf=dmabuf.name, refcount=dmabuf.refcount - 1):
        core.spend(ctx, core.costs.file_op_ps)
        dmabuf.refcount -= 1
        if dmabuf.refcount:
            return
        if dmabuf.attachments:
            core.warn(ctx, f"{call}: WARN_ON(!list_empty(&dmabuf->attachments)): {dmabuf.name} released "
                      f"with {len(dmabuf.attachments)} attachment(s)")
        dmabuf.released = True
        dmabuf.ops.release(dmabuf)
        core.instant(ctx, "BufferReleased", dmabuf=dmabuf.name)


def dma_buf_fd(dmabuf: DmaBuf, fdtable: FdTable, *, caller: str | None = None) -> int:
    """Install ``dmabuf`` in ``fdtable`` and return the fd; the fd takes over the caller's reference.

    :raises VerbsError: ``EMFILE`` when the table is full.
    :raises ProtocolError: the buffer was released.
    """
    call = "dma_buf_fd"
    _check_alive(dmabuf, call)
    ctx = dmabuf.core.context(caller, fdtable.owner)
    with dmabuf.core.call(ctx, call, dmabuf=dmabuf.name):
        dmabuf.core.spend(ctx, dmabuf.core.costs.file_op_ps)
        return fdtable.install(dmabuf, lambda owner: dma_buf_put(dmabuf, caller=owner))


def dma_buf_get(fdtable: FdTable, fd: int, *, caller: str | None = None) -> DmaBuf:
    """Take a new reference to the buffer behind ``fd``.

    :raises VerbsError: ``EBADF`` when ``fd`` is not open; ``EINVAL`` when it is not a dma-buf file.
    :raises ProtocolError: the fd refers to a released buffer (a reference was dropped too often).
    """
    call = "dma_buf_get"
    file = fdtable.fget(fd, call)
    if not isinstance(file, DmaBuf):
        raise VerbsError("EINVAL", f"fd {fd} is {file!r}, not a dma-buf file", call=call)
    _check_alive(file, call)
    ctx = file.core.context(caller, fdtable.owner)
    with file.core.call(ctx, call, dmabuf=file.name, refcount=file.refcount + 1):
        file.core.spend(ctx, file.core.costs.file_op_ps)
        get_dma_buf(file)
        return file

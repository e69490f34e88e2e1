"""The revocation contract of the dma-buf core (kernel 7.1) and an exporter that revokes device memory as VFIO does.

From 7.1 ("dma-buf: Add dma_buf_attach_revocable()", Leon Romanovsky's dmabuf-revoke series) an importer that
provides ``invalidate_mappings`` promises to unmap within bounded time after it is called; a pinned importer may
take the call as a permanent revocation. After ``dma_buf_invalidate_mappings`` returns, an importer may still access
the memory until the buffer's fences signal, and read it speculatively until it unmaps, so an exporter that must
stop every access waits for both. :func:`dma_buf_attach_revocable` tells the importers that keep the promise from
those that do not (no op: they unmap only when user space deregisters), and an exporter refuses the latter at
attach.

:class:`VfioExporter` follows drivers/vfio/pci/vfio_pci_dmabuf.c as the series leaves it: attach refuses importers
without peer2peer (``EOPNOTSUPP``), a revoked buffer (``ENODEV``) and, from 7.1, importers that are not revocable
(``EOPNOTSUPP``); before 7.1 its pin op refuses every pinned importer (``EOPNOTSUPP``). A revocation takes the lock,
marks the buffer revoked (maps fail with ``ENODEV``), invalidates, waits for the fences, unlocks, then waits for
every importer's unmap; before 7.1 it returns right after the invalidation, without waiting, so importers may still
reach the memory when it does. v5 of "vfio: Wait for dma-buf invalidation to complete" bounded that last wait by one
second and WARNed that the importer has a broken ``invalidate_mapping()``; v7 waits without bound, since attach now
admits only importers that promise to unmap. The model waits the bound, WARNs naming the importers still mapped,
then keeps waiting; a revocable importer past the bound broke the contract (:class:`InvariantViolation`).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from sim.core import PS_PER_S, InvariantViolation, ProtocolError, VerbsError
from sim.core.units import format_time

from models.dmabuf.core import (DmaBuf, DmaBufAttachment, DmaBufCore, DmaBufOps, DmaDataDirection, Placement,
                                Segments, SgTable)
from models.dmabuf.exporters import _Exporter
from models.dmabuf.ops import dma_buf_move_notify
from models.dmabuf.resv import DmaResvUsage, dma_resv_wait_timeout

UNMAP_BOUND_PS = PS_PER_S
"""How long the exporter waits for the importers' unmaps before it WARNs: VFIO's ``secs_to_jiffies(1)`` (ps)."""
BROKEN_IMPORTER = "Timed out waiting for DMABUF unmap, importer has a broken invalidate_mapping()"
"""VFIO's WARN when an importer has not unmapped within the bound."""


def dma_buf_attach_revocable(attach: DmaBufAttachment) -> bool:
    """``dma_buf_attach_revocable``: the importer provides ``invalidate_mappings``, so it unmaps in bounded time
    after a revocation (the pinned RDMA importers have no op from 7.1; the revocable ones have one).

    :raises ProtocolError: the kernel predates 7.1 (no such function).
    """
    config = attach.dmabuf.core.config
    if not config.behaviour.has_attach_revocable:
        raise ProtocolError(f"dma_buf_attach_revocable does not exist in kernel {config.version} (added in 7.1)")
    return attach.importer_ops is not None and attach.importer_ops.move_notify is not None


@dataclass
class Revocation:
    """What one revocation did and when (ps)."""

    started_ps: int
    fences_done_ps: int = 0
    """When the BOOKKEEP fences had signaled (the importers' hardware access is over)."""
    waited_for: list[str] = field(default_factory=list)
    """Importers still mapped when the fences had signaled."""
    unmapped_ps: int | None = None
    """When the last importer unmapped; None while one still maps the buffer."""
    warned: list[str] = field(default_factory=list)
    """Importers named by the WARN (still mapped at the bound)."""
    broken_promises: list[str] = field(default_factory=list)
    """Revocable importers still mapped at the bound: each broke the bounded-time promise."""
    left_mapped: list[str] = field(default_factory=list)
    """Importers still mapped when an exporter that does not wait (before 7.1) returned."""
    unmapped: Any = field(default=None, repr=False)
    """The simpy event the last unmap triggers, while the exporter waits for it."""

    @property
    def done(self) -> bool:
        """Every importer has unmapped: no access to the memory can happen any more."""
        return self.unmapped_ps is not None


class RevocableExporter(_Exporter):
    """Device memory (peer MMIO, a PCI BAR) exported as a dma-buf that never moves and can be revoked; the
    profiles below say which importers attach and whether a revocation waits.

    :param core: the dma-buf core to export through.
    :param size: buffer size in bytes.
    :param name: the exporter's context.
    :param invariants: ``raise`` (default) or ``record`` (into ``violations``) a broken bounded-time promise.
    """

    call_prefix = "revocable"
    """The driver's function names start so (``<prefix>_attach``, ``_map``, ``_pin``)."""
    revoke_call = "revoke"
    """The driver function that revokes."""
    warns_at_bound = False
    """The driver WARNs when an importer has not unmapped within the bound."""

    def __init__(self, core: DmaBufCore, size: int, *, name: str, invariants: str = "raise") -> None:
        self.core = core  # the profile's choice of ops depends on the kernel
        self.revoked = False
        self.invariants = invariants
        self.violations: list[str] = []
        self.revocations: list[Revocation] = []
        pin = {"pin": self._pin, "unpin": self._unpin} if self.refuses_pinned_at_pin() else {}
        ops = DmaBufOps(map_dma_buf=self._map, unmap_dma_buf=self._unmap, release=self._release, attach=self._attach,
                        **pin)
        super().__init__(core, size, ops, name, Placement.VRAM)

    def refuses_pinned_at_pin(self) -> bool:
        """The exporter has a pin op that refuses every pinned importer (instead of refusing at attach)."""
        return True

    def waits(self) -> bool:
        """A revocation waits for the fences and the unmaps before it returns."""
        return True

    def _attach(self, dmabuf: DmaBuf, attach: DmaBufAttachment) -> None:
        """Peer MMIO needs a peer-to-peer importer."""
        if not attach.peer2peer:
            raise VerbsError("EOPNOTSUPP", f"{attach.dev} cannot reach MMIO (no peer2peer)",
                             call=f"{self.call_prefix}_attach")

    def _pin(self, attach: DmaBufAttachment) -> None:
        """No pinned importer, since none could be revoked."""
        raise VerbsError("EOPNOTSUPP", f"{self.name} refuses pinned importers (they cannot handle a revocation)",
                         call=f"{self.call_prefix}_pin")

    def _unpin(self, attach: DmaBufAttachment) -> None:
        """Nothing was pinned."""

    def _map(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments:
        """``ENODEV`` once revoked."""
        if self.revoked:
            raise VerbsError("ENODEV", f"{self.dmabuf.name} was revoked", call=f"{self.call_prefix}_map")
        return super()._map(attach, direction)

    def _unmap(self, attach: DmaBufAttachment, sgt: SgTable, direction: DmaDataDirection) -> None:
        """The revocation waiting for the unmaps completes with the last one (the driver's kref and completion)."""
        waiting = self.revocations[-1] if self.revocations and not self.revocations[-1].done else None
        if waiting is not None and waiting.unmapped is not None and not self.mapped_by(exclude=sgt):
            waiting.unmapped_ps = self.core.now_ps(self.core.context(None, attach.dev))
            waiting.unmapped.succeed()

    def mapped_by(self, exclude: SgTable | None = None) -> list[str]:
        """The importers holding a live mapping (``exclude`` aside: the one being unmapped)."""
        return sorted({a.dev for a in self.dmabuf.attachments for m in a.mappings if m is not exclude})

    def revoke(self, unmap_bound_ps: int = UNMAP_BOUND_PS) -> Generator:
        """A revocation as a simpy process (``env.process(exporter.revoke())``) whose value is the
        :class:`Revocation`: :meth:`start_revocation`, then :meth:`wait_unmapped`."""
        revocation = self.start_revocation()
        yield from self.wait_unmapped(revocation, unmap_bound_ps)
        return revocation

    def start_revocation(self) -> Revocation:
        """The locked part of a revocation, at once: lock, mark revoked, invalidate, wait for the BOOKKEEP fences
        (when :meth:`waits`), unlock. The returned record's ``waited_for`` lists the importers still mapped.

        :raises ProtocolError: already revoked, or the buffer was released.
        :raises DeadlockError: the lock is held.
        """
        buf, ctx = self.dmabuf, self.name
        if self.revoked or buf.released:
            raise ProtocolError(f"{ctx}: {buf.name} is already {'revoked' if self.revoked else 'released'}")
        revocation = Revocation(self.core.now_ps(ctx))
        self.revocations.append(revocation)
        waits = self.waits()
        with self.core.call(ctx, self.revoke_call, dmabuf=buf.name, revoked=True):
            buf.resv.lock(ctx)
            self.revoked = True
            dma_buf_move_notify(buf, caller=ctx)
            if waits:
                self.core.wait_until(ctx, dma_resv_wait_timeout(buf.resv, DmaResvUsage.BOOKKEEP,
                                                                now_ps=self.core.now_ps(ctx)))
            revocation.fences_done_ps = self.core.now_ps(ctx)
            buf.resv.unlock(ctx)
        mapped = self.mapped_by()
        if not waits:
            revocation.left_mapped = mapped
        elif mapped:
            revocation.waited_for = mapped
            revocation.unmapped = self.core.env.event()
            return revocation
        revocation.unmapped_ps = revocation.fences_done_ps
        self.core.instant(ctx, "BufferRevoked", dmabuf=buf.name, waited_ps=0, left_mapped=len(revocation.left_mapped))
        return revocation

    def wait_unmapped(self, revocation: Revocation, unmap_bound_ps: int = UNMAP_BOUND_PS) -> Generator:
        """Wait (a simpy process's steps) for the importers of ``revocation`` to unmap: ``unmap_bound_ps``, then a
        WARN naming who still maps, then on without bound.

        :raises InvariantViolation: a revocable importer had not unmapped at the bound (``invariants="raise"``).
        """
        if revocation.done or revocation.left_mapped:
            return
        env = self.core.env
        yield env.timeout(max(0, revocation.fences_done_ps - env.now))
        yield env.any_of([revocation.unmapped, env.timeout(unmap_bound_ps)])
        if not revocation.done:
            self._past_bound(revocation, unmap_bound_ps)
            yield revocation.unmapped
        self.core.instant(self.name, "BufferRevoked", dmabuf=self.dmabuf.name,
                          waited_ps=revocation.unmapped_ps - revocation.fences_done_ps)

    def _past_bound(self, revocation: Revocation, bound_ps: int) -> None:
        """The bound passed with importers still mapped: WARN naming them (when the driver does); a revocable one
        broke its promise."""
        revocation.warned = self.mapped_by()
        if self.warns_at_bound:
            self.core.warn(self.name, f"{self.revoke_call}: WARN: {BROKEN_IMPORTER}: {', '.join(revocation.warned)} "
                           f"still mapped {self.dmabuf.name} {format_time(bound_ps)} after the invalidation")
        revocable = {a.dev for a in self.dmabuf.attachments if a.importer_ops is not None
                     and a.importer_ops.move_notify is not None}
        revocation.broken_promises = [dev for dev in revocation.warned if dev in revocable]
        if not revocation.broken_promises:
            return
        op = self.core.config.behaviour.invalidate_name
        message = (f"unbounded revocation of {self.dmabuf.name}: {', '.join(revocation.broken_promises)} (revocable: "
                   f"it has {op}) still mapped it {format_time(bound_ps)} after the invalidation; the contract asks "
                   f"every importer with {op} to unmap in bounded time")
        if self.invariants == "raise":
            raise InvariantViolation(message)
        self.violations.append(message)


class VfioExporter(RevocableExporter):
    """A PCI BAR exported by vfio-pci (``VFIO_DEVICE_FEATURE_DMA_BUF``, drivers/vfio/pci/vfio_pci_dmabuf.c): from 7.1
    attach admits only revocable importers and a revocation waits (WARNing at the bound, as v5 of the series did);
    before, a pin op refuses pinned importers and a revocation does not wait."""

    call_prefix = "vfio_pci_dma_buf"
    revoke_call = "vfio_pci_dma_buf_move"
    warns_at_bound = True

    def __init__(self, core: DmaBufCore, size: int, *, name: str = "vfio0", invariants: str = "raise") -> None:
        super().__init__(core, size, name=name, invariants=invariants)

    def refuses_pinned_at_pin(self) -> bool:  # noqa: D102 - see RevocableExporter
        return not self.core.config.behaviour.has_attach_revocable

    def waits(self) -> bool:  # noqa: D102 - see RevocableExporter
        return self.core.config.behaviour.has_attach_revocable

    def _attach(self, dmabuf: DmaBuf, attach: DmaBufAttachment) -> None:
        """``vfio_pci_dma_buf_attach``: peer2peer, not revoked, and from 7.1 revocable."""
        super()._attach(dmabuf, attach)
        call = "vfio_pci_dma_buf_attach"
        if self.revoked:
            raise VerbsError("ENODEV", f"{dmabuf.name} was revoked", call=call)
        if self.core.config.behaviour.has_attach_revocable and not dma_buf_attach_revocable(attach):
            raise VerbsError("EOPNOTSUPP", f"{attach.dev} is not revocable (dma_buf_attach_revocable: no "
                             "invalidate_mappings op, so it would unmap only when user space lets go)", call=call)


class UverbsDmabufExporter(RevocableExporter):
    """NIC device memory (``ibv_alloc_dm``) exported by ``ibv_dm_export_dmabuf_fd``: the uverbs dma-buf object
    (drivers/infiniband/core/uverbs_std_types_dmabuf.c, "RDMA/uverbs: Add DMABUF object type and operations", 7.0).
    Attach needs peer2peer, pin refuses every pinned importer, a revoked buffer maps with ``ENODEV``; removing the
    memory (``ibv_free_dm``) revokes: lock, invalidate, wait for the fences, unlock, wait for every unmap (without a
    WARN: the simulator still checks the contract's bound)."""

    call_prefix = "uverbs_dmabuf"
    revoke_call = "uverbs_dmabuf_fd_destroy_uobj"

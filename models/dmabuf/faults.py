"""A fault-injecting exporter for testing an importer's ``move_notify`` / ``invalidate_mappings``.

:class:`FaultInjector` wraps the ops of any exported buffer (the reference exporters, the GPU profiles, VFIO) and
is scripted from Python or from a scenario's ``exporter-fault`` events:

* :meth:`~FaultInjector.delay_map`: the next maps take longer (the importer waits with the lock held);
* :meth:`~FaultInjector.block_map`: the next map never returns: the importer hangs holding the lock
  (:class:`~sim.core.UnboundedWait` names it);
* :meth:`~FaultInjector.fail_map_after_invalidate`: after the next invalidation, maps fail with an errno;
* :meth:`~FaultInjector.invalidate_and_hold`: invalidate, then sleep holding the reservation lock (a re-map waits
  until the exporter wakes; one that never wakes is a :class:`~sim.core.DeadlockError` naming the holder);
* :meth:`~FaultInjector.hold_lock`: the same without the invalidation;
* :meth:`~FaultInjector.move`: move the buffer now (a scenario event gives the exact instant).

What an importer does wrong then is named by the checks already in the model: DMA through a mapping of a moved
buffer by ``check_dma`` (stale access, :class:`~sim.core.InvariantViolation`), a lock that can never be taken by
the reservation lock (deadlock), a wait that never ends by :class:`~sim.core.UnboundedWait`, a revocable importer
that does not unmap in time by :class:`~models.dmabuf.revoke.VfioExporter`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.core import ProtocolError, UnboundedWait, VerbsError, format_duration
from sim.core.units import format_time

from models.dmabuf.core import DmaBuf, DmaBufAttachment, DmaDataDirection, Placement, Segments
from models.dmabuf.ops import dma_buf_move_notify


@dataclass
class _MapFault:
    """One scripted behaviour of the next ``count`` maps (None: every map)."""

    kind: str
    """``delay``, ``block`` or ``fail``."""
    count: int | None
    delay_ps: int = 0
    errno: str = ""
    after_invalidations: int = 0
    """It applies once the buffer has seen more invalidations than this."""


class FaultInjector:
    """Scripted faults in the exporter of ``dmabuf`` (its ops are wrapped in place; one injector per buffer).

    :param dmabuf: an exported buffer.
    """

    def __init__(self, dmabuf: DmaBuf) -> None:
        if dmabuf.released:
            raise ProtocolError(f"FaultInjector: {dmabuf.name} was released")
        self.dmabuf = dmabuf
        self.core = dmabuf.core
        self.ctx = dmabuf.exp_name
        """The exporter's context: invalidations and lock holds run in it."""
        self._map_ops = dmabuf.ops.map_dma_buf
        self._faults: list[_MapFault] = []
        self.injected: list[str] = []
        """What the injector did, oldest first (for event logs and tests)."""
        dmabuf.ops = replace(dmabuf.ops, map_dma_buf=self._map)

    # ---------------------------------------------------------------------------------------- scripting
    def delay_map(self, delay_ps: int, count: int | None = 1) -> None:
        """The next ``count`` maps (None: all) take ``delay_ps`` longer."""
        self._faults.append(_MapFault("delay", count, delay_ps=delay_ps))

    def block_map(self, count: int | None = 1) -> None:
        """The next ``count`` maps never return."""
        self._faults.append(_MapFault("block", count))

    def fail_map_after_invalidate(self, errno: str = "ENOMEM", count: int | None = 1) -> None:
        """After the buffer's next invalidation, the next ``count`` maps fail with ``errno``.

        :raises ValueError: an unknown errno name.
        """
        VerbsError(errno, "checked")  # refuses names Linux does not have
        self._faults.append(_MapFault("fail", count, errno=errno, after_invalidations=self.dmabuf.invalidations))

    def invalidate_and_hold(self, hold_ps: int | None) -> int | None:
        """Take the lock, invalidate every importer's mappings, then sleep holding the lock for ``hold_ps`` (None:
        forever). Returns when the lock is free again (ps), None for never.

        :raises DeadlockError: the lock is held.
        """
        resv = self.dmabuf.resv
        with self.core.call(self.ctx, "FaultInjector.invalidate_and_hold", dmabuf=self.dmabuf.name):
            resv.lock(self.ctx)
            dma_buf_move_notify(self.dmabuf, caller=self.ctx)
            return self._sleep("invalidated its importers and sleeps holding it", hold_ps)

    def hold_lock(self, hold_ps: int | None) -> int | None:
        """Take the reservation lock and sleep holding it for ``hold_ps`` (None: forever); returns as
        :meth:`invalidate_and_hold`.

        :raises DeadlockError: the lock is held.
        """
        self.dmabuf.resv.lock(self.ctx)
        return self._sleep("sleeps holding it", hold_ps)

    def move(self, dst: Placement):
        """Move the buffer to ``dst`` now, through its exporter (which must be movable); returns the copy's fence.

        :raises ProtocolError: the exporter never moves its buffers.
        """
        mover = getattr(self.dmabuf.priv, "move", None)
        if mover is None:
            raise ProtocolError(f"FaultInjector.move: exporter {self.dmabuf.exp_name} never moves {self.dmabuf.name}")
        self.injected.append(f"moved to {dst.value}")
        return mover(dst)

    def wake(self) -> None:
        """End the exporter's sleep with the lock held (at its time), if it still holds it."""
        self.dmabuf.resv.wake(self.ctx)

    # ---------------------------------------------------------------------------------------- the wrapped op
    def _sleep(self, what: str, hold_ps: int | None) -> int | None:
        until = None if hold_ps is None else self.core.now_ps(self.ctx) + hold_ps
        self.dmabuf.resv.sleep_holding(self.ctx, until, f"{what} (injected fault)")
        self.injected.append(f"{what} {'forever' if hold_ps is None else f'for {format_time(hold_ps)}'}")
        return until

    def _due(self) -> _MapFault | None:
        """The fault the next map meets (used up by one map), or None."""
        fault = next((f for f in self._faults if self.dmabuf.invalidations > f.after_invalidations
                      or f.kind != "fail"), None)
        if fault is not None and fault.count is not None:
            fault.count -= 1
            if not fault.count:
                self._faults.remove(fault)
        return fault

    def _map(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments | None:
        fault = self._due()
        ctx = self.core.context(None, attach.dev)
        if fault is None:
            return self._map_ops(attach, direction)
        if fault.kind == "delay":
            self.core.spend(ctx, fault.delay_ps)
            self.injected.append(f"delayed a map by {attach.dev} by {format_time(fault.delay_ps)}")
            return self._map_ops(attach, direction)
        if fault.kind == "fail":
            self.injected.append(f"failed a map by {attach.dev} with {fault.errno}")
            raise VerbsError(fault.errno, "injected map failure after an invalidation", call="map_dma_buf")
        self.injected.append(f"blocked a map by {attach.dev}")
        held = f", holding {self.dmabuf.resv.name}" if self.dmabuf.resv.holder == ctx else ""
        raise UnboundedWait(f"map_dma_buf of {self.dmabuf.name} never returns (injected fault): {ctx} waits forever "
                            f"in dma_buf_map_attachment from {format_duration(self.core.now_ps(ctx))}{held}"
                            + ("" if ctx == attach.dev else f", mapping for {attach.dev}"))

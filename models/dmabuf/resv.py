"""``struct dma_resv``: the reservation lock of a dma-buf (a ww_mutex) and its fences.

The lock is owned by a named *context* (a string such as ``"mlx5_0"`` or ``"amdgpu"``) standing in for the
kernel task that holds it. Calls are synchronous and there is no other task to release a lock, so taking a
lock that is already held raises :class:`~sim.core.DeadlockError` whoever holds it: by the same context it
is a self-deadlock, by another one the caller would wait forever. ww_mutex acquire contexts (``-EDEADLK``
back-off when locking several buffers) are not modelled.

Fences are plain records with the picosecond time at which they signal, so a waiter computes when its wait
ends instead of blocking.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from sim.core import DeadlockError, ProtocolError, VerbsError, format_duration


class ContextClocks(Protocol):
    """Per-context clocks a lock orders (:class:`~models.dmabuf.core.DmaBufCore` keeps them)."""

    def now_ps(self, ctx: str) -> int:
        """The time context ``ctx`` is at (ps)."""

    def wait_until(self, ctx: str, time_ps: int) -> None:
        """Make ``ctx`` idle until ``time_ps``."""

    def instant(self, ctx: str, name: str, **args: Any) -> None:
        """Trace event ``name`` on ``ctx``'s track."""


class DmaResvUsage(enum.IntEnum):
    """``enum dma_resv_usage``: waiting for one usage also waits for every lower (stronger) one."""

    KERNEL = 0
    """Memory management work (moves, clears): everyone must wait for these."""
    WRITE = 1
    """Implicit-sync writers."""
    READ = 2
    """Implicit-sync readers."""
    BOOKKEEP = 3
    """Tracked but never waited for implicitly."""


@dataclass(frozen=True, slots=True)
class DmaFence:
    """``struct dma_fence``: a point on timeline ``context`` that signals at ``signaled_at_ps``."""

    context: str
    seqno: int
    signaled_at_ps: int


@dataclass(eq=False)
class DmaResv:
    """Reservation object: a lock with an owner plus ``(fence, usage)`` pairs.

    :param name: names the lock in error messages (``"dmabuf3.resv"``).
    """

    name: str
    holder: str | None = None
    fences: list[tuple[DmaFence, DmaResvUsage]] = field(default_factory=list)
    core: ContextClocks | None = None
    """The dma-buf core whose per-context clocks the lock orders: a context that takes the lock continues no
    earlier than the previous holder released it. Lock and unlock are traced on the holder's track."""
    free_at_ps: int = 0
    """When the last holder released the lock (ps)."""
    sleep_until_ps: int | None = None
    """The holder sleeps with the lock held until then (:meth:`sleep_holding`); None: it does not sleep."""
    sleep_reason: str = ""
    """Why the holder sleeps with the lock held (said in a deadlock's message); empty: it does not sleep."""

    def lock(self, holder: str) -> None:
        """``dma_resv_lock``. A holder sleeping until a known time releases the lock when it wakes: ``holder`` (the
        sleeper too: it acts only once awake) waits until then and takes it.

        :raises DeadlockError: the lock is already held (by ``holder``: self-deadlock; by another context:
            a synchronous caller would wait forever, as it would for a holder that sleeps and never wakes).
        """
        if self.holder is not None and self.sleep_until_ps is not None:
            self.wake(self.holder)
        if self.holder == holder:
            raise DeadlockError(f"{self.name}: {holder} locks it again while holding it (ww_mutex self-deadlock)")
        if self.holder is not None:
            raise DeadlockError(f"{self.name}: {holder} would wait forever: held by {self.holder}"
                                + (f", which {self.sleep_reason} and never wakes" if self.sleep_reason
                                   else " and synchronous calls cannot block"))
        self.holder = holder
        if self.core is not None:
            self.core.wait_until(holder, self.free_at_ps)
            self.core.instant(holder, "LockAcquired", lock=self.name)

    def unlock(self, holder: str) -> None:
        """``dma_resv_unlock``.

        :raises ProtocolError: ``holder`` does not hold the lock.
        """
        if self.holder != holder:
            raise ProtocolError(f"{self.name}: unlocked by {holder} but held by {self.holder or 'nobody'} "
                                "(only the owner may release a ww_mutex)")
        self.holder, self.sleep_until_ps, self.sleep_reason = None, None, ""
        if self.core is not None:
            self.free_at_ps = self.core.now_ps(holder)
            self.core.instant(holder, "LockReleased", lock=self.name)

    def sleep_holding(self, holder: str, until_ps: int | None, reason: str) -> None:
        """``holder``, which holds the lock, sleeps with it until ``until_ps`` (None: forever); ``reason`` says why, in
        the words of a deadlock's message ("sleeps holding it ...").

        :raises ProtocolError: ``holder`` does not hold the lock.
        """
        dma_resv_assert_held(self, holder, "sleep_holding")
        self.sleep_until_ps, self.sleep_reason = until_ps, reason

    def wake(self, holder: str) -> None:
        """``holder``'s sleep with the lock held ends (at its time): it unlocks. Nothing when it no longer sleeps
        holding the lock (a waiter already took it), or sleeps forever."""
        if self.holder != holder or self.sleep_until_ps is None:
            return
        if self.core is not None:
            self.core.wait_until(holder, self.sleep_until_ps)
        self.unlock(holder)

    @property
    def blocks_forever(self) -> bool:
        """Someone holds the lock and a synchronous caller could only wait forever for it."""
        return self.holder is not None and self.sleep_until_ps is None

    def is_held_by(self, holder: str) -> bool:
        """True when ``holder`` owns the lock (what lockdep's ``dma_resv_assert_held`` checks)."""
        return self.holder == holder


def dma_resv_assert_held(resv: DmaResv, holder: str, call: str, rule: str = "") -> None:
    """lockdep's ``dma_resv_assert_held``: ``call`` needs ``holder`` to own ``resv``.

    :raises ProtocolError: naming ``call``, the actual holder and ``rule`` (the convention broken).
    """
    if not resv.is_held_by(holder):
        raise ProtocolError(f"{call}: lockdep: dma_resv_assert_held failed: {resv.name} is held by "
                            f"{resv.holder or 'nobody'}, not {holder}" + (f"; rule: {rule}" if rule else ""))


def dma_resv_add_fence(resv: DmaResv, fence: DmaFence, usage: DmaResvUsage, *, holder: str) -> None:
    """Publish ``fence`` with ``usage``; a fence of the same context and no stronger usage is replaced.

    Slot reservation (``dma_resv_reserve_fences``) is not modelled.

    :raises ProtocolError: ``holder`` does not hold the lock (lockdep ``dma_resv_assert_held``).
    """
    dma_resv_assert_held(resv, holder, "dma_resv_add_fence", "fences are added under the lock")
    resv.fences = [(f, u) for f, u in resv.fences
                   if not (f.context == fence.context and u >= usage and f.seqno <= fence.seqno)]
    resv.fences.append((fence, usage))


def dma_resv_wait_timeout(resv: DmaResv, usage: DmaResvUsage, *, now_ps: int, timeout_ps: int | None = None) -> int:
    """Wait from ``now_ps`` for every fence of ``usage`` or stronger; return the time the wait ends (ps).

    ``timeout_ps=None`` is ``MAX_SCHEDULE_TIMEOUT``. Interruption (``-ERESTARTSYS``) is not modelled.

    :raises VerbsError: ``ETIMEDOUT`` when a fence signals after ``now_ps + timeout_ps`` (the kernel returns 0
        and callers such as ``ib_umem_dmabuf_map_pages`` turn that into ``-ETIMEDOUT``).
    """
    done = max([now_ps] + [f.signaled_at_ps for f, u in resv.fences if u <= usage])
    if timeout_ps is not None and done - now_ps > timeout_ps:
        raise VerbsError("ETIMEDOUT", f"{resv.name}: {usage.name} fences signal at {format_duration(done)}, after "
                         f"the {format_duration(timeout_ps)} timeout", call="dma_resv_wait_timeout")
    return done

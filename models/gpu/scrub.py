"""Freed device memory that the driver clears before handing it out again, one free after another, and takes back
on the next allocation.

What an H200 and H100s showed (``calib/gpu_alloc/measure_scrub.py`` and ``measure_pause.py``, raw runs in
``calib/gpu_alloc/raw``, reduced to ``models/data/gpu_scrub.json`` and ``gpu_reclaim.json``):

* a free's memory comes back whole, ~3 ms per GiB after the free returns: after a 64 GiB free with 2 GiB to
  spare, allocations of 8, 32 and 62 GiB each waited the same ~195 ms, 0.1 s later ~92 ms;
* frees are cleared one after another: two 32 GiB frees, then 62 GiB at once, waited ~175 ms (side by side
  would be ~100 ms);
* an allocation waits only when the memory free and cleared is less than it asks, one 2 MiB page beyond its size
  (:data:`HEADROOM`): with room to spare, 8 GiB right after an 8 GiB free took 0.55 ms;
* the first allocation after a free's clearing ended takes that memory back, at ~0.2-0.3 ms per GiB, whatever its
  own size: 1 GiB took 0.14 ms right after freeing 8 and 32 GiB, 1.7 ms once the 8 GiB were cleared and 9 ms once
  all 40 were; the allocation after it pays nothing. Neither a kernel every millisecond nor a spinning thread
  through the pause removes the cost, and a pause with no free before it costs nothing: it follows the cleared
  memory, not an idle GPU or CPU. An allocation that waited for a free takes that free's memory back too.

* back-to-back allocate-then-free cycles of 8-32 GiB on H100s and an H200 (``measure_alternation.py``, reduced to
  ``gpu_alternation.json``) take their first slow call where the rule above says, but then wait neither for the
  clearing of the free being cleared nor for all of them: on an H100 ~34 ms at 8 GiB, ~68 at 16, ~165 at 32, on the
  H200 ~48 at 12 GiB, ~100 at 24, ~129 at 32 (a power of the size per GPU, :attr:`ScrubRates.slow_ps_at_GiB`),
  alternating with calls that do not wait, the same on four H100s. The model takes this slow path where the
  allocation would wait for the free being cleared alone while more frees wait behind it
  (:meth:`ScrubQueue.slow_path`); with one free pending, or where it needs more than that free (two 32 GiB frees,
  then 62 GiB), it waits for the clearing, as measured. Not modeled: the waits' dependence on the memory left free
  (16 GiB: 49-87 ms on both GPUs), and the first call of a case after a pause waiting up to 155 ms on the H200.

>>> q = ScrubQueue(ScrubRates(clear_ps_per_GiB=3_000_000_000, reclaim_ps_per_GiB=200_000_000))  # 3 and 0.2 ms
>>> q.freed(0, 2 * GiB)
>>> q.take(1_000_000_000, 2 * GiB, free_bytes=3 * GiB)  # 1 GiB free and cleared: waits, then takes 2 GiB back
(5000000000, 400000000)
>>> q.take(7_000_000_000, GiB, free_bytes=3 * GiB)  # nothing cleared since: no wait, nothing to take back
(0, 0)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

GiB = 1 << 30
HEADROOM = 2 << 20
"""What an allocation wants free and cleared beyond its size (bytes): one 2 MiB page, its page tables'. An H100 let
16 GiB through at once with 16 GiB + 2 MiB free and cleared, and waited with 16 GiB (``measure_headroom.py``)."""


@dataclass(frozen=True)
class ScrubRates:
    """How one GPU clears freed memory and takes it back (ps per GiB freed)."""

    clear_ps_per_GiB: int
    """Clearing time, one free after another."""
    reclaim_ps_per_GiB: int
    """What the next allocation pays to take back memory whose clearing has ended."""
    slow_ps_at_GiB: int | None = None
    """The driver's slow path (:meth:`ScrubQueue.slow_path`): what an allocation of 1 GiB waits there (None: no slow
    path; the allocation waits for the clearing)."""
    slow_exponent: float = 1.0
    """How the slow path's wait grows with the allocation: ``slow_ps_at_GiB * (bytes / GiB) ** slow_exponent``."""

    def slow_ps(self, nbytes: int) -> int:
        """The slow path's wait for an allocation of ``nbytes`` (ps)."""
        return round(self.slow_ps_at_GiB * (nbytes / GiB) ** self.slow_exponent)


SCRUB_PRESETS: dict[str, ScrubRates] = {"h200": ScrubRates(2_882_527_222, 285_880_192, 5_841_460_152, 0.91),
                                        "h100": ScrubRates(2_785_855_512, 261_011_822, 3_384_121_144, 1.11)}
"""Per GPU, fitted by ``calib/gpu_alloc/fit_pause.py`` (the taking back, to the allocations after a free's clearing
ended), ``fit_scrub.py`` (the clearing, to its ``sizes`` cases with the taking back known) and
``fit_alternation.py`` (the slow path, to the GPU's first run of back-to-back cycles, 8-32 GiB: beyond 32 GiB the
curve is extrapolated); ``tests/models/gpu/test_scrub.py`` re-fits them from the data."""


class ScrubQueue:
    """The frees of one GPU still being cleared, in the order they were made, and the memory cleared since the
    last allocation.

    :param rates: the GPU's clearing and taking-back rates.
    """

    def __init__(self, rates: ScrubRates) -> None:
        self.rates = rates
        self._pending: deque[tuple[int, int]] = deque()
        """(when its memory is cleared (ps), bytes) per free not yet cleared, oldest first."""
        self._cleared = 0
        """Bytes cleared and not yet taken back by an allocation."""

    def freed(self, now_ps: int, nbytes: int) -> None:
        """A free of ``nbytes`` returned at ``now_ps``: its clearing starts once the frees before it are cleared."""
        start = max(now_ps, self._pending[-1][0]) if self._pending else now_ps
        self._pending.append((start + nbytes * self.rates.clear_ps_per_GiB // GiB, nbytes))

    def take(self, now_ps: int, nbytes: int, free_bytes: int) -> tuple[int, int]:
        """An allocation of ``nbytes`` asked at ``now_ps`` with ``free_bytes`` free in all (frees still being
        cleared included): how long it waits for cleared memory, then what taking back the memory cleared by then
        costs it (ps each). It waits none while the free memory already cleared covers it, else until enough frees
        are cleared, each one's memory whole, or for the driver's slow path (:meth:`slow_path`); nor where even
        every free cleared would not cover it (the allocation fails). It takes back every free cleared by the end
        of its wait, so the next allocation takes back only what is cleared after."""
        self._take_back_until(now_ps)
        ready = self._covered(now_ps, nbytes, free_bytes)
        slow = self._slow(now_ps, ready)
        if slow:
            ready = now_ps + self.rates.slow_ps(nbytes)
        self._take_back_until(ready)
        reclaim = 0 if slow else self._cleared * self.rates.reclaim_ps_per_GiB // GiB  # (the slow path's own time)
        self._cleared = 0
        return ready - now_ps, reclaim

    def slow_path(self, now_ps: int, nbytes: int, free_bytes: int) -> bool:
        """Whether an allocation asked at ``now_ps`` (as :meth:`take`'s) takes the driver's slow path: it would wait
        for the free being cleared, which alone would cover it, while more frees wait behind that one. It then waits
        :meth:`ScrubRates.slow_ps` for its size instead, the taking back of what was cleared by then included
        (never where the rates have no slow path). The frees cleared by ``now_ps`` join the memory the next
        allocation takes back, as :meth:`take` counts them first."""
        self._take_back_until(now_ps)
        return self._slow(now_ps, self._covered(now_ps, nbytes, free_bytes))

    def _covered(self, now_ps: int, nbytes: int, free_bytes: int) -> int:
        """When enough frees are cleared to cover ``nbytes`` and the :data:`HEADROOM` (as much of it as is free at
        all): ``now_ps`` if they already are, or if even all of them would not."""
        wanted = min(nbytes + HEADROOM, free_bytes)
        usable, ready = free_bytes - sum(n for _, n in self._pending), now_ps
        for cleared_ps, n in self._pending:
            if usable >= wanted:
                break
            usable += n
            if usable >= wanted:
                ready = cleared_ps
        return ready

    def _slow(self, now_ps: int, ready: int) -> bool:
        """Whether waiting until ``ready`` (:meth:`_covered`) is waiting for the oldest pending free alone, with
        more behind it, under rates that have a slow path."""
        return (self.rates.slow_ps_at_GiB is not None and ready > now_ps and len(self._pending) > 1
                and ready == self._pending[0][0])

    def _take_back_until(self, when_ps: int) -> None:
        """The frees cleared by ``when_ps`` join the memory the next allocation takes back."""
        while self._pending and self._pending[0][0] <= when_ps:
            self._cleared += self._pending.popleft()[1]

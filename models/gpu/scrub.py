"""Freed device memory that the driver clears before handing it out again, one free after another.

What an H200 and an H100 showed (``calib/gpu_alloc/measure_scrub.py``, raw runs in ``calib/gpu_alloc/raw``,
reduced to ``models/data/gpu_scrub.json``), with a ballast allocation holding all but a known room:

* a free's memory comes back whole, ~3 ms per GiB after the free returns: after a 64 GiB free, allocations of
  8, 32 and 62 GiB each waited the same ~195 ms, 0.1 s later ~92 ms;
* frees are cleared one after another: two 32 GiB frees, then 62 GiB at once, waited ~175 ms (side by side
  would be ~100 ms);
* an allocation waits only when the memory free and cleared is less than it asks: with room to spare, 8 GiB
  right after an 8 GiB free took 0.55 ms.

Not modeled: after the GPU idles 50 ms or more an allocation costs 4-12 ms more; and back-to-back cycles of
16-64 GiB with memory to spare alternate slow and fast calls, which this queue does not reproduce
(``calib/gpu_alloc/README.md``).

>>> q = ScrubQueue(ps_per_GiB=3_000_000_000)  # 3 ms per GiB
>>> q.freed(0, 2 * GiB)
>>> q.wait_ps(1_000_000_000, 2 * GiB, free_bytes=3 * GiB)  # 1 GiB free and cleared: waits for the whole free
5000000000
>>> q.wait_ps(1_000_000_000, GiB, free_bytes=3 * GiB)  # enough cleared memory: no wait
0
"""

from __future__ import annotations

from collections import deque

GiB = 1 << 30

SCRUB_PRESETS: dict[str, int] = {"h200": 3_168_407_414, "h100": 3_040_901_575}
"""Clearing time per GiB freed (ps), fitted per GPU by ``calib/gpu_alloc/fit_scrub.py`` to its ``sizes`` cases
(one run each; ``tests/models/gpu/test_scrub.py`` re-fits them from the data)."""


class ScrubQueue:
    """The frees of one GPU still being cleared, in the order they were made.

    :param ps_per_GiB: clearing time per GiB freed (ps).
    """

    def __init__(self, ps_per_GiB: int) -> None:
        self.ps_per_GiB = ps_per_GiB
        self._pending: deque[tuple[int, int]] = deque()
        """(when its memory is cleared (ps), bytes) per free not yet cleared, oldest first."""

    def freed(self, now_ps: int, nbytes: int) -> None:
        """A free of ``nbytes`` returned at ``now_ps``: its clearing starts once the frees before it are cleared."""
        start = max(now_ps, self._pending[-1][0]) if self._pending else now_ps
        self._pending.append((start + nbytes * self.ps_per_GiB // GiB, nbytes))

    def wait_ps(self, now_ps: int, nbytes: int, free_bytes: int) -> int:
        """How long an allocation of ``nbytes`` asked at ``now_ps`` waits for cleared memory (ps), with
        ``free_bytes`` free in all (frees still being cleared included): none while the free memory already
        cleared covers it, else until enough frees are cleared, each one's memory whole. No wait either where even
        every free cleared would not cover it (the allocation fails)."""
        while self._pending and self._pending[0][0] <= now_ps:
            self._pending.popleft()
        usable = free_bytes - sum(n for _, n in self._pending)
        for cleared_ps, n in self._pending:
            if usable >= nbytes:
                break
            usable += n
            if usable >= nbytes:
                return cleared_ps - now_ps
        return 0

"""Two accelerations for blocks whose passes crawl. ``crawl`` (:attr:`sim.fast.Speedups.crawl`): a block of the
solver's smallest size whose passes still move their earliest disagreement later goes on passing past
``max_passes`` instead of keeping a few operations, which the next block would solve again with the same passes (8
streams crossing rails in ``rail_server.yaml``). ``tail_apart`` (:attr:`sim.fast.Speedups.tail_apart`): a block in
which a stream changes its steps stops passing once the slices before the change are settled and its tail alone
crawls on, so that later passes do not walk the changed steps again (a window of requests RNR-NAKed dozens of
times while their buffer is re-mapped, ``gpu_pressure.yaml``)."""

from __future__ import annotations

from collections.abc import Callable

from sim.fast.block_pass import SliceIn


def repeats(problem, slices: list[SliceIn], disagree: int, before: int | None,
            kept: Callable[[int], list[int]]) -> bool:
    """Whether stopping the block's passes now would make the next block repeat them: no slice is longer than
    the solver's smallest block (:attr:`sim.fast.solver.Problem.smallest_block`), so the next block could not be
    shorter, the passes still move the earliest disagreement later (``before``: the last pass's), and they
    would keep under a quarter of the block's operations (``kept``: per slice, were the passes to stop at a
    disagreement at a given time). Always False without the ``crawl`` acceleration."""
    if not problem.speedups.crawl or before is None or disagree <= before \
            or any(p.hi - p.lo > problem.smallest_block for p in slices):
        return False
    return 4 * sum(kept(disagree)) < sum(piece.hi - piece.lo for piece in slices)


def tail_crawls(problem, slices: list[SliceIn], disagree: int, before: int | None,
                kept: Callable[[int], list[int]]) -> bool:
    """Whether the slices that a later slice of the block continues (a stream that changes its steps) would be
    kept whole were the passes to stop at their earliest disagreement now (``disagree``) or at the last pass's
    (``before``): only the stream's tail still disagrees, and has for two passes (``kept``: per slice, at a
    disagreement). Always False without the ``tail_apart`` acceleration."""
    continued = [i - 1 for i, piece in enumerate(slices) if piece.joined]
    if not problem.speedups.tail_apart or before is None or not continued:
        return False
    return all(all(counts[i] == slices[i].hi - slices[i].lo for i in continued)
               for counts in (kept(disagree), kept(before)))

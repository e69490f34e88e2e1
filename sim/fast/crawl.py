"""The crawl acceleration (:attr:`sim.fast.Speedups.crawl`): a block of the solver's smallest size whose passes
still move their earliest disagreement later goes on passing past ``max_passes`` instead of keeping a few
operations, which the next block would solve again with the same passes (8 streams crossing rails in
``rail_server.yaml``)."""

from __future__ import annotations

from collections.abc import Callable

from sim.fast.block_pass import SliceIn


def repeats(problem, slices: list[SliceIn], disagree: int, before: int | None, kept: Callable[[], list[int]]) -> bool:
    """Whether stopping the block's passes now would make the next block repeat them: no slice is longer than
    the solver's smallest block (:attr:`sim.fast.solver.Problem.smallest_block`), so the next block could not be
    shorter, the passes still move the earliest disagreement later (``before``: the last pass's), and they
    would keep under a quarter of the block's operations (``kept``: per slice, were the passes to stop)."""
    if before is None or disagree <= before or any(p.hi - p.lo > problem.smallest_block for p in slices):
        return False
    return 4 * sum(kept()) < sum(piece.hi - piece.lo for piece in slices)

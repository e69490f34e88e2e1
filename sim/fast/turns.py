"""Claims made in a turn (:attr:`sim.core.steps.Claim.turn`): operation ``i`` makes its claim only once operation
``i - 1`` of its stream has made its own, whenever its head arrives (a send queue's requests reach the transmit
port in posting order).

The event engine parks an operation that arrives early and takes it up again at the picosecond the one before it
claims, right after that one; it then claims from its own head (``start = max(head, free)``). So the claim's
ordering key (:mod:`sim.fast.merge`) is the running maximum, in operation order, of the operations' own keys
(the time the claim is reached, then the position of the step that orders it): an operation that does not raise
that maximum is ordered right behind the one before it, at the later of their positions. Heads are left alone.
A stream whose steps never change reaches its turns in operation order anyway; a stream whose steps change
(:attr:`sim.fast.steps.Group.first`) may not, and this keeps the event engine's order across the change.
"""

from __future__ import annotations

import numpy as np

SPAN = 1 << 32
"""Larger than the spread of ordering positions (step indices, :data:`sim.core.interpreter.MODEL_EVENT`)."""


def turn_key(turn: str, server: int) -> tuple[str, str]:
    """The names under which a slice's output keeps each operation's ordering time and position at turn ``turn``
    on ``server`` (:attr:`sim.fast.block_pass.SliceOut.released`), for the operations after it (one operation
    may walk two QPs' turns of one name: a ping-pong's)."""
    return f"turn {turn} on {server}", f"turn {turn} on {server}: position"


def turn_order(wake: np.ndarray, wpos, seed: tuple[int, int] | None,
               passes: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ordering times and positions of claims reached at ``wake`` from position(s) ``wpos`` by consecutive
    operations of a stream, in a turn; ``seed``: the time and position of the operation before the first (None:
    there is none). With ``passes`` they are no claims but the ends of operations that make none in the turn
    (:attr:`sim.fast.solver.Problem.unclaimed`): one that ends before the operation ahead of it passed takes no
    part in the order (the event engine's interpreter keeps its ticket as passed early), so the next operation is
    ordered as behind the one ahead of it."""
    own = np.broadcast_to(np.asarray(wpos, np.int64), wake.shape)
    if not len(wake):
        return wake, own.copy()
    before = np.iinfo(np.int64).min if seed is None else seed[0]
    order = np.maximum.accumulate(np.concatenate(([before], wake)))
    raised = np.concatenate(([True], wake > order[:-1]))
    if passes:
        own = np.where(wake < order[:-1], -(SPAN // 2), own)
    positions = np.concatenate(([own[0] if seed is None else seed[1]], own))
    runs = np.cumsum(raised) * SPAN  # a run: an operation that raised the maximum and those ordered behind it
    return order[1:], (np.maximum.accumulate(positions + runs) - runs)[1:]

"""Claims that can never queue, proven from the pipeline's shape alone.

Walking a chain, keep lower bounds (ps) on how far consecutive operations ``i - 1``, ``i`` are apart:
``gap`` for their heads (``head_i - head_{i-1}``), ``tails`` for their tails, ``lead`` for ``head_i -
tail_{i-1}``. A FIFO server serving one position in operation order guarantees them: ``start_i >=
finish_{i-1} >= start_{i-1} + service``, so after a claim ``gap`` and ``tails`` are at least its service and
``lead`` at least its ``head_ps`` (latencies shift heads and tails alike, negative ones too). A claim whose
arrivals keep ``gap >= service_ps`` and ``lead >= tail_ps`` finds its server free for every operation but
the first (``head_i >= finish_{i-1}``): it is served on arrival, ``start = head`` (the first operation is
checked against the server's state when solved). Per-operation draws, gates, pools and shared servers make
no such promise: bounds are forgotten there.

>>> from sim.core.steps import Claim
>>> sorted(never_queue((Claim(0, 80), Claim(1, 50, 10), Claim(2, 90)), lambda server: True))
[1]
"""

from __future__ import annotations

from collections.abc import Callable

from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Mark, Rebase, Step, Wake

Bounds = tuple[int, int, int] | None
"""(gap, tails, lead) in ps, or None: nothing known."""


def never_queue(steps: tuple[Step, ...], alone: Callable[[int], bool]) -> set[int]:
    """Walk-order indices (:func:`sim.core.steps.walk_order`) of the claims that never wait for their server.

    :param alone: whether a server is one FIFO server without stalls, claimed from this one position only.
    """
    proven: set[int] = set()
    _walk(steps, None, alone, proven, [0])
    return proven


def calm_claims(servers, groups, positions: dict[int, set]) -> list[set[int]]:
    """Per group: :func:`never_queue` of its steps, where a server is alone when it is one FIFO server without
    stalls claimed from one pipeline position (``positions``: per server, the (group, walk index) pairs claiming
    it)."""
    def alone(i: int) -> bool:
        return len(positions[i]) == 1 and servers[i].count == 1 and not servers[i].stalls
    return [never_queue(g.steps, alone) for g in groups]


def _walk(steps, bounds: Bounds, alone, proven: set[int], index: list[int], varied: bool = False) -> bool:
    """``varied``: after a drawn delay, operations may reach servers out of order, which no bound survives;
    returns whether one came before the end of ``steps``."""
    for step in steps:
        here = index[0]
        index[0] += 1
        if isinstance(step, Fork):
            _walk(step.steps, bounds, alone, proven, index, varied)
        elif isinstance(step, Detour):  # from the head; after it the tail is a maximum no bound is kept for
            varied = _walk(step.steps, None if bounds is None else (bounds[0],) * 3, alone, proven, index, varied)
            bounds = None
        elif isinstance(step, Claim):
            bounds = None if varied or step.skipped_by else _claim(step, bounds, alone(step.server), proven, here)
            varied = varied or step.skipped_by is not None  # (an operation that skips it goes on from its arrival)
        elif isinstance(step, Rebase):
            bounds = None if bounds is None else (bounds[1] if step.from_tail else bounds[0],) * 3
        elif isinstance(step, Check) and step.holds:
            bounds = None  # a hold releases operations together (in their order)
        elif not (isinstance(step, (Wake, Check, Mark)) or (isinstance(step, Delay) and step.draws is None)):
            bounds = None  # drawn delays, waits and gates
            varied = varied or not isinstance(step, Gate)
    return varied


def _claim(step: Claim, bounds: Bounds, alone: bool, proven: set[int], here: int) -> Bounds:
    if not alone:
        return None
    if bounds is not None and bounds[0] >= step.service_ps and bounds[2] >= step.tail_ps:
        gap, tails, lead = bounds
        proven.add(here)  # head_i >= finish_{i-1} = max(head_{i-1} + service, tail_{i-1} + tail_ps)
        return gap, max(step.service_ps, min(gap, tails)), step.head_ps + min(gap - step.service_ps,
                                                                               lead - step.tail_ps)
    return step.service_ps, step.service_ps, step.head_ps

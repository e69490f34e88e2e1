"""What the vectorized core solves: the limits on its step lists, checked once before solving (:func:`check`),
and those that only the solve tells (:func:`check_posts`, :func:`unnumbered_tie`). Whatever passes them
:func:`sim.fast.solve` solves exactly; whatever does not is :class:`Unsolvable`, with the limit in words.

A :class:`~sim.core.steps.Check` that ``decides`` something from the run's history (a translation cache's hits, a
page fault, a lost frame) makes its steps unsolvable: the core knows no run-time decisions but holds. A gate, the
claim that releases it and a pool may not follow a drawn delay; a gate must be followed by a positive delay, then
a step that waits (a release cannot let a claim through at its own picosecond, which the event engine orders after
the releasing claim). Left to the caller: a gate passes operation ``i`` at the release of operation ``i - slots``,
the FIFO semaphore's answer while releases come in operation order, as one step list's do; a stream that changes
its steps must check them (:attr:`sim.fast.Finished.marks` has each labelled claim's time).
"""

from __future__ import annotations

import numpy as np

from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Mark, Rebase, Wake, waits
from sim.core.units import format_time
from sim.fast.deliveries import UNRANKED
from sim.fast.merge import tied_posts


class Unsolvable(ValueError):
    """Step lists the vectorized core does not solve: ``reason`` says which limit they pass, ``group`` whose
    steps do (None: no one group's)."""

    def __init__(self, reason: str, group: int | None = None) -> None:
        super().__init__(reason if group is None else f"group {group}: {reason}")
        self.reason, self.group = reason, group


def check(problem, walks: list) -> None:
    """Check a :class:`sim.fast.solver.Problem` (``walks``: each group's steps in walk order) against the limits.

    :raises Unsolvable: a pool shared or stalled, a stream that changes its steps other than by continuing a
        group of the same window and gates, a check the model decides at run time, a gate without its release,
        a gate not followed by a positive delay and a waiting step, a gate or release after a drawn delay.
    """
    for i, server in enumerate(problem.servers):
        uses = [(g, k) for g, ks in enumerate(problem.claim_steps) for k in ks if problem.step_server[g][k] == i]
        if server.count > 1 and (len(uses) > 1 or server.stalls or any(problem.varied[g][k] for g, k in uses)):
            raise Unsolvable(f"server {server.name}: a pool of {server.count} may serve one pipeline position "
                             "of one group, without stalls and before any drawn delay")
    for g, (group, walk) in enumerate(zip(problem.groups, walks)):
        before = problem.groups[g - 1] if g else None
        if problem.parallel[problem.round_of[g]] and group.first:
            raise Unsolvable("a stream running in parallel with others does not change its steps", g)
        if group.first and (before is None or before.ops != group.first or before.window != group.window
                            or problem.gates[g - 1] != problem.gates[g] or group.ops <= group.first):
            raise Unsolvable(f"continues from operation {group.first}: the previous group must end there, with "
                             "the same window and gates, and it must have operations of its own", g)
        if group.posts_while is not None and (group.first or problem.continued[g]):
            raise Unsolvable("a stream that posts for a while does not change its steps", g)
        skips = [k for k, s in enumerate(walk) if isinstance(s, Claim) and s.skipped_by]
        if skips and not all(isinstance(s, (Rebase, Delay, Mark, Wake)) or (isinstance(s, Claim) and s.skipped_by)
                             for s in walk[skips[0]:]):
            raise Unsolvable("claims some operations skip end the chain (only delays, rebases, marks and a wake "
                             "follow them: those that skip them number their later steps otherwise)", g)
        if (group.unsignaled or skips) and (problem.streams_meet or problem.unclaimed[g]):
            raise Unsolvable("operations that deliver no completion or skip a claim run as the only stream of "
                             "every round, in a stream that keeps its steps' turns", g)
        if group.unsignaled and group.posts_while is not None and problem.round_of[g] + 1 < len(problem.rounds):
            raise Unsolvable("a stream that posts for a while with completions some operations do not deliver "
                             "ends the run (those after its last delivered one still run past its end)", g)
        if group.first and before.unsignaled != group.unsignaled:
            raise Unsolvable("a continuation delivers completions as the stream it continues does", g)
        if len(set(problem.turn_keys[g])) != len(problem.turn_keys[g]):
            raise Unsolvable("a turn is claimed twice on one server by one operation", g)
        decided = next((s for s in walk if isinstance(s, Check) and s.decides), None)
        if decided is not None:
            raise Unsolvable(f"at its check '{decided.name}' the model decides at run time: {decided.decides}", g)
        labels = {c.label for c in problem.claims[g]}
        if set(problem.gates[g]) - labels or group.window < 1:
            raise Unsolvable("the window must be at least 1 and every gate needs its labelled claim", g)
        if not _gates_delayed(group.steps):
            raise Unsolvable("a gate must be followed by a positive delay, then by a claim that is not eager or a "
                             "check with a time (what a release lets through at its own picosecond would be "
                             "ordered after the releasing claim, against the ordering rule)", g)
        if any(problem.varied[g][k] for k, s in enumerate(walk)
               if isinstance(s, Gate) or (isinstance(s, Claim) and s.label in problem.gates[g])):
            raise Unsolvable("a gate and its release must come before any drawn delay (after one, operations may "
                             "reach them out of order)", g)


def check_posts(problem, group: int, lo: int, post: np.ndarray, start: int) -> None:
    """Operations ``lo..`` of ``group``, whose round started at ``start``, were posted at ``post``.

    :raises Unsolvable: in a round of parallel streams, one that a completion posted at the start (after every
        stream's first posts).
    """
    if problem.parallel[problem.round_of[group]]:
        later = post[max(0, problem.groups[group].window - lo):]
        if len(later) and later[0] == start:
            raise Unsolvable("an operation completes at its round's start and posts another then", group)


def unnumbered_tie(problem, claims, order: np.ndarray, server: int) -> tuple[int | None, tuple | None]:
    """Claims of parallel streams on one server that tie on time, ordering position and post time are ordered by
    their operations' numbers. The streams' first posts at their round's start are numbered stream by stream, as
    the event engine numbers them; the others by their ranks (:mod:`sim.fast.deliveries`), unless those tie too
    (deliveries created by walks at one time and position, in an order their own numbers decide) or do not fit.
    Returns the time (ps) of the earliest tie between two streams' operations posted after their round's start
    (None: none), and the earliest such tie that their ranks do not order, with why the core cannot solve it (None:
    none).
    """
    if not problem.streams_meet:
        return None, None
    first = tied_posts(claims, order)
    if not len(first):
        return None, None
    a, b = order[first], order[first + 1]
    group_a, group_b = problem.group_of_pos[claims.pos[a]], problem.group_of_pos[claims.pos[b]]
    later = claims.seq[a] - np.asarray(problem.seq_base)[group_a] >= problem.window_of[group_a]
    mixed = (problem.stream_of[group_a] != problem.stream_of[group_b]) & later
    if not mixed.any():
        return None, None
    rank_a, rank_b = claims.rank[a], claims.rank[b]
    unranked = mixed & ((rank_a == rank_b) | (rank_a == UNRANKED) | (rank_b == UNRANKED))
    earliest = int(claims.wake[a[np.argmax(mixed)]])  # ``order`` is by time
    if not unranked.any():
        return earliest, None
    k = int(np.argmax(unranked))
    wake, name = int(claims.wake[a[k]]), problem.servers[server].name
    return earliest, (wake, Unsolvable(f"parallel streams claim {name} at {format_time(wake)} with operations "
                                       f"posted at {format_time(int(claims.post[a[k]]))} by completions whose "
                                       "deliveries tie (made at one picosecond and step)", int(group_a[k])))


def _gates_delayed(steps) -> bool:
    """Whether every gate in ``steps`` (forks included) is followed by a positive delay and then by a step that
    waits (a claim that is not eager, a check with a time) before any other claim or check: what a release lets
    through then reaches its next claim after the releasing claim, in time."""
    after = None  # None: no gate pending; False: a gate, no positive delay yet; True: delayed
    for step in _inline(steps):
        if isinstance(step, Fork) and not _gates_delayed(step.steps):
            return False
        if isinstance(step, Gate):
            after = False
        elif after is None or isinstance(step, (Rebase, Mark, Fork)) or (isinstance(step, Check)
                                                                        and step.back_ps is None):
            continue
        elif isinstance(step, Delay):
            after = after or step.ps > 0
        elif not after or not waits(step):  # not waiting here: an eager claim
            return False
        else:
            after = None
    return True


def _inline(steps):
    """``steps`` with each :class:`~sim.core.steps.Detour` replaced by its own steps (it is part of the chain)."""
    for step in steps:
        if isinstance(step, Detour):
            yield from _inline(step.steps)
        else:
            yield step

"""Solve streams of operations through FIFO pipelines, block by block, exactly.

A block of consecutive operations is solved by repeated passes (:class:`sim.fast.block_pass.Pass`), each taking
guesses for what the block itself determines later (posts released by completions ``window`` operations back,
gate releases, claims of later positions on shared servers) and recomputing them (guesses: :mod:`sim.fast.block`).
A pass that reproduces its guesses is consistent: every value depends only on values no later than itself. Where
claims tie at one picosecond, more than one consistent answer may exist; from the guesses of
:mod:`sim.fast.guesses` (idle latencies: from below) the passes reach the event engine's, which the properties
against its interpreter hold (tests/sim/fast/test_pipelines.py).

A round's parallel streams (:attr:`sim.fast.steps.Group.parallel`) are solved together, a slice of each per block.
A block keeps the operations whose every claim precedes the next block's earliest post (later ones may still be
overtaken on a shared server); the next block starts each stream at the first one not kept, and what a server still
owes kept operations after that time is carried over as pending claims. Passes that disagree after ``max_passes``
keep what precedes the earliest disagreement, and the next block takes at most twice what a stream kept; passes
that keep nothing are doubled. Past one pass per operation of the block, doubled passes that leave their earliest
disagreement where half as many left it make the block :class:`Unsolvable` (a claim reached at the picosecond a
completion posts its operation flips between two orders from pass to pass); passes that still move it later go on
up to one per value of the block a pass recomputes (a post, a gate's release, a claim's time, its completion: each
pass settles at least the earliest that disagrees).

Nothing is approximated: claims on one server are served in the ordering rule's total order
(:mod:`sim.fast.merge`). What it solves is decided before solving (:mod:`sim.fast.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from copy import copy
from dataclasses import dataclass, replace
from itertools import accumulate

import numpy as np

from sim.core.steps import Claim, Gate, walk_order
from sim.fast.block import NEVER, solve_block
from sim.fast.limits import Unsolvable, check, check_posts
from sim.fast.spacing import calm_claims
from sim.fast.turns import turn_key
from sim.fast.speedups import ALL, NoHints, Speedups
from sim.fast.steps import Group, Server, after_draws, claim_wpos, tail_draws
from sim.fast.block_pass import Carry, SliceOut
from sim.fast.pace import Paces
from sim.fast.state import History, State


@dataclass(frozen=True)
class Finished:
    """Final times of operations ``lo..lo+len(post)-1`` of group ``group`` (ps)."""

    group: int
    lo: int
    post: np.ndarray
    done: np.ndarray
    marks: dict[str, np.ndarray]
    """Per label: each operation's wake at that :class:`~sim.core.steps.Check`, or when it made that
    :class:`~sim.core.steps.Claim`."""
    next_post: int
    """When the next operation solved is posted (ps; ``NEVER`` after the last): no later operation claims or
    marks anything before it."""


class Problem:
    """Groups and servers with every pipeline position numbered (see :func:`solve`)."""

    def __init__(self, servers: Sequence[Server], groups: Sequence[Group], speedups: Speedups = ALL) -> None:
        self.servers, self.groups, self.speedups = list(servers), list(groups), speedups
        self.walks = walks = [walk_order(g.steps) for g in self.groups]
        """Per group: its steps in walk order (a pipeline position is the group's base plus an index)."""
        self.claim_steps = [[k for k, s in enumerate(w) if isinstance(s, Claim)] for w in walks]
        """Per group: the walk-order index of each claim (a pipeline position is group base + index)."""
        self.claims = [[w[k] for k in ks] for w, ks in zip(walks, self.claim_steps)]
        self.step_server = [{k: w[k].server for k in ks} for w, ks in zip(walks, self.claim_steps)]
        self.tail_draws = [tail_draws(g.steps) for g in self.groups]
        """Per group: the drawn delays after its last claim (see :func:`sim.fast.steps.tail_draws`)."""
        self.varied = [after_draws(g.steps) for g in self.groups]
        """Per group and walk step: a drawn delay comes before it (its operations may arrive out of order)."""
        positions = {}
        for g, ks in enumerate(self.claim_steps):
            for k in ks:
                positions.setdefault(self.step_server[g][k], set()).add((g, k))
        self.calm = calm_claims(self.servers, self.groups, positions) if speedups.calm else [set() for _ in groups]
        """Per group: walk-order indices of the claims that never queue, save perhaps the first of a block."""
        self.pos_base = np.cumsum([0] + [len(w) for w in walks]).tolist()
        self.claim_at = {self.pos_base[g] + k: w[k] for g, (w, ks) in enumerate(zip(walks, self.claim_steps))
                         for k in ks}
        """The claim at each pipeline position."""
        self.wpos_at = {self.pos_base[g] + k: w for g, group in enumerate(self.groups)
                        for k, w in claim_wpos(group.steps).items()}
        """The ordering position of each pipeline position's claims (:mod:`sim.fast.merge`)."""
        self.queued: dict = {} if speedups.hints else NoHints()
        """Per position (or ``("merged", server)``): whether its server needed the running maximum when last
        solved; then it is solved with it straight away (the answer is the same)."""
        self.paces = Paces()
        """What the pace acceleration keeps of each group from block to block (:mod:`sim.fast.pace`)."""
        self.continued = [bool(later.first) for later in self.groups[1:]] + [False]
        """Per group: the next group continues its stream (:attr:`sim.fast.steps.Group.first`)."""
        self.rounds: list[list[int]] = []
        """Groups that start at one instant: a stream, the streams parallel to it, and their continuations."""
        for g, group in enumerate(self.groups):
            if g == 0 or not (group.first or group.parallel):
                self.rounds.append([])
            self.rounds[-1].append(g)
        self.round_of = [r for r, members in enumerate(self.rounds) for _ in members]
        self.parallel = [sum(not self.groups[k].first for k in members) > 1 for members in self.rounds]
        """Per round: it has several streams."""
        self.streams_meet = any(self.parallel)
        """Some round has several streams (only then may their claims tie in an order the core does not know)."""
        firsts = [g.first for g in self.groups] + [0]
        self.seq_base = (np.cumsum([0] + [g.ops - g.first for g in self.groups]) - firsts).tolist()
        """Per group: the event-sequence number of its operation 0 (a continuation's numbers follow on)."""
        self.gates = [{s.release: s.slots for s in w if isinstance(s, Gate)} for w in walks]
        turns = [[(s.turn, s.server) for s in w if isinstance(s, Claim) and s.turn] for w in walks]
        self.turn_keys = [[name for t in mine for name in turn_key(*t)] for mine in turns]
        """Per group: the names under which its claims in turns keep their ordering keys (:mod:`sim.fast.turns`)."""
        stream = list(accumulate((0 if g.first else 1 for g in self.groups), initial=-1))[1:]
        of_stream: dict[int, list] = {}
        for k, mine in zip(stream, turns):
            of_stream.setdefault(k, []).extend(t for t in mine if t not in of_stream[k])
        self.unclaimed = [[t for t in of_stream[k] if t not in mine] for k, mine in zip(stream, turns)]
        """Per group: the turns of its stream its steps make no claim in; an operation's turn in each passes when its
        main chain ends (the event engine's interpreter passes such tickets then)."""
        self.stream_turn_keys = [[name for t in of_stream[k] for name in turn_key(*t)] for k in stream]
        """Per group: the names of every turn of its stream (a continuation's keys go on from the group before)."""
        self.stream_of = np.array(stream)
        """Per group: its stream (a continuation's is the group's before it)."""
        self.group_of_pos = np.repeat(np.arange(len(self.groups)), [len(w) for w in walks])
        """Per pipeline position: its group."""
        self.window_of = np.array([g.window for g in self.groups])
        """Per group: its window (the operations its stream posts at its round's start)."""
        self.keep = max([g.window for g in self.groups] + [s for gates in self.gates for s in gates.values()] + [1])
        """How many of a group's latest final values later posts and gates may need."""
        self.smallest_block = 2 * self.keep
        """The fewest operations per stream a block takes (where its streams have that many left)."""
        check(self, walks)


def solve(servers: Sequence[Server], groups: Sequence[Group], start_ps: int = 0, block: int = 16384,
          max_passes: int = 8, speedups: Speedups = ALL, resume: State | None = None,
          save: Callable[[State], None] | None = None) -> Iterator[Finished]:
    """Solve every operation of ``groups`` (run one round after the other from ``start_ps``, the parallel
    streams of a round together) through ``servers``, with the accelerations ``speedups`` names (none changes an
    answer); or, from ``resume`` (its problem's servers and groups are solved then), what is left.
    ``save`` is given the state before each block, once every piece before it was yielded.

    Yields :class:`Finished` pieces, each group's in operation order; memory stays proportional to ``block``
    per stream.

    :raises Unsolvable: also where claims of parallel streams on one server tie on time and on their operations'
        post time after their round's start, and so do the walks that made those completions' deliveries
        (:func:`sim.fast.limits.unnumbered_tie`).
    """
    problem, active, ended, start, carry, history, spanned, size = resume or begin(
        Problem(servers, groups, speedups), start_ps)
    smallest = problem.smallest_block
    passes, reach, reached = max_passes, 1, NEVER
    while active:
        if save is not None:
            save(State(problem, dict(active), list(ended), dict(start), [copy(c) for c in carry], dict(history),
                       dict(spanned), size))
        spans = _slices(problem, active, size, reach)
        for g, _, hi in spans:
            spanned[int(problem.stream_of[g])] = max(spanned.get(int(problem.stream_of[g]), 0), hi)
        timed = any(problem.groups[g].posts_while for g, _, _ in spans)
        before = [(c.free_at, c.pending, c.free) for c in carry] if timed else None
        outs, kept, disagree = solve_block(problem, spans, carry, history, start, passes, max(ended, default=None))
        agreed = disagree == NEVER
        cut = _cut(problem, spans, outs, disagree, start) if timed else None
        if cut:  # solved again without the operations never posted, which may have delayed the ones before
            for c, (free_at, pending, free) in zip(carry, before):
                c.free_at, c.pending, c.free = free_at, pending, free
            g, ops = cut
            problem.groups[g] = replace(problem.groups[g], ops=ops, posts_while=None)
            if problem.groups[g].ended is not None:
                problem.groups[g].ended(ops)
            if active.get(g) == ops:  # every operation posted was kept by earlier blocks
                del active[g]
                ended.append(history.pop(g).end)
                if not active and problem.round_of[g] + 1 < len(problem.rounds):  # the next round starts
                    start.update(dict.fromkeys(problem.rounds[problem.round_of[g] + 1], max(ended)))
                    active, ended = _heads(problem, problem.round_of[g] + 1), []
            continue
        total = sum(hi - first for _, first, hi in spans)
        if not any(kept):  # nothing final: more passes if they disagreed, else a longer block
            values = sum((hi - lo) * (2 + len(problem.claims[g]) + len(problem.gates[g])) for g, lo, hi in spans)
            if not agreed and passes > total + max_passes and (disagree <= reached or passes > values + max_passes):
                raise Unsolvable(f"passes over {total} operations from operation {spans[0][1]} do not agree: a "
                                 "claim is reached at the picosecond another operation's completion posts it, an "
                                 "order the vectorized core cannot settle", spans[0][0])
            passes, size, reach = (passes * 2, size, reach) if not agreed else (passes, 2 * size, reach + 1)
            reached = disagree
            continue
        size = max(smallest, 2 * size if agreed else min(size, 2 * max(kept)))
        size, passes, reach = min(size, max(block, smallest)), max_passes, 1
        for (g, first, _), out, n in zip(spans, outs, kept):
            if not n:
                continue
            _remember(problem, history, g, out, n)
            check_posts(problem, g, first, out.post[:n], start[g])
            for draws in problem.groups[g].draws.values():
                if hasattr(draws, "finished"):
                    draws.finished(first + n)
            active[g] = first + n
            if first + n == problem.groups[g].ops:
                done = history.pop(g, None)
                del active[g]
                if problem.continued[g]:  # the stream goes on
                    history[g + 1] = done
                    active[g + 1] = problem.groups[g + 1].first
                else:
                    ended.append(problem.groups[g].end_after(out.done, out.marks, n))
                if not active and problem.round_of[g] + 1 < len(problem.rounds):  # the next round starts
                    start.update(dict.fromkeys(problem.rounds[problem.round_of[g] + 1], max(ended)))
                    active, ended = _heads(problem, problem.round_of[g] + 1), []
            yield Finished(g, first, out.post[:n], out.done[:n], {k: v[:n] for k, v in out.marks.items()},
                           min((_post_of(problem, history, start, h, lo) for h, lo in active.items()), default=NEVER))


def begin(problem: Problem, start_ps: int) -> State:
    """The state before the first block: the first round's streams start at ``start_ps``, every server free."""
    carry = [Carry(free=[0] * s.count if s.count > 1 else None) for s in problem.servers]
    return State(problem, _heads(problem, 0), [], dict.fromkeys(problem.rounds[0], int(start_ps)), carry, {}, {},
                 problem.smallest_block)


def _cut(problem: Problem, spans, outs: list[SliceOut], disagree: int, start: dict[int, int]) -> tuple[int, int] | None:
    """A group whose posting stops (:attr:`Group.posts_while`) at an operation of a block, and how many it posts;
    None if none is known. Known once the block's passes agree up to the stop (``disagree``: where they did not):
    posts before it are final, and the same without the operations never posted, which come after it. Of several,
    the one that stops first: the operations never posted of the others, from later on, may still delay its own."""
    found = []
    for (g, lo, _), piece in zip(spans, outs):
        rule = problem.groups[g].posts_while
        if rule is not None and len(piece.post):
            begin = start.get(g, int(piece.post[0]))  # (a later round's start: its first post)
            refused = ~rule(piece.post, begin)
            if refused.any() and not rule(np.array([disagree]), begin)[0]:
                first = int(np.argmax(refused))
                if not lo + first:
                    raise Unsolvable("a stream that posts for a while posts at least its first operation", g)
                found.append((min(int(piece.post[first]), disagree), g, lo + first))
    return min(found)[1:] if found else None


def _heads(problem: Problem, r: int) -> dict[int, int]:
    """The first group of each stream of round ``r``, with its first operation (0)."""
    return {g: 0 for g in problem.rounds[r] if not problem.groups[g].first}


def _post_of(problem: Problem, history: dict[int, History], start: dict[int, int], group: int, lo: int) -> int:
    """When operation ``lo`` of ``group``, the next of its stream to be solved, is posted (ps)."""
    window = problem.groups[group].window
    return start[group] if lo < window else int(history[group].done[-window])


def _slices(problem: Problem, active: dict[int, int], size: int, reach: int) -> list[tuple[int, int, int]]:
    """Up to ``size`` operations of each stream from ``active`` (group -> next operation) on, within ``reach``
    levels: normally the current round's; more when a group's end cannot be final before its continuation or
    the next round is solved with it (its side chains still claim servers then). Many levels at once would make
    every shared server serve all their positions. Past ``reach``, the streams' continuations come too while the
    levels taken hold fewer operations than the smallest block: a stream cut into short groups (around lost
    frames) is solved in one block instead of one more level per block."""
    out: list[tuple[int, int, int]] = []
    level, budget, goes_on = list(active.items()), size, False
    while size > 0 and level and (reach > 0 or (goes_on and budget - size < problem.smallest_block)):
        spans = [(g, lo, min(problem.groups[g].ops, lo + size)) for g, lo in level]
        out += spans
        size -= max(hi - lo for _, lo, hi in spans)
        reach -= 1
        r = problem.round_of[level[0][0]]
        level, goes_on = [], False
        if all(hi == problem.groups[g].ops for g, _, hi in spans):
            level = [(g + 1, problem.groups[g + 1].first) for g, _, _ in spans if problem.continued[g]]
            goes_on = bool(level)
            if not level and r + 1 < len(problem.rounds):
                level = list(_heads(problem, r + 1).items())
    return out


def _remember(problem: Problem, history: dict[int, History], group: int, out: SliceOut, n: int) -> None:
    """Append the kept operations' values to the group's history (its latest ``problem.keep``)."""
    old = history.get(group)

    def tail(previous, new):
        new = new[-problem.keep:]
        return new if previous is None else np.concatenate((previous, new))[-problem.keep:]

    history[group] = History(tail(old and old.done, out.release[:n]),
                             {k: tail(old and old.released[k], v[:n]) for k, v in out.released.items()},
                             int(out.done[n - 1]), problem.groups[group].end_after(out.done, out.marks, n))
    problem.paces.last[group] = out.pace

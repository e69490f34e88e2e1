"""The pace acceleration (:attr:`sim.fast.Speedups.pace`): a group that queued throughout its last block is
assumed to keep that block's pace, so its next block's first guesses need no pass over free servers. The passes
that follow check the guesses as any others, so the pace changes how fast a block is solved, never its answer."""

from __future__ import annotations

import numpy as np

from sim.fast.block_pass import Record, SliceIn, SliceOut
from sim.fast.steps import after_draws
from sim.fast.deliveries import FIRST_DELIVERED
from sim.fast.pace_lanes import Pace
from sim.fast.guesses import guess_posts, tail


class Paces:
    """What the pace acceleration keeps of each group from block to block."""

    def __init__(self) -> None:
        self.last: dict[int, Pace | None] = {}
        """Per group: the pace of its last block that kept operations, where they nearly all queued."""
        self.idle_base: dict[int, dict[int, int]] = {}
        """Per group, once seen: its operations' time through the pipeline with every server free, less their
        last drawn delays, where that is one constant for the operations that deliver a completion (0) and one
        for those that do not (1, :attr:`sim.fast.steps.Group.unsignaled`) (ps)."""
        self.idle_claims: dict[int, dict[int, int]] = {}
        """Per group and shared position, once seen: the time from post to the claim with every server free,
        where that is one constant (ps)."""
        self.idle_gates: dict[int, dict[str, tuple[int, int]]] = {}
        """Per group and gate label, once seen: the times from post to the gate and from the gate to the slot's
        release with every server free, where each is one constant (ps)."""
        self.drawn: dict[int, bool] = {}
        """Per group, once seen: a drawn delay comes before one of its claims (its operations may reach them out of
        order, and no idle latency is one constant)."""


def record_pace(problem, slices: list[SliceIn], outs: list[SliceOut], kept: list[int]) -> None:
    """Keep the pace of each slice of a block whose kept operations nearly all queued (:func:`_record_pace`)."""
    if problem.speedups.pace:
        for piece, out, n in zip(slices, outs, kept):
            _record_pace(problem, piece, out, n)


def _record_pace(problem, piece: SliceIn, out: SliceOut, n: int) -> None:
    """Keep the pace of a slice whose ``n`` kept operations nearly all queued (99 %): the spacing of its ends, of
    its claims on shared servers and of its gates' releases, for its group's next block (lanes: :class:`Pace`)."""
    saturated = n > 1 and np.count_nonzero(out.done[:n] > out.post[:n] + piece.idle_done[:n]) >= 0.99 * n
    if not saturated:
        return
    lanes = _lanes(problem, piece, n)
    end = out.head[:n] - tail(problem, piece, slice(n)) if problem.tail_draws[piece.group] is not None \
        else out.done[:n]
    last, step = Pace.of([end], n, lanes)
    claims = {pos: Pace.of([r.wake[:n], r.head[:n], r.not_before[:n]], n, lanes)
              for pos, r in out.records.items() if pos in piece.shared}
    releases = {label: Pace.of([out.released[label][:n]], n, lanes) for label in problem.gates[piece.group]}
    out.pace = Pace((last[0], step[0]), claims, releases)


def record_idle(problem, piece: SliceIn) -> None:
    """Keep what a slice's pass over free servers gave where it is one constant for all its operations, as
    :func:`paced` needs it: the time through the pipeline less the last drawn delays, to each shared position,
    and to and after each gate (none where a drawn delay comes before a claim: its operations may arrive out of
    order)."""
    g, m = piece.group, piece.hi - piece.lo
    if not problem.speedups.pace or not m:
        return
    if g not in problem.paces.drawn:  # (the operations that skip a claim are a kind of their own)
        skips = any(claim.skipped_by for claim in problem.claims[g])
        varied = after_draws(problem.groups[g].steps, skips=False) if skips else problem.varied[g]
        problem.paces.drawn[g] = any(varied[k] for k in problem.claim_steps[g])
    if problem.paces.drawn[g]:
        return
    if problem.tail_draws[g] is not None:
        base, silent = piece.idle_done - tail(problem, piece), _silent(problem, piece)
        for kind in (0, 1):
            mine = base[silent == kind]
            if len(mine) and (mine == mine[0]).all():
                problem.paces.idle_base.setdefault(g, {})[kind] = int(mine[0])
    problem.paces.idle_claims.setdefault(g, {}).update(
        {pos: int(v[0]) for pos, v in piece.idle_claim.items() if (v == v[0]).all()})
    problem.paces.idle_gates.setdefault(g, {}).update(
        {label: (int(a[0]), int(b[0])) for label, (a, b) in piece.idle_gate.items()
         if (a == a[0]).all() and (b == b[0]).all()})


def paced(problem, piece: SliceIn) -> bool:
    """Whether a slice's first guesses can come from its group's pace alone, without a pass over free servers:
    the group queued throughout its last block; its idle latencies are known (a constant plus its last drawn
    delays, for the operations that deliver a completion and for those that do not, a constant to each shared
    position, and constants to and after each gate); and the slice's first posts are completions of earlier
    blocks."""
    g, paces = piece.group, problem.paces
    window, pace, idle_claims = problem.groups[g].window, paces.last.get(g), paces.idle_claims.get(g, {})
    idle_gates, known = paces.idle_gates.get(g, {}), paces.idle_base.get(g, {})
    kinds = (0,) if problem.groups[g].unsignaled is None else np.unique(_silent(problem, piece)).tolist()
    return (pace is not None and not piece.joined and all(kind in known for kind in kinds)
            and all(pos in pace.claims and pos in idle_claims for pos in piece.shared)
            and all(label in pace.releases and label in idle_gates for label in problem.gates[g])
            and piece.lo >= window and piece.hi - piece.lo > window)


def guesses_from_pace(problem, slices: list[SliceIn]) -> dict[int, Record] | None:
    """Where every slice of a block is :func:`paced`: each one's first guesses from its pace
    (:func:`guess_from_pace`) and their claims on shared servers; else None (a pass over free servers gives
    them)."""
    if not all(paced(problem, piece) for piece in slices):
        return None
    return {pos: rec for piece in slices for pos, rec in guess_from_pace(problem, piece).items()}


def guess_from_pace(problem, piece: SliceIn) -> dict[int, Record]:
    """Set a :func:`paced` slice's idle latencies (known constants plus its own drawn delays) and first guesses
    (:func:`~sim.fast.guesses.guess_posts` from its pace, its gates' releases at theirs); returns its claims on
    shared servers, which keep their pace."""
    g, m = piece.group, piece.hi - piece.lo
    base = problem.paces.idle_base[g]
    own = np.where(_silent(problem, piece) != 0, base.get(1, 0), base.get(0, 0)) if problem.groups[g].unsignaled \
        else base[0]
    piece.idle_done = np.add(tail(problem, piece), own, out=np.empty(m, np.int64))
    piece.idle_claim = {pos: np.full(m, problem.paces.idle_claims[g][pos], np.int64) for pos in piece.shared}
    for label, slots in problem.gates[g].items():  # a slot is released at the pace its releases kept
        to_gate, after = problem.paces.idle_gates[g][label]
        piece.idle_gate[label] = np.full(m, to_gate, np.int64), np.full(m, after, np.int64)
        if m > slots:
            piece.gate_input[label][slots:] = Pace.ahead(*problem.paces.last[g].releases[label], m - slots)[0]
    first = piece.hist_done[-problem.groups[g].window:]
    guess_posts(problem, piece, first, paced_ends(problem, piece))
    post = np.concatenate((first, piece.guess_post)) if piece.shared else None
    rank = np.concatenate((piece.hist_released[FIRST_DELIVERED][-len(first):], piece.guess_rank)) \
        if piece.shared and problem.streams_meet else post  # (else the posts stand in for the ranks: Pass._ranks)
    steady = problem.paces.last[g].claims
    return {pos: paced_record(problem, pos, piece, post, rank, steady[pos]) for pos in piece.shared}


def paced_ends(problem, piece: SliceIn) -> np.ndarray:
    """Where a saturated group's operations end if it keeps its pace, with the slice's own drawn delays (ps)."""
    ends = Pace.ahead(*problem.paces.last[piece.group].end, piece.hi - piece.lo)
    if problem.tail_draws[piece.group] is not None:
        ends += tail(problem, piece)
        if piece.lo:
            ends[0] = max(ends[0], piece.last_done)
    return ends


def paced_record(problem, pos: int, piece: SliceIn, post: np.ndarray, rank: np.ndarray, steady) -> Record:
    """The claims of position ``pos`` of the slice's operations posted at ``post`` with ranks ``rank`` that keep
    their pace ``steady`` (last values and spacings of wake, head and not_before)."""
    claim = problem.claim_at[pos]
    wake, head, not_before = Pace.ahead(*steady, len(post))
    return Record(claim.server, pos, piece.seq0, post, rank, wake, problem.wpos_at[pos], head, not_before,
                  claim.service(claim.skips(piece.draws)))


def _silent(problem, piece: SliceIn) -> np.ndarray:
    """Per operation of the slice: 1 where it delivers no completion (:attr:`sim.fast.steps.Group.unsignaled`)."""
    unsignaled = problem.groups[piece.group].unsignaled
    return piece.draws[unsignaled] if unsignaled else np.zeros(piece.hi - piece.lo, np.int64)


def _lanes(problem, piece: SliceIn, n: int) -> int:
    """The lanes of a slice's pace: its window (each completion posts the operation a window on), or its gates' slots
    where fewer; where some operations deliver no completion, the operations between its kept ones that do (a
    completion posts them all at once)."""
    group = problem.groups[piece.group]
    delivered = np.flatnonzero(_silent(problem, piece)[:n] == 0) if group.unsignaled else ()
    if len(delivered) > 2:
        return int(np.diff(delivered[-3:]).max())
    return min([group.window, *problem.gates[piece.group].values()])

"""One block of operations: passes until the guesses hold, then what to keep and what to carry over.

Guesses (see :mod:`sim.fast.solver`) come from the last pass: each operation's completion is the later of
its post plus its *idle latency* (its time through the pipeline with every server free, from a first pass
that takes them so) and, where the pass saw it queue, the completion the pass computed; posts follow
completions along the window's lanes. Gate releases are guessed the same way along the gate's lanes, and the
claims of later positions on a shared server move with their operation's post where they did not queue.
For the first guess of a block, a group whose previous block was saturated (nearly every operation queued)
is assumed to keep its pace: its operations end at that block's spacing plus their own drawn delays after the
last claim, and its claims on shared servers keep their spacing too (:class:`sim.fast.pace_lanes.Pace`). Such a
block needs no pass over free servers where the idle latencies are known constants (:func:`sim.fast.pace.paced`).

Typical pass counts: a saturated (bandwidth-bound) stream agrees after its first pass from the second block
on; a latency-bound stream after one pass over free servers plus the verifying one; a stream whose rounds
interact through a shared server (a small message's completion entry delaying the next round's read requests
on a PCIe link) advances by about one round per pass. A block of the smallest size whose passes still move the
disagreement later goes on passing while they would keep under a quarter of it: the next block would hold the same
operations and repeat the passes (8 streams crossing rails in ``rail_server.yaml``). A block in which a stream changes
its steps stops passing once only that stream's tail still disagrees: the next block solves the tail without walking
the changed steps (a window of requests RNR-NAKed dozens of times, ``gpu_pressure.yaml``). Times are int64 ps.
"""

from __future__ import annotations

import numpy as np

from sim.fast.merge import concat
from sim.fast.server import pool
from sim.fast.block_pass import LOW, NO_RELEASE, Carry, Pass, Record, SliceIn, SliceOut, gate_history, same_values
from sim.fast.chain import chained
from sim.fast.crawl import repeats, tail_crawls
from sim.fast.deliveries import FIRST_DELIVERED, KEYS
from sim.fast.guesses import guess_from_pass, lag_scan
from sim.fast.pace import guesses_from_pace, paced_ends, paced_record, record_idle, record_pace

NEVER = np.iinfo(np.int64).max


def solve_block(problem, spans, carry: list[Carry], history: dict, start: dict[int, int], max_passes: int,
                floor: int | None = None):
    """Solve the operations of ``spans`` ((group, lo, hi) triples) and update ``carry`` for the kept ones. A
    span of a later round than the first span's starts once that round's spans have ended, and no earlier
    than ``floor`` (the last completion of its streams that ended before the block).

    Returns (slice outputs, operations kept per slice, the earliest time the last pass disagreed with its
    guesses: :data:`NEVER` when the passes agreed).
    """
    shared = _shared_servers(problem, spans, carry)
    slices = _slices_in(problem, spans, history, start, shared, floor)
    previous = guesses_from_pace(problem, slices)
    if previous is None:
        run = Pass(problem, slices, carry, shared, {}, idle=True)
        previous = _guess(problem, slices, run.run(), run, idle=True)
    passes, before = 0, None
    while True:
        run = Pass(problem, slices, carry, shared, previous)
        outs = run.run()
        passes, disagree = passes + 1, _disagreement(problem, slices, outs, run)
        future = _next_post(problem, slices, outs)
        if disagree == NEVER:
            break
        def kept(at: int) -> list[int]:  # per slice, were the passes to stop at a disagreement at ``at``
            return _kept(slices, outs, min(future, at), False)
        if tail_crawls(problem, slices, disagree, before, kept) or (
                passes >= max_passes and not repeats(problem, slices, disagree, before, kept)):
            break
        previous = chained(problem, run, slices, outs, _guess(problem, slices, outs, run), disagree, before)
        before = disagree
    horizon = min(future, disagree)
    if run.tie is not None and run.tie[0] < horizon:  # later claims are solved again by the next block
        raise run.tie[1]
    # Without shared servers or drawn delays before claims, later operations never come first anywhere, unless
    # the stream goes on with other steps: a continuation's operations, posted by this block's completions, may
    # claim its servers from other positions before this block's last claims.
    continued = problem.continued[spans[-1][0]]
    alone = not continued and not shared and not any(problem.varied[g][k] for g, _, _ in spans
                                                     for k in problem.claim_steps[g])
    kept = _kept(slices, outs, horizon, everything=disagree == NEVER and alone)
    _carry_over(problem, slices, outs, kept, run, carry, future)
    record_pace(problem, slices, outs, kept)
    return outs, kept, disagree


def _shared_servers(problem, spans, carry: list[Carry]) -> dict[int, list[int]]:
    """Servers this block claims from more than one pipeline position (pending claims included), with the
    positions in the order a pass reaches them."""
    positions: dict[int, list[int]] = {}
    for g, _, _ in spans:
        for k, claim in enumerate(problem.claims[g]):
            positions.setdefault(claim.server, []).append(problem.pos_base[g] + problem.claim_steps[g][k])
    shared = {}
    for server, mine in positions.items():
        pending = carry[server].pending
        if len(mine) > 1 or (pending is not None and (pending.pos != mine[0]).any()):
            shared[server] = mine
    return shared


def _slices_in(problem, spans, history, start, shared, floor) -> list[SliceIn]:
    """The slices' known inputs, with placeholder guesses."""
    slices, first = [], problem.round_of[spans[0][0]]
    for i, (g, lo, hi) in enumerate(spans):
        later = problem.round_of[g] - first  # rounds after the block's first
        after = tuple(k for k, span in enumerate(spans) if later and problem.round_of[span[0]] == first + later - 1)
        group, hist, m = problem.groups[g], history.get(g), hi - lo
        back = min(lo, group.window)
        empty = np.empty(0, np.int64)
        gate_input = {}
        for label, slots in problem.gates[g].items():
            gate_input[label] = np.full(m, NO_RELEASE, np.int64)
            if hist is not None:  # a joined slice's come from the slice it continues
                gate_history(gate_input[label], hist.released[label], lo, hi, slots)
        joined = bool(i and group.first) and group.first == lo and spans[i - 1][0] == g - 1
        slices.append(SliceIn(
            g, lo, hi, problem.seq_base[g] + lo, floor if later == 1 else None if later else start[g],
            hist.done[len(hist.done) - back:] if back and hist is not None else empty,
            np.zeros(max(0, m - group.window), np.int64), np.zeros(max(0, m - group.window), np.int64),
            gate_input,  # (guessed posts and ranks: placeholders)
            {name: np.asarray(draw(lo, hi), np.int64) for name, draw in group.draws.items()},
            [problem.pos_base[g] + k for k in problem.claim_steps[g] if problem.step_server[g][k] in shared],
            hist_released={label: hist.released[label] if hist is not None else empty
                           for label in (*problem.gates[g], *problem.stream_turn_keys[g], *KEYS)
                           if hist is None or label in hist.released}, last_done=hist.last_done if hist else LOW,
            after=after, joined=joined))
    return slices


def _guess(problem, slices: list[SliceIn], outs: list[SliceOut], run: Pass, idle: bool = False) -> dict[int, Record]:
    """Set every slice's guesses from a pass (the first, idle pass also gives the idle latencies); returns
    the shared positions' claims for the next pass."""
    moved = {}
    for piece, out in zip(slices, outs):
        window, m = problem.groups[piece.group].window, piece.hi - piece.lo
        if piece.idle_done is None:
            piece.idle_done = out.done - out.post
            piece.idle_gate = {k: (out.gate_in[k] - out.post, out.released[k] - out.gate_out[k])
                               for k in problem.gates[piece.group]}
            piece.idle_claim = {pos: out.records[pos].head - out.post for pos in piece.shared}
            record_idle(problem, piece)
        post, rank, pace = out.post, out.rank, problem.paces.last.get(piece.group) if idle else None
        # One operation at a time, the round's only stream: what an operation waits beyond its idle latency is its
        # own (its claims queue behind each other), whenever it is posted; its claims move with its post.
        alone = (problem.speedups.own_waits and window == 1 and not idle
                 and not problem.parallel[problem.round_of[piece.group]])
        if m > window:  # (a saturated group keeps its pace: start from it)
            guess_from_pass(problem, piece, out, alone, paced_ends(problem, piece) if pace is not None else None)
            post = np.concatenate((out.post[:window], piece.guess_post))
            if problem.streams_meet:  # (else the posts stand in for the ranks: Pass._ranks)
                piece.guess_rank = out.released[FIRST_DELIVERED][: m - window]
                rank = np.concatenate((out.rank[:window], piece.guess_rank))
            else:
                rank = post
        for label, slots in problem.gates[piece.group].items():
            if m > slots:
                to_gate, after = piece.idle_gate[label]
                released = out.released[label]
                queued = np.where(released > out.gate_out[label] + after, released, LOW)
                floor = np.maximum(np.maximum(out.gate_in[label], post + to_gate) + after, queued)
                given = piece.gate_input[label]
                first = np.where(given[:slots] == NO_RELEASE, LOW, given[:slots])
                given[slots:] = lag_scan(first, after, floor, slots)[: m - slots]
        for pos in piece.shared:
            now, idle_head = out.records[pos], piece.idle_claim[pos]
            steady = pace.claims.get(pos) if pace is not None else None
            if steady is not None and len(now.wake) == m:  # a saturated group's claims keep their pace too
                moved[pos] = paced_record(problem, pos, piece, post, rank, steady)
                continue
            shift = post - out.post if alone else np.where(now.head > out.post + idle_head,
                                                           np.maximum(post + idle_head - now.head, 0), post - out.post)
            moved[pos] = Record(now.server, pos, now.seq0, post, rank, now.wake + shift, now.wpos, now.head + shift,
                                now.not_before + shift, now.service)
    return moved


def _first_difference(old: np.ndarray, new: np.ndarray) -> int:
    """Earliest time at which two non-decreasing series differ (:data:`NEVER` if equal)."""
    if same_values(old, new):
        return NEVER
    k = int(np.argmax(old != new))
    return int(min(old[k], new[k]))


def _disagreement(problem, slices: list[SliceIn], outs: list[SliceOut], run: Pass) -> int:
    """Earliest time at which a pass's guesses differ from what it computed (:data:`NEVER` if nowhere)."""
    t = NEVER
    for piece, out in zip(slices, outs):
        window, m = problem.groups[piece.group].window, piece.hi - piece.lo
        inside = max(0, m - window)
        t = min(t, _first_difference(piece.guess_post, out.release[:inside]))
        wrong = piece.guess_rank != out.released[FIRST_DELIVERED][:inside] if run.ranked is not None else ()
        if np.any(wrong):  # ranks order claims from the first tie on, an operation's claims from its post on
            k = int(np.argmax(wrong))
            t = min(t, max(run.ranked, min(int(piece.guess_post[k]), int(out.release[k]))))
        for label, slots in problem.gates[piece.group].items():
            if m > slots:
                t = min(t, _first_difference(piece.gate_input[label][slots:], out.released[label][: m - slots]))
    for pos, used in run.used.items():
        now = run.current[pos]
        if used is None:
            t = min(t, int(now.wake.min())) if len(now.wake) else t
        elif not now.same_inputs(used):  # after a drawn delay, not in order
            t = min(t, int(np.minimum(now.wake, used.wake)[now.differs(used)].min()))
    return t


def _next_post(problem, slices: list[SliceIn], outs: list[SliceOut]) -> int:
    """The earliest post of an operation after the block: no claim of a later operation comes earlier. A stream
    that ends in the block bounds the next round's start by the latest completion of its round's slices."""
    t, ended = NEVER, set()
    covered = {k for piece in slices for k in piece.after} | {i - 1 for i, p in enumerate(slices) if p.joined}
    for i, (piece, out) in enumerate(zip(slices, outs)):
        g, lo, hi = piece.group, piece.lo, piece.hi
        group = problem.groups[g]
        if i in covered:
            continue
        if hi == group.ops and not problem.continued[g]:
            if problem.round_of[g] + 1 < len(problem.rounds):
                ended.add(problem.round_of[g])
        elif hi < group.window:
            t = min(t, int(out.post[0]))
        elif hi - group.window >= lo:
            t = min(t, int(out.release[hi - group.window - lo]))
        else:
            t = min(t, int(piece.hist_done[len(piece.hist_done) - (lo - hi + group.window)]))
    for r in ended:
        t = min(t, max(int(out.done[-1]) for piece, out in zip(slices, outs) if problem.round_of[piece.group] == r))
    return t


def _kept(slices: list[SliceIn], outs: list[SliceOut], horizon: int, everything: bool) -> list[int]:
    """Operations kept per slice: a prefix whose every claim precedes ``horizon``, none in a slice that
    continues or follows one not kept whole."""
    kept: list[int] = []
    for i, (piece, out) in enumerate(zip(slices, outs)):
        m = piece.hi - piece.lo
        late = None if everything or out.last_wake is None else out.last_wake >= horizon
        n = m if late is None or not late.any() else int(np.argmax(late))
        kept.append(0 if any(kept[k] < slices[k].hi - slices[k].lo for k in piece.deps(i)) else n)
    return kept


def _carry_over(problem, slices: list[SliceIn], outs, kept, run: Pass, carry: list[Carry], future: int) -> None:
    """Server states for the next block: free times up to the next block's earliest possible claim
    (``limit``), and the kept operations' claims after it (pending, in key order)."""
    limit, cuts = future, []
    for piece, out, n in zip(slices, outs, kept):
        if n < piece.hi - piece.lo:
            window = problem.groups[piece.group].window
            limit = min(limit, int(out.release[n - window]) if n >= window else int(out.post[n]))
            cuts.append((piece.seq0 + n, piece.seq0 + piece.hi - piece.lo))
    kept_of = {piece.seq0: n for piece, n in zip(slices, kept)}
    records: dict[int, list[Record]] = {}
    for rec in run.current.values():
        records.setdefault(rec.server, []).append(rec)
    for server, state in enumerate(carry):
        if server in run.merged:
            claims, order = run.merged[server]
            _settle(state, claims, order, limit, cuts)
        elif problem.servers[server].count > 1:
            for rec in records.get(server, []):
                n = kept_of[rec.seq0]
                state.free = pool(rec.head[:n], rec.service, rec.not_before[:n], state.free)[2]
        elif records.get(server):
            (rec,) = records[server]
            n = kept_of[rec.seq0]
            k = int(np.searchsorted(rec.wake[:n], limit))
            if k:  # everything before (pending claims included) is over by then
                state.free_at, state.pending = int(rec.finish[k - 1]), None
            if k < n:
                tail = rec.claims(k, n)
                state.pending = tail if state.pending is None else concat([state.pending, tail])
        elif state.pending is not None:
            _settle(state, state.pending, np.arange(len(state.pending)), limit, cuts)


def _settle(state: Carry, claims, order: np.ndarray, limit: int, cuts: list[tuple[int, int]]) -> None:
    """Fold the kept operations' claims (``claims`` served in ``order``, finish times known) that precede
    ``limit`` into ``state.free_at`` and keep their later ones as pending; claims of operations not kept (their
    numbers in one of ``cuts``' ``[lo, hi)``) are dropped (the next block solves them again). The pending claims
    merged again keep the finish times they were carried with: they are final, and a pass whose guesses put a later
    claim before one of them (it would disagree there) computed another."""
    if state.pending is not None and getattr(claims, "parts", (None,))[0] is state.pending:
        claims.finish[:len(state.pending)] = state.pending.finish
    seq = claims.seq[order]
    dropped = np.zeros(len(order), bool)
    for lo, hi in cuts:
        dropped |= (seq >= lo) & (seq < hi)
    kept = order[~dropped]
    k = int(np.searchsorted(claims.wake[kept], limit))
    if k:
        state.free_at = int(claims.finish[kept[k - 1]])
    state.pending = claims.take(kept[k:]) if k < len(kept) else None

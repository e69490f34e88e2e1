"""The chain acceleration (:attr:`sim.fast.Speedups.chain`): a stream that claims one server at two pipeline
positions, through claims of servers of their own between them (a READ response written to a GPU through the NIC's
switch uplink and the GPU's link, then its completion entry to host memory through the same uplink).

A pass serves the earlier position's claims with the later position's taken from the last pass, so each pass
settles one more link of the chain ``later claim of operation i -> earlier claim of operation i + 1 -> later claim of
operation i + 1``: with the uplink busy, every completion entry that queues behind the next response moves the
responses after it, and a block used to settle a few operations per pass. This guess serves the chain's claims one at
a time instead, in the ordering rule's order, as a pass walks and serves them, so the next pass agrees at once
where nothing else moves them. The passes check the guess as any other: it changes how fast a block is solved, never
its answer.
"""

from __future__ import annotations

import numpy as np

from sim.core.steps import Claim
from sim.fast.block_pass import Record


def chains(problem, shared: dict[int, list[int]], piece) -> list[tuple[list[int], list[Claim], list[int]]]:
    """The chains of ``piece`` in a block whose shared servers are ``shared`` (positions by server), as ``(the two
    positions, the claims from one to the other, their servers)``: two positions of the slice on one server that no
    other position of the block claims, every step between them a claim of a server of its own, none of them
    skipped, in a turn, made before its head arrives or after a drawn delay; none without the acceleration."""
    if not problem.speedups.chain:
        return []
    base, walk, found = problem.pos_base[piece.group], problem.walks[piece.group], []
    for server, positions in shared.items():
        if len(positions) != 2 or any(p not in piece.shared for p in positions):
            continue
        lo, hi = positions[0] - base, positions[1] - base + 1
        chain = walk[lo:hi]
        servers = [server, *(s.server for s in chain[1:-1] if isinstance(s, Claim))]
        if len(servers) == len(chain) - 1 and not any(problem.varied[piece.group][lo:hi]) \
                and not any(s.eager or s.turn is not None or s.skipped_by for s in chain) \
                and not any(c in shared for c in servers[1:]) \
                and not any(problem.servers[c].count > 1 or problem.servers[c].stalls for c in servers):
            found.append((positions, chain, servers))
    return found


def chained(problem, run, slices: list, outs: list, moved: dict[int, Record], disagree: int,
            before: int | None) -> dict[int, Record]:
    """``moved`` (a pass's guesses for the next, :func:`sim.fast.block._guess`) with the later position of each of
    the slices' :func:`chains` served anew (:func:`serve_chain`) from the pass's disagreement ``disagree`` on, where it
    came later than the last pass's (``before``): a pass that did not move on goes on from its own claims."""
    if before is not None and disagree <= before:
        return moved
    for piece, out in zip(slices, outs):
        for positions, chain, servers in chains(problem, run.shared, piece):
            guess, made = moved.get(positions[0]), moved.get(positions[1])
            if guess is None or made is None or np.ndim(guess.service):
                continue
            inner = [(problem.wpos_at[pos], pos) for pos in range(positions[0] + 1, positions[1])]
            served = serve_chain(guess, chain, [Queue(run.carry[c]) for c in servers], inner,
                                 out.records[positions[1]])
            agreed = made.wake < disagree  # (the pass's own claims, where they agreed: sure)
            for name in ("wake", "head", "not_before"):
                setattr(served, name, np.where(agreed, getattr(made, name), getattr(served, name)))
            moved[positions[1]] = served
    return moved


class Queue:
    """One FIFO server served one claim at a time from its state between blocks (:class:`Carry`): its pending claims
    are served before any claim that comes after them in key order."""

    def __init__(self, state) -> None:
        self.free = state.free_at
        pending = state.pending
        self.pending = [] if pending is None else list(zip(
            *(np.asarray(getattr(pending, k)).tolist() for k in ("wake", "wpos", "post", "rank", "seq", "pos",
                                                                 "head", "not_before", "service"))))
        self.left = len(self.pending)
        """Pending claims not served yet."""

    def drain(self, key: tuple) -> None:
        """Serve the pending claims before ``key`` (wake, ordering position, post, rank, sequence number,
        position)."""
        while self.left and self.pending[-self.left][:6] < key:
            *_, head, before, service = self.pending[-self.left]
            self.free = max(max(head, self.free) + service, before)
            self.left -= 1


def serve_chain(first: Record, chain: list[Claim], queues: list[Queue], inner: list[tuple[int, int]],
                later: Record) -> Record:
    """The claims of ``chain``'s last position when those of its first (``first``, the next pass's guess) and its
    last are served one at a time in key order on their server (``queues[0]``), each operation going from the first
    through the claims between (each on a server of its own, ``queues[1:]``; ``inner``: their ordering positions and
    positions) to the last as :meth:`sim.fast.block_pass.Pass._claim` walks a claim (a start no earlier than the
    head's arrival and the server's being free, a finish no earlier than the tail's); ``later``: the last pass's
    claims of the last position, whose ordering position and service these keep."""
    m, seq0 = len(first.wake), first.seq0
    wake, head, before = (np.asarray(first.wake).tolist(), np.asarray(first.head).tolist(),
                          np.asarray(first.not_before).tolist())
    post, rank = np.asarray(first.post).tolist(), np.asarray(first.rank).tolist()
    wpos, wpos_later = int(np.asarray(first.wpos).flat[0]), int(np.asarray(later.wpos).flat[0])
    opening, closing, shared = chain[0], chain[-1], queues[0]
    ahead, latency = opening.head_ps + opening.latency_ps, opening.latency_ps
    between = [(c.service_ps, c.head_ps + c.latency_ps, c.latency_ps, c.tail_ps, queue, order, pos)
               for c, queue, (order, pos) in zip(chain[1:-1], queues[1:], inner)]
    out_head, out_before = [0] * m, [0] * m
    i = j = 0
    while j < m:
        if i < m and (j == i or wake[i] < out_head[j] or (wake[i] == out_head[j] and (
                wpos, post[i], rank[i], seq0 + i, first.pos) < (wpos_later, post[j], rank[j], seq0 + j, later.pos))):
            if shared.left:
                shared.drain((wake[i], wpos, post[i], rank[i], seq0 + i, first.pos))
            start = head[i] if head[i] > shared.free else shared.free
            finish = start + opening.service_ps
            shared.free = finish = finish if finish > before[i] else before[i]
            h, t = start + ahead, finish + latency
            for service, to_next, hop, tail, queue, order, pos in between:
                if queue.left:
                    queue.drain((h, order, post[i], rank[i], seq0 + i, pos))
                begin = h if h > queue.free else queue.free
                done, t = begin + service, t + tail
                queue.free = done = done if done > t else t
                h, t = begin + to_next, done + hop
            out_head[i], out_before[i] = h, t + closing.tail_ps
            i += 1
        else:
            if shared.left:
                shared.drain((out_head[j], wpos_later, post[j], rank[j], seq0 + j, later.pos))
            begin = out_head[j] if out_head[j] > shared.free else shared.free
            done = begin + closing.service_ps
            shared.free = done if done > out_before[j] else out_before[j]
            j += 1
    heads = np.array(out_head, np.int64)
    return Record(later.server, later.pos, later.seq0, first.post, first.rank, heads, later.wpos, heads,
                  np.array(out_before, np.int64), later.service)

"""The chain acceleration (:attr:`sim.fast.Speedups.chain`): streams that each claim one server at two pipeline
positions, through claims of servers of the chains' own between them (a READ response written to a GPU through the
NIC's switch uplink and the GPU's link, then its completion entry to host memory through the same uplink; with
several QPs, each QP's stream).

A pass serves the earlier positions' claims with the later positions' taken from the last pass, so each pass
settles one more link of the chain ``later claim of operation i -> earlier claim of operation i + 1 -> later claim of
operation i + 1``: with the uplink busy, every completion entry that queues behind the next response moves the
responses after it, and a block used to settle a few operations per pass. This guess serves the chains' claims one
at a time instead, in the ordering rule's order, as a pass walks and serves them, so the next pass agrees at once
where nothing else moves them. The passes check the guess as any other: it changes how fast a block is solved, never
its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heapify, heappop, heappush

import numpy as np

from sim.core.steps import Claim
from sim.fast.block_pass import Record


@dataclass
class Link:
    """One slice's chain: its two positions on the shared server, the claims from one to the other and their servers
    (the shared one, then those of the claims between)."""

    positions: tuple[int, int]
    chain: list[Claim]
    servers: list[int]


def chains(problem, shared: dict[int, list[int]], slices: list) -> list[tuple[int, list[tuple[int, Link]]]]:
    """The chains of a block whose shared servers are ``shared`` (positions by server), per server: ``(server,
    [(slice index, its link)])``, where each slice that claims the server claims it at two positions, every step
    between them a claim (none skipped, in a turn, made before its head arrives or after a drawn delay) of a server
    that only the chains' claims between claim; none without the acceleration."""
    if not problem.speedups.chain:
        return []
    found = []
    for server, positions in shared.items():
        links = [(k, _link(problem, piece, server, [p for p in positions if p in piece.shared]))
                 for k, piece in enumerate(slices) if any(p in piece.shared for p in positions)]
        if any(link is None for _, link in links) or 2 * len(links) != len(positions):
            continue
        between = {pos for _, link in links for pos in range(link.positions[0] + 1, link.positions[1])}
        inner = {c for _, link in links for c in link.servers[1:]}
        if all(set(shared.get(c, ())) <= between for c in inner) and server not in inner:
            found.append((server, links))
    return found


def _link(problem, piece, server: int, positions: list[int]) -> Link | None:
    """``piece``'s chain on ``server`` at ``positions`` (None: it has none there)."""
    if len(positions) != 2:
        return None
    base = problem.pos_base[piece.group]
    lo, hi = positions[0] - base, positions[1] - base + 1
    chain = problem.walks[piece.group][lo:hi]
    servers = [server, *(s.server for s in chain[1:-1] if isinstance(s, Claim))]
    if len(servers) != len(chain) - 1 or any(problem.varied[piece.group][lo:hi]) \
            or any(s.eager or s.turn is not None or s.skipped_by for s in chain) \
            or any(problem.servers[c].count > 1 or problem.servers[c].stalls for c in servers):
        return None
    return Link((positions[0], positions[1]), chain, servers)


def chained(problem, run, slices: list, outs: list, moved: dict[int, Record], disagree: int,
            before: int | None) -> dict[int, Record]:
    """``moved`` (a pass's guesses for the next, :func:`sim.fast.block._guess`) with the later positions of the
    slices' :func:`chains` served anew (:func:`serve_chains`) from the pass's disagreement ``disagree`` on, where it
    came later than the last pass's (``before``): a pass that did not move on goes on from its own claims."""
    if before is not None and disagree <= before:
        return moved
    for _, links in chains(problem, run.shared, slices):
        firsts = [moved.get(link.positions[0]) for _, link in links]
        if any(f is None or moved.get(link.positions[1]) is None or np.ndim(f.service) for f, (_, link)
               in zip(firsts, links)):
            continue
        queues = {c: Queue(run.carry[c]) for _, link in links for c in link.servers}
        inner = [[(problem.wpos_at[pos], pos) for pos in range(link.positions[0] + 1, link.positions[1])]
                 for _, link in links]
        laters = [outs[k].records[link.positions[1]] for k, link in links]
        served = serve_chains(firsts, [link for _, link in links], queues, inner, laters)
        for (_, link), claims in zip(links, served):
            made = moved[link.positions[1]]
            agreed = made.wake < disagree  # (the pass's own claims, where they agreed: sure)
            for name in ("wake", "head", "not_before"):
                setattr(claims, name, np.where(agreed, getattr(made, name), getattr(claims, name)))
            moved[link.positions[1]] = claims
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


def serve_chains(firsts: list[Record], links: list[Link], queues: dict[int, Queue], inner: list[list[tuple[int, int]]],
                 laters: list[Record]) -> list[Record]:
    """The claims of each chain's last position when those of its first (``firsts``, the next pass's guesses) and its
    last, of every chain, are served one at a time in key order on their server, each operation going from the first
    through the claims between (``inner``: their ordering positions and positions) to the last as
    :meth:`sim.fast.block_pass.Pass._claim` walks a claim (a start no earlier than the head's arrival and the
    server's being free, a finish no earlier than the tail's); ``queues``: the servers by index; ``laters``: the last
    pass's claims of each last position, whose ordering position and service these keep."""
    walks = [_Walk(first, link, queues, hops, later) for first, link, hops, later in zip(firsts, links, inner, laters)]
    heap = [(walk.first_key(0), k) for k, walk in enumerate(walks) if walk.m]
    heapify(heap)
    shared = queues[links[0].servers[0]]
    while heap:  # each chain's claims in turn while they come before every other chain's next (the heap's first)
        _, k = heappop(heap)
        after = walks[k].run(shared, heap[0][0] if heap else None)
        if after is not None:
            heappush(heap, (after, k))
    return [walk.record() for walk in walks]


class _Walk:
    """One chain's operations in :func:`serve_chains`: the next to claim the first position (``i``) and the last
    (``j``), and where each went on from the claims between (``out_head``, ``out_before``)."""

    def __init__(self, first: Record, link: Link, queues: dict[int, Queue], hops: list[tuple[int, int]],
                 later: Record) -> None:
        self.first, self.later, self.m, self.i, self.j, self.seq0 = first, later, len(first.wake), 0, 0, first.seq0
        self.wake, self.head, self.before, self.post, self.rank = (
            np.asarray(getattr(first, k)).tolist() for k in ("wake", "head", "not_before", "post", "rank"))
        self.wpos, self.wpos_later = int(np.asarray(first.wpos).flat[0]), int(np.asarray(later.wpos).flat[0])
        self.opening, self.closing = link.chain[0], link.chain[-1]
        self.between = [(c.service_ps, c.head_ps + c.latency_ps, c.latency_ps, c.tail_ps, queues[s], order, pos)
                        for c, s, (order, pos) in zip(link.chain[1:-1], link.servers[1:], hops)]
        self.out_head, self.out_before = [0] * self.m, [0] * self.m

    def run(self, shared: Queue, bound: tuple | None) -> tuple | None:
        """Serve the chain's claims on the ``shared`` server in key order while they come before ``bound`` (the other
        chains' next claim's key; None: there is none), each of the first position walking on through the claims
        between, as :meth:`sim.fast.block_pass.Pass._claim` serves a claim (a start no earlier than the head's
        arrival and the server's being free, a finish no earlier than the tail's); an operation's last claim comes
        once its first is made. Returns the key of the next claim, or None when all are served."""
        wake, head, before, out_head, out_before = self.wake, self.head, self.before, self.out_head, self.out_before
        opening, closing, between, m, i, j = self.opening, self.closing, self.between, self.m, self.i, self.j
        free, key = shared.free, None
        while True:  # (the servers' FIFO rule written out, with locals: this loop is the acceleration's time)
            later = j < i and (i == m or out_head[j] < wake[i]
                               or (out_head[j] == wake[i] and self.later_key(j) < self.first_key(i)))
            if not later and i == m:
                break
            if shared.left or (bound is not None and (out_head[j] if later else wake[i]) >= bound[0]):
                key = self.later_key(j) if later else self.first_key(i)
                if bound is not None and key > bound:
                    break
                shared.free = free
                shared.drain(key)
                free, key = shared.free, None
            if later:
                begin = out_head[j] if out_head[j] > free else free
                done = begin + closing.service_ps
                free = done if done > out_before[j] else out_before[j]
                j += 1
                continue
            start = head[i] if head[i] > free else free
            finish = start + opening.service_ps
            free = finish = finish if finish > before[i] else before[i]
            h, t = start + opening.head_ps + opening.latency_ps, finish + opening.latency_ps
            for service, to_next, hop, tail, queue, order, pos in between:
                if queue.left:
                    queue.drain((h, order, self.post[i], self.rank[i], self.seq0 + i, pos))
                begin = h if h > queue.free else queue.free
                done, t = begin + service, t + tail
                queue.free = done = done if done > t else t
                h, t = begin + to_next, done + hop
            out_head[i], out_before[i] = h, t + closing.tail_ps
            i += 1
        shared.free, self.i, self.j = free, i, j
        return key

    def first_key(self, i: int) -> tuple:
        """Operation ``i``'s key at the first position (:mod:`sim.fast.merge`)."""
        return self.wake[i], self.wpos, self.post[i], self.rank[i], self.seq0 + i, self.first.pos

    def later_key(self, j: int) -> tuple:
        """Operation ``j``'s key at the last position, its head there known."""
        return self.out_head[j], self.wpos_later, self.post[j], self.rank[j], self.seq0 + j, self.later.pos

    def record(self) -> Record:
        """The last position's claims served."""
        heads, later = np.array(self.out_head, np.int64), self.later
        return Record(later.server, later.pos, later.seq0, self.first.post, self.first.rank, heads, later.wpos, heads,
                      np.array(self.out_before, np.int64), later.service)

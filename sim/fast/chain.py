"""The chain acceleration (:attr:`sim.fast.Speedups.chain`): streams that each claim one server at two pipeline
positions, the later claim following from the first through steps a scalar walk takes: claims of servers of the
chains' own, fixed delays, rebases, side chains (a READ response written to a GPU through the NIC's switch uplink and
the GPU's link, then its completion entry to host memory through the same uplink; a SEND's payload and then its
receive completion on the responder's PCIe link, where the receive WQE's fetch, another position of the stream, is
served beside them from the guesses; with several QPs, each QP's stream).

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

from sim.core.steps import Check, Claim, Delay, Detour, Fork, Mark, Rebase, Step
from sim.fast.block_pass import Record


@dataclass
class Link:
    """One slice's chain on the shared server: its first and later positions there, the later one's claim following
    from the first one's through ``path`` (steps a scalar walk takes, :func:`_walkable`; ``between``: the pipeline
    positions of their claims), and the slice's other positions on the server (``extras``), whose claims are taken from
    the guesses."""

    positions: tuple[int, int]
    opening: Claim
    closing: Claim
    path: tuple[Step, ...]
    between: tuple[int, ...]
    extras: tuple[int, ...]


def chains(problem, shared: dict[int, list[int]], slices: list) -> list[tuple[int, list[tuple[int, Link]]]]:
    """The chains of a block whose shared servers are ``shared`` (positions by server), per server: ``(server,
    [(slice index, its link)])``, where each slice that claims the server has a chain there (:func:`_link`) whose
    walked claims are of servers that only the chains' walked claims use; none without the acceleration."""
    if not problem.speedups.chain:
        return []
    found = []
    for server, positions in shared.items():
        links = [(k, _link(problem, piece, server, [p for p in positions if p in piece.shared]))
                 for k, piece in enumerate(slices) if any(p in piece.shared for p in positions)]
        if any(link is None for _, link in links) or sum(2 + len(link.extras) for _, link in links) != len(positions):
            continue
        walked = {pos for _, link in links for pos in link.between}
        inner = {problem.claim_at[pos].server for pos in walked}
        if all(set(shared.get(c, ())) <= walked for c in inner) and server not in inner:
            found.append((server, links))
    return found


def _link(problem, piece, server: int, positions: list[int]) -> Link | None:
    """``piece``'s chain on ``server``, where it claims it at ``positions``: the one position whose claim follows
    from another's through steps a scalar walk takes (:func:`_predecessors`), each reached in operation order, made
    as its head arrives, not in a turn and by every operation (None: there is no such pair, or more than one)."""
    g, base = piece.group, problem.pos_base[piece.group]
    walk, before, found = problem.walks[g], _predecessors(problem.groups[g].steps), []
    if any(problem.varied[g][pos - base] for pos in positions):
        return None
    for pos in positions:
        path, k = [], before[pos - base]
        while k is not None and base + k not in positions and _walkable(walk[k], problem) and not problem.varied[g][k]:
            path.append(k)
            k = before[k]
        if k is not None and base + k in positions:
            found.append((base + k, pos, [walk[j] for j in reversed(path)], [base + j for j in reversed(path)]))
    if len(found) != 1:
        return None
    first, later, path, at = found[0]
    opening, closing = problem.claim_at[first], problem.claim_at[later]
    if any(c.eager or c.turn is not None or c.skipped_by for c in (opening, closing)):
        return None
    between = tuple(p for p, step in zip(at, path) if isinstance(step, Claim))
    extras = tuple(p for p in positions if p not in (first, later))
    return Link((first, later), opening, closing, tuple(path), between, extras)


def _predecessors(steps: tuple[Step, ...]) -> list[int | None]:
    """Per walk-order index of ``steps``: the index of the step whose head and tail it starts from (the step before
    it in its own list; a fork's or a detour's for its first step), None for the chain's first."""
    out: list[int | None] = []

    def fill(steps: tuple[Step, ...], before: int | None) -> None:
        for step in steps:
            here = len(out)
            out.append(before)
            if isinstance(step, (Fork, Detour)):
                fill(step.steps, here)
            before = here
    fill(steps, None)
    return out


def _walkable(step: Step, problem) -> bool:
    """Whether a scalar walk takes ``step`` between a chain's two claims: a claim of one server without stalls, not
    in a turn and made by every operation; a fixed delay; a rebase; a fork passed by; a mark; a check that holds
    nothing."""
    if isinstance(step, Claim):
        server = problem.servers[step.server]
        return step.turn is None and step.skipped_by is None and server.count == 1 and not server.stalls
    if isinstance(step, Check):
        return not step.holds and not step.restarts and step.decides is None
    return isinstance(step, (Rebase, Fork, Mark)) or (isinstance(step, Delay) and step.draws is None)


def chained(problem, run, slices: list, outs: list, moved: dict[int, Record], disagree: int,
            before: int | None) -> dict[int, Record]:
    """``moved`` (a pass's guesses for the next, :func:`sim.fast.block._guess`) with the later positions of the
    slices' :func:`chains` served anew (:func:`serve_chains`) from the pass's disagreement ``disagree`` on, where it
    came later than the last pass's (``before``): a pass that did not move on goes on from its own claims."""
    if before is not None and disagree <= before:
        return moved
    for server, links in chains(problem, run.shared, slices):
        firsts = [moved.get(link.positions[0]) for _, link in links]
        if any(f is None or np.ndim(f.service) or moved.get(link.positions[1]) is None
               or any(moved.get(e) is None for e in link.extras) for f, (_, link) in zip(firsts, links)):
            continue
        walked = {problem.claim_at[pos].server for _, link in links for pos in link.between}
        queues = {c: Queue(run.carry[c]) for c in {server, *walked}}
        walks = [_Walk(problem, first, link, queues, outs[k].records[link.positions[1]], moved)
                 for first, (k, link) in zip(firsts, links)]
        for (_, link), claims in zip(links, serve_chains(walks, queues[server])):
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


def serve_chains(walks: list[_Walk], shared: Queue) -> list[Record]:
    """The claims of each chain's later position when the claims of every chain's positions on the ``shared`` server
    are served one at a time in key order, as :meth:`sim.fast.block_pass.Pass._claim` serves a claim (a start no
    earlier than the head's arrival and the server's being free, a finish no earlier than the tail's), each
    operation walking from its first position's claim to its later one's (:attr:`Link.path`)."""
    heap = [(key, k) for k, key in enumerate(walk.key() for walk in walks) if key is not None]
    heapify(heap)
    while heap:  # each chain's claims in turn while they come before every other chain's next (the heap's first)
        _, k = heappop(heap)
        after = walks[k].run(shared, heap[0][0] if heap else None)
        if after is not None:
            heappush(heap, (after, k))
    return [walk.record() for walk in walks]


CLAIM, DELAY, REBASE = range(3)
"""What a walked step does (:meth:`_Walk._compiled`): claim a server of its own, add a delay, or rebase."""


class _Walk:
    """One chain's operations in :func:`serve_chains`: the next to claim the first position (``i``), the later one
    (``j``) and each other position (``at``), and where each went on from its first claim (``out_head``,
    ``out_before``)."""

    def __init__(self, problem, first: Record, link: Link, queues: dict[int, Queue], later: Record,
                 moved: dict[int, Record]) -> None:
        self.first, self.later, self.m, self.i, self.j, self.seq0 = first, later, len(first.wake), 0, 0, first.seq0
        self.wake, self.head, self.before, self.post, self.rank = (
            np.asarray(getattr(first, k)).tolist() for k in ("wake", "head", "not_before", "post", "rank"))
        self.wpos, self.wpos_later = int(np.asarray(first.wpos).flat[0]), int(np.asarray(later.wpos).flat[0])
        self.opening, self.closing = link.opening, link.closing
        self.path = self._compiled(problem, link, queues)
        self.out_head, self.out_before = [0] * self.m, [0] * self.m
        self.extras = [[0, pos, *(np.broadcast_to(getattr(moved[pos], k), (self.m,)).tolist()
                                  for k in ("wake", "wpos", "head", "not_before", "service"))] for pos in link.extras]
        """Per other position: the next operation to claim it, the position, and per operation its claims' wake,
        ordering position, head, tail bound and service, from the guesses."""

    @staticmethod
    def _compiled(problem, link: Link, queues: dict[int, Queue]) -> list[tuple]:
        """``link``'s path as the steps :meth:`run` walks, each ``(kind, a, b, c, d, queue, order, pos)``: a claim's
        service, head-to-next time, latency and tail time, its server's queue, ordering position and position; a
        delay's ps in ``a``; a rebase's ``from_tail`` and offset in ``a`` and ``b`` (one shape, unpacked at once)."""
        out, claims = [], iter(link.between)
        for step in link.path:
            if isinstance(step, Claim):
                pos = next(claims)
                out.append((CLAIM, step.service_ps, step.head_ps + step.latency_ps, step.latency_ps, step.tail_ps,
                            queues[step.server], problem.wpos_at[pos], pos))
            elif isinstance(step, Delay):
                out.append((DELAY, step.ps, 0, 0, 0, None, 0, 0))
            elif isinstance(step, Rebase):
                out.append((REBASE, step.from_tail, step.offset_ps, 0, 0, None, 0, 0))
        return out

    def key(self) -> tuple | None:
        """The key of the chain's next claim (None: every claim was made)."""
        keys = [self.first_key(self.i)] if self.i < self.m else []
        return min(keys + [self.extra_key(e) for e in self.extras if e[0] < self.m], default=None)

    def run(self, shared: Queue, bound: tuple | None) -> tuple | None:
        """Serve the chain's claims on the ``shared`` server in key order while they come before ``bound`` (the other
        chains' next claim's key; None: there is none), each of the first position walking on to the later one (an
        operation's later claim comes once its first is made). Returns the key of the next claim, or None when all
        are served."""
        wake, head, before, out_head, out_before = self.wake, self.head, self.before, self.out_head, self.out_before
        opening, closing, path, m, i, j, extras = self.opening, self.closing, self.path, self.m, self.i, self.j, \
            self.extras
        free, key = shared.free, None
        while True:  # (the servers' FIFO rule written out, with locals: this loop is the acceleration's time)
            later = j < i and (i == m or out_head[j] < wake[i]
                               or (out_head[j] == wake[i] and self.later_key(j) < self.first_key(i)))
            extra = own = None
            for e in extras:  # (another position's claim comes first where its key does)
                if e[0] < m:
                    mine = self.extra_key(e)
                    if own is None or mine < own:
                        extra, own = e, mine
            if extra is not None and (later or i < m) and not own < (self.later_key(j) if later else self.first_key(i)):
                extra = None
            if extra is None and not later and i == m:
                break
            arrival = own[0] if extra is not None else out_head[j] if later else wake[i]
            if shared.left or (bound is not None and arrival >= bound[0]):
                key = own if extra is not None else self.later_key(j) if later else self.first_key(i)
                if bound is not None and key > bound:
                    break
                shared.free = free
                shared.drain(key)
                free, key = shared.free, None
            if extra is not None:
                c = extra[0]
                start = extra[4][c] if extra[4][c] > free else free
                done = start + extra[6][c]
                free = done if done > extra[5][c] else extra[5][c]
                extra[0] = c + 1
                continue
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
            for kind, service, to_next, hop, tail, queue, order, pos in path:
                if kind == CLAIM:
                    if queue.left:
                        queue.drain((h, order, self.post[i], self.rank[i], self.seq0 + i, pos))
                    begin = h if h > queue.free else queue.free
                    done, t = begin + service, t + tail
                    queue.free = done = done if done > t else t
                    h, t = begin + to_next, done + hop
                elif kind == DELAY:
                    h, t = h + service, t + service
                else:
                    h = t = (t if service else h) + to_next
            out_head[i], out_before[i] = h, t + closing.tail_ps
            i += 1
        shared.free, self.i, self.j = free, i, j
        return key

    def first_key(self, i: int) -> tuple:
        """Operation ``i``'s key at the first position (:mod:`sim.fast.merge`)."""
        return self.wake[i], self.wpos, self.post[i], self.rank[i], self.seq0 + i, self.first.pos

    def extra_key(self, extra: list) -> tuple:
        """The key of the next claim at another position (an entry of :attr:`extras`)."""
        c = extra[0]
        return extra[2][c], extra[3][c], self.post[c], self.rank[c], self.seq0 + c, extra[1]

    def later_key(self, j: int) -> tuple:
        """Operation ``j``'s key at the later position, its head there known."""
        return self.out_head[j], self.wpos_later, self.post[j], self.rank[j], self.seq0 + j, self.later.pos

    def record(self) -> Record:
        """The later position's claims served."""
        heads, later = np.array(self.out_head, np.int64), self.later
        return Record(later.server, later.pos, later.seq0, self.first.post, self.first.rank, heads, later.wpos, heads,
                      np.array(self.out_before, np.int64), later.service)

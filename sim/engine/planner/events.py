"""Scenario events under the vectorized core: the testbed's clock follows a solved run, and a move of a
buffer the workloads read from is folded into the next solve.

Events run on the testbed's own environment, the same processes as under the event engine, as the solve
goes on: an event is stepped once every operation still to solve is posted after it, so a solve that a move
makes stale stops there (:class:`Solved` takes pieces only as far as asked). They act on the data path only
through the workloads' MRs and QPs (they share no server with it and read no access history), so
:class:`Watch` steps the clock and compares what the data path reads of those (:func:`exposed`) after every
event. Nothing changed: the event engine's run would have seen
none of it. A dma-buf MR the workloads read from that ``move_notify`` zapped is a :class:`Move`: the first
access after the zap finds the translation gone and re-faults (the watch makes that very call on the testbed,
at that access's time from the solve, which only earlier operations decide), accesses until the re-fault is
done wait for it, and operations posted from the zap on reach the buffer where it went. A source buffer whose
next access completes in error instead (VFIO revoked it) is a :class:`Failure`: the watch makes
that access on the testbed at its time; its send queue stops there, so no later work request reaches the buffer
(:mod:`sim.engine.planner.errors`). A dma-buf a stream reaches at
the responder that ``move_notify`` zapped is a move too, whose first access after the zap the watch makes on the
testbed; the requests that arrive before its re-map is done get RNR NAKs (:mod:`sim.engine.planner.retries`).
Anything else the event engine simulates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from models.nic.stages import memory_target
from models.ib.dmabuf_mr import DmabufBacking
from models.nic.translation import Fault
from models.nic.transport import QP_RC
from models.nic.odp_caps import gated_translate, mlx5_ib_odp_opcode_cap
from models.nic.wqe import RNR_RETRY_INFINITE, WcStatus
from sim.engine.harness import workload_opcode
from sim.core.units import format_duration, format_size, format_time
from sim.fast import NEVER, Finished
from sim.engine.planner.errors import NONE, Failure, first_flushed
from sim.engine.planner.faults import Access, FaultScan, Unfollowed, faults_followed
from sim.engine.planner.losses import Losses
from sim.engine.planner.retries import REMOTE, Retries
from sim.engine.planner.settling import windows
from sim.scenario.schema import Scenario


@dataclass(frozen=True)
class Move:
    """A move of a workload's source buffer: its translation was zapped at ``zapped_ps``; operations posted
    from then on reach ``target`` (:func:`models.nic.stages.memory_target`); the first access after the zap,
    at ``faulted_ps``, re-faulted and accesses wait until ``ready_ps`` (both None: no access came after it)."""

    zapped_ps: int
    target: str | None
    faulted_ps: int | None
    ready_ps: int | None


def segments(targets: tuple[str | None, str | None], moves: list[Move], remote: list[Move], posts: np.ndarray,
             ops: int) -> Iterator[tuple[int, int, tuple[str | None, str | None]]]:
    """``(lo, hi, targets)`` runs of operations by where their source and their responder's buffer are when they
    are posted (``moves`` and ``remote`` of each; ``posts``: those solved so far, the rest posted after every
    move)."""
    sides = []
    for target, kept in zip(targets, (moves, remote)):
        cuts = [(0, target)]
        for move in kept:
            if move.target != cuts[-1][1]:  # (a fault, or a move that leaves it where it was, changes no route)
                cuts.append((int(np.searchsorted(posts, move.zapped_ps)), move.target))
        sides.append(cuts)
    edges = sorted({lo for cuts in sides for lo, _ in cuts} | {ops})
    for lo, hi in zip(edges, edges[1:]):
        yield lo, hi, tuple(next(t for c, t in reversed(cuts) if c <= lo) for cuts in sides)


class Solved:
    """A solve's per-operation times by (workload index, size), taken from its pieces only as far as the events
    need: posts, completions, the wake at the source's translation (``local`` marks; absent where the source is
    not read) and other marks.

    :param pieces: ``((workload, size), piece)`` in solve order.
    :param ops: operations of each (workload, size).
    """

    def __init__(self, pieces: Iterator[tuple[tuple[int, int], Finished]], ops: dict[tuple[int, int], int]) -> None:
        self._pieces, self._ops = pieces, ops
        self.parts: dict[tuple[int, int], list[Finished]] = {}
        """The pieces taken so far, by (workload, size)."""
        self.last: tuple[tuple[int, int], Finished] | None = None
        """The piece taken last, with its (workload, size)."""
        self._joined: tuple | None = None
        self.horizon = 0
        """No operation still to solve claims or marks anything before this time (ps)."""
        self.complete = False

    def extend(self) -> bool:
        """Take the next piece; False when none is left."""
        try:
            key, piece = next(self._pieces)
        except StopIteration:
            self.complete, self.horizon = True, NEVER
            return False
        self.parts.setdefault(key, []).append(piece)
        self.last = key, piece
        self.horizon, self._joined = piece.next_post, None
        return True

    def keys(self) -> list[tuple[int, int]]:
        """Every (workload, size) of the solve."""
        return list(self._ops)

    def last_done(self, key: tuple[int, int]) -> int:
        """The completion of ``key``'s last operation; NEVER while some are still to solve (ps)."""
        last = self.parts[key][-1] if key in self.parts else None
        return int(last.done[-1]) if last is not None and last.lo + len(last.post) == self._ops[key] else NEVER

    def _tables(self) -> tuple:
        if self._joined is None:
            parts = self.parts
            self._joined = tuple({key: np.concatenate([getattr(p, field) for p in pieces])
                                  for key, pieces in parts.items()} for field in ("post", "done")) + (
                {key: {label: np.concatenate([p.marks.get(label, np.full(len(p.post), NONE)) for p in pieces])
                       for label in {label: None for p in pieces for label in p.marks}}
                 for key, pieces in parts.items()},)
        return self._joined

    @property
    def posts(self) -> dict[tuple[int, int], np.ndarray]:
        return self._tables()[0]

    @property
    def done(self) -> dict[tuple[int, int], np.ndarray]:
        return self._tables()[1]

    @property
    def marks(self) -> dict[tuple[int, int], dict[str, np.ndarray]]:
        return self._tables()[2]


Item = tuple[str, str]
"""What :func:`exposed` watches: ``("buffer", name)`` or ``("QP", "<number> on <node>")``."""


def exposed(bed, scenario: Scenario) -> dict[Item, tuple]:
    """What the workloads' data path reads of their MRs and QPs: each MR's key state and its backing's
    :meth:`~models.nic.translation.MrBacking.epoch`, each QP's state."""
    names = {name for work in scenario.workload for pair in work.buffer_pairs() for name in pair}
    state = {}
    for name in sorted(names):
        mr = bed.registrations[name].mr
        nic = mr.pd.context.node.nic
        state["buffer", name] = (mr.valid, mr.registered, nic.lookup(mr.lkey) is mr,
                                 mr.backing.epoch() if mr.backing is not None else ())
    for qp in bed.qps:
        state["QP", f"{qp.qp_num} on {qp.node.name}"] = (qp.state,)
    return state


def describe(items: list[Item]) -> str:
    """``buffer 'src', QP 2 on b``."""
    return ", ".join(f"buffer '{name}'" if kind == "buffer" else f"QP {name}" for kind, name in items)


FAULTED = "fault"
"""The kind of :data:`Item` that :meth:`Watch.follow` returns after making a page fault
(:mod:`sim.engine.planner.faults`)."""


class Watch:
    """The testbed's clock following solved runs, with the moves (and page faults) found so far by buffer name;
    ``streams``: the run's streams, whose own ODP accesses it follows
    (:class:`~sim.engine.planner.faults.FaultScan`)."""

    def __init__(self, bed, scenario: Scenario, streams=()) -> None:
        self.bed, self.scenario = bed, scenario
        self.base = exposed(bed, scenario)
        self.moves: dict[str, list[Move]] = {}
        self.faults = FaultScan(streams, self.holds)
        self.remote_moves: dict[str, list[Move]] = {}
        """The moves of buffers the workloads reach at the responder, by name (:mod:`sim.engine.planner.retries`)."""
        depth = windows(streams)
        self.retries = Retries(depth)
        self.losses = Losses(streams, depth)
        """The requests link outages lose (:mod:`sim.engine.planner.losses`)."""
        self.failures: dict[tuple[int, int], Failure] = {}
        """The error completions accepted so far, by (stream, size) (:mod:`sim.engine.planner.errors`)."""
        self.unsettled = False
        """The last complete solve put the requester's first flush elsewhere than its failure said: solve again."""

    def holds(self, name: str) -> list[tuple[int, int]]:
        """The intervals in which accesses of buffer ``name`` wait for a re-map or a fault handler (ps)."""
        return [(m.zapped_ps, m.ready_ps) for m in self.moves.get(name, ()) if m.ready_ps is not None]

    def changed(self) -> list[Item]:
        """What differs from the last accepted state."""
        now = exposed(self.bed, self.scenario)
        return [name for name in now if now[name] != self.base[name]]

    def advance(self, until_ps: int, inclusive: bool = True) -> list[Item]:
        """Step the events due up to ``until_ps`` (at it too when ``inclusive``, as the event engine's run
        ends: its events were scheduled before the workloads' last step); stop at the first that changed what
        the data path sees and return what it changed (empty: none did)."""
        env = self.bed.env
        while env.peek() < until_ps or (inclusive and env.peek() == until_ps):
            env.step()
            changed = self.changed()
            if changed:
                return changed
        return []

    def follow(self, solved: Solved) -> list[Item]:
        """Solve on, stepping the events due before what is still to solve; stop at the first event that changed
        what the data path sees and return what it changed, or at the first page fault of a stream's own
        accesses, made on the testbed (``[(FAULTED, buffer)]``); empty: the solve is complete. While RNR NAK counts
        are still to settle (:attr:`Retries.pending`), no event is stepped: the times after their window are not
        sure until a complete solve holds them, and an event folded on them would be placed wrong. Nor where link
        outages lose frames: the run's end is not sure until their decisions settle, and an event stepped past it
        would be logged as reached (the outages are known before the run; an event that changes the data path sends
        such a run to the event engine, from :meth:`advance` to its end). There a decision of theirs that differs on
        the solve's prefix stops the solve at once (:meth:`Losses.settle_early`): empty, the solve incomplete.

        :raises Unfollowed: a page fault the vectorized core does not follow.
        """
        scan = self.faults
        scan.restart()
        self.losses.open = True
        while solved.extend():
            key, piece = solved.last
            scan.scan(key, piece, self.bed.env.now)
            if scan.found is not None and scan.found.at_ps < solved.horizon:
                return self._fault(scan.found)
            if solved.horizon < NEVER and self.losses.links:
                if self.losses.open and self.losses.settle_early(solved.marks, solved.horizon):
                    return []  # (the solve is left incomplete)
            elif solved.horizon < NEVER:
                changed = [] if self.retries.pending else self.advance(solved.horizon, inclusive=False)
                if changed:
                    return changed
        return [] if scan.found is None else self._fault(scan.found)

    def _fault(self, access: Access) -> list[Item]:
        """Step the events up to ``access`` (they come first at its time); unless one changed what the data path
        sees, make the access on the testbed and hold the buffer's accesses until its fault is handled."""
        changed = self.advance(access.at_ps)
        if changed:
            return changed
        self.clock(access.at_ps)
        ready = self.faults.make(access)
        return self._refaulted(self.faults.sources[access.stream].buffer, access.at_ps, ready)

    def _refaulted(self, name: str, at_ps: int, ready_ps: int) -> list[Item]:
        """The access of buffer ``name`` at ``at_ps`` faulted on the testbed: its accesses wait until ``ready_ps``
        (a :class:`Move` to where the buffer is then); returns ``[(FAULTED, name)]``, the run to be solved again."""
        mr = self.bed.registrations[name].mr
        self.moves.setdefault(name, []).append(Move(at_ps, memory_target(mr, at_ps), at_ps, ready_ps))
        self.base = exposed(self.bed, self.scenario)
        return [(FAULTED, name)]

    def clock(self, at_ps: int) -> None:
        """Move the clock to ``at_ps`` (no event is due before it)."""
        env = self.bed.env
        if env.now < at_ps:
            env.timeout(at_ps - env.now)
            env.step()

    def fold(self, changed: list[Item], solved: Solved, streams) -> str | None:
        """Accept ``changed`` as a :class:`Move` of a source buffer (making its re-fault on the testbed), or as a
        source buffer whose next access completes in error (a :class:`Failure`); return why not
        otherwise."""
        env = self.bed.env
        if changed[0][0] == FAULTED:
            return None
        if self.losses.links:
            return f"scenario events changed {describe(changed)} while a link outage loses the workloads' frames"
        name = changed[0][1] if len(changed) == 1 and changed[0][0] == "buffer" else None
        backing = self.bed.registrations[name].mr.backing if name else None
        if name and faults_followed(self.bed.registrations[name].mr):
            return self._invalidated(name)
        if name and any(failure.name == name for failure in self.failures.values()):
            self.base = exposed(self.bed, self.scenario)  # its stream's send queue stopped: no access reaches it
            return None
        if not isinstance(backing, DmabufBacking):
            return f"scenario events changed {describe(changed)} at {format_duration(env.now)}"
        if any(move.ready_ps is not None and env.now <= move.ready_ps
               for move in (*self.moves.get(name, ()), *self.remote_moves.get(name, ()))):
            # (the exporter's new zap lets the accesses that come meanwhile reach the old pages, not wait)
            return f"buffer '{name}' moved again at {format_duration(env.now)} while its last re-fault was handled"
        moved = backing.mode == "dmabuf" and not backing.translation_valid and not backing.umem.revoked \
            and backing.zapped_at_ps > env.now
        after = backing.zapped_at_ps if moved else max(env.now, backing.umem.revoked_at_ps)
        self.base = exposed(self.bed, self.scenario)  # the zap itself is accepted from here on
        for k, size in solved.keys():
            work, (source, sink) = streams[k].work, streams[k].buffers
            responder = name == sink or (name == source and work.rule.ping_pong)
            if responder and solved.last_done((k, size)) >= after:
                return self._responder_moved(name, after, solved, streams, k) if moved else (
                    f"scenario events changed {describe(changed)} at {format_duration(env.now)}")
        first = _first_access(solved, streams, name, after)
        at = ready = None
        failed = False
        if first is not None:
            at, size = first
            reason = self._reach(name, at)
            if reason:
                return reason
            answer = backing.translate(at, 0, size)
            if isinstance(answer, WcStatus):
                reason = self._failure(name, (at, size), after, answer, solved, streams)
                if reason:
                    return reason
                failed = True
            elif isinstance(answer, Fault) and moved:
                ready = answer.ready_ps
            elif moved:
                return f"buffer '{name}': the access at {format_time(at)} after its move {_not_refaulted(answer)}"
        if not moved and not failed and first is not None:  # (none reaches it after the change: the run never sees it)
            return f"scenario events changed {describe(changed)} at {format_duration(env.now)}"
        if moved:
            target = memory_target(self.bed.registrations[name].mr, after)
            self.moves.setdefault(name, []).append(Move(after, target, at, ready))
        self.base = exposed(self.bed, self.scenario)
        return None

    def _alone(self, name: str, side: int, verbs: tuple[str, ...], streams) -> int | None:
        """The stream that alone reaches buffer ``name``, as its source (``side`` 0) or at the responder (1): a
        bandwidth stream of one of ``verbs`` for a count on one RC QP, with no stream's own page faults followed;
        None where there is no such stream."""
        readers = [k for k, end in enumerate(streams) if name in end.buffers]
        if len(readers) != 1:
            return None
        end = streams[readers[0]]
        work = end.work
        followed = (end.buffers[side] == name and work.rule.verb in verbs and work.rule.streams and work.streams() == 1
                    and work.duration is None and end.src.qp.qp_type is QP_RC and not self.faults.sources)
        return readers[0] if followed else None

    def _reach(self, name: str, at: int) -> str | None:
        """Step the events before buffer ``name``'s next access at ``at`` (ps) and move the clock to it; why not
        where one of them changes what the data path sees again, or one is due at that very time."""
        if self.advance(at, inclusive=False) or self.bed.env.peek() == at:
            return (f"scenario events act on buffer '{name}' again, or at {format_time(at)} exactly, before its "
                    "next access")
        self.clock(at)
        return None

    def _responder_moved(self, name: str, after: int, solved: Solved, streams, k: int) -> str | None:
        """Accept the move of buffer ``name``, zapped at ``after`` (ps), which stream ``k``'s requests still reach at
        the responder: the first of them after the zap re-faults, made on the testbed at its time, and those that
        arrive before the re-fault is done get RNR NAKs (:mod:`sim.engine.planner.retries`); return why not where
        the vectorized core does not follow that."""
        end, work = streams[k], streams[k].work
        if self._alone(name, 1, ("read", "write"), streams) != k or end.src.qp.rnr_retry != RNR_RETRY_INFINITE \
                or self.failures:
            return (f"buffer '{name}' moved while workload '{work.name or work.kind}' still "
                    "reaches it as a responder (RNR NAKs and retries), which the vectorized core follows only for a "
                    "READ or WRITE stream of one RC QP retrying for ever, for a count, alone on the buffer")
        target, moves = memory_target(end.dst.mr, after), self.remote_moves.setdefault(name, [])
        first = _first_access(solved, streams, name, after, remote=True)
        if first is None:
            moves.append(Move(after, target, None, None))
            return None
        at, size = first
        reason = self._reach(name, at)
        if reason:
            return reason
        mr = end.dst.mr
        answer = gated_translate(end.dst.qp, mr, mlx5_ib_odp_opcode_cap(workload_opcode(work)), at,
                                 end.dst.iova - mr.iova, size)
        if not isinstance(answer, Fault):
            return f"buffer '{name}': the access at {format_time(at)} after its move {_not_refaulted(answer)}"
        moves.append(Move(after, target, at, answer.ready_ps))
        self.retries.open(k, (at, answer.ready_ps))
        self.base = exposed(self.bed, self.scenario)
        return None

    def _failure(self, name: str, access: tuple[int, int], after: int, status: WcStatus, solved: Solved,
                 streams) -> str | None:
        """The access of source buffer ``name`` at ``access`` (its time and message size; its first after
        ``after``) completed in error with ``status``: accept it as a :class:`Failure` (the
        requester's first flush guessed from the run as it went on without it); return why not where the
        vectorized core does not follow that."""
        at, size = access
        k = self._alone(name, 0, ("write",), streams)
        if k is None:
            return (f"buffer '{name}': the access at {format_time(at)} completes in error ({status.ibv_name}), "
                    "which the vectorized core follows only for a WRITE stream of one RC QP, for a count, alone on "
                    "the buffer")
        while solved.extend():  # the run as it would have gone on: where the requester starts flushing, first
            pass
        marks = solved.marks[k, size]
        ops = np.flatnonzero(marks["local"] == at)
        if len(ops) != 1:
            return f"buffer '{name}': two of its accesses come at {format_time(at)}, when they complete in error"
        first = int(ops[0])
        self.failures[k, size] = Failure(name, k, size, first, at, after, status, first_flushed(first, at, marks))
        self.base = exposed(self.bed, self.scenario)
        return None

    def finish(self, streams) -> None:
        """After the run: each QP whose work request failed has its send queue stopped and is in the error state, its
        error completion delivered (:meth:`models.verbs.qp.QueuePair.to_error`), and each requester has counted the
        RNR NAKs its requests got, as the event engine's run leaves them."""
        for k in self.retries.windows:
            streams[k].src.qp.rnr_naks += self.retries.total(k)
        for k in self.losses.links:
            streams[k].src.qp.frames_lost += self.losses.total(k)
        for failure in self.failures.values():
            qp = streams[failure.stream].src.qp
            qp.sq_failed = True
            qp.to_error(completing=True)
            qp.error_completed()

    def _invalidated(self, name: str) -> str | None:
        """An event zapped pages of ODP buffer ``name``: the accesses after it are scanned again (the next that
        finds a page missing faults), unless a fault of the buffer was being handled then (the event engine asks
        the held access again when it is done, and it faults once more)."""
        now = self.bed.env.now
        if any(start <= now < end for start, end in self.holds(name)):
            return f"buffer '{name}' was invalidated at {format_time(now)} while one of its page faults was handled"
        self.base = exposed(self.bed, self.scenario)
        return None

    def confirm(self, solved: Solved, streams) -> str | None:
        """Why ``solved`` may not stand: a move's first access after the zap came at another time than its
        re-fault was made for, or READ responses landed out of order where a stream's steps change (a move, a
        translation cache's first misses; a READ's max_rd_atomic slot
        goes back when its response lands, and the core passes READ ``i`` at the landing of READ
        ``i - max_rd_atomic``, which is the slots' answer only while they land in order), or an error completion's
        split of the stream does not hold (:meth:`Failure.settled`; where only its first flush
        moved, :attr:`unsettled` says to solve again)."""
        for (k, size), marks in solved.marks.items():
            if "landing" in marks and (np.diff(marks["landing"]) < 0).any():
                return (f"the responses of READ workload '{streams[k].work.name or streams[k].work.kind}' at "
                        f"{format_size(size)} landed out of order where its steps change (its buffer moved or a "
                        "translation cache missed for one of them), which max_rd_atomic's slots see")
        for key, failure in self.failures.items() if solved.complete else ():
            verdict = failure.settled(solved.marks[key])
            if isinstance(verdict, str):
                return verdict
            if verdict is not None:
                failure.flushed, self.unsettled = verdict, True
        for remote, kept in ((False, self.moves), (True, self.remote_moves)):
            for name, moves in kept.items():
                for move in moves:
                    first = _first_access(solved, streams, name, move.zapped_ps, remote)
                    if (first and first[0]) != move.faulted_ps:
                        return f"buffer '{name}': the run with its move reached it first at another time"
        return None


def _not_refaulted(answer: WcStatus | None) -> str:
    """What an access got instead of the answer expected (:meth:`DmabufBacking.translate`'s answer)."""
    if isinstance(answer, WcStatus):
        return f"completes in error ({answer.ibv_name}) instead of re-faulting"
    return "reaches memory without re-faulting"


def _first_access(solved: Solved, streams, name: str, zapped_ps: int, remote: bool = False) -> tuple[int, int] | None:
    """The earliest translation of buffer ``name`` as a source (``remote``: at the responder, by any attempt) at or
    after ``zapped_ps``, and its size (solving on until no later one can come earlier; each piece is looked at
    once)."""
    def earliest(key: tuple[int, int], piece: Finished) -> tuple[int, int] | None:
        if streams[key[0]].buffers[int(remote)] != name:
            return None
        times = [t[t >= zapped_ps] for label, t in piece.marks.items()
                 if (label.startswith(REMOTE) if remote else label == "local")]
        after = np.concatenate(times) if times else ()
        return None if not len(after) else (int(after.min()), key[1])

    first = min(filter(None, (earliest(key, p) for key, pieces in solved.parts.items() for p in pieces)), default=None)
    while not (first and first[0] < solved.horizon) and solved.extend():
        first = min(filter(None, (first, earliest(*solved.last))), default=None)
    return first

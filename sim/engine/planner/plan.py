"""Run a scenario's perftest workloads on the vectorized core (:mod:`sim.fast`) instead of the event engine.

The testbed is built exactly as for the event engine (:func:`sim.engine.harness.setup_run`: same registrations, same
QPs, same random streams, the same stall intervals of link flaps on the ports); each (workload, size)
becomes a :class:`sim.fast.Group` whose steps are the very steps the event engine runs,
:func:`models.nic.datapath.path` (servers numbered, the requester's own translation held while a moved buffer
is re-mapped), and whose window is the workload's posting rule:

* ``write_bw`` / ``read_bw``: ``tx_depth`` outstanding; a completion is delivered in order, and the post it
  releases happens then (``ib_write_bw``'s loop).
* ``read_lat`` / ``atomic_lat``: one READ or atomic at a time (a window of one); ``atomic_bw`` is
  ``read_bw``'s window over atomics.
* ``write_lat`` / ``send_lat``: one ping-pong iteration is one operation (:func:`models.verbs.ping_pong.ping_pong`);
  a send_lat size ends once its last SENDs' completions are polled (:attr:`sim.fast.Group.settles`).
* with a ``duration`` (perftest -D): the same windows over as many operations as the posting allows; each
  stream is solved block by block and ends where :func:`models.verbs.workloads.still_posting`, the event
  engine's own rule, stops it (:attr:`sim.fast.Group.posts_while`).
* ``send_bw``: as ``write_bw``, in its steady state: the server reposts each receive before its SEND arrives, which
  the run checks from the solved arrivals and receive completions (:class:`ReceivesAhead`); where one might come
  late (RNR NAKs) the event engine runs it.

Tables and summaries come from the event engine's own code (:mod:`sim.engine.tables`). Without scenario events or
ODP sources nothing can move or fault, so the solved pieces go straight to the run's operation table and summaries
(:mod:`sim.engine.planner.rows`, the QPs of a workload of several held apart until its size ends) and memory stays
bounded whatever the iterations; otherwise the solve is kept whole, as a move or a fault re-solves from the posts of
the one before. A workload's QPs (``qps``, ``bidirectional``, ``pairs``) are parallel
streams of one round per size (:attr:`sim.fast.Group.parallel`), started as :func:`sim.engine.run._process` starts
them. The domain is decided once, before solving (:func:`decide`): a check where the model decides something
from the run's history (translation caches, data mode's bytes, frames a link outage loses, a responder's page
faults; :attr:`sim.core.steps.Check.decides`) makes the solver refuse the steps (:class:`sim.fast.Unsolvable`),
and so does a work request that would fail (:func:`refused_work`: the event engine completes it in error); a stream's
own ODP page faults are followed (:mod:`sim.engine.planner.faults`), and so are the frames a link outage loses
under a WRITE stream (:mod:`sim.engine.planner.losses`, which takes those checks' decisions over). What
:func:`~sim.engine.planner.domain.outside_domain` lists is not in the steps: tracing, and posting rules a fixed
window does not follow; ``engine: auto`` also avoids BlueFlame-off NICs (each work request waits on the previous
one's payload: exact but solved a round at a time) and a ``send_bw`` over several QPs (exact but slower than the
event engine, :func:`~sim.engine.planner.domain.slow_for_fast`).

Scenario events run on the testbed's own clock, following the solve (:mod:`sim.engine.planner.events`): link flaps
are stall intervals of the ports, known in advance; an event that leaves the workloads' MRs and QPs alone
changes nothing the event engine would have seen; a dma-buf the workloads read from that the exporter moves
is followed (its re-fault holds the accesses, operations posted after the zap take the new route, and the
run is solved again with that), and so is one whose next access completes in error (:mod:`sim.engine.planner.errors`)
and one a stream reaches at the responder, whose requests get RNR NAKs while it is re-mapped
(:mod:`sim.engine.planner.retries`); anything else sends the run back to the event engine, saying what changed.
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np

from models.ib.dmabuf_mr import DmabufBacking
from models.nic.datapath import checked_accesses, path, translation_cache
from models.nic.wqe import Opcode
from models.verbs.ping_pong import ACKED, NoSingleChain, ping_pong
from models.verbs.workloads import POLL_BATCH, Endpoint, posts_inline, still_posting, tagged
from sim.core.steps import Check, Claim, Detour, Fork
from sim.core.units import format_size
from sim.fast import Finished, Group, Server, UniformSeries, Unsolvable, solve
from sim.fast.solver import Problem
from sim.engine.planner.domain import OutsideDomain, outside_domain, refused_work, slow_for_fast
from sim.engine.planner.errors import Failure, failed_by, labelled
from sim.engine.planner.losses import Losses, wires_labelled
from sim.engine.planner.moderation import moderate
from sim.engine.planner.retries import Retries, attempts_labelled
from sim.engine.planner.streams import Stream, by_workload, case_counters, streams
from sim.engine.planner.events import Move, Solved, Watch, segments
from sim.engine.planner.faults import Unfollowed, faults_followed
from sim.engine.planner.receives import ReceivesAhead, ReceivesShort
from sim.engine.planner.resumes import Resumes
from sim.engine.planner.rows import Rows, records
from sim.engine.planner.translations import Translations
from sim.engine.harness import PieceProgress, finish_run, inline_threshold, setup_run, workload_opcode
from sim.store.operations import OperationTable
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec
from sim.engine.tables import RunResult, StreamedSummaries, workload_tables


MAX_MOVES = 16
"""Solves of one run after its first (each move, page fault or change of the decisions settled costs one)."""
CRAWL_BLOCKS, CRAWL_OPS = 32, 100
"""``engine: auto`` hands a run to the event engine once the last this many pieces cut short (a stream's
operations of a block whose claims overlap the next block's) kept fewer than this many operations each on
average: passes that advance a few operations at a time cost more than simulating them (rounds that interact
through a shared PCIe link under a READ's max_rd_atomic gate do that)."""


class _Crawling(Exception):
    """The solve advances so few operations per block that the event engine is faster."""


class CrawlWatch:
    """The operations kept by the latest :data:`CRAWL_BLOCKS` pieces cut short: a crawl that starts after sizes
    solved in long blocks is seen as soon as one that starts the run."""

    def __init__(self) -> None:
        self.kept: list[int] = []

    def cut_short(self, operations: int) -> None:
        """A piece cut short kept ``operations``.

        :raises _Crawling: the latest pieces kept fewer than :data:`CRAWL_OPS` each on average.
        """
        self.kept = (self.kept + [operations])[-CRAWL_BLOCKS:]
        if len(self.kept) == CRAWL_BLOCKS and sum(self.kept) < CRAWL_OPS * CRAWL_BLOCKS:
            raise _Crawling(sum(self.kept) // CRAWL_BLOCKS)


class Declined(NamedTuple):
    """Why ``engine: auto`` runs a scenario on the event engine rather than the vectorized core."""

    reason: str


class Plan(NamedTuple):
    """A scenario inside the vectorized core's domain, its testbed built (:func:`decide`)."""

    bed: object
    started: int
    """When the workloads start (ps)."""
    event_log: list
    ends: list[Stream]
    watch: Watch
    translations: Translations | None


def decide(scenario: Scenario, seed: int, trace: bool = False) -> Plan | str:
    """The vectorized core's domain, decided once before anything is solved: ``scenario``'s testbed built and its
    streams' pipelines checked, or why the event engine runs it. What the scenario says (:func:`outside_domain`;
    under ``engine: auto`` also :func:`slow_for_fast`), work requests that would be refused or fail
    (:func:`refused_work`), a translation cache with scenario events or page faults (which change what it holds), and
    the solver's limits on the steps (:class:`sim.fast.solver.Problem`: a check that decides at run time, gates,
    pools, a duration over a buffer that moves). What only the solve tells is :func:`run_fast`'s."""
    reason = outside_domain(scenario, trace) or (slow_for_fast(scenario) if scenario.engine == "auto" else None)
    if reason:
        return reason
    bed, started, event_log = setup_run(scenario, seed, trace)
    ends = streams(scenario, bed)
    watch, translations = Watch(bed, scenario, ends), _translations(ends, bed.env.now)
    reason = refused_work(ends)
    if not reason and translations is not None and (scenario.events or watch.faults.sources):
        reason = ("a translation cache's hits with scenario events or page faults, which change what it holds: the "
                  "event engine simulates that")
    if not reason and watch.losses.links and (watch.faults.sources or translations is not None):
        reason = "frames a link outage loses with page faults or a translation cache: the event engine simulates that"
    if reason:
        return reason
    pipes = None
    try:
        pipes = pipelines(ends, translations=translations, losses=watch.losses)
        Problem(pipes.servers, pipes.groups)
    except Unsolvable as exc:
        return _unsolved(exc, pipes, ends)
    return Plan(bed, started, event_log, ends, watch, translations)


def run_fast(scenario: Scenario, seed: int, told: PieceProgress | None = None, *, trace: bool = False,
             variant: str = "base", operations: bool = True) -> RunResult | Declined:
    """Run ``scenario`` on the vectorized core; :class:`Declined` when ``engine: auto`` should use the event
    engine, saying why: before solving (:func:`decide`), or at a decision only the solve tells (passes that
    never agree or parallel streams posted at one picosecond, :class:`sim.fast.Unsolvable`; blocks that advance a
    few operations at a time; a page fault the core does not follow; a send_bw's receives running short; a
    scenario event that changes what the data path reads other than by moving a source buffer). Without
    ``operations`` the result keeps no per-operation table.

    :raises OutsideDomain: ``engine: fast`` for a scenario outside the domain.
    """
    def decline(reason: str) -> Declined:
        if scenario.engine == "fast":
            raise OutsideDomain(f"engine fast: {reason}")
        return Declined(reason)

    plan = decide(scenario, seed, trace)
    if isinstance(plan, str):
        return decline(plan)
    bed, started, event_log, ends, watch, translations = plan
    if told is not None:
        told.streams(by_workload(ends))
    # Nothing makes the run be solved again: no event, no page fault, no translation cache.
    once = not scenario.events and not watch.faults.sources and translations is None
    if not once and any(end.work.cq_mod > 1 for end in ends):
        return decline("completions moderated (cq_mod) in a run that scenario events, ODP page faults or a "
                       "translation cache make the vectorized core solve again: the event engine simulates that")
    table = OperationTable() if operations else None
    rows = Rows(ends, table, StreamedSummaries(variant)) if once else None
    solved, pipes = None, None
    resumes = None if once else Resumes()
    try:
        for solves in range(1, MAX_MOVES + 2):
            if solves > 1 and told is not None:
                told.again(solves)
            pipes = pipelines(ends, watch.moves, solved and solved.posts, translations, watch.failures,
                              bool(scenario.events), watch.remote_moves, watch.retries, watch.losses)
            solved = Solved(_pieces(pipes, started, told, crawl=scenario.engine == "auto",
                                    rows=rows, receives=ReceivesAhead(ends), resumes=resumes),
                            pipes.ops)
            changed = watch.follow(solved)
            if not solved.complete and not changed:
                continue  # a link outage's decisions differ on the solve's prefix: solved again with them
            reason = watch.confirm(solved, ends)
            if reason:
                break
            if not changed and watch.unsettled:
                watch.unsettled = False
                continue  # the requester's first flush came elsewhere: solved again with that
            if not changed and watch.retries.settle(solved.marks):
                continue  # a request got another count of RNR NAKs: solved again with that
            if not changed and watch.losses.settle(solved.marks):
                continue  # a link outage lost other requests: solved again with that
            reason = None if changed else watch.losses.confirm(solved.marks)
            if reason:
                break
            if not changed and translations is not None and translations.settle(
                    solved.marks, {k: _local_check(end.work) for k, end in enumerate(ends)}):
                continue  # another operation reached a translation first: solved again with that
            if not changed:
                end = _settled(ends, solved)
                changed = watch.advance(end)
                if not changed:
                    watch.clock(end)
                    break
            reason = watch.fold(changed, solved, ends)
            if reason:
                break
        else:
            reason = (f"the run was solved again more than {MAX_MOVES} times (buffers that moved, page faults, and "
                      "the decisions settled against each solve)")
    except Unsolvable as exc:
        return decline(_unsolved(exc, pipes, ends))
    except _Crawling as exc:
        return decline(f"the vectorized core keeps only about {exc} operations per block here (its passes settle "
                       "a few rounds at a time): the event engine is faster")
    except Unfollowed as exc:
        return decline(f"{exc}: the event engine simulates that")
    except OverflowError as exc:
        return decline(f"{exc}: the event engine simulates that")
    except ReceivesShort as exc:
        depth, consequence = exc.args
        return decline(f"send_bw's receives ({depth}) may not be posted before every SEND arrives, so {consequence}")
    if reason:
        return decline(f"{reason}: the event engine simulates that")
    watch.finish(ends)
    cases = case_counters(ends, watch.retries, watch.losses)
    if rows is not None:
        return finish_run(scenario, seed, bed, variant, started, event_log, table, rows.finish(), cases, "fast")
    summaries = []
    for work, mine in zip(scenario.workload, by_workload(ends)):
        for size in work.size_list():
            parts = [records(work, solved.posts[k, size], solved.done[k, size],
                             failed_by(watch.failures, k, work.size_list(), size), size) for k in mine]
            summaries.append(workload_tables(work, size, parts[0] if len(parts) == 1 else tagged(parts), variant,
                                             table))
    return finish_run(scenario, seed, bed, variant, started, event_log, table, summaries, cases, "fast")


def fast_refusal(scenario: Scenario, trace: bool = False) -> str | None:
    """Why :func:`run_fast` would refuse ``scenario`` before solving (:func:`decide`); None when it would not (the
    solve may find more). Builds the testbed, simulates nothing."""
    plan = decide(scenario, scenario.seed, trace)
    return plan if isinstance(plan, str) else None


def _unsolved(exc: Unsolvable, pipes: Pipelines, ends: list[Stream]) -> str:
    """``exc`` in words, naming the workload and size whose steps it refuses."""
    where = ""
    if exc.group is not None:
        k, size = pipes.labels[exc.group]
        where = f" of workload '{ends[k].work.name or ends[k].work.kind}' at {format_size(size)}"
    return f"the vectorized core does not solve the steps{where}: {exc.reason}"


def _pieces(pipes: Pipelines, start_ps: int, told: PieceProgress | None, crawl: bool = False,
            rows: Callable[[int, int, Finished, bool], None] | None = None,
            receives: Callable[[int, int, Finished], None] | None = None, resumes: Resumes | None = None):
    """Solve ``pipes`` from ``start_ps`` (with ``resumes``, from where the last solve still holds): yields
    ``((workload index, size), piece)`` in order; with ``rows``
    each piece goes to it and only its last operation is yielded. ``told`` (a progress display's) is told of each
    piece. ``receives`` checks each piece first (:class:`ReceivesAhead`).

    :raises _Crawling: ``crawl`` and the latest pieces cut short keep too few operations (:class:`CrawlWatch`).
    :raises ReceivesShort: from ``receives``.
    """
    watch = CrawlWatch()
    solved = resumes.pieces(pipes, start_ps) if resumes is not None else (
        (pipes.labels[piece.group], piece) for piece in solve(pipes.servers, pipes.groups, start_ps))
    for (k, size), piece in solved:
        if receives is not None:
            receives(k, size, piece)
        if told is not None:
            told.piece((k, size), piece.lo, piece.post)
        ended = piece.lo + len(piece.post) == pipes.ops[k, size]  # the stream's last piece
        if crawl and not ended:
            watch.cut_short(len(piece.post))
        if rows is not None:
            rows(k, size, piece, ended)
            # Copies: a view of the block's last operation would keep the whole block's arrays alive.
            piece = replace(piece, lo=piece.lo + len(piece.post) - 1, post=piece.post[-1:].copy(),
                            done=piece.done[-1:].copy(),
                            marks={label: v[-1:].copy() for label, v in piece.marks.items()})
        yield (k, size), piece


def _settled(ends: list[Stream], solved: Solved) -> int:
    """When the event engine's run ends: the last completion or, after a ping-pong, the completions of its last
    two messages seen by their pollers, whichever is later (:func:`sim.engine.harness.drain` waits for them) (ps)."""
    end = max(int(d[-1]) for d in solved.done.values())
    k, last = len(ends) - 1, ends[-1]
    if last.work.rule.ping_pong:
        marks = solved.marks[k, last.work.size_list()[-1]]
        end = max([end] + [int(marks[label][-1]) for label in ACKED])
    return end


class Pipelines(NamedTuple):
    """What :func:`sim.fast.solve` takes, and each group's workload and message size."""

    servers: list[Server]
    groups: list[Group]
    labels: list[tuple[int, int]]
    """Per group: its stream's index and the message size (a stream split where its buffer moved has
    several groups)."""
    ops: dict[tuple[int, int], int]
    """Per stream index and size: its operations (a duration's: :data:`TIMED_OPS` until the solve finds where its
    posting stops)."""


def pipelines(ends: list[Stream], moves: dict[str, list[Move]] | None = None,
              posts: dict[tuple[int, int], np.ndarray] | None = None,
              translations: Translations | None = None, failures: dict[tuple[int, int], Failure] | None = None,
              watched: bool = False, remote_moves: dict[str, list[Move]] | None = None,
              retries: Retries | None = None, losses: Losses | None = None) -> Pipelines:
    """The servers and groups of ``ends`` in run order. ``moves`` of a buffer a workload reads from (its
    ``from``) hold its translations in each move's re-fault interval and send the operations posted after
    each move's zap to where the buffer went: the first such operation of each (workload, size) is found in
    ``posts`` (the previous solve's posts, exact up to there). ``translations``: the streams' translation-cache
    stages (:mod:`sim.engine.planner.translations`; none may move then). ``failures``: the streams' error completions by
    (stream, size) (:mod:`sim.engine.planner.errors`); ``watched``: label the checks they are settled by.
    ``remote_moves`` of a buffer a workload reaches at the responder send the operations posted after each zap to
    where it went, and ``retries`` gives the RNR NAKs each operation gets meanwhile
    (:mod:`sim.engine.planner.retries`); ``losses``: the requests link outages lose
    (:mod:`sim.engine.planner.losses`)."""
    servers: dict[int, int] = {}
    names: list[Server] = []
    groups, labels, ops = [], [], {}
    for mine in by_workload(ends):  # one workload's streams are solved together
        sizes = [_groups(ends[w], servers, names, (moves or {}).get(ends[w].buffers[0], []),
                         {s: p for (v, s), p in (posts or {}).items() if v == w}, w, ops, translations,
                         failures or {}, watched, (remote_moves or {}).get(ends[w].buffers[1], []), retries, losses)
                 for w in mine]
        for each in zip(*sizes):  # one size: the streams of every QP at once
            for stream, (w, (size, parts)) in enumerate(zip(mine, each)):
                for j, group in enumerate(parts):
                    groups.append(replace(group, parallel=stream > 0 and j == 0))
                    labels.append((w, size))
    return Pipelines(names, groups, labels, ops)


class _Draws:
    """Every ``stride``-th draw of a QP's poll-delay series from ``phase``, operations numbered from ``first()``
    (known once the sizes before have ended)."""

    def __init__(self, series: UniformSeries, first: Callable[[], int], stride: int = 1, phase: int = 0) -> None:
        self.series, self.first, self.stride, self.phase = series, first, stride, phase

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        first = self.first()
        return self.series.take(self.stride * (first + lo) + self.phase,
                                self.stride * (first + hi) + self.phase - (self.stride - 1), self.stride)

    def finished(self, lo: int) -> None:
        self.series.release(self.stride * (self.first() + lo))


TIMED_OPS = 1 << 40
"""The operations a group of a workload with a duration is given: more than any posts (the solver ends it where
its posting stops, :attr:`sim.fast.Group.posts_while`)."""


def _groups(end: Stream, servers: dict[int, int], names: list[Server], moves: list[Move],
            posts: dict[int, np.ndarray], k: int, ops: dict[tuple[int, int], int],
            translations: Translations | None = None, failures: dict[tuple[int, int], Failure] | None = None,
            watched: bool = False, remote: list[Move] = (), retries: Retries | None = None,
            losses: Losses | None = None):
    """Each size of ``end.work`` with its :class:`Group` s (posted from ``src``'s QP to ``dst``'s):
    the steps of :func:`models.nic.datapath.path` with servers numbered, the requester's own translation
    (labelled ``local``) held in the re-fault intervals of ``moves``. A size whose operations were posted on
    both sides of a move's zap is split into groups that continue one stream. ``ops`` gets each size's operations
    under ``(k, size)``; a duration's groups post while :func:`models.verbs.workloads.still_posting` says so and
    set them when they end. ``remote``: the moves of ``dst``'s buffer, which send the operations posted after each
    zap to where it went; ``retries``: the RNR NAKs of each operation (a run of one count per group); the
    responder's checks are labelled for them where ``watched`` and ``dst`` is a dma-buf MR; ``losses``: the
    requests link outages lose, its checks on the wire labelled where it follows the stream.
    """
    work, src, dst = end.work, end.src, end.dst
    if work.duration is not None and (moves or remote):
        raise Unsolvable(f"a buffer that workload '{work.name or work.kind}', which runs for a duration, reads from "
                         "moves or takes a page fault: where its posting stops then depends on the re-solve")
    timed = {} if work.duration is None else {"posts_while": partial(still_posting, duration_ps=work.duration)}
    qp, peer = src.path_qp(dst), dst.path_qp(src)
    lossy = losses is not None and k in losses.links
    holds = tuple((m.zapped_ps, m.ready_ps) for m in moves if m.ready_ps is not None)

    def followed(check: Check) -> bool:
        """Whether the page faults ``check`` decides are the stream's own ODP faults, which the watch follows."""
        backing = src.mr.backing
        return faults_followed(src.mr) and check.decides == backing.decides

    def indexed(steps, local: str | None = None) -> tuple:
        out = []
        for step in steps:
            if isinstance(step, Claim):
                if id(step.server) not in servers:
                    servers[id(step.server)] = len(names)
                    names.append(Server(step.server.name, stalls=step.server.stalls))
                step = replace(step, server=servers[id(step.server)])
            elif isinstance(step, Check) and step.name == local:
                step = replace(step, holds=holds, label="local", decides=None if followed(step) else step.decides)
            elif isinstance(step, (Fork, Detour)):
                step = replace(step, steps=indexed(step.steps))
            out.append(step)
        return tuple(out)

    def path_of(q, local: Endpoint, remote: Endpoint, opcode: Opcode, size: int, inline: bool, targets):
        return path(q, opcode, size, inline, *targets, checked_accesses(q, [local.mr], remote.mr))

    mine = UniformSeries.following(qp.poll_delays)
    theirs = UniformSeries.following(dst.qp.poll_delays) if work.rule.ping_pong else None
    inline, sizes = inline_threshold(work), work.size_list()
    for j, size in enumerate(sizes):
        ops[k, size] = work.iterations if work.duration is None else TIMED_OPS
        if timed:
            timed["ended"] = partial(ops.__setitem__, (k, size))
        first = partial(lambda before: sum(ops[k, s] for s in before), sizes[:j])
        if work.rule.ping_pong:  # (moves of its buffers never reach here: each end is also a responder)
            opcode, fits = workload_opcode(work), size <= inline
            try:
                chain, _ = ping_pong(path_of(qp, src, dst, opcode, size, fits, end.targets).steps,
                                     path_of(peer, dst, src, opcode, size, fits, end.targets[::-1]).steps)
            except NoSingleChain as exc:
                raise Unsolvable(str(exc)) from None
            # Each QP's poll delays in the event engine's order: the requester's for its message's completion
            # and for the message back, the responder's for the message there and for its own completion.
            draws = {"peer_poll": _Draws(theirs, first, 2), "poll": _Draws(mine, first, 2, 1),
                     f"{ACKED[0]}_poll": _Draws(mine, first, 2), f"{ACKED[1]}_poll": _Draws(theirs, first, 2, 1)}
            quiesces = ACKED if work.rule.receives else ()  # ib_send_lat polls its last SENDs' completions
            yield size, [Group(indexed(chain), ops[k, size], 1, draws, settles=quiesces, **timed)]
        else:
            draws = {"poll": _Draws(mine, first)}
            window = work.rule.window(work.tx_depth)
            opcode, local = workload_opcode(work), _local_check(work)
            known = posts.get(size, np.empty(0, np.int64))  # none yet: all are posted after every move
            failure = failed_by(failures or {}, k, sizes, size)
            parts = [part for lo, hi, targets in segments(end.targets, moves, remote, known, ops[k, size])
                     for found in [path_of(qp, src, dst, opcode, size, posts_inline(opcode, size, inline), targets)]
                     for part in (failure.parts(lo, hi, found, size) if failure else
                                  retries.parts((k, size), lo, hi, found, qp.remote.min_rnr_timer_ps)
                                  if retries and (k, size) in retries.decided else
                                  losses.parts((k, size), lo, hi, found) if lossy else [(lo, hi, found.steps)])]
            if translations is not None:  # (nothing moves or fails then: one part)
                parts = translations.split(k, end, size, parts[0][2], ops[k, size], work.duration is not None)
            moderated = {}
            if work.cq_mod > 1:  # (run_fast keeps it to runs solved once: one part)
                paths = partial(path, qp, opcode, size, posts_inline(opcode, size, inline), *end.targets,
                                checked_accesses(qp, [src.mr], dst.mr))
                parts, window, moderated = moderate(work, parts, paths, draws)
            attempts = lossy or (watched and isinstance(dst.mr.backing, DmabufBacking))
            yield size, [Group(indexed(_watched(steps, watched, attempts, lossy), local), hi, window, draws, lo,
                               polls=POLL_BATCH, **timed, **moderated) for lo, hi, steps in parts]


def _local_check(work: WorkloadSpec) -> str:
    """The check of ``work``'s path where the requester's own MR is translated: a READ's or atomic's response
    landing, else the source's payload read (labelled ``local`` in the vectorized core's steps)."""
    return "response" if workload_opcode(work).reads_remote else "source"


def _translations(ends: list[Stream], now_ps: int) -> Translations | None:
    """The translations of ``ends`` when a node of theirs models a translation cache (None otherwise)."""
    nodes = [n for end in ends for n in (end.src.qp.node, end.dst.qp.node)]
    return Translations(now_ps) if any(translation_cache(n) is not None for n in nodes) else None


def _watched(steps: tuple, watched: bool, attempts: bool, wires: bool) -> tuple:
    """``steps`` with the checks a watched run settles its error completions by labelled (``watched``), with
    ``attempts`` the responder's check of each attempt (:func:`~sim.engine.planner.retries.attempts_labelled`), and
    with ``wires`` its checks on the wire (:func:`~sim.engine.planner.losses.wires_labelled`)."""
    steps = labelled(steps) if watched else steps
    steps = attempts_labelled(steps) if attempts else steps
    return wires_labelled(steps) if wires else steps

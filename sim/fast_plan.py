"""Run a scenario's perftest workloads on the vectorized core (:mod:`sim.fast`) instead of the event engine.

The testbed is built exactly as for the event engine (:func:`sim.run.setup_run`: same registrations, same
QPs, same random streams, the same stall intervals of link flaps on the ports); each (workload, size)
becomes a :class:`sim.fast.Group` whose steps are the stage lists of :func:`models.datapath.plan`, strung
together the way :func:`models.datapath.run_work_request` walks them, and whose window is the workload's
posting rule:

* ``write_bw`` / ``read_bw``: ``tx_depth`` outstanding; a completion is seen after the CPU's poll delay and
  delivered in order, and the post it releases happens then (``ib_write_bw``'s loop). READs also pass the QP's
  ``max_rd_atomic`` gate, released when the response's last write reaches the requester's PCIe link.
* ``read_lat``: one READ at a time (a window of one).
* ``write_lat``: one ping-pong iteration is one operation: A's WRITE until it lands at B, B's poll delay,
  B's WRITE until it lands at A, A's poll delay; each WRITE's acknowledgement and completion entry run in a
  side chain (they still occupy links and engines).

Tables and summaries come from :mod:`sim.run`'s own code. The domain is host and GPU memory registered
without page faults (pinned, peer memory, dma-buf), no translation caches, one QP per workload, no data mode
or tracing; ``engine: auto`` also avoids BlueFlame-off NICs, whose WQE fetches make every work request wait
on the previous one's payload on the PCIe link (exact but solved a round at a time).

Scenario events run on the testbed's own clock after the solve, up to the workloads' end, and write the same
event table. Link flaps are stall intervals of the ports, known in advance. Every other event acts on the
data path only through the workloads' MRs and QPs (it shares no server with them and reads no access
history), so :func:`exposed` compares what the data path reads of them before and after: an event that left
them alone (memory pressure that evicts other buffers or fails, a managed-memory job, a migration the pin
blocks, a fault on another node or after the end) changes nothing the event engine would have seen; one that
moved, invalidated or broke them sends the run back to the event engine, with the names of what changed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from models.datapath import memory_target, plan
from models.verbs import Opcode
from models.workloads import PERFTEST_WRITE_LAT_INLINE, Endpoint, OpRecords
from sim.core.errors import SimError
from sim.fast import (Claim, Delay, Fork, Gate, Group, Rebase, Server, Sleep, UndecidableOrder, UniformSeries, Wait,
                      Wake)
from sim.fast import solve
from sim.run import Progress, RunResult, _endpoints, finish_run, setup_run, workload_tables
from sim.scenario.resolve import nic_params
from sim.scenario.schema import Scenario, WorkloadSpec


class OutsideDomain(SimError):
    """``engine: fast`` was asked for a scenario the vectorized core does not simulate."""


def outside_domain(scenario: Scenario, trace: bool = False) -> str | None:
    """Why the vectorized core cannot run ``scenario`` (None when it can)."""
    if trace:
        return "a trace records the event engine's individual events"
    if scenario.data:
        return "data mode moves real bytes, which only the event engine does"
    for node in scenario.nodes:
        if node.nic.translation_cache or node.iommu != "off":
            return (f"node {node.name} models translation caches (NIC MTT or IOMMU), whose hits depend on "
                    "each access's history: the event engine simulates them")
    buffers = {b.name: b for b in scenario.buffers}
    nodes = {n.name: n for n in scenario.nodes}
    for work in scenario.workload:
        if work.qps > 1:
            return (f"workload '{work.name or work.kind}' streams {work.qps} QPs at once: the vectorized core "
                    "solves one stream at a time")
        for name in (work.from_, work.to):
            spec = buffers[name]
            if spec.registration == "odp":
                return (f"buffer '{name}' is registered with ODP: its page faults need the event engine")
        inline = _inline(work)
        for name in (work.from_, work.to) if work.kind == "write_lat" else (work.from_,):
            limit = nic_params(nodes[buffers[name].on.split(".")[0]]).max_inline
            if work.kind.startswith("write") and any(limit < s <= inline for s in work.size_list()):
                return f"inline {inline} exceeds max_inline {limit}: the event engine rejects those work requests"
    return None


def slow_for_fast(scenario: Scenario) -> str | None:
    """Why ``engine: auto`` prefers the event engine for a scenario the vectorized core could run."""
    for node in scenario.nodes:
        if not nic_params(node).blueflame:
            return (f"node {node.name} fetches WQEs by DMA (blueflame off): each work request then waits on "
                    "the previous payload, which the vectorized core solves a round at a time")
    return None


def run_fast(scenario: Scenario, seed: int, progress: Progress | None = None, *, trace: bool = False,
             variant: str = "base", notice: Callable[[str], None] | None = None) -> RunResult | None:
    """Run ``scenario`` on the vectorized core; None when ``engine: auto`` should use the event engine
    (``notice`` is told why, default: one line on stderr).

    :raises OutsideDomain: ``engine: fast`` for a scenario outside the domain.
    :raises sim.fast.UndecidableOrder: ``engine: fast`` and two claims whose order needs the event engine.
    """
    def decline(reason: str) -> None:
        if scenario.engine == "fast":
            raise OutsideDomain(f"engine fast: {reason}")
        (notice or _stderr)(f"{scenario.name}: engine auto: using the event engine: {reason}")

    reason = outside_domain(scenario, trace) or (slow_for_fast(scenario) if scenario.engine == "auto" else None)
    if reason:
        return decline(reason)
    bed, started, event_log = setup_run(scenario, seed, trace)
    servers, groups, labels = pipelines(scenario, bed)
    before = exposed(bed, scenario)
    posted = [[] for _ in groups]
    completed = [[] for _ in groups]
    try:
        for piece in solve(servers, groups, started):
            posted[piece.group].append(piece.post)
            completed[piece.group].append(piece.done)
            if progress:
                progress(len(piece.post))
    except UndecidableOrder as exc:
        if scenario.engine == "fast":
            raise
        return decline(str(exc))
    _advance(bed, int(completed[-1][-1][-1]))
    moved = [name for name, state in exposed(bed, scenario).items() if state != before[name]]
    if moved:
        return decline(f"scenario events changed {', '.join(moved)} while the workloads ran (a move, "
                       "invalidation, reclaim or error the data path sees): the event engine simulates that")
    op_frames, summaries = [], []
    for (work, size), post, done in zip(labels, posted, completed):
        post, done = np.concatenate(post), np.concatenate(done)
        latency = (done - post) // 2 if work.kind == "write_lat" else done - post
        frame, row = workload_tables(work, size, OpRecords(post, done, latency, np.ones(len(post), bool)), variant)
        op_frames.append(frame)
        summaries.append(row)
    return finish_run(scenario, seed, bed, variant, started, event_log, op_frames, summaries)


def exposed(bed, scenario: Scenario) -> dict[str, tuple]:
    """What the workloads' data path reads of their MRs and QPs, by name: each MR's key state and its
    backing's :meth:`~models.mr_backing.MrBacking.epoch`, each QP's state. Scenario events do not depend on
    the workloads (no shared server, no access history), so when this is the same after the events ran as
    before, the event engine's run would have seen none of them."""
    names = {name for work in scenario.workload for name in (work.from_, work.to)}
    state = {}
    for name in sorted(names):
        mr = bed.registrations[name].mr
        nic = mr.pd.context.node.nic
        state[f"buffer '{name}'"] = (mr.valid, mr.registered, nic.lookup(mr.lkey) is mr,
                                     mr.backing.epoch() if mr.backing is not None else ())
    for qp in bed.qps:
        state[f"QP {qp.qp_num} on {qp.node.name}"] = (qp.state,)
    return state


def _advance(bed, end_ps: int) -> None:
    """Run the clock to the workloads' end, as the event engine's run ends: the scenario's events due by then
    (all scheduled before the workloads' last step, so processed first at a tie) write their rows."""
    env = bed.env
    if end_ps > env.now:
        env.run(until=end_ps)
    while env.peek() == end_ps:
        env.step()


def pipelines(scenario: Scenario, bed) -> tuple[list[Server], list[Group], list[tuple[WorkloadSpec, int]]]:
    """The servers, the groups (one per workload and size, in run order) and each group's (workload, size)
    for ``scenario`` on ``bed``; creates the workloads' QPs as the event engine does."""
    servers: dict[int, int] = {}
    names: list[Server] = []
    groups, labels = [], []
    for work in scenario.workload:
        ((src, dst),) = _endpoints(bed, work)
        for group, size in _groups(work, src, dst, servers, names):
            groups.append(group)
            labels.append((work, size))
    return names, groups, labels


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _inline(work: WorkloadSpec) -> int:
    """The workload's inline threshold (the rule of :func:`sim.run._process`)."""
    if work.inline is not None:
        return work.inline
    return PERFTEST_WRITE_LAT_INLINE if work.kind == "write_lat" else 0


class _Draws:
    """Every ``stride``-th draw of a QP's poll-delay series from ``phase``, operations numbered from ``first``."""

    def __init__(self, series: UniformSeries, first: int, stride: int = 1, phase: int = 0) -> None:
        self.series, self.first, self.stride, self.phase = series, first, stride, phase

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        at = self.stride * (self.first + lo) + self.phase
        return self.series.take(at, self.stride * (self.first + hi) + self.phase - (self.stride - 1), self.stride)

    def finished(self, lo: int) -> None:
        self.series.release(self.stride * (self.first + lo))


def _groups(work: WorkloadSpec, src: Endpoint, dst: Endpoint, servers: dict[int, int], names: list[Server]):
    """One :class:`Group` per size of ``work`` (posted from ``src``'s QP to ``dst``'s), with its size.

    An MR with a translation to check (GPU memory through peer memory or a dma-buf) adds the sleeps of
    :func:`models.datapath.run_work_request`'s translations, which never fault here (nothing moves them): the
    requester's at its payload's first read request, the responder's when the request arrives, the READ
    requester's before the response lands.
    """
    qp, peer = src.qp, dst.qp

    def steps(stages, label: str | None = None) -> list:
        out = []
        for k, (server, service, head, tail, latency, eager) in enumerate(stages):
            if server is None:
                out.append(Delay(latency))
                continue
            if id(server) not in servers:
                servers[id(server)] = len(names)
                names.append(Server(server.name, stalls=server.stalls))
            out.append(Claim(servers[id(server)], service, head, tail, latency, eager,
                             label if k == len(stages) - 1 else None))
        return out

    def stages_of(q, local: Endpoint, remote: Endpoint, opcode: Opcode, size: int, inline: bool):
        now = q.pd.context.env.now
        return plan(q, opcode, size, inline, memory_target(local.mr, now), memory_target(remote.mr, now))

    def checked(end: Endpoint) -> list:
        """The sleep of a translation that holds (an access through an MR with a backing)."""
        return [Sleep()] if end.mr.backing is not None else []

    def write(q, local: Endpoint, remote: Endpoint, size: int, inline: bool, fork: bool) -> list:
        """A WRITE from post to landing, its acknowledgement and completion entry after it or forked."""
        p = stages_of(q, local, remote, Opcode.RDMA_WRITE, size, inline)
        forward = steps(p.forward)
        if p.issue and local.mr.backing is not None:  # translated when its first read request is issued
            forward[p.issue:p.issue] = [Sleep(p.forward[p.issue - 1][2]), Rebase(False)]
        ack = [Rebase(True, -q.remote.node.pcie.params.write_latency_ps), *steps(p.reply)]
        head = [Delay(q.node.nic.params.doorbell_ps), *steps(p.to_engine), Rebase(False), *forward,
                *checked(remote), *steps(p.remote)]
        return head + [Fork(tuple(ack)), Rebase(True)] if fork else head + ack + [Rebase(True)]

    def read(size: int) -> list:
        p = stages_of(qp, src, dst, Opcode.RDMA_READ, size, False)
        split = len(p.remote) - p.landing
        return [Delay(qp.node.nic.params.doorbell_ps), *steps(p.to_engine), Rebase(False),
                Gate(qp.node.nic.params.max_rd_atomic, "landing"), *steps(p.forward), *checked(dst),
                *steps(p.remote[:split]), *checked(src), *steps(p.remote[split:-1]),
                *steps(p.remote[-1:], "landing"), Rebase(True)]

    mine = UniformSeries.following(qp.poll_delays)
    theirs = UniformSeries.following(peer.poll_delays) if work.kind == "write_lat" else None
    inline, first = _inline(work), 0
    for size in work.size_list():
        if work.kind == "write_lat":
            fits = size <= inline
            chain = [*write(qp, src, dst, size, fits, True), Wake(), Wait("peer_poll"),
                     *write(peer, dst, src, size, fits, True), Wake(), Wait("poll")]
            draws = {"peer_poll": _Draws(theirs, first, 2), "poll": _Draws(mine, first, 2, 1)}
            window = 1
        else:
            body = write(qp, src, dst, size, size <= inline, False) if work.kind == "write_bw" else read(size)
            chain = [*body, Delay(draws="poll"), Wake()]
            draws = {"poll": _Draws(mine, first)}
            window = 1 if work.kind == "read_lat" else work.tx_depth
        yield Group(tuple(chain), work.iterations, window, draws), size
        first += work.iterations

"""What both engines do around the simulation of a scenario's workloads: build the testbed and start its
events, connect each workload's QPs; once the workloads return, let what is in flight complete, check every
work request completed, count the protocol's activity and assemble the :class:`~sim.engine.tables.RunResult`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from models.nic.wqe import Opcode
from models.dmabuf.gpu_export import pin_outcome
from models.nic.transport import QpType, qp_type_of, receive_overhead
from models.verbs.ah import ibv_create_ah, ibv_query_gid
from models.verbs.qp_state import AhAttr
from models.verbs.query import ibv_query_port
from models.verbs.cq import ibv_create_cq
from models.verbs.qp import PERFTEST_QKEY, ibv_create_qp
from models.verbs.recv import SrqAttr
from models.verbs.workloads import PERFTEST_WRITE_LAT_INLINE, Endpoint
from models.verbs.xrc import (O_CREAT, SrqInitAttrMask, SrqType, XrcdInitAttrMask, create_xrc_qp_user,
                              ibv_create_srq_ex, ibv_get_srq_num, ibv_open_xrcd)
from sim.engine.build import Testbed, build, qp_device
from sim.core.errors import InvariantViolation
from sim.engine.events import log_unreached, schedule_events
from sim.engine.library import run_library
from sim.store.operations import OperationTable
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec
from sim.engine.tables import RunResult, registration_rows

Progress = Callable[[int], None]
"""Called with the number of operations just simulated."""


class Covered:
    """What a progress display is told of a run's workloads for a duration: per case (workload index, size), the
    simulated time its operations reached since the case began, up to the duration, as it grows (``told``, ps).
    Both engines tell one of the same run, each case no further than once (a fallback repeats none of it)."""

    def __init__(self, told: Callable[[int], None] | None, scenario: Scenario) -> None:
        self.told, self.reached, self.starts = told, {}, {}
        self.cases = {(k, size): w.duration for k, w in enumerate(scenario.workload) if w.duration is not None
                      for size in w.size_list()}

    def reach(self, key: tuple[int, int], now_ps: int, begun_ps: int) -> None:
        """Case ``key`` (begun at ``begun_ps``, where first told) has simulated up to ``now_ps``."""
        if key in self.cases:
            self._tell(key, now_ps - self.starts.setdefault(key, begun_ps))

    def finish(self, key: tuple[int, int]) -> None:
        """Case ``key`` is done: the rest of its duration (its posting stopped before the duration ended)."""
        if key in self.cases:
            self._tell(key, self.cases[key])

    def end(self) -> None:
        """The run is done: :meth:`finish` of every case."""
        for key in self.cases:
            self.finish(key)

    def _tell(self, key: tuple[int, int], covered: int) -> None:
        covered = min(max(0, covered), self.cases[key])
        if self.told is not None and covered > self.reached.get(key, 0):
            self.told(covered - self.reached.get(key, 0))
            self.reached[key] = covered


class PieceProgress:
    """What a progress display was told of the pieces the vectorized core solved in one run: each (stream index,
    size)'s operations, once over the run's solves, and the simulated time they covered (:class:`Covered`)."""

    def __init__(self, progress: Progress | None, covered: Covered,
                 solving_again: Callable[[int], None] | None = None) -> None:
        self.progress, self.covered, self.operations = progress, covered, {}
        self.workload_of: dict[int, int] = {}
        self.solving_again = solving_again
        """Told the number of each solve from the second on (the display names it)."""

    def streams(self, by_workload: list[list[int]]) -> None:
        """The streams the core solves, by workload (:func:`sim.engine.planner.streams.by_workload`), so that a
        stream's time counts as its workload's."""
        self.workload_of = {k: i for i, mine in enumerate(by_workload) for k in mine}

    def again(self, solve: int) -> None:
        """The run is solved again (its ``solve``-th solve, 2 on): the operations it solves again were counted, so
        the display says so until the count moves on."""
        if self.solving_again is not None:
            self.solving_again(solve)

    def piece(self, key: tuple[int, int], lo: int, post) -> None:
        """Operations ``lo..`` of ``key`` (stream index, size) were solved, posted at ``post`` (ps)."""
        done = lo + len(post)
        if self.progress and done > self.operations.get(key, 0):
            self.progress(done - self.operations.get(key, 0))
            self.operations[key] = done
        if len(post):
            self.covered.reach((self.workload_of[key[0]], key[1]), int(post[-1]), int(post[0]))


def total_duration_ps(scenario: Scenario) -> int | None:
    """The simulated time a progress display follows for a run of workloads for a duration: each one's duration at
    each of its sizes (ps); None unless every workload runs for a duration."""
    if not scenario.workload or any(w.duration is None for w in scenario.workload):
        return None
    return sum(w.duration * len(w.size_list()) for w in scenario.workload)


def setup_run(scenario: Scenario, seed: int, trace: bool = False) -> tuple[Testbed, int, list[dict]]:
    """Build the testbed and start the scenario's events; returns it, the workloads' start and the event log."""
    bed = build(scenario, seed, trace=trace)
    event_log: list[dict] = []
    started = bed.env.now
    for gpu in bed.gpus.values():
        event_log.append({"time_ps": started, "kind": "workloads-start", "target": gpu.name, "bytes": 0,
                          "evicted": 0, "outcome": "baseline", "gpu_used": gpu.memory.used})
    for reg in bed.registrations.values():
        outcome = pin_outcome(reg.allocation) if reg.allocation is not None else None
        if outcome is not None:
            event_log.append({"time_ps": started, "kind": "registration", "target": reg.buffer,
                              "bytes": reg.size_bytes, "evicted": 0, "outcome": outcome,
                              "gpu_used": bed.gpus[f"{reg.node}.{reg.location}"].memory.used})
    schedule_events(bed, scenario, started, event_log)
    return bed, started, event_log


def endpoints(bed: Testbed, work: WorkloadSpec) -> list[tuple[Endpoint, Endpoint]]:
    """The workload's ``qps`` connected QP pairs (requester end, responder end) for each of its buffer pairs, each
    QP on the NIC its ``rails`` policy picks (:func:`sim.engine.build.qp_device`) and with its own CQs; a SEND
    test's QPs have a receive queue ``rx_depth`` deep and a receive CQ of their own. With ``cq_mod`` above 1 the
    QPs signal only the work requests posted with IBV_SEND_SIGNALED; ``max_rd_atomic`` sets both ends' READ
    limits."""
    depth = max(work.tx_depth, 2)
    receives = work.rx_depth if work.rule.receives else 0
    pairs = []
    for names in work.buffer_pairs():
        for k in range(work.qps):
            ends = []
            for reg in (bed.registrations[name] for name in names):
                ctx, pd_ = qp_device(bed, reg, work.rails, k)
                cq = ibv_create_cq(ctx, 2 * depth)
                recv_cq = ibv_create_cq(ctx, 2 * receives) if receives else None
                end = Endpoint(None, reg.mr_on(ctx.node.device), reg.addr)
                if work.transport == "xrc":
                    ends.append(xrc_end(end, pd_, cq, recv_cq, depth, receives, work.cq_mod, responder=bool(ends)))
                    continue
                qp = ibv_create_qp(pd_, cq, depth, sq_sig_all=work.cq_mod == 1, recv_cq=recv_cq,
                                   max_recv_wr=receives, qp_type=qp_type_of(work.transport))
                ends.append(dataclasses.replace(end, qp=qp))
            if work.transport == "xrc":
                ends = [dataclasses.replace(ends[0], srqn=ibv_get_srq_num(ends[1].srq)), ends[1]]
                ends[0].qp.connect(ends[1].qp, work.max_rd_atomic, work.qp_timeout)
            elif work.transport == "ud":
                ends = datagram_ends(bed, ends)
            else:
                ends[0].qp.connect(ends[1].qp, work.max_rd_atomic, work.qp_timeout)
            bed.qps.extend(e.qp for e in ends)
            pairs.append((ends[0], ends[1]))
    bed.flows[work.name or work.kind] = pairs
    return pairs


def xrc_end(end: Endpoint, pd, cq, recv_cq, depth: int, receives: int, cq_mod: int, responder: bool) -> Endpoint:
    """One end of an XRC workload (perftest ``-c XRC``): the requester an XRC initiator on ``pd``; the responder a
    private XRC domain with an XRC SRQ of ``pd`` (``receives`` deep, completing in ``recv_cq``; one receive and the
    send CQ for a workload that posts none: its requests still name it) and an XRC target QP."""
    if not responder:
        return dataclasses.replace(end, qp=ibv_create_qp(pd, cq, depth, sq_sig_all=cq_mod == 1,
                                                         qp_type=QpType.XRC_SEND))
    xrcd = ibv_open_xrcd(pd.context, XrcdInitAttrMask.FD | XrcdInitAttrMask.OFLAGS, -1, O_CREAT)
    srq = ibv_create_srq_ex(pd.context, XRC_SRQ_MASK, SrqAttr(max(receives, 1), 1), srq_type=SrqType.XRC, pd=pd,
                            xrcd=xrcd, cq=recv_cq or cq)
    return dataclasses.replace(end, qp=create_xrc_qp_user(xrcd), srq=srq)


XRC_SRQ_MASK = SrqInitAttrMask.TYPE | SrqInitAttrMask.PD | SrqInitAttrMask.XRCD | SrqInitAttrMask.CQ
"""What an XRC SRQ's ``ibv_srq_init_attr_ex`` sets."""


def datagram_ends(bed: Testbed, ends: list[Endpoint]) -> list[Endpoint]:
    """Two UD ends brought to RTS with perftest's Q_Key, each given an AH of the other's port (by GID on RoCE,
    as perftest's ``ctx_set_ah`` builds it with the GRH there)."""
    for end in ends:
        end.qp.ready_datagrams(PERFTEST_QKEY)
    out = []
    for end, peer in zip(ends, ends[::-1]):
        peer_ctx = peer.qp.pd.context
        gid = ibv_query_gid(peer_ctx, 1, 0)
        attr = AhAttr(dlid=ibv_query_port(peer_ctx, 1).lid, is_global=bed.fabric.params.transport == "roce", dgid=gid)
        out.append(dataclasses.replace(end, datagram=(ibv_create_ah(end.qp.pd, attr), peer.qp.qp_num, PERFTEST_QKEY)))
    return out


OPCODES = {"write": Opcode.RDMA_WRITE, "read": Opcode.RDMA_READ, "send": Opcode.SEND}
ATOMIC_OPCODES = {"FETCH_AND_ADD": Opcode.ATOMIC_FETCH_AND_ADD, "CMP_AND_SWAP": Opcode.ATOMIC_CMP_AND_SWP}
"""perftest's ``-A`` names and the opcodes they post."""


def workload_opcode(work: WorkloadSpec) -> Opcode:
    """The opcode every work request of ``work`` posts."""
    verb = work.rule.verb
    return ATOMIC_OPCODES[work.atomic] if verb == "atomic" else OPCODES[verb]


def inline_threshold(work: WorkloadSpec) -> int:
    """The largest WRITE or SEND the workload posts inline (bytes): its ``inline``, else perftest's default (only
    the latency tests ``ib_write_lat`` and ``ib_send_lat`` inline by default; perftest's 236 B for SEND is more than
    the presets' ``max_inline``, so send_lat inlines what write_lat does)."""
    if work.inline is not None:
        return work.inline
    return PERFTEST_WRITE_LAT_INLINE if work.rule.inline_by_default else 0


def finish_run(scenario: Scenario, seed: int, bed: Testbed, variant: str, started: int, event_log: list[dict],
               table: OperationTable | None, summaries: list[dict], case_counters: dict, engine: str = "event"
               ) -> RunResult:
    """Registrations, end-of-run checks, counters and the event table: the run's :class:`RunResult` (``engine``:
    the one that ran the workloads, ``event`` or ``fast``). ``case_counters``, each (workload name, size)'s own
    :func:`retry_counters`, go into its summary row beside its errors; the result's ``counters`` hold the run's
    totals."""
    registrations = registration_rows(bed, variant)
    drain(bed)
    log_unreached(bed, scenario, started, event_log)
    check_completions(bed)
    counters = protocol_counters(bed)
    if scenario.data:
        counters |= verify_data(bed, scenario)
    library = run_library(bed, scenario) if scenario.library else None
    summaries = [row | case_counters.get((row["workload"], row["bytes"]), {}) for row in summaries]
    return RunResult(scenario, seed, table and table.close(), summaries, registrations, bed, variant, event_log,
                     counters, library, engine=engine)


def drain(bed: Testbed) -> None:
    """Let work requests still in flight when the last workload returned complete (a ping-pong's last write
    is acknowledged after its data landed)."""
    env = bed.env
    while any(qp.outstanding for qp in bed.qps) and env.peek() != float("inf"):
        env.step()


def check_completions(bed: Testbed) -> None:
    """Every posted work request finished, in order, and a completion covers each but the unsignaled ones after
    its QP's last signaled one (a duration run with completions moderated stops posting when the time is up, as
    perftest does, wherever that falls between two signaled ones: no completion will cover them).

    :raises InvariantViolation: a QP has work requests not finished, or not covered by a completion.
    """
    for qp in bed.qps:
        if qp.next_completion != qp.posted_count or qp.outstanding != qp.unsignaled:
            raise InvariantViolation(f"QP {qp.qp_num} on {qp.node.name}: {qp.posted_count} work requests posted, "
                                     f"{qp.next_completion} completed, {qp.outstanding} outstanding at the end")


def verify_data(bed: Testbed, scenario: Scenario) -> dict[str, int]:
    """Data mode: compare every workload's destination bytes with its source's (the largest message's span).

    WRITE workloads copy ``from`` into ``to``, READ workloads ``to`` into ``from``; atomic workloads copy nothing
    and are not compared, nor is a UD send_lat (each side's receive puts the GRH first, so the pong lands 40 bytes
    into the source and neither buffer is a copy of the other), nor a bidirectional workload (each direction
    writes into the other's source while it is read, so neither buffer ends a copy of the other).
    """
    checked = mismatched = 0
    for work in scenario.workload:
        if (work.rule.verb == "atomic" or (work.rule.ping_pong and work.transport == "ud")
                or work.bidirectional):
            continue
        span = max(work.size_list())
        src, dst = bed.registrations[work.from_], bed.registrations[work.to]
        if work.rule.verb == "read":
            src, dst = dst, src
        skip = receive_overhead(qp_type_of(work.transport))  # a UD receive's GRH comes first
        expected, got = src.current_bytes()[:span], dst.current_bytes()[skip:skip + span]
        checked += span
        mismatched += int(np.count_nonzero(expected != got))
    return {"data_checked_bytes": checked, "data_mismatched_bytes": mismatched}


def retry_counters(bed: Testbed) -> dict[str, int]:
    """The RNR NAKs the requests of every QP got and the frames of theirs a link lost, so far."""
    return {"rnr_naks": sum(qp.rnr_naks for qp in bed.qps), "frames_lost": sum(qp.frames_lost for qp in bed.qps)}


def protocol_counters(bed: Testbed) -> dict[str, int]:
    """What the registration protocol did during the run, summed over MRs (on every NIC), QPs and GPUs."""
    mrs = [mr for r in bed.registrations.values() for mr in r.mrs.values()]
    backings = [mr.backing for mr in mrs if mr.backing is not None]
    return {
        "invalidations": sum(getattr(b, "invalidations", 0) for b in backings),
        "refaults": sum(getattr(b, "faults", 0) for b in backings),
        **retry_counters(bed),
        "evictions": sum(g.evictions for g in bed.gpus.values()),
        "failed_allocations": sum(g.failed_allocations for g in bed.gpus.values()),
        "invariant_violations": sum(len(getattr(b, "violations", ())) for b in backings)
        + sum(len(getattr(r.allocation.exporter, "violations", ())) for r in bed.registrations.values()
              if r.allocation is not None),
        "kernel_warnings": sum(len(n.kernel.warnings) for n in bed.nodes.values()),
    }

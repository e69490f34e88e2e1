"""What the vectorized core does not take, known from the scenario before anything is built: tracing, posting
rules its fixed windows do not follow, and (for ``engine: auto``) the runs it would solve more slowly than the
event engine; and, on the built testbed, the work requests that would be refused or fail (:func:`refused_work`).
What only the solve can tell is decided in :mod:`sim.engine.planner.plan`."""

from __future__ import annotations

from models.nic.refusal import refusal
from models.verbs.send_checks import check_send_wr
from models.verbs.workloads import posts_inline, whole_buffer_receive, work_request
from sim.core.errors import SimError, VerbsError
from sim.core.units import format_size
from sim.engine.harness import inline_threshold, workload_opcode
from sim.scenario.resolve import nic_params
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec


class OutsideDomain(SimError):
    """``engine: fast`` was asked for a scenario the vectorized core does not simulate."""


def outside_domain(scenario: Scenario, trace: bool = False) -> str | None:
    """Why the vectorized core cannot run ``scenario`` (None when it can)."""
    if trace:
        return "a trace records the event engine's individual events"
    for work in scenario.workload:
        posting = _posting_outside(work)
        if posting:
            return f"workload '{work.name or work.kind}' {posting}"
    return None


def _posting_outside(work: WorkloadSpec) -> str | None:
    """Why the vectorized core's fixed windows cannot follow ``work``'s posting (None when they can)."""
    if work.bidirectional and work.rule.receives:
        return (f"is a bidirectional {work.kind}: each QP's CPU then polls receives between its own SENDs, from one "
                "series of poll delays")
    if work.post_list > 1 and work.cq_mod != work.post_list:
        return ("posts lists with more than one completion each (post_list, cq_mod): the vectorized core posts a "
                "list once its one completion before is polled")
    if work.cq_mod > 1 and (not work.rule.streams or workload_opcode(work).reads_remote or work.streams() > 1):
        return ("moderates completions (cq_mod) on a READ, an atomic or several QPs: the vectorized core moderates "
                "one stream of WRITEs or SENDs")
    return None


def slow_for_fast(scenario: Scenario) -> str | None:
    """Why ``engine: auto`` prefers the event engine for a scenario the vectorized core could run."""
    for node in scenario.nodes:
        if not nic_params(node).blueflame:
            return (f"node {node.name} fetches WQEs by DMA (blueflame off): each work request then waits on "
                    "the previous payload, which the vectorized core solves a round at a time")
    for work in scenario.workload:
        if work.post_list > 1:
            return (f"workload '{work.name or work.kind}' posts lists (post_list): the NIC fetches each of their WQEs "
                    "by DMA, each work request then waiting on the previous payload, which the vectorized core "
                    "solves a round at a time")
        small = min(work.size_list())
        if work.rule.streams and work.rule.receives and work.streams() > 1 and small < SEND_PARALLEL_MIN_BYTES:
            return (f"workload '{work.name or work.kind}' is a {work.kind} over {work.streams()} QPs with "
                    f"{format_size(small)} messages: their receive completions share the responder's PCIe link, "
                    "where the vectorized core's passes agree on a few hundred operations at a time")
        both_ways = _writes_both_ways(scenario, work)
        if both_ways:
            return (f"workload '{work.name or work.kind}' {both_ways}, where the vectorized core's passes agree on a "
                    "few hundred operations at a time")
    return None


def _writes_both_ways(scenario: Scenario, work: WorkloadSpec) -> str | None:
    """How ``work``'s WRITE streams carry payloads both ways over one link, each way's acknowledgements or DMA
    read requests queueing among the other way's payloads (None: they do not): a bidirectional write_bw, or one
    whose flows cross rails from GPUs on both sockets of a node. Measured on this project's rail server and two
    ConnectX-7 hosts, 2,000-20,000 WRITEs per stream of 8 B to 1 MiB: the vectorized core took 1.1-1.8x the event
    engine's time for ``ib_write_bw -b`` (1 and 2 QPs) and 1-2x for cross-rail flows from GPUs 0 and 4, 1.7-2x
    from all eight; from four GPUs of one socket it was 4-8x faster, and so was ``ib_read_bw -b`` (2.3-2.7x)."""
    if work.kind != "write_bw":
        return None
    if work.bidirectional:
        return "is a bidirectional write_bw: each side's acknowledgements share a wire with the other side's payloads"
    if work.rails != "cross":
        return None
    nodes = {node.name: node for node in scenario.nodes}
    places = {buffer.name: buffer.on.split(".") for buffer in scenario.buffers}
    sockets: dict[str, set[int]] = {}
    for source, _ in work.buffer_pairs():
        node, device = places[source]
        rails = nodes[node].rails
        if rails is not None and device.startswith("gpu") and device[3:].isdigit():
            sockets.setdefault(node, set()).add(rails.layout().socket_of(int(device[3:])))
    crossing = next((node for node, seen in sockets.items() if len(seen) > 1), None)
    return None if crossing is None else (
        f"crosses rails from GPUs on {len(sockets[crossing])} sockets of node {crossing}: payloads cross its socket "
        "links both ways")


SEND_PARALLEL_MIN_BYTES = 4096
"""The smallest message of a send_bw over several QPs that ``auto`` gives the vectorized core. Measured on two
ConnectX-7 hosts, PCIe Gen5 x16, 400 Gb/s, 5,000 SENDs per QP, 2 and 8 QPs: from 3 KiB up the core solved them 10-15x
faster than the event engine; at 64 B, 256 B and 2 KiB it was 1-7x slower (its passes advanced a few hundred
operations at a time), at 1 KiB 4x faster."""


def refused_work(ends) -> str | None:
    """Why some work requests of ``ends`` (:class:`~sim.engine.planner.plan.Stream` s) would be refused by
    ``ibv_post_send``, complete in error or be dropped, which the vectorized core does not solve
    (:func:`models.verbs.send_checks.check_send_wr` and :func:`models.nic.refusal.refusal` on one of each size, both
    ways for a ping-pong); None when all succeed."""
    for end in ends:
        work = end.work
        opcode, inline = workload_opcode(work), inline_threshold(work)
        ways = [(end.src, end.dst)] + ([(end.dst, end.src)] if work.rule.ping_pong else [])
        for size in work.size_list():
            for src, dst in ways:
                wr = work_request(0, opcode, src, dst, size, posts_inline(opcode, size, inline))
                where = f"workload '{work.name or work.kind}' at {format_size(size)}"
                try:
                    check_send_wr(src.qp, wr)
                except VerbsError as exc:
                    return f"{where}: ibv_post_send refuses its work requests ({exc}), which the event engine reports"
                recv = whole_buffer_receive(0, dst) if opcode.consumes_receive else None
                why = refusal(src.path_qp(dst), wr, recv)
                if why is not None:
                    return f"{where}: its work requests would fail ({why}), which the event engine completes"
    return None

"""The data path of one work request through host, PCIe, NIC and wire, as a chain of FIFO resources.

A message streams through each resource cut-through style: its head enters a resource when the resource
is free, it occupies the resource for its whole service time, and it cannot leave before its tail has
arrived and been served. A :class:`~models.pcie.stage.Stage` is ``(server, service_ps, head_ps, tail_ps,
latency_ps, eager)``:
``head_ps`` is the store-and-forward delay of the first unit (a packet must be received whole before the
NIC uses it; a transmit port puts the first bit on the wire at once), ``tail_ps`` the time the last unit
still needs after it arrives, ``latency_ps`` a pure delay after the resource. ``server`` None makes a
pure-delay stage. A claim normally happens at the simulated time the head arrives, so each resource is an
exact FIFO queue shared by every flow that crosses it.

A stage marked ``eager`` is claimed at once, without waiting for its head: allowed only where the resource
has a single feeder, the previous stage, behind a fixed delay. Its arrivals then come in the feeder's
service order (a later job starts the feeder after the earlier one finished, and finishing takes at least
one segment), so claiming in that order is the same FIFO queue with fewer events. Eager resources are a
PCIe link's downstream completions (fed only by its upstream read requests), a receive engine (fed only by
its port), a receive port on a point-to-point fabric (fed only by the one peer's transmit port) and a send
engine fed by BlueFlame doorbells (each arrives a fixed delay after its post, and posts come in time order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generator, NamedTuple

from simpy import Timeout

from models.fabric import AETH, RETH, Fabric
from models.nic.nic import Nic
from models.nic.translation import Fault, mr_bytes
from models.nic.wqe import RNR_RETRY_INFINITE, Access, Opcode, QpState, SendWR, WcStatus, WorkCompletion
from models.pcie.link import PcieLink, PcieParams, read_tags
from models.pcie.stage import Stage
from models.pcie.topology import dma_read_stages, dma_write_stages
from sim.core import PS_PER_S, Environment
from sim.core.servers import claim_cut_through

_LOCAL_WRITE, _REMOTE_WRITE, _REMOTE_READ = int(Access.LOCAL_WRITE), int(Access.REMOTE_WRITE), int(Access.REMOTE_READ)
"""Access bits as plain ints: IntFlag arithmetic is slow on the per-message path."""


def walk(env, stages: list[Stage], head: int, tail: int) -> Generator:
    """Stream a message whose head and tail reach the first stage at ``head`` and ``tail``.

    Returns (head, tail) times at the far end of the last stage.
    """
    tracing = env.trace.enabled
    for server, service, head_ps, tail_ps, latency, eager in stages:
        if server is not None:
            if not eager and head > (now := env.now):
                yield Timeout(env, head - now)
            start, finish = claim_cut_through(server, head, service, tail + tail_ps)
            if tracing:
                env.trace.slice(server.name, "busy", start, finish)
            head = start + head_ps
            tail = finish
        head += latency
        tail += latency
    return head, tail


def dma_read(link: PcieLink, nbytes: int) -> list[Stage]:
    """Device reads ``nbytes`` of host memory: read tags, MRd requests up, the round trip, CplD completions
    down."""
    p = link.params
    request = p.read_request_ps(min(nbytes, p.mrrs))
    completion = p.read_return_ps(min(nbytes, p.mps))
    tags = read_tags(link, nbytes, p.read_latency_ps)
    return [
        *([tags[0]] if tags else []),
        Stage(link.up, p.read_request_ps(nbytes), request, request, 0, False),
        delay(p.read_latency_ps),
        Stage(link.down, tags[1] if tags else p.read_return_ps(nbytes), completion, completion, 0, True),
    ]


def stream_Bps(stages_of: Callable[[], list[Stage]], nbytes: int, messages: int = 300) -> float:
    """Steady-state rate of back-to-back messages of ``nbytes`` through the stages ``stages_of()`` gives (all
    ``messages`` queued at once, each a process walking them), over the second half of them (bytes/s)."""
    env, done = Environment(), []

    def one() -> Generator:
        _, tail = yield from walk(env, stages_of(), 0, 0)
        done.append(tail)

    for _ in range(messages):
        env.process(one())
    env.run()
    done.sort()
    half = messages // 2
    return (messages - 1 - half) * nbytes * PS_PER_S / (done[-1] - done[half])


def dma_read_stream_Bps(params: PcieParams, nbytes: int, reads: int = 300) -> float:
    """:func:`stream_Bps` of DMA reads of ``nbytes`` over one link with ``params`` (bytes/s)."""
    link = PcieLink("stream", params)
    return stream_Bps(lambda: dma_read(link, nbytes), nbytes, reads)


def dma_write(link: PcieLink, nbytes: int) -> list[Stage]:
    """Device writes ``nbytes`` to host memory with posted MWr TLPs."""
    p = link.params
    tlp = p.write_ps(min(nbytes, p.mps))
    return [Stage(link.up, p.write_ps(nbytes), tlp, tlp, p.write_latency_ps, False)]


def wire(src: Nic, dst: Nic, fabric: Fabric, nbytes: int, first_extra: int = 0) -> list[Stage]:
    """A message from ``src``'s port through the fabric into ``dst``'s port.

    The first bit leaves as soon as the transmit port is free; the receiver holds the first packet until it
    has arrived whole.
    """
    p = fabric.params
    total = p.serialize_ps(nbytes, first_extra)
    first = p.first_packet_ps(nbytes, first_extra)
    return [Stage(src.tx_port, total, 0, 0, p.latency_ps, False),
            Stage(dst.rx_port, total - first, first, 0, 0, fabric.point_to_point)]


def rx_engine(nic: Nic, qp_num: int) -> Stage:
    """Processing and key check by the receive engine of QP ``qp_num`` on ``nic``."""
    p = nic.params
    return Stage(nic.rx_engine(qp_num), p.rx_process_ps, p.rx_process_ps, p.rx_process_ps, p.rx_latency_ps, True)


def delay(ps: int) -> Stage:
    """A pure delay."""
    return Stage(None, 0, 0, 0, ps, False)


class Plan(NamedTuple):
    """The stage lists of one kind of work request on one QP (cached: they depend only on parameters)."""

    to_engine: list[Stage]
    """Doorbell through the send engine (with a WQE fetch when BlueFlame is off)."""
    forward: list[Stage]
    """Send engine to the responder's receive engine (payload read, wire, key check)."""
    remote: list[Stage]
    """Responder side: DMA write of WRITE data, or DMA read + response + requester write for READ."""
    reply: list[Stage]
    """ACK or NAK back to the requester and its CQE write."""
    cqe_ps: int
    """Time the CQE adds after a READ response has landed."""
    landing: int
    """READ: how many of ``remote``'s last stages write the response (and the CQE) at the requester."""
    issue: int
    """WRITE from memory: how many of ``forward``'s first stages issue the payload's first read request (its
    read tags and its request's first hop)."""


def memory_target(mr, now_ps: int) -> str | None:
    """Where a NIC access through ``mr`` goes at ``now_ps`` in its node's PCIe topology: ``gpu0`` for a GPU
    buffer the NIC reaches in VRAM, ``mem0`` for host memory; None when the node has no topology (the NIC's own
    link reaches host memory)."""
    if mr is None or mr.pd.context.node.topology is None:
        return None
    return "mem0" if mr.backing is None else mr.backing.target(now_ps)


def node_dma_read(node, target: str | None, nbytes: int) -> list[Stage]:
    """The NIC of ``node`` reads ``nbytes`` of ``target`` (see :func:`memory_target`)."""
    if target is None:
        return dma_read(node.pcie, nbytes)
    return dma_read_stages(node.topology, "nic0", target, nbytes)


def node_dma_write(node, target: str | None, nbytes: int) -> list[Stage]:
    """The NIC of ``node`` writes ``nbytes`` to ``target``."""
    if target is None:
        return dma_write(node.pcie, nbytes)
    return dma_write_stages(node.topology, "nic0", target, nbytes)


def plan(qp, opcode: Opcode, n: int, inline: bool, local: str | None = None,
         remote_target: str | None = None) -> Plan:
    """Build (or fetch from the QP's cache) the stages a work request crosses; ``local`` and
    ``remote_target`` are the :func:`memory_target` of its two MRs."""
    key = (opcode, n, inline, local, remote_target)
    cached = qp.plans.get(key)
    if cached is not None:
        return cached
    node, peer = qp.node, qp.remote.node
    nic, pnic = node.nic, peer.nic
    fabric: Fabric = qp.pd.context.fabric
    process = nic.params.tx_process_ps
    engine = Stage(nic.tx_engine(qp.qp_num), process, process, process, 0, nic.params.blueflame)
    to_engine = ([] if nic.params.blueflame else dma_read(node.pcie, nic.params.wqe_bytes)) + [engine]
    reply = [delay(pnic.params.tx_latency_ps), *wire(pnic, nic, fabric, 0, AETH), rx_engine(nic, qp.qp_num),
             *dma_write(node.pcie, nic.params.cqe_bytes)]
    cqe_ps = node.pcie.params.write_ps(nic.params.cqe_bytes)
    if opcode is Opcode.RDMA_WRITE:
        forward = [] if inline else node_dma_read(node, local, n)
        forward += [delay(nic.params.tx_latency_ps), *wire(nic, pnic, fabric, n, RETH),
                    rx_engine(pnic, qp.remote.qp_num)]
        remote = node_dma_write(peer, remote_target, n)
    else:
        forward = [delay(nic.params.tx_latency_ps), *wire(nic, pnic, fabric, 0, RETH),
                   rx_engine(pnic, qp.remote.qp_num)]
        if local is None:  # data and CQE stream to host memory over the NIC's link as one write
            landing = dma_write(node.pcie, n + nic.params.cqe_bytes)
        else:
            landing = [*node_dma_write(node, local, n), *dma_write(node.pcie, nic.params.cqe_bytes)]
            cqe_ps += node.pcie.params.write_latency_ps
        remote = [*node_dma_read(peer, remote_target, n), delay(pnic.params.tx_latency_ps),
                  *wire(pnic, nic, fabric, n, AETH), rx_engine(nic, qp.qp_num), *landing]
    issue = 1 + (forward[0][0] is node.pcie.tags) if opcode is Opcode.RDMA_WRITE and not inline else 0
    result = qp.plans[key] = Plan(to_engine, forward, remote, reply, cqe_ps,
                                  len(landing) if opcode is Opcode.RDMA_READ else 0, issue)
    return result


def run_work_request(qp, wr: SendWR) -> Generator:
    """simpy process: carry one RDMA WRITE or READ from doorbell to the polled completion on ``qp`` (a
    connected :class:`~models.verbs.verbs.QueuePair`, the verbs layer's object this module reads and updates)."""
    env = qp.pd.context.env
    node = qp.node
    posted = env.now
    poll_ps = qp.poll_delays.next()
    peer = qp.remote.node
    if node.topology is None and peer.topology is None:
        stages = plan(qp, wr.opcode, wr.length, wr.inline)
    else:
        stages = plan(qp, wr.opcode, wr.length, wr.inline, memory_target(node.nic.lookup(wr.lkey), posted),
                      memory_target(peer.nic.lookup(wr.rkey), posted))
    translating = node.nic.mtt is not None or node.iommu is not None or peer.nic.mtt is not None \
        or peer.iommu is not None
    t = posted + node.nic.params.doorbell_ps
    t, _ = yield from walk(env, stages.to_engine, t, t)
    read_slot = None
    if wr.opcode is Opcode.RDMA_READ:  # the send engine stalls the QP at max_rd_atomic outstanding READs
        read_slot = qp.reads.request()
        if t > env.now:
            yield env.timeout(t - env.now)
        yield read_slot
        t = env.now

    status = WcStatus.SUCCESS
    local_mr = node.nic.lookup(wr.lkey)
    local_need = _LOCAL_WRITE if wr.opcode is Opcode.RDMA_READ else 0
    if qp.state is QpState.ERR:
        status = WcStatus.WR_FLUSH_ERR
    elif local_mr is None or not local_mr.allows(wr.local_addr, wr.length, local_need):
        status = WcStatus.LOC_PROT_ERR
    forward = stages.forward
    reads_source = wr.opcode is Opcode.RDMA_WRITE and not wr.inline
    if status is WcStatus.SUCCESS and reads_source and local_mr.backing is not None:
        # The NIC translates the source when it issues the payload's first read request, once it has a read
        # tag and the earlier WQEs' requests are on the link.
        first, forward = forward[:stages.issue], forward[stages.issue:]
        issued, _ = yield from walk(env, first, t, t)
        t, status = yield from _translated(env, qp, local_mr, wr.local_addr, wr.length,
                                           max(issued - first[-1].head_ps, qp.sq_stalled_until), write=False)
        qp.sq_stalled_until = t  # a page fault stalls the send queue: later WQEs wait behind it
        t = max(t, issued)
    if status is not WcStatus.SUCCESS:
        _, done = yield from walk(env, stages.reply[-1:], t, t)
        _complete_at(env, qp, wr, status, posted, done + poll_ps, read_slot)
        return

    payload = _read_payload(env, local_mr, wr) if wr.opcode is Opcode.RDMA_WRITE else None
    if translating and reads_source:
        t = yield from _translate_first(env, node, local_mr, wr.local_addr, wr.length, t, write=False)
    head, tail = yield from walk(env, forward, t, t)
    remote_mr = peer.nic.lookup(wr.rkey)
    needed = _REMOTE_WRITE if wr.opcode is Opcode.RDMA_WRITE else _REMOTE_READ
    if remote_mr is None or remote_mr.backing is not None or not _remote_ok(qp, wr, needed):
        status, head, tail = yield from _responder_accepts(env, qp, wr, stages, head, tail)
    if translating and status is WcStatus.SUCCESS:
        ready = yield from _translate_first(env, peer, remote_mr, wr.remote_addr, wr.length, head,
                                            write=wr.opcode is Opcode.RDMA_WRITE)
        head, tail = ready, max(tail, ready)
    if status is not WcStatus.SUCCESS:
        _, done = yield from walk(env, stages.reply, tail, tail)
    elif wr.opcode is Opcode.RDMA_WRITE:
        _write_payload(env, remote_mr, wr.remote_addr, payload)
        _, landed = yield from walk(env, stages.remote, head, tail)
        _notify_landed(env, wr, landed)
        # The responder acknowledges once the last TLP is on its PCIe link: a full receive path backs up
        # into the fabric, so the requester's completions are paced by the slowest resource.
        issued = landed - qp.remote.node.pcie.params.write_latency_ps
        _, done = yield from walk(env, stages.reply, issued, issued)
    else:
        payload = _read_payload(env, qp.remote.node.nic.lookup(wr.rkey), wr, remote=True)
        split = len(stages.remote) - stages.landing
        response, landing = stages.remote[:split], stages.remote[split:]
        head, tail = yield from walk(env, response, head, tail)
        if local_mr.backing is not None:  # the response is written through the local MR's translation
            head, status = yield from _translated(env, qp, local_mr, wr.local_addr, wr.length, head, write=True)
            tail = max(tail, head)
        if status is WcStatus.SUCCESS:
            _write_payload(env, local_mr, wr.local_addr, payload)
            if translating:
                head = yield from _translate_first(env, node, local_mr, wr.local_addr, wr.length, head, write=True)
                tail = max(tail, head)
            _, done = yield from walk(env, landing, head, tail)
            _notify_landed(env, wr, done - stages.cqe_ps)
        else:
            _, done = yield from walk(env, stages.reply[-1:], head, head)
    _complete_at(env, qp, wr, status, posted, done + poll_ps, read_slot)


def translation_stages(node, mr, addr: int, length: int, now_ps: int, *, write: bool) -> list[Stage]:
    """What translating one access costs before its data moves: NIC MPT/MTT cache misses (DMA reads of the
    entries), the deep-MR walk of a large MR the NIC writes, and IO-TLB misses of host-memory DMA. Empty when
    the node models neither (the default)."""
    stages: list[Stage] = []
    mtt = node.nic.mtt
    if mtt is not None:
        access = mtt.access(mr.lkey, mr.length, 4096, addr - mr.iova, length, write=write)
        if access.mpt_miss:
            stages += dma_read(node.pcie, mtt.params.mpt_bytes)
        if access.mtt_misses:
            stages += dma_read(node.pcie, access.mtt_misses * mtt.params.line_bytes)
        stages += mtt.walk_stage(access)
    if node.iommu is not None and memory_target(mr, now_ps) != "gpu0":
        stages += node.iommu.stages(mr.addr + addr - mr.iova, length)
    return stages


def _translate_first(env, node, mr, addr: int, length: int, t: int, *, write: bool) -> Generator:
    """Walk the translation stages of an access starting at ``t``; return when the data may move."""
    if mr is None or (node.nic.mtt is None and node.iommu is None):
        return t
    extra = translation_stages(node, mr, addr, length, t, write=write)
    if not extra:
        return t
    ready, _ = yield from walk(env, extra, t, t)
    return ready


def _read_payload(env, mr, wr: SendWR, *, remote: bool = False):
    """Data mode: the bytes the NIC reads through ``mr``'s translation now (None when data mode is off)."""
    if not env.data_mode:
        return None
    return mr_bytes(mr, wr.remote_addr if remote else wr.local_addr, wr.length).copy()


def _write_payload(env, mr, addr: int, payload) -> None:
    """Data mode: the NIC writes ``payload`` through ``mr``'s translation now."""
    if payload is not None:
        mr_bytes(mr, addr, len(payload))[:] = payload


def _responder_accepts(env, qp, wr: SendWR, stages: Plan, head: int, tail: int) -> Generator:
    """The responder's key check and translation, with RNR NAK and retransmission while it faults.

    Returns (status, head, tail) of the request as finally accepted (or rejected).
    """
    needed = _REMOTE_WRITE if wr.opcode is Opcode.RDMA_WRITE else _REMOTE_READ
    retries = qp.rnr_retry
    while True:
        if not _remote_ok(qp, wr, needed):
            qp.remote.to_error()  # the responder drops everything after the NAK
            return WcStatus.REM_ACCESS_ERR, head, tail
        mr = qp.remote.node.nic.lookup(wr.rkey)
        if mr.backing is None:
            return WcStatus.SUCCESS, head, tail
        if head > env.now:
            yield env.timeout(head - env.now)
        answer = mr.backing.translate(head, wr.remote_addr - mr.iova, wr.length)
        if answer is None:
            return WcStatus.SUCCESS, head, tail
        if not isinstance(answer, Fault):
            qp.remote.to_error()
            return WcStatus.REM_ACCESS_ERR, head, tail
        env.trace.instant(f"{qp.remote.node.nic.name}.hw", "RnrNakSent", mr=mr.lkey, retry_at_ps=answer.ready_ps)
        qp.rnr_naks += 1
        if retries == 0:
            return WcStatus.RNR_RETRY_EXC_ERR, head, tail
        retries -= 1 if qp.rnr_retry != RNR_RETRY_INFINITE else 0
        nak_at, _ = yield from walk(env, stages.reply[:-1], tail, tail)  # RNR NAK back to the requester
        retry = nak_at + qp.remote.min_rnr_timer_ps
        head, tail = yield from walk(env, stages.forward, retry, retry)


def _translated(env, qp, mr, addr: int, length: int, t: int, *, write: bool) -> Generator:
    """A requester-side NIC access through ``mr`` at ``t``: stall the send queue while the driver handles
    page faults. Returns (time the access proceeds, status)."""
    while True:
        if t > env.now:
            yield env.timeout(t - env.now)
        answer = mr.backing.translate(t, addr - mr.iova, length)
        if answer is None:
            return t, WcStatus.SUCCESS
        if not isinstance(answer, Fault):
            return t, answer
        env.trace.instant(f"{qp.node.nic.name}.hw", "AccessStalled", mr=mr.lkey, until_ps=answer.ready_ps, write=write)
        t = max(t, answer.ready_ps)


def _remote_ok(qp, wr: SendWR, needed: int) -> bool:
    """Responder-side check of the rkey, bounds and rights (and that the responder QP still works)."""
    mr = qp.remote.node.nic.lookup(wr.rkey)
    return (qp.remote.state is QpState.RTS and mr is not None
            and mr.pd.context.node is qp.remote.node and mr.allows(wr.remote_addr, wr.length, needed))


def _notify_landed(env, wr: SendWR, landed: int) -> None:
    if wr.landed is not None:
        signal = wr.landed
        env.timeout(landed - env.now).callbacks.append(lambda _event: signal.succeed(landed))


def _complete_at(env, qp, wr: SendWR, status: WcStatus, posted: int, seen: int, read_slot) -> None:
    """Finish a work request whose CQE the polling CPU would notice at ``seen``.

    RC completions are delivered in posting order: a completion waits for every earlier one. The first
    error completion moves the QP to the error state; every later one is delivered as WR_FLUSH_ERR.
    """
    if read_slot is not None:
        qp.reads.release(read_slot)
    if wr.landed is not None and not wr.landed.triggered and status is not WcStatus.SUCCESS:
        wr.landed.succeed(None)  # the payload never landed: waiters learn it from the None value
    qp.finished[qp.seq_of.pop(id(wr))] = (wr, status, posted, seen)
    while qp.next_completion in qp.finished:
        wr, status, posted, seen = qp.finished.pop(qp.next_completion)
        qp.next_completion += 1
        seen = max(seen, qp.last_completion_ps)
        qp.last_completion_ps = seen
        if qp.state is QpState.ERR:
            status = WcStatus.WR_FLUSH_ERR
        elif status is not WcStatus.SUCCESS:
            qp.to_error()
        wc = WorkCompletion(wr.wr_id, status, wr.opcode, wr.length if status is WcStatus.SUCCESS else 0,
                            qp.qp_num, posted, seen)
        if env.trace.enabled:
            env.trace.slice(f"{qp.node.name}.qp{qp.qp_num}", wr.opcode.value, posted, seen, wr_id=wr.wr_id,
                            bytes=wr.length, status=status.name)
        env.timeout(seen - env.now).callbacks.append(lambda _event, wc=wc: _deliver(qp, wc))


def _deliver(qp, wc: WorkCompletion) -> None:
    qp.outstanding -= 1
    qp.send_cq.push(wc)

"""The data path of one work request through host, PCIe, NIC and wire: the steps both engines run.

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

:func:`path` strings a work request's stages together with the doorbell, the READ slot gate, the
acknowledgement, the completion and the poll into one step list (:mod:`sim.core.steps`): the event engine
runs it (:mod:`sim.core.interpreter`), with :class:`WorkRequestRun` deciding at its checks what only run time
knows (errors, page faults, RNR NAKs, lost frames, translation caches, data mode); the vectorized core solves
streams of the same lists. A QP's claims of its send engine and transmit port are made in posting order
(:func:`in_send_order`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import simpy

from models.fabric import AETH, ATOMIC_ACK_ETH, ATOMIC_ETH, RETH, Fabric
from models.nic.atomics import apply_atomic
from models.nic.nic import Nic
from models.nic.receive import (RECEIVING, complete_receive, landing_buffer, receive_mr, receive_problem,
                                scatter, unacknowledged_refusal, with_grh)
from models.nic.remote_access import remote_status
from models.nic.translation import Fault, mr_bytes, write_payload
from models.nic.transport import (PSN_MASK, PSN_WINDOW, QP_RC, Outcome, Waiting, acknowledged, after_acknowledgement,
                                  after_gap_closed, carries, opcode_problem, packet_headers, sequence_nak)
from models.nic.wqe import (ATOMIC_BYTES, RNR_RETRY_INFINITE, SEND_FENCE, SEND_SIGNALED, WC_SUCCESS, Access, Opcode,
                            QpState, RecvWR, SendWR, Sge, WcStatus, WorkCompletion, send_wc_opcode)
from models.pcie.link import PcieLink, PcieParams, read_tags, write_issue
from models.pcie.stage import Stage
from models.pcie.topology import dma_read_stages, dma_write_stages
from sim.core import PS_PER_S, Environment
from sim.core.interpreter import Operation, Semaphore, Turns, compile_steps
from sim.core.steps import Check, Claim, Delay, Fork, Gate, Mark, Rebase, Step, Wake

_LOCAL_WRITE = int(Access.LOCAL_WRITE)
"""Access bits as plain ints: IntFlag arithmetic is slow on the per-message path."""


def dma_read(link: PcieLink, nbytes: int) -> list[Stage]:
    """Device reads ``nbytes`` of host memory: read tags, MRd requests up, the round trip, CplD completions
    down, then the engine's size term (:meth:`~models.pcie.link.PcieParams.read_size_ps`)."""
    p = link.params
    request = p.read_request_ps(min(nbytes, p.mrrs))
    completion = p.read_return_ps(min(nbytes, p.mps))
    tags = read_tags(link, nbytes, p.read_latency_ps)
    return [
        *([tags[0]] if tags else []),
        Stage(link.up, p.read_request_ps(nbytes), request, request, 0, False),
        delay(p.read_latency_ps),
        Stage(link.down, tags[1] if tags else p.read_return_ps(nbytes), completion, completion, p.read_size_ps(nbytes),
              True),
    ]


def end_times(stages_of: Callable[[], list[Stage]], messages: int) -> list[int]:
    """When each of ``messages`` messages queued at time 0 leaves the stages ``stages_of()`` gives (each an
    operation walking them), earliest first (ps); one message: its latency alone."""
    env, done = Environment(), []
    for k in range(messages):
        program = compile_steps((*stage_steps(stages_of()), Rebase(True), Wake()))
        env.step_runner.start(Operation(program, k, EndTimes(done)))
    env.run()
    return sorted(done)


def stream_Bps(stages_of: Callable[[], list[Stage]], nbytes: int, messages: int = 300) -> float:
    """Steady-state rate of back-to-back messages of ``nbytes`` through the stages ``stages_of()`` gives (all
    ``messages`` queued at once), over the second half of them (bytes/s)."""
    done = end_times(stages_of, messages)
    half = messages // 2
    return (messages - 1 - half) * nbytes * PS_PER_S / (done[-1] - done[half])


class EndTimes:
    """Owner of operations that only report when they end: each end time is appended to ``done`` (ps)."""

    def __init__(self, done: list[int]) -> None:
        self.done = done

    def wake(self, op: Operation, head: int) -> None:
        self.done.append(head)


def dma_read_stream_Bps(params: PcieParams, nbytes: int, reads: int = 300) -> float:
    """:func:`stream_Bps` of DMA reads of ``nbytes`` over one link with ``params`` (bytes/s)."""
    link = PcieLink("stream", params)
    return stream_Bps(lambda: dma_read(link, nbytes), nbytes, reads)


def dma_write(link: PcieLink, nbytes: int) -> list[Stage]:
    """Device writes ``nbytes`` to host memory with posted MWr TLPs, spaced by its engine's issue limit."""
    p = link.params
    tlp = p.write_ps(min(nbytes, p.mps))
    return [*write_issue(link), Stage(link.up, p.write_ps(nbytes), tlp, tlp, p.write_latency_ps, False)]


def wire(src: Nic, dst: Nic, fabric: Fabric, nbytes: int, first_extra: int = 0,
         mtu: int | None = None, per_packet: int = 0) -> list[Stage]:
    """A message from ``src``'s port through the fabric into ``dst``'s port, in packets of ``mtu`` payload bytes
    (the sending QP's path MTU; None or more than the fabric carries: the fabric's MTU), its first packet
    ``first_extra`` header bytes longer and every packet ``per_packet`` (:func:`~models.nic.transport.packet_headers`).

    The first bit leaves as soon as the transmit port is free; the receiver holds the first packet until it
    has arrived whole.
    """
    p = fabric.params
    if mtu is not None and mtu < p.mtu:
        p = dataclasses.replace(p, mtu=mtu)
    total = p.serialize_ps(nbytes, first_extra, per_packet)
    first = p.first_packet_ps(nbytes, first_extra, per_packet)
    return [Stage(src.tx_port, total, 0, 0, p.latency_ps, False),
            Stage(dst.rx_port, total - first, first, 0, 0, fabric.point_to_point)]


def rx_engine(nic: Nic, qp_num: int) -> Stage:
    """Processing and key check by the receive engine of QP ``qp_num`` on ``nic``."""
    p = nic.params
    return Stage(nic.rx_engine(qp_num), p.rx_process_ps, p.rx_process_ps, p.rx_process_ps, p.rx_latency_ps, True)


def delay(ps: int) -> Stage:
    """A pure delay."""
    return Stage(None, 0, 0, 0, ps, False)


def memory_target(mr, now_ps: int) -> str | None:
    """Where a NIC access through ``mr`` goes at ``now_ps`` in its node's PCIe topology: the GPU's vertex
    (``gpu0``, ``gpu3``...) for a GPU buffer the NIC reaches in VRAM, ``mem0`` for host memory; None when the
    node has no topology (the NIC's own link reaches host memory)."""
    if mr is None or mr.pd.context.node.topology is None:
        return None
    return "mem0" if mr.backing is None else mr.backing.target(now_ps)


def node_dma_read(node, target: str | None, nbytes: int) -> list[Stage]:
    """The NIC of ``node`` reads ``nbytes`` of ``target`` (see :func:`memory_target`), along the route from
    that NIC (``node.device``)."""
    if target is None:
        return dma_read(node.pcie, nbytes)
    return dma_read_stages(node.topology, node.device, target, nbytes)


def node_dma_write(node, target: str | None, nbytes: int) -> list[Stage]:
    """The NIC of ``node`` writes ``nbytes`` to ``target``."""
    if target is None:
        return dma_write(node.pcie, nbytes)
    return dma_write_stages(node.topology, node.device, target, nbytes)


class Path(NamedTuple):
    """The steps of one kind of work request on one QP, for both engines, with the pieces its run-time
    decisions put in their place (cached per QP: they depend only on parameters)."""

    steps: tuple[Step, ...]
    """Doorbell to polled completion (:mod:`sim.core.steps`)."""
    program: tuple
    """``steps`` compiled for the event engine."""
    unmarked: tuple
    """``program`` without its marks, for a work request nothing waits to see land (:meth:`WorkRequestRun.mark`
    does nothing then)."""
    after: dict[str, tuple[Step, ...]]
    """The steps that follow each check."""
    forward: tuple[Step, ...]
    """Send engine to the responder's receive engine (retransmitted after an RNR NAK)."""
    reply: tuple[Step, ...]
    """ACK or NAK back to the requester and its CQE write."""
    failed: tuple
    """Compiled: the requester's CQE write of an error completion, then the poll (it goes no further)."""
    rejected: tuple
    """Compiled: the responder's NAK back, the CQE write, then the poll (the responder refused the request)."""
    landed_back_ps: int
    """How long before the end of the landing stages the payload is in memory (a READ's CQE write)."""
    packets: int
    """The PSNs the request takes (:func:`request_packets`)."""


COMPLETION = (Rebase(True), Delay(draws="poll"), Wake())
"""The end of every work request: the CPU polls the completion a drawn poll delay after its CQE lands."""


def stage_steps(stages: list[Stage], label: str | None = None) -> list[Step]:
    """``stages`` as steps (the last claim labelled ``label``)."""
    out: list[Step] = []
    for k, (server, service, head, tail, latency, eager) in enumerate(stages):
        if server is None:
            out.append(Delay(latency))
        else:
            out.append(Claim(server, service, head, tail, latency, eager, label if k == len(stages) - 1 else None))
    return out


class Checked(NamedTuple):
    """Which checks a work request makes at run time, and what they decide there (the ``checked`` of :func:`path`)."""

    local: bool = False
    """The local MR has a backing to translate through."""
    remote: bool = False
    """The remote MR has a backing to translate through."""
    every: bool = False
    """Every access is looked at (translation caches, data mode)."""
    local_decides: str | None = None
    """What the requester's accesses decide from the run's history (:attr:`sim.core.steps.Check.decides`)."""
    remote_decides: str | None = None
    """What the responder's accesses decide from the run's history."""


class Shape(NamedTuple):
    """What a work request's path depends on besides its opcode, size and memory targets."""

    gather: tuple[tuple[int, str | None], ...] = ()
    """Length and :func:`memory_target` of each SGE when there are several (empty: one SGE, the ``local``
    target); each costs its own DMA read (a WRITE's gather) or write (a READ's scatter)."""
    signaled: bool = True
    """The work request writes a CQE on success (``IBV_SEND_SIGNALED`` or the QP's ``sq_sig_all``)."""
    fence: bool = False
    """``IBV_SEND_FENCE``: it takes every READ/atomic slot of its QP (see :func:`path`)."""
    fetched: bool = False
    """Posted in a list of several work requests (one ibv_post_send, one doorbell): the NIC fetches its WQE by DMA
    even with BlueFlame, which mlx5 writes for a single work request only (``mlx5_post_send``)."""


_ONE_SGE = {(sig, fence): Shape((), sig, fence) for sig in (False, True) for fence in (False, True)}
"""The shapes of single-SGE work requests, made once (a NamedTuple is slow to build per message)."""


def path(qp, opcode: Opcode, n: int, inline: bool, local: str | None = None, remote_target: str | None = None,
         checked: Checked = Checked(), shape: Shape = Shape()) -> Path:
    """Build (or fetch from the QP's cache) the path of a work request; ``local`` and ``remote_target`` are
    the :func:`memory_target` of its two MRs, ``checked`` says which accesses are checked at run time and what
    those checks decide (:func:`checked_accesses`).

    READs and atomics take one of the QP's :func:`rd_atomic_slots` until their response lands. An atomic travels
    like an 8-byte READ whose responder also claims the NIC's atomic unit after reading the target. A fenced
    work request takes every slot: it starts once every earlier READ and atomic has landed, and later ones wait
    until it has completed (mlx5 lets them go once it is sent: conservative by its acknowledgement).
    """
    node, peer = qp.node, qp.remote.node
    nic, pnic = node.nic, peer.nic
    lossy = bool(nic.outages or pnic.outages) and nic is not pnic
    key = (opcode, n, inline, local, remote_target, checked, shape, lossy)
    cached = qp.paths.get(key)
    if cached is not None:
        return cached
    local_backing, remote_backing, every, local_decides, remote_decides = checked
    fabric: Fabric = qp.pd.context.fabric
    pieces = shape.gather or ((n, local),)
    process = nic.params.tx_process_ps
    blueflame = nic.params.blueflame and not shape.fetched
    engine = Stage(nic.tx_engine(qp.qp_num), process, process, process, 0, blueflame)
    to_engine = ([] if blueflame else dma_read(node.pcie, nic.params.wqe_bytes)) + [engine]
    ack = [delay(pnic.params.tx_latency_ps), *wire(pnic, nic, fabric, 0, AETH), rx_engine(nic, qp.qp_num)]
    cqe = dma_write(node.pcie, nic.params.cqe_bytes)
    reply = stage_steps([*ack, *cqe])
    # A request that consumes a receive is checked when it arrives, on simpy's clock: a receive posted by then
    # is found.
    responder = Check("responder", 0 if remote_backing or opcode.consumes_receive else None, decides=remote_decides)
    slots = rd_atomic_slots(qp)
    fence = [Gate(slots, READ_SLOT)] * slots if shape.fence else []
    steps: list[Step] = [Delay(nic.params.doorbell_ps), *stage_steps(to_engine), Rebase(False), *fence]
    if not opcode.reads_remote:
        source = [] if inline else [s for length, target in pieces for s in node_dma_read(node, target, length)]
        forward = source + [delay(nic.params.tx_latency_ps),
                            *wire(nic, pnic, fabric, n, request_headers(opcode), qp.path_mtu_bytes,
                                  packet_headers(qp.qp_type)),
                            rx_engine(pnic, qp.remote.qp_num)]
        steps.append(Check("requester"))
        if source and (local_backing or every):
            # The NIC translates the source when it issues the payload's first read request, once it has a read
            # tag and the earlier WQEs' requests are on the link.
            split = 1 + (forward[0][0] is node.pcie.tags) if local_backing else 0
            steps += [*stage_steps(forward[:split]), Check("source", forward[split - 1].head_ps if split else None,
                                                           decides=local_decides),
                      *([Rebase(False)] if split else []), *stage_steps(forward[split:])]
        else:
            steps += stage_steps(forward)
        delivery = [responder, *receive_wqe_fetch(qp, opcode), *stage_steps(node_dma_write(peer, remote_target, n)),
                    *receive_completion(peer, opcode), Mark("landed")]
        if acknowledged(qp.qp_type):
            # The responder acknowledges once the last TLP is on its PCIe link: a full receive path backs up into
            # the fabric, so the requester's completions are paced by the slowest resource.
            steps += [*delivery, Rebase(True, -peer.pcie.params.write_latency_ps),
                      *(reply if shape.signaled else stage_steps(ack)), *COMPLETION]
        else:
            steps = _unacknowledged(steps, delivery, cqe if shape.signaled else [], fabric.params.latency_ps)
        landed_back = 0
    else:
        atomic = opcode.is_atomic
        forward = [delay(nic.params.tx_latency_ps), *wire(nic, pnic, fabric, 0, ATOMIC_ETH if atomic else RETH),
                   rx_engine(pnic, qp.remote.qp_num)]
        landing, landed_back = _landing(node, pieces, nic.params.cqe_bytes if shape.signaled else 0)
        if atomic:
            unit = Stage(pnic.atomic_unit, pnic.params.atomic_ps, pnic.params.atomic_ps, 0, 0, False)
            response = [*node_dma_read(peer, remote_target, n), unit, delay(pnic.params.tx_latency_ps),
                        *wire(pnic, nic, fabric, 0, AETH + ATOMIC_ACK_ETH), rx_engine(nic, qp.qp_num)]
        else:
            response = [*node_dma_read(peer, remote_target, n), delay(pnic.params.tx_latency_ps),
                        *wire(pnic, nic, fabric, n, AETH, qp.remote.path_mtu_bytes), rx_engine(nic, qp.qp_num)]
        # The send engine stalls the QP at its READ/atomic slots; a slot is free again once the response's last
        # write reaches the requester's PCIe link.
        steps += [*([] if shape.fence else [Gate(slots, READ_SLOT)]), Check("requester"), *stage_steps(forward),
                  responder, *stage_steps(response),
                  *([Check("response", 0 if local_backing else None, decides=local_decides)]
                    if local_backing or every else []),
                  *stage_steps(landing[:-1]), *stage_steps(landing[-1:], READ_SLOT), Mark("landed"), *COMPLETION]
    steps = on_the_wire(in_send_order(steps, nic, qp.qp_num), nic, pnic, lossy)
    after = _after_checks(steps)
    forward = on_the_wire(in_send_order(stage_steps(forward), nic, qp.qp_num), nic, pnic, lossy)
    reply = on_the_wire(reply, nic, pnic, lossy)
    result = qp.paths[key] = Path(steps, compile_steps(steps), compile_steps(steps, marks=False), after, forward,
                                  tuple(reply), compile_steps((*reply[-1:], *COMPLETION)),
                                  compile_steps((*reply, *COMPLETION)), landed_back, request_packets(qp, opcode, n))
    return result


def _unacknowledged(steps: list[Step], delivery: list[Step], cqe: list[Stage], wire_latency_ps: int) -> list[Step]:
    """A UC or UD request's steps: ``steps`` end with the message's claims of the responder's receive port and
    engine; they and the ``delivery`` at the responder go on as a side chain, while the requester writes its
    ``cqe`` (none when unsignaled) as soon as the transmit port has sent the last byte, nothing coming back."""
    arrival = steps[-2:]
    return [*steps[:-2], Fork((*arrival, *delivery)), Rebase(True, -wire_latency_ps), *stage_steps(cqe), *COMPLETION]


def _after_checks(steps: tuple[Step, ...]) -> dict[str, tuple[Step, ...]]:
    """The steps that follow each check of ``steps``, within its own chain (a side chain's checks too)."""
    after: dict[str, tuple[Step, ...]] = {}
    for k, step in enumerate(steps):
        if isinstance(step, Check):
            after[step.name] = steps[k + 1:]
        elif isinstance(step, Fork):
            after.update({name: rest for name, rest in _after_checks(step.steps).items() if name not in after})
    return after


SEND_ENGINE, TRANSMIT = "send_engine", "transmit"
"""The turns of a QP's send queue: its WQEs reach the send engine, and its requests the transmit port, in posting
order (RC sends a QP's requests in PSN order), whatever each waits for in between (a WRITE's payload read, a READ
slot)."""


def send_turns() -> dict[str, Turns]:
    """A new QP's send-queue turns (:data:`SEND_ENGINE`, :data:`TRANSMIT`)."""
    return {SEND_ENGINE: Turns(), TRANSMIT: Turns()}


def in_send_order(steps: list[Step], nic: Nic, qp_num: int) -> tuple[Step, ...]:
    """``steps`` with the claims of QP ``qp_num``'s send engine and of ``nic``'s transmit port made in its send
    queue's turns."""
    turns = {id(nic.tx_engine(qp_num)): SEND_ENGINE, id(nic.tx_port): TRANSMIT}
    return tuple(dataclasses.replace(s, turn=turns[id(s.server)]) if isinstance(s, Claim) and id(s.server) in turns
                 else s for s in steps)


ACK_TIMER, SEQUENCE_NAK = "ack_timer", "sequence_nak"
"""The checks where a request waits for its requester's ACK timer (or an acknowledgement or NAK that ends the wait
early), and where a NAK PSN sequence error reaches the requester."""
_AWAIT_TIMER = compile_steps((Check(ACK_TIMER),))
REQUEST_WIRE, REPLY_WIRE = "request_wire", "reply_wire"
"""The checks after a request's, and after its acknowledgement's or response's, transmit claim on a link that has
outages: whether the link lost the frames (:meth:`WorkRequestRun._request_wire`)."""
LOST_FRAMES = ("a link outage loses the frames it meets (RC's transport retries them by its timeout and retry_cnt, "
               "UC and UD lose their messages)")
"""What those checks decide (:attr:`sim.core.steps.Check.decides`)."""


def on_the_wire(steps, nic: Nic, pnic: Nic, lossy: bool) -> tuple[Step, ...]:
    """``steps`` with a :data:`REQUEST_WIRE` check after each claim of ``nic``'s transmit port and a
    :data:`REPLY_WIRE` check after each of the responder ``pnic``'s, when ``lossy`` (a link of the two loses frames
    at times); else ``steps`` as they are."""
    if not lossy:
        return tuple(steps)
    out: list[Step] = []
    for step in steps:
        out.append(step)
        if isinstance(step, Claim) and step.server in (nic.tx_port, pnic.tx_port):
            out.append(Check(REQUEST_WIRE if step.server is nic.tx_port else REPLY_WIRE, decides=LOST_FRAMES))
    return tuple(out)


def _landing(node, pieces: tuple[tuple[int, str | None], ...], cqe_bytes: int) -> tuple[list[Stage], int]:
    """How a READ or atomic response lands at the requester ``node``: its pieces (length, target) then a CQE of
    ``cqe_bytes`` (0: unsignaled, none); and how long before the end of those stages the payload is in memory."""
    link = node.pcie
    if len(pieces) == 1 and pieces[0][1] is None:  # data and CQE stream to host memory over the NIC's link as one
        return dma_write(link, pieces[0][0] + cqe_bytes), link.params.write_ps(cqe_bytes) if cqe_bytes else 0
    landing = [s for length, target in pieces for s in node_dma_write(node, target, length)]
    if not cqe_bytes:
        return landing, 0
    return [*landing, *dma_write(link, cqe_bytes)], link.params.write_ps(cqe_bytes) + link.params.write_latency_ps


def request_packets(qp, opcode: Opcode, n: int) -> int:
    """The PSNs a request of ``opcode`` and ``n`` bytes on ``qp`` takes: one per path-MTU packet of its payload (a
    READ: of its response), at least one; an atomic one."""
    return 1 if opcode.is_atomic else max(1, -(-n // qp.path_mtu_bytes))


def rd_atomic_slots(qp) -> int:
    """READs and atomics ``qp`` may have outstanding: its ``max_rd_atomic``, no more than its responder's
    ``max_dest_rd_atomic`` accepts; 0 still lets one through."""
    return max(min(qp.attr.max_rd_atomic, qp.remote.attr.max_dest_rd_atomic), 1)


READ_SLOT = "landing"
"""The gate of a QP's outstanding READs, released by the claim that lands a READ's response."""

IMMDT = 4
"""The ImmDt extension header of a ``*_WITH_IMM`` request's last packet (bytes)."""


def request_headers(opcode: Opcode) -> int:
    """Extension header bytes of a request carrying a payload: RETH for RDMA WRITE, none for SEND, ImmDt for
    immediate data (IB spec vol. 1 ch. 9.2-9.3, approximated as extra bytes of the first packet)."""
    return (RETH if opcode.writes_remote else 0) + (IMMDT if opcode.carries_imm else 0)


def receive_wqe_fetch(qp, opcode: Opcode) -> list[Step]:
    """What fetching the receive WQE costs the responder of ``qp`` for an ``opcode`` that consumes one: a DMA read
    of one WQE of its queue (16 B per scatter entry, an SRQ's next-segment more) on the responder's PCIe link.

    mlx5 posts receives with no doorbell but the doorbell record in host memory (``mlx5_post_recv``), so the NIC
    reads receive WQEs by DMA; ConnectX prefetches them for the receives posted ahead, which is why the read runs
    beside the payload (a fork from the first packet's arrival) and costs PCIe link time, not latency."""
    if not opcode.consumes_receive:
        return []
    peer = qp.remote.node
    return [Fork((Rebase(False), *stage_steps(dma_read(peer.pcie, qp.remote.receives.wqe_bytes))))]


def receive_completion(peer, opcode: Opcode) -> list[Step]:
    """The responder's receive CQE for an ``opcode`` that consumes a receive: written on the responder's PCIe link
    after the payload (a fork from its last TLP), ending at the check :data:`RECEIVED` when it is in memory."""
    if not opcode.consumes_receive:
        return []
    cqe = dma_write(peer.pcie, peer.nic.params.cqe_bytes)
    return [Fork((Rebase(True, -peer.pcie.params.write_latency_ps), *stage_steps(cqe), Rebase(True),
                  Check(RECEIVED, 0, label=RECEIVED)))]


RECEIVED = "received"
"""The check (and its label: the vectorized core reports its times) where a receive-consuming request's receive CQE
is in memory: the receive completes then."""


def checked_accesses(qp, local_mrs: Sequence, remote_mr) -> Checked:
    """The checks a work request on ``qp`` between ``local_mrs`` (its SGEs' MRs) and ``remote_mr`` makes at run
    time."""
    node, peer = qp.node, qp.remote.node
    data = qp.pd.context.env.data_mode
    every = data or translation_cache(node) is not None or translation_cache(peer) is not None
    remote = remote_mr if remote_mr is not None and remote_mr.pd.context.node is peer else None
    local_decides = next((d for d in (run_time_decision(node, mr, data) for mr in local_mrs) if d), None)
    return Checked(any(mr is not None and mr.backing is not None for mr in local_mrs),
                   remote is not None and remote.backing is not None, every, local_decides,
                   run_time_decision(peer, remote, data))


def translation_cache(node) -> str | None:
    """The translation cache ``node``'s accesses go through, in words (its NIC's MTT cache, else its IOMMU's
    IO-TLB); None when it models neither."""
    if node.nic.mtt is not None:
        return "NIC's translation cache (MTT)"
    return None if node.iommu is None else "IOMMU's IO-TLB"


def run_time_decision(node, mr, data: bool) -> str | None:
    """What an access of ``node``'s NIC through ``mr`` decides from the run's own history, in words: the bytes of
    data mode, the hits of the node's translation cache or IO-TLB, the MR's first-touch page faults; None when its
    answer is known before the run."""
    if data:
        return "data mode moves the bytes of each access"
    cache = translation_cache(node)
    if cache is not None:
        return f"the {cache} of node {node.name} hits or misses by each access's history"
    return None if mr is None or mr.backing is None else mr.backing.decides


def local_status(qp, wr: SendWR, local: Sequence[tuple]) -> WcStatus | None:
    """The requester's own checks of ``wr`` on ``qp``, ``local`` being ``(mr, addr, length)`` of each SGE: an
    opcode or message its UC or UD service does not carry (:func:`~models.nic.transport.opcode_problem`), then an
    SGE whose lkey names no MR or whose MR does not cover it with the access the opcode needs (LOCAL_WRITE where a
    READ's or atomic's response lands): IBV_WC_LOC_PROT_ERR. None when they pass."""
    if qp.qp_type is not QP_RC and (problem := opcode_problem(qp.qp_type, wr.opcode, wr.message_bytes,
                                                                   qp.path_mtu_bytes)) is not None:
        return problem
    needed = _LOCAL_WRITE if wr.opcode.reads_remote else 0
    for mr, addr, length in local:
        if mr is None or not mr.allows(addr, length, needed):
            return WcStatus.LOC_PROT_ERR
    return None


def refusal(qp, wr: SendWR, recv: RecvWR | None = None) -> str | None:
    """What refuses ``wr`` on ``qp`` when nothing changes while it runs (the status of its error completion, or
    why a UC or UD responder drops it), None when it succeeds: the requester's :func:`local_status`, then the
    responder's: the R_Key of a request that takes no receive (:func:`remote_status`), or for one that takes the
    receive ``recv``, :func:`receive_refusal`."""
    nic = qp.node.nic
    problem = local_status(qp, wr, [(nic.lookup(sge.lkey), sge.addr, sge.length) for sge in local_sges(wr)])
    if problem is not None:
        return problem.ibv_name
    if not wr.opcode.consumes_receive:
        refused = remote_status(qp, wr)
        return None if refused is None else refused.ibv_name
    kind, why = receive_refusal(qp, wr, recv)
    if kind is None:
        return None
    if kind is RECEIVE_PROBLEM:
        return why[1].ibv_name
    return why if isinstance(why, str) else why.ibv_name


DROPPED, NAK, NOT_RECEIVING, NO_RECEIVE, RECEIVE_PROBLEM = "dropped", "nak", "not receiving", "no receive", "receive"
"""What :func:`receive_refusal` found."""


def receive_refusal(qp, wr: SendWR, recv: RecvWR | None) -> tuple[str | None, object]:
    """The responder's checks of ``wr``, a request on ``qp`` that consumes a receive (``recv``, the one it would
    take: None when none is posted), in their order: ``(None, None)`` when it takes ``recv``, else ``(what, why)``:
    :data:`DROPPED` and the reason, a UC or UD responder dropping it (:func:`unacknowledged_refusal`); on RC,
    :data:`NAK` and the status, a WRITE with immediate's R_Key (:func:`remote_status`); :data:`NOT_RECEIVING` and
    IBV_WC_RETRY_EXC_ERR, a responder that does not receive; :data:`NO_RECEIVE` and "no receive posted" (an RNR
    NAK); then, on every service, :data:`RECEIVE_PROBLEM` and :func:`receive_problem`'s statuses, what ``recv``
    cannot take."""
    if not acknowledged(qp.qp_type):
        dropped = unacknowledged_refusal(qp, wr, recv)
        if dropped is not None:
            return DROPPED, dropped
    else:
        refused = remote_status(qp, wr) if wr.opcode.writes_remote else None
        if refused is not None:
            return NAK, refused
        if qp.remote.state not in RECEIVING:
            return NOT_RECEIVING, WcStatus.RETRY_EXC_ERR
        if recv is None:
            return NO_RECEIVE, "no receive posted"
    problem = receive_problem(qp.remote, recv, wr)
    return (None, None) if problem is None else (RECEIVE_PROBLEM, problem)


def work_request_path(qp, wr: SendWR, now_ps: int, listed: bool = False) -> Path:
    """The path ``wr`` posted on ``qp`` at ``now_ps`` takes (``listed``: in a list of several, see
    :attr:`Shape.fetched`)."""
    return _posted(qp, wr, now_ps, listed)[2]


def _posted(qp, wr: SendWR, now_ps: int, listed: bool) -> tuple[Sequence[Sge], bool, Path]:
    """``wr``'s :func:`local_sges`, whether it is :func:`signaled` and its path (:func:`_path_of`).

    The three are remembered in the QP's path cache for a work request of one SGE whose MRs its keys look up
    (not a SEND's receive) between nodes without a PCIe topology, where the path depends on no time: what else
    they depend on is in the key (the work request's fields but its addresses, whether a link has outages) or is
    fixed for the QP's life (its type and ``sq_sig_all``, the nodes' translation models, the run's data mode), and
    a later work request takes them while its keys look up the same MRs (and its SGE's address is the same)."""
    nic, pnic = qp.node.nic, qp.remote.node.nic
    key = (_POSTED, wr.opcode, wr.length, wr.lkey, wr.rkey, wr.inline, wr.send_flags, listed,
           bool(nic.outages or pnic.outages))
    known = qp.paths.get(key) if wr.sg_list is None else None
    if known is not None and known[0] is nic.lookup(wr.lkey) and known[1] is pnic.lookup(wr.rkey):
        sges = known[2]
        return (sges if not sges or sges[0].addr == wr.local_addr else local_sges(wr)), known[3], known[4]
    sges, sig = local_sges(wr), signaled(qp, wr)
    found = _path_of(qp, wr, sges, sig, now_ps, listed)
    opcode = wr.opcode
    if (wr.sg_list is None and qp.node.topology is None and qp.remote.node.topology is None
            and not opcode.is_atomic and (opcode.writes_remote or not opcode.consumes_receive)):
        qp.paths[key] = (nic.lookup(wr.lkey), pnic.lookup(wr.rkey), tuple(sges), sig, found)
    return sges, sig, found


_POSTED = "posted"
"""First item of :func:`_posted`'s keys in a QP's path cache (:func:`path`'s keys begin with an opcode)."""


def _path_of(qp, wr: SendWR, sges: Sequence[Sge], sig: bool, now_ps: int, listed: bool) -> Path:
    """:func:`work_request_path` given ``wr``'s :func:`local_sges` and whether it is :func:`signaled`."""
    node, peer = qp.node, qp.remote.node
    local_mrs = [node.nic.lookup(sge.lkey) for sge in sges]
    local_mr = local_mrs[0] if local_mrs else None
    remote_mr = peer.nic.lookup(wr.rkey) if not wr.opcode.consumes_receive or wr.opcode.writes_remote else \
        receive_mr(qp.remote)
    checked = checked_accesses(qp, local_mrs, remote_mr)
    flat = node.topology is None and peer.topology is None
    gather = () if len(sges) < 2 else tuple((sge.length, None if flat else memory_target(mr, now_ps))
                                            for sge, mr in zip(sges, local_mrs))
    fence = bool(wr.send_flags & SEND_FENCE)
    shape = Shape(gather, sig, fence, listed) if gather or listed else _ONE_SGE[sig, fence]
    # An opcode the QP's service does not carry fails at the requester: its path is a SEND's up to there.
    opcode = wr.opcode if carries(qp.qp_type, wr.opcode) else Opcode.SEND
    if flat:
        return path(qp, opcode, wr.message_bytes, wr.is_inline, checked=checked, shape=shape)
    return path(qp, opcode, wr.message_bytes, wr.is_inline, memory_target(local_mr, now_ps),
                memory_target(remote_mr, now_ps), checked, shape)


def local_sges(wr: SendWR) -> list[Sge]:
    """The SGEs the NIC reads or writes for ``wr``: those of non-zero length (mlx5's ``_mlx5_post_send`` skips
    the others); an atomic writes its 8-byte original value through the first of them only."""
    if wr.sg_list is None and not wr.opcode.is_atomic:  # the common single SGE, without building a list first
        return [Sge(wr.local_addr, wr.length, wr.lkey)] if wr.length else []
    sges = [sge for sge in wr.sges if sge.length]
    if wr.opcode.is_atomic:
        return [Sge(sge.addr, ATOMIC_BYTES, sge.lkey) for sge in sges[:1]]
    return sges


def signaled(qp, wr: SendWR) -> bool:
    """Whether ``wr`` writes a completion when it succeeds: ``IBV_SEND_SIGNALED`` or the QP's ``sq_sig_all``
    (an error always completes)."""
    return qp.sq_sig_all or bool(wr.send_flags & SEND_SIGNALED)


def start_work_request(qp, wr: SendWR, seq: int, offset: int = 0, listed: bool = False,
                       posted_ps: int | None = None) -> None:
    """Start carrying one work request from doorbell to the polled completion on ``qp`` (a connected
    :class:`~models.verbs.verbs.QueuePair`, the verbs layer's object this module reads and updates); ``seq``
    and ``offset`` are its operation number and position offset under the ordering rule; ``listed``: posted in
    a list of several; ``posted_ps``: when it was posted, if earlier than now (it waited in SQD)."""
    env = qp.pd.context.env
    if qp.gates is None:  # counted at the first post, when the responder's max_dest_rd_atomic is known
        qp.gates = {READ_SLOT: Semaphore(rd_atomic_slots(qp))}
    now = env.now
    sges, sig, found = _posted(qp, wr, now, listed)
    run = WorkRequestRun(qp, wr, found, now if posted_ps is None else posted_ps, sges, sig)
    program = found.program if wr.landed is not None else found.unmarked
    env.step_runner.start(Operation(program, seq, run, {"poll": qp.poll_delays.next()}, qp.gates,
                                    offset, qp.turns, qp.seq_of[id(wr)]))


Piece = tuple
"""One local access of a work request: ``(mr, addr, length)``."""


class WorkRequestRun:
    """What the model decides while one work request runs: key and state checks, translations (page faults
    stall the send queue; a responder-side fault sends an RNR NAK), PSNs, frames a link loses and the retries
    after them, data mode's bytes, landing and completion."""

    __slots__ = ("qp", "wr", "path", "posted", "sges", "signaled", "status", "payload", "retries", "resume", "local",
                 "received", "transport_retries", "executed", "psn", "packets", "op", "waiting", "timer_at", "woken",
                 "nak_psn")

    def __init__(self, qp, wr: SendWR, path: Path, posted: int, sges: Sequence[Sge], sig: bool) -> None:
        self.qp, self.wr, self.path, self.posted = qp, wr, path, posted
        self.sges, self.signaled = sges, sig
        """The work request's :func:`local_sges` and whether it is :func:`signaled`, as posted."""
        self.status = WC_SUCCESS
        self.payload = None
        self.retries = qp.rnr_retry
        self.transport_retries = qp.attr.retry_cnt
        """Sends again left after lost frames (``retry_cnt``; 7 is seven, not for ever)."""
        self.executed = False
        """The responder has executed the request (a copy sent again is then a duplicate)."""
        self.psn, self.packets = qp.next_psn, path.packets
        qp.next_psn = (qp.next_psn + self.packets) & PSN_MASK
        self.local: list[Piece] = []
        """The local SGEs' MRs as the requester found them when it took up the WQE, with address and length."""
        self.resume: tuple[tuple, int] | None = None
        """After translation stages: the steps the data goes on with, and its tail before them."""
        self.received: tuple | None = None
        """The receive the responder consumed: its queue and :class:`RecvWR`."""
        self.op: Operation | None = None
        """Its operation while it waits at :data:`ACK_TIMER` (an acknowledgement may end the wait sooner), else None:
        the operation refers to the run, and a reference back for its whole life would make every work request a
        cycle for the garbage collector."""
        self.waiting: Waiting | None = None
        """Why it waits for its ACK timer (None: it does not), until ``timer_at`` (ps)."""
        self.timer_at = 0
        self.woken: Outcome | None = None
        """What an acknowledgement or NAK that ended its wait early decided."""
        self.nak_psn: int | None = None
        """The PSN of the NAK PSN sequence error it carries back, while it does."""

    def check(self, op: Operation, name: str, now: int, head: int, tail: int):
        """See :class:`sim.core.interpreter.Model`."""
        if name == ACK_TIMER:
            self.op = op
        return _CHECKS[name](self, now, head, tail)

    def _fail(self, status: WcStatus, at: int, program: tuple):
        """End with ``status``: the rest replaced by ``program`` (the path's ``failed`` or ``rejected``) from
        ``at``."""
        self.status = status
        return program, at, at

    def _requester(self, now: int, head: int, tail: int):
        qp, wr = self.qp, self.wr
        nic = qp.node.nic
        self.local = [(nic.lookup(sge.lkey), sge.addr, sge.length) for sge in self.sges]
        if qp.state.flushes:
            return self._fail(WcStatus.WR_FLUSH_ERR, head, self.path.failed)
        problem = local_status(qp, wr, self.local)
        if problem is not None:
            return self._fail(problem, head, self.path.failed)
        if wr.is_inline:
            self.payload = _gather(qp.pd.context.env, self.local)
        return None

    def _source(self, now: int, head: int, tail: int):
        qp = self.qp
        backed = [piece for piece in self.local if piece[0].backing is not None]
        if backed:
            if qp.sq_stalled_until > now:  # a page fault stalls the send queue: later WQEs wait behind it
                return qp.sq_stalled_until
            for mr, addr, length in backed:
                held = self._translated(mr, addr, length, now, write=False)
                if held is not None:
                    return held if isinstance(held, int) else self._fail(held, now, self.path.failed)
            qp.sq_stalled_until = now
        self.payload = _gather(qp.pd.context.env, self.local)
        return self._translation(qp.node, self.local, now, head, tail, self.path.after.get("source"), write=False)

    def _responder(self, now: int, head: int, tail: int):
        qp, wr = self.qp, self.wr
        if not qp.remote.psn_synced and acknowledged(qp.qp_type):  # UC and UD requests are not sequence-checked
            unsynced = self._first_psns(tail)
            if unsynced is not None:
                return unsynced
        if self.executed:  # a duplicate, whatever is missing: acknowledged again (a READ read again), not executed
            if not wr.opcode.reads_remote:
                return self.path.rejected, tail, tail
        elif qp.remote.missing not in (None, self):
            return self._out_of_sequence(tail, Waiting.BEHIND)
        else:
            if qp.remote.missing is self and qp.awaiting:
                self._wake(now, lambda run: after_gap_closed(run.waiting))
            qp.remote.missing, qp.remote.nak_sent = None, False
        if wr.opcode.consumes_receive:
            return self._receive(now, head, tail)
        refused = remote_status(qp, wr)
        unacked = not acknowledged(qp.qp_type)
        if refused is not None:
            if unacked:
                return self._dropped(tail, refused.ibv_name)
            qp.remote.to_error()  # the responder drops everything after the NAK
            return self._fail(refused, tail, self.path.rejected)
        peer, n = qp.remote.node, wr.message_bytes
        mr = peer.nic.lookup(wr.rkey)
        if mr.backing is not None:
            answer = mr.backing.translate(now, wr.remote_addr - mr.iova, n)
            if unacked and answer is not None:
                return self._dropped(tail, "page fault" if isinstance(answer, Fault) else "translation refused")
            if isinstance(answer, Fault):
                return self._rnr_nak(tail, mr=mr.lkey, retry_at_ps=answer.ready_ps)
            if answer is not None:
                qp.remote.to_error()
                return self._fail(WcStatus.REM_ACCESS_ERR, tail, self.path.rejected)
        env, target = qp.pd.context.env, [(mr, wr.remote_addr, n)]
        if wr.opcode.writes_remote:  # (a WRITE with immediate took its receive above)
            write_payload(mr, wr.remote_addr, self.payload)
        elif wr.opcode.is_atomic:  # the read-modify-write happens as the responder accepts it, once
            if env.data_mode and not self.executed:
                self.payload = apply_atomic(mr_bytes(mr, wr.remote_addr, n), wr.opcode, wr.compare_add, wr.swap)
        else:
            self.payload = _gather(env, target)
        self._executed()
        return self._translation(peer, target, now, head, tail, self.path.after["responder"],
                                 write=wr.opcode.writes_remote or wr.opcode.is_atomic)

    def _dropped(self, tail: int, why: str):
        """An unacknowledged (UC, UD) responder drops the request (``why`` goes to the trace): nothing comes back
        and the requester, which completed when it sent it, never learns; a waiter on its landing learns it never
        landed."""
        qp = self.qp
        qp.pd.context.env.trace.instant(f"{qp.remote.node.nic.name}.hw", "RequestDropped", qp=qp.remote.qp_num,
                                        reason=why)
        self._never_lands()
        return (), tail, tail

    def _never_lands(self) -> None:
        """A waiter on the work request's landing learns that its payload never lands (the value None)."""
        landed = self.wr.landed
        if landed is not None and not landed.triggered:
            landed.succeed(None)

    def _rnr_nak(self, tail: int, **why):
        """The responder is not ready (a page fault, or no receive posted; ``why`` goes to the trace): an RNR NAK
        goes back and the request is sent again after the responder's min_rnr_timer, up to rnr_retry times (7: for
        ever), then the requester completes IBV_WC_RNR_RETRY_EXC_ERR."""
        qp = self.qp
        qp.pd.context.env.trace.instant(f"{qp.remote.node.nic.name}.hw", "RnrNakSent", **why)
        qp.rnr_naks += 1
        if self.retries == 0:
            return self._fail(WcStatus.RNR_RETRY_EXC_ERR, tail, self.path.rejected)
        self.retries -= 1 if qp.rnr_retry != RNR_RETRY_INFINITE else 0
        return self._sent_again(tail)

    def _sent_again(self, tail: int):
        """The request goes again once the responder's NAK is back and its min_rnr_timer has passed."""
        return self._send_again(tail, (*self.path.reply[:-1], Rebase(False), Delay(self.qp.remote.min_rnr_timer_ps)))

    def _send_again(self, at: int, before: tuple):
        """Every retry's rule: from ``at``, ``before`` (the NAK's way back and the wait), then the request's path from
        the send engine on again (go-back-N: its payload read again)."""
        again = (*before, *self.path.forward, Check("responder", 0), *self.path.after["responder"])
        return compile_steps(again), at, at

    def _executed(self) -> None:
        """The responder executed the request: it expects the PSN after it next (a duplicate changes nothing)."""
        if not self.executed:
            self.executed = True
            self.qp.remote.expected_psn = (self.psn + self.packets) & PSN_MASK

    def _first_psns(self, tail: int):
        """The responder checks the PSN of each request until one arrives with the PSN it expects (``rq_psn``):
        one behind it is a duplicate, acknowledged and not executed (a READ is read again); one ahead is out of
        sequence (:meth:`_out_of_sequence`), and its requester, which never sent the PSN the responder's NAK asks
        for, sends it again then and at each ACK timer until ``retry_cnt`` runs out (IBV_WC_RETRY_EXC_ERR): what
        mismatched ``sq_psn``/``rq_psn`` do. None: the request goes on."""
        responder = self.qp.remote
        behind = (responder.expected_psn - self.psn) & PSN_MASK
        if behind == 0:
            responder.psn_synced = True
            return None
        self.qp.pd.context.env.trace.instant(f"{responder.node.nic.name}.hw", "PsnSequenceError", psn=self.psn,
                                             expected=responder.expected_psn)
        if behind <= PSN_WINDOW:
            self.executed = True
            return None if self.wr.opcode.reads_remote and not self.wr.opcode.is_atomic else (
                self.path.rejected, tail, tail)
        return self._out_of_sequence(tail, Waiting.REQUEST if responder.missing is None else Waiting.BEHIND)

    def _request_wire(self, now: int, head: int, tail: int):
        """The request's first bit reached the responder's port at ``head`` and its last at ``tail``: when either
        link was down meanwhile the responder never sees it, and waits for it again (:meth:`_lost`); a UC or UD
        message is simply gone (:meth:`_lost_unacknowledged`)."""
        qp = self.qp
        latency = qp.pd.context.fabric.params.latency_ps
        if not _frame_lost(qp.node.nic, qp.remote.node.nic, latency, head, tail):
            return None
        if not acknowledged(qp.qp_type):
            return self._lost_unacknowledged(head, tail)
        if qp.remote.missing is None and not self.executed:
            qp.remote.missing = self
        return self._lost(tail - latency, "request")

    def _reply_wire(self, now: int, head: int, tail: int):
        """The same for the acknowledgement, NAK or READ response on its way back. One that arrives acknowledges
        the requests before it whose own were lost (:meth:`_acknowledged`)."""
        qp = self.qp
        latency = qp.pd.context.fabric.params.latency_ps
        if not _frame_lost(qp.remote.node.nic, qp.node.nic, latency, head, tail):
            if self.executed and qp.awaiting:
                self._acknowledged(tail, self.psn, nak=False)
            return None
        return self._lost(tail - latency, "reply")

    def _lost(self, sent: int, frame: str):
        """A frame of the request, sent by ``sent``, was lost: the requester's transport timer fires ``timeout``
        later and it sends the request again, up to ``retry_cnt`` times; then the work request completes
        IBV_WC_RETRY_EXC_ERR (and the QP's later ones flush). A lost NAK PSN sequence error leaves its request
        dropped behind the lost one. With timeout 0 the timer never fires: the work request never completes."""
        self._count_lost(frame)
        if frame == "request":
            return self._await_timer(sent, Waiting.REQUEST)
        if self.nak_psn is not None:  # the NAK it carried back: it waits as the responder left it
            self.nak_psn = None
            return self._await_timer(sent, self.waiting)
        return self._await_timer(sent, Waiting.REPLY if self.executed else Waiting.REQUEST)

    def _lost_unacknowledged(self, head: int, tail: int):
        """A UC or UD message met an outage: nothing retries it (:mod:`models.nic.transport`), so it never reaches
        the responder (UC drops the rest of a message a packet of which was lost; the model drops the whole
        message, the packets before the lost one included) and consumes no receive there, while the requester
        completes as it would have, its completion not waiting for the remote side."""
        self._count_lost("request")
        self._never_lands()
        rest = tuple(step for step in self.path.after[REQUEST_WIRE] if not isinstance(step, Fork))
        return compile_steps(rest), head, tail

    def _count_lost(self, frame: str) -> None:
        """One more frame of the QP lost on a link (``frame``: the request, or its reply), counted and traced."""
        qp = self.qp
        qp.frames_lost += 1
        qp.pd.context.env.trace.instant(f"{qp.node.nic.name}.hw", "FrameLost", qp=qp.qp_num, frame=frame,
                                        wr_id=self.wr.wr_id)

    def _out_of_sequence(self, tail: int, why: Waiting):
        """The responder drops a request that arrives (at ``tail``) ahead of the PSN it expects: behind one the link
        lost (go-back-N), or one the requester never sent. The first of the gap carries a NAK PSN sequence error
        for the expected PSN back (:func:`sequence_nak`); the others wait for their timers, or for the requester
        to go back, as ``why`` says."""
        responder = self.qp.remote
        if not sequence_nak(responder.nak_sent):
            return self._await_timer(tail, why)
        responder.nak_sent, self.nak_psn, self.waiting = True, responder.expected_psn, why
        responder.sequence_naks += 1
        self.qp.pd.context.env.trace.instant(f"{responder.node.nic.name}.hw", "PsnSequenceNak", qp=responder.qp_num,
                                             psn=self.nak_psn)
        return compile_steps((*self.path.reply[:-1], Check(SEQUENCE_NAK, 0))), tail, tail

    def _sequence_nak(self, now: int, head: int, tail: int):
        """The NAK PSN sequence error is back: the requester goes back to its PSN (:meth:`_acknowledged`) and this
        request goes again behind the NAK'd one."""
        psn, self.nak_psn, self.waiting = self.nak_psn, None, None
        if not self._acknowledged(now, psn, nak=True):
            return self._fail(WcStatus.WR_FLUSH_ERR, now, self.path.failed)
        return self._send_again(now, ())

    def _acknowledged(self, at: int, psn: int, *, nak: bool) -> bool:
        """An acknowledgement (or, ``nak``, a NAK PSN sequence error) for ``psn`` reaches the requester at ``at``:
        the QP's requests waiting for their timers that it decides (:func:`after_acknowledgement`) end their wait
        then, in posting order. False: the NAK'd request has no retry left (the later requests flush)."""
        nakd = [run for run in self.qp.awaiting if nak and run.psn == psn]
        left = not nakd or nakd[0].transport_retries > 0
        self._wake(at, lambda run: after_acknowledgement(run.psn, run.waiting, run.wr.opcode.reads_remote, psn, nak,
                                                         left))
        return left

    def _wake(self, at: int, decide) -> None:
        """The QP's requests waiting for their timers for which ``decide(run)`` is an :class:`Outcome` end their wait
        at ``at`` with it."""
        qp = self.qp
        runner = qp.pd.context.env.step_runner
        for run in list(qp.awaiting):
            outcome = decide(run)
            if outcome is not None:
                qp.awaiting.remove(run)
                run.woken = outcome
                runner.ask_sooner(run.op, at)

    def _await_timer(self, sent: int, why: Waiting):
        """The requester's ACK timer runs from ``sent``: the request waits for it at :data:`ACK_TIMER` (for ever
        with timeout 0), unless an acknowledgement or NAK ends the wait sooner."""
        timeout = self.qp.ack_timeout_ps
        if timeout is None:
            return (), sent, sent
        self.waiting, self.timer_at, self.woken = why, sent + timeout, None
        self.qp.awaiting.append(self)
        return _AWAIT_TIMER, sent, sent

    def _ack_timer(self, now: int, head: int, tail: int):
        """Held until the timer fires (or sooner, :meth:`_acknowledged`), then: completed when acknowledged; sent
        again; or, for a lost request or the NAK'd one, sent again spending a retry, IBV_WC_RETRY_EXC_ERR once
        ``retry_cnt`` is spent."""
        woken, why = self.woken, self.waiting
        if woken is None and now < self.timer_at:
            return self.timer_at
        if woken is None:
            self.qp.awaiting.remove(self)
        self.waiting = self.woken = self.op = None
        if woken is Outcome.COMPLETE:
            return self.path.failed, now, now
        if woken is Outcome.FLUSH:
            return self._fail(WcStatus.WR_FLUSH_ERR, now, self.path.failed)
        if woken is Outcome.AGAIN or (woken is None and why is Waiting.BEHIND):
            return self._send_again(now, ())
        if self.transport_retries == 0:
            return self._fail(WcStatus.RETRY_EXC_ERR, now, self.path.failed)
        self.transport_retries -= 1
        return self._send_again(now, ())

    def _receive(self, now: int, head: int, tail: int):
        """A request that consumes a receive reached the responder. On UC and UD, one the responder cannot take
        (:func:`receive_refusal`, a faulting buffer) is dropped. On RC, without a receive posted (or with its
        buffer faulting) an RNR NAK, and the responder drops the QP's later requests until this one comes again (they
        follow it, go-back-N, each after the same timer from its own arrival); a receive that cannot take the
        message (:func:`receive_problem`) completes in error on the responder and the requester gets the NAK's
        error; else the payload lands in the receive's buffers (or, for a WRITE with immediate, through the rkey)
        and the receive completes when its CQE is written."""
        qp, wr = self.qp, self.wr
        responder, env = qp.remote, qp.pd.context.env
        if acknowledged(qp.qp_type):
            if qp.state is QpState.ERR:  # sent again behind a request that failed: flushed
                return self._fail(WcStatus.WR_FLUSH_ERR, tail, self.path.rejected)
            if responder.rnr_blocked not in (None, self):
                return self._sent_again(tail)  # go-back-N: dropped behind an RNR-NAKed request, sent again after it
        queue = responder.receives
        recv = queue.peek()
        kind, why = receive_refusal(qp, wr, recv)
        if kind is DROPPED:
            return self._dropped(tail, why)
        if kind is NAK:
            responder.to_error()
            return self._fail(why, tail, self.path.rejected)
        if kind is NOT_RECEIVING:  # the responder drops it: the requester's retries run out
            return self._fail(why, tail, self.path.rejected)
        if kind is NO_RECEIVE:
            responder.rnr_blocked = self  # (for good when its retries run out: the later ones are flushed)
            return self._rnr_nak(tail, qp=responder.qp_num, reason=why)
        responder.rnr_blocked = None
        mr, addr, length = landing_buffer(responder, recv, wr)
        problem = why
        if problem is None and mr is not None and mr.backing is not None:
            answer = mr.backing.translate(now, addr - mr.iova, length)
            if isinstance(answer, Fault):
                if not acknowledged(qp.qp_type):
                    return self._dropped(tail, "page fault")
                return self._rnr_nak(tail, mr=mr.lkey, retry_at_ps=answer.ready_ps)
            if answer is not None:
                problem = (WcStatus.LOC_PROT_ERR, WcStatus.REM_ACCESS_ERR if wr.opcode.writes_remote
                           else WcStatus.REM_OP_ERR)
        queue.take()
        if problem is not None:
            complete_receive(env, responder, queue, recv, wr, problem[0], qp.qp_num, now)
            responder.to_error()
            if not acknowledged(qp.qp_type):
                return self._dropped(tail, problem[0].ibv_name)
            return self._fail(problem[1], tail, self.path.rejected)
        self.received = (queue, recv)
        self._executed()
        if wr.opcode.writes_remote:
            write_payload(mr, addr, self.payload)
        else:
            scatter(responder.node.nic, recv, with_grh(qp, wr, self.payload))
        return self._translation(responder.node, [(mr, addr, length)], now, head, tail, self.path.after["responder"],
                                 write=True)

    def _response(self, now: int, head: int, tail: int):
        qp = self.qp
        for mr, addr, length in self.local:
            if mr.backing is not None:  # the response is written through the local MR's translation
                held = self._translated(mr, addr, length, now, write=True)
                if held is not None:
                    return held if isinstance(held, int) else self._fail(held, now, self.path.failed)
        _scatter(self.local, self.payload)
        return self._translation(qp.node, self.local, now, head, tail, self.path.after["response"], write=True)

    def _translated(self, mr, addr: int, length: int, now: int, *, write: bool):
        """A requester-side NIC access of ``length`` bytes through ``mr`` at ``now``: None when it goes on, the
        time a page fault holds it until, or the error status."""
        answer = mr.backing.translate(now, addr - mr.iova, length)
        if answer is None:
            return None
        if not isinstance(answer, Fault):
            return answer
        self.qp.pd.context.env.trace.instant(f"{self.qp.node.nic.name}.hw", "AccessStalled", mr=mr.lkey,
                                             until_ps=answer.ready_ps, write=write)
        return answer.ready_ps

    def _translation(self, node, pieces: list[Piece], now: int, head: int, tail: int, rest, *, write: bool):
        """After an access is allowed: the NIC's translation-cache and IO-TLB stages of each piece (when the node
        models them) run from ``head``; the data goes on with ``rest`` of the steps once they are done, its tail
        no earlier than then. None when there are none."""
        if rest is None or not pieces or (node.nic.mtt is None and node.iommu is None):
            return None
        extra = [s for mr, addr, length in pieces for s in translation_stages(node, mr, addr, length, now, write=write)]
        if not extra:
            return None
        self.resume = (compile_steps(rest), tail)
        return compile_steps((*stage_steps(extra), Check("translation_done"))), head, head

    def _translation_done(self, now: int, head: int, tail: int):
        program, before = self.resume
        return program, head, max(before, head)

    def _received(self, now: int, head: int, tail: int):
        """The responder's receive CQE is in memory: the receive completes."""
        queue, recv = self.received
        complete_receive(self.qp.pd.context.env, self.qp.remote, queue, recv, self.wr, WcStatus.SUCCESS,
                         self.qp.qp_num, now)

    def mark(self, op: Operation, name: str, head: int, tail: int) -> None:
        """The payload has landed (``name`` is ``landed``): a waiter on the work request learns when."""
        if self.wr.landed is not None:
            landed, signal = tail - self.path.landed_back_ps, self.wr.landed
            env = self.qp.pd.context.env
            env.timeout(landed - env.now).callbacks.append(lambda _event: signal.succeed(landed))

    def wake(self, op: Operation, head: int) -> None:
        """The CPU sees the completion at ``head``."""
        _complete_at(self.qp.pd.context.env, self.qp, self.wr, self.status, self.posted, head, self.signaled)


def _frame_lost(sender: Nic, receiver: Nic, latency_ps: int, head: int, tail: int) -> bool:
    """Whether a frame whose first bit reached ``receiver``'s port at ``head`` and last at ``tail``, ``latency_ps``
    after leaving ``sender``'s, met an outage of either link on its way."""
    return sender.link_lost(head - latency_ps, tail - latency_ps) or receiver.link_lost(head, tail)


_CHECKS = {name: getattr(WorkRequestRun, "_" + name)
           for name in ("requester", "source", "responder", "response", "translation_done", RECEIVED, REQUEST_WIRE,
                        REPLY_WIRE, ACK_TIMER, SEQUENCE_NAK)}
"""The method deciding each :class:`~sim.core.steps.Check` of a work request's path, by the check's name."""


def translation_stages(node, mr, addr: int, length: int, now_ps: int, *, write: bool) -> list[Stage]:
    """What translating one access costs before its data moves: NIC MPT/MTT cache misses (DMA reads of the
    entries), the deep-MR walk of a large MR the NIC writes, and IO-TLB misses of host-memory DMA. Empty when
    the node models neither (the default)."""
    stages: list[Stage] = []
    mtt = node.nic.mtt
    if mtt is not None:
        access = mtt.access(mr.lkey, mr.length, mr.page_size, addr - mr.iova, length, write=write)
        if access.mpt_miss:
            stages += dma_read(node.pcie, mtt.params.mpt_bytes)
        if access.mtt_misses:
            stages += dma_read(node.pcie, access.mtt_misses * mtt.params.line_bytes)
        stages += mtt.walk_stage(access, node.pcie.params)
    if node.iommu is not None and not (memory_target(mr, now_ps) or "mem").startswith("gpu"):
        stages += node.iommu.stages(mr.addr + addr - mr.iova, length)
    return stages


def _gather(env, pieces: list[Piece]):
    """Data mode: the bytes the NIC reads through each piece's MR translation now, one after the other (None when
    data mode is off)."""
    if not env.data_mode:
        return None
    if not pieces:
        return np.zeros(0, np.uint8)
    return np.concatenate([mr_bytes(mr, addr, length) for mr, addr, length in pieces])


def _scatter(pieces: list[Piece], payload) -> None:
    """Data mode: the NIC writes ``payload`` through the pieces' translations now, filling each in turn."""
    if payload is None:
        return
    at = 0
    for mr, addr, length in pieces:
        mr_bytes(mr, addr, length)[:] = payload[at:at + length]
        at += length




def _complete_at(env, qp, wr: SendWR, status: WcStatus, posted: int, seen: int, sig: bool) -> None:
    """Finish a work request whose CQE the polling CPU would notice at ``seen``.

    RC completions are delivered in posting order: a completion waits for every earlier one. The first
    error completion moves the QP to the error state; every later one is delivered as WR_FLUSH_ERR. An unsignaled
    work request that succeeds delivers nothing and keeps its send-queue slot until the next completion the QP
    delivers is polled (the CQE's WQE counter covers every earlier WQE).
    """
    if wr.landed is not None and not wr.landed.triggered and status is not WC_SUCCESS:
        wr.landed.succeed(None)  # the payload never landed: waiters learn it from the None value
    seq = qp.seq_of.pop(id(wr))
    if seq != qp.next_completion:
        qp.finished[seq] = (wr, status, posted, seen, sig)
        return
    while True:
        number = qp.next_completion
        qp.next_completion += 1
        seen = max(seen, qp.last_completion_ps)
        qp.last_completion_ps = seen
        if qp.state.flushes:
            status = WcStatus.WR_FLUSH_ERR
        elif status is not WC_SUCCESS:
            if acknowledged(qp.qp_type):
                qp.to_error()
            else:
                qp.to_send_queue_error()
        if env.trace.enabled:
            env.trace.slice(f"{qp.node.name}.qp{qp.qp_num}", wr.opcode.value, posted, seen, wr_id=wr.wr_id,
                            bytes=wr.message_bytes, status=status.name)
        if status is WC_SUCCESS and not sig:
            qp.unsignaled += 1
        else:
            wc = WorkCompletion(wr.wr_id, status, send_wc_opcode(wr.opcode), wr.message_bytes if status is WC_SUCCESS
                                else 0, qp.qp_num, posted, seen)
            freed, qp.unsignaled = qp.unsignaled + 1, 0
            simpy.Timeout(env, seen - env.now).callbacks.append(partial(_deliver, qp, wc, freed, number))
        if qp.next_completion not in qp.finished:
            return
        wr, status, posted, seen, sig = qp.finished.pop(qp.next_completion)


def _deliver(qp, wc: WorkCompletion, freed: int, number: int, _event) -> None:
    """The CQE of work request ``number`` (its posting number) reaches the CQ (a simpy callback): it and the
    unsignaled ones before it are no longer outstanding; their send queue slots are free once it is polled."""
    qp.outstanding -= freed
    if number < qp.sq_reset_seq:  # posted before the QP was reset, which discarded its WQEs
        return
    wc.release = partial(_free_send_slots, qp, freed)
    qp.send_cq.push(wc)


def _free_send_slots(qp, freed: int) -> None:
    """A send completion covering ``freed`` work requests was polled (or cleaned from its CQ)."""
    qp.sq_used -= freed

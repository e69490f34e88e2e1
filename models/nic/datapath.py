"""The data path of one work request through host, PCIe, NIC and wire: the steps both engines run.

:func:`path` strings a work request's stages (:mod:`models.nic.stages`) together with the doorbell, the READ slot
gate, the acknowledgement, the completion and the poll into one step list (:mod:`sim.core.steps`): the event
engine runs it (:mod:`sim.core.interpreter`), with :class:`~models.nic.work_request.WorkRequestRun` deciding at its
checks what only run time knows (errors, page faults, RNR NAKs, lost frames, translation caches, data mode); the
vectorized core solves streams of the same lists. A QP's claims of its send engine and transmit port are made in
posting order (:func:`in_send_order`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from models.fabric import AETH, ATOMIC_ACK_ETH, ATOMIC_ETH, RETH, Fabric
from models.nic.memory_window import key_mr
from models.nic.nic import Nic
from models.nic.receive import receive_mr
from models.nic.stages import (dma_read, dma_write, labelled, memory_target, node_dma_read, node_dma_write,
                               rx_engine, wire)
from models.nic.transport import acknowledged, carries, packet_headers
from models.nic.wqe import ATOMIC_BYTES, SEND_FENCE, SEND_SIGNALED, Opcode, SendWR, Sge
from sim.core.interpreter import Turns, compile_steps
from sim.core.steps import Check, Claim, Delay, Fork, Gate, Mark, Rebase, Step, Wake, walk_order


class Path(NamedTuple):
    """The steps of one kind of work request on one QP, for both engines, with the pieces its run-time
    decisions put in their place (cached per QP: they depend only on parameters)."""

    steps: tuple[Step, ...]
    """Doorbell to polled completion (:mod:`sim.core.steps`)."""
    program: tuple
    """``steps`` compiled for the event engine."""
    unmarked: tuple
    """``program`` without its marks, for a work request nothing waits to see land
    (:meth:`~models.nic.work_request.WorkRequestRun.mark` does nothing then)."""
    after: dict[str, tuple[Step, ...]]
    """The steps that follow each check."""
    at: dict[str, int]
    """Each check's position in the ordering rule (its index in :func:`~sim.core.steps.walk_order` of ``steps``):
    what a check puts in the place of the steps after it is numbered on from there."""
    forward: tuple[Step, ...]
    """Send engine to the responder's receive engine (retransmitted after an RNR NAK)."""
    reply: tuple[Step, ...]
    """ACK or NAK back to the requester and its CQE write."""
    failure: tuple[Step, ...]
    """The requester's CQE write of an error completion, then the poll (it goes no further)."""
    failed: dict[str | None, tuple]
    """``failure`` compiled: under each check of the main chain numbered on from it, as what a check puts in the
    place of the steps after it (:func:`failing`); under None from 0, for the checks of a retransmission's own
    program."""
    rejected: tuple
    """Compiled: the responder's NAK back, the CQE write, then the poll (the responder refused the request)."""
    landed_back_ps: int
    """How long before the end of the landing stages the payload is in memory (a READ's CQE write)."""
    packets: int
    """The PSNs the request takes (:func:`request_packets`)."""
    again: dict[int | None, tuple]
    """Compiled as they are first needed: the request's own program when it goes again (:func:`resent
    <models.nic.retransmit.resent>`), after an RNR NAK under each responder's min_rnr_timer (ps), or under None
    with nothing before it (a lost frame, a NAK PSN sequence error)."""


COMPLETION = (Rebase(True), Delay(draws="poll"), Wake())
"""The end of every work request: the CPU polls the completion a drawn poll delay after its CQE lands."""


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
    engine = Claim(nic.tx_engine(qp.qp_num), process, process, process, 0, blueflame)
    to_engine = ([] if blueflame else dma_read(node.pcie, nic.params.wqe_bytes)) + [engine]
    ack = [Delay(pnic.params.tx_latency_ps), *wire(pnic, nic, fabric, 0, AETH), rx_engine(nic, qp.qp_num)]
    cqe = dma_write(node.pcie, nic.params.cqe_bytes)
    reply = [*ack, *cqe]
    # A request that consumes a receive is checked when it arrives, on simpy's clock: a receive posted by then
    # is found.
    responder = Check("responder", 0 if remote_backing or opcode.consumes_receive else None, decides=remote_decides,
                      label=ARRIVED if opcode.consumes_receive else None)
    slots = rd_atomic_slots(qp)
    fence = [Gate(slots, READ_SLOT)] * slots if shape.fence else []
    steps: list[Step] = [Delay(nic.params.doorbell_ps), *to_engine, Rebase(False), *fence]
    if opcode.is_local:
        return _local_path(qp, key, (*steps, Check("requester"), *(cqe if shape.signaled else []), *COMPLETION), cqe)
    if not opcode.reads_remote:
        source = [] if inline else [s for length, target in pieces for s in node_dma_read(node, target, length)]
        forward = source + [Delay(nic.params.tx_latency_ps),
                            *wire(nic, pnic, fabric, n, request_headers(opcode), qp.path_mtu_bytes,
                                  packet_headers(qp.qp_type)),
                            rx_engine(pnic, qp.remote.qp_num)]
        steps.append(Check("requester"))
        if source and (local_backing or every):
            # The NIC translates the source when it issues the payload's first read request, once it has a read
            # tag and the earlier WQEs' requests are on the link.
            split = 1 + (isinstance(forward[0], Claim) and forward[0].server is node.pcie.tags) if local_backing else 0
            steps += [*forward[:split], Check("source", forward[split - 1].head_ps if split else None,
                                              decides=local_decides),
                      *([Rebase(False)] if split else []), *forward[split:]]
        else:
            steps += forward
        delivery = [responder, *receive_wqe_fetch(qp, opcode), *node_dma_write(peer, remote_target, n),
                    *receive_completion(peer, opcode), Mark("landed")]
        if acknowledged(qp.qp_type):
            # The responder acknowledges once the last TLP is on its PCIe link: a full receive path backs up into
            # the fabric, so the requester's completions are paced by the slowest resource.
            steps += [*delivery, Rebase(True, -peer.pcie.params.write_latency_ps),
                      *(reply if shape.signaled else ack), *COMPLETION]
        else:
            steps = _unacknowledged(steps, delivery, cqe if shape.signaled else [], fabric.params.latency_ps)
        landed_back = 0
    else:
        atomic = opcode.is_atomic
        forward = [Delay(nic.params.tx_latency_ps),
                   *wire(nic, pnic, fabric, 0, (ATOMIC_ETH if atomic else RETH) + packet_headers(qp.qp_type)),
                   rx_engine(pnic, qp.remote.qp_num)]
        landing, landed_back = _landing(node, pieces, nic.params.cqe_bytes if shape.signaled else 0)
        if atomic:
            unit = Claim(pnic.atomic_unit, pnic.params.atomic_ps, pnic.params.atomic_ps)
            response = [*node_dma_read(peer, remote_target, n), unit, Delay(pnic.params.tx_latency_ps),
                        *wire(pnic, nic, fabric, 0, AETH + ATOMIC_ACK_ETH), rx_engine(nic, qp.qp_num)]
        else:
            response = [*node_dma_read(peer, remote_target, n), Delay(pnic.params.tx_latency_ps),
                        *wire(pnic, nic, fabric, n, AETH, qp.remote.path_mtu_bytes, last_extra=AETH),
                        rx_engine(nic, qp.qp_num)]
        # The send engine stalls the QP at its READ/atomic slots; a slot is free again once the response's last
        # write reaches the requester's PCIe link.
        steps += [*([] if shape.fence else [Gate(slots, READ_SLOT)]), Check("requester"), *forward,
                  responder, *response,
                  *([Check("response", 0 if local_backing else None, decides=local_decides)]
                    if local_backing or every else []),
                  *labelled(landing, READ_SLOT), Mark("landed"), *COMPLETION]
    steps = on_the_wire(in_send_order(steps, nic, qp.qp_num, opcode.reads_remote), nic, pnic, lossy)
    after, at = _after_checks(steps)
    forward = on_the_wire(in_send_order(forward, nic, qp.qp_num), nic, pnic, lossy)
    reply = on_the_wire(reply, nic, pnic, lossy)
    failure = (*reply[-1:], *COMPLETION)
    result = qp.paths[key] = Path(steps, compile_steps(steps), compile_steps(steps, marks=False), after, at, forward,
                                  tuple(reply), failure, _failed(failure, at), compile_steps((*reply, *COMPLETION)),
                                  landed_back, request_packets(qp, opcode, n), {})
    return result


def _failed(failure: tuple[Step, ...], at: dict[str, int]) -> dict[str | None, tuple]:
    """:attr:`Path.failed` of ``failure``, given the position of each check of the main chain."""
    return {None: compile_steps(failure), **{name: compile_steps(failure, pos + 1) for name, pos in at.items()}}


def failing(found: Path, check: str) -> tuple[Step, ...]:
    """The steps of a work request of path ``found`` that fails at its main chain's check ``check``: the path's
    steps up to the check, then its :attr:`Path.failure` from the check's time, numbered on from the check as
    :attr:`Path.failed` has it for :meth:`~models.nic.work_request.WorkRequestRun._fail` (the rebase to that time
    takes no position). The check's time: the head at an inline check (the requester's), else ``back_ps`` before
    it (the source's, whose ``back_ps`` is the head time of the claim before it, so that it is when that claim
    started).

    :raises ValueError: ``check`` is not a check of the path's main chain.
    """
    steps = found.steps
    k = check_index(steps, check)
    return (*steps[:k + 1], Rebase(False, -(steps[k].back_ps or 0), renumber=found.at[check] + 1), *found.failure)


def check_index(steps: Sequence[Step], name: str) -> int:
    """The index in ``steps`` (a main chain) of its first check named ``name``.

    :raises ValueError: there is none.
    """
    k = next((k for k, s in enumerate(steps) if isinstance(s, Check) and s.name == name), None)
    if k is None:
        raise ValueError(f"no check '{name}' in the main chain of the path")
    return k


def _local_path(qp, key: tuple, steps: tuple[Step, ...], cqe: list[Step]) -> Path:
    """The path of a BIND_MW or LOCAL_INV (a UMR work request on mlx5): the WQE reaches the send engine, the NIC
    executes it at the check ``requester`` (:func:`~models.nic.memory_window.local_operation`) and writes the CQE;
    nothing goes on the wire, and it takes no PSN. Cached in the QP's paths under ``key``."""
    steps = in_send_order(list(steps), qp.node.nic, qp.qp_num)
    failure = (*cqe[-1:], *COMPLETION)
    after, at = _after_checks(steps)
    result = qp.paths[key] = Path(steps, compile_steps(steps), compile_steps(steps, marks=False), after, at, (), (),
                                  failure, _failed(failure, at), compile_steps(failure), 0, 0, {})
    return result


def _unacknowledged(steps: list[Step], delivery: list[Step], cqe: list[Claim], wire_latency_ps: int) -> list[Step]:
    """A UC or UD request's steps: ``steps`` end with the message's claims of the responder's receive port and
    engine; they and the ``delivery`` at the responder go on as a side chain, while the requester writes its
    ``cqe`` (none when unsignaled) as soon as the transmit port has sent the last byte, nothing coming back."""
    arrival = steps[-2:]
    return [*steps[:-2], Fork((*arrival, *delivery)), Rebase(True, -wire_latency_ps), *cqe, *COMPLETION]


def _after_checks(steps: tuple[Step, ...], base: int = 0) -> tuple[dict[str, tuple[Step, ...]], dict[str, int]]:
    """The steps that follow each check of ``steps``, within its own chain (a side chain's checks too, a main
    chain's check before a side chain's of the same name), and each such check's walk-order position (numbered
    from ``base``)."""
    after: dict[str, tuple[Step, ...]] = {}
    at: dict[str, int] = {}
    for k, step in enumerate(steps):
        if isinstance(step, Check):
            after[step.name], at[step.name] = steps[k + 1:], base
        elif isinstance(step, Fork):
            inner, where = _after_checks(step.steps, base + 1)
            for name in inner.keys() - after.keys():
                after[name], at[name] = inner[name], where[name]
        base += len(walk_order((step,)))
    return after, at


SEND_ENGINE, TRANSMIT, RESPONSES = "send_engine", "transmit", "responses"
"""The turns of a QP's send queue: its WQEs reach the send engine, and its requests the transmit port, in posting
order (RC sends a QP's requests in PSN order), whatever each waits for in between (a WRITE's payload read, a READ
slot); and the responder takes a QP's READs and atomics up in the same order (IB spec vol. 1 9.7.5.1: a responder
answers a QP's requests in PSN order): its first access of each, once translated, waits for the one before it (a
READ whose translation missed holds the QP's later ones, not the other way round)."""


def send_turns() -> dict[str, Turns]:
    """A new QP's send-queue turns (:data:`SEND_ENGINE`, :data:`TRANSMIT`, :data:`RESPONSES`)."""
    return {SEND_ENGINE: Turns(), TRANSMIT: Turns(), RESPONSES: Turns()}


def in_send_order(steps: list[Step], nic: Nic, qp_num: int, reads: bool = False) -> tuple[Step, ...]:
    """``steps`` with the claims of QP ``qp_num``'s send engine and of ``nic``'s transmit port made in its send
    queue's turns, and, for a READ or an atomic (``reads``), the responder's first claim after its check of the
    request (its first access once the request is translated) in :data:`RESPONSES`."""
    turns = {id(nic.tx_engine(qp_num)): SEND_ENGINE, id(nic.tx_port): TRANSMIT}
    out = [dataclasses.replace(s, turn=turns[id(s.server)]) if isinstance(s, Claim) and id(s.server) in turns
           else s for s in steps]
    checked = next((k for k, s in enumerate(out) if isinstance(s, Check) and s.name == "responder"), len(out))
    first = next((k for k in range(checked + 1, len(out)) if isinstance(out[k], Claim)), None) if reads else None
    if first is not None and out[first].turn is None:
        out[first] = dataclasses.replace(out[first], turn=RESPONSES)
    return tuple(out)


ACK_TIMER, SEQUENCE_NAK = "ack_timer", "sequence_nak"
"""The checks where a request waits for its requester's ACK timer (or an acknowledgement or NAK that ends the wait
early), and where a NAK PSN sequence error reaches the requester."""


REQUEST_WIRE, REPLY_WIRE = "request_wire", "reply_wire"
"""The checks after a request's, and after its acknowledgement's or response's, transmit claim on a link that has
outages: whether the link lost the frames (:meth:`~models.nic.retransmit.Retransmission._request_wire`)."""
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


def _landing(node, pieces: tuple[tuple[int, str | None], ...], cqe_bytes: int) -> tuple[list[Step], int]:
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

IMMDT = IETH = 4
"""The ImmDt extension header of a ``*_WITH_IMM`` request's last packet, and the IETH of a SEND with invalidate,
which carries the rkey to invalidate (bytes)."""


def request_headers(opcode: Opcode) -> int:
    """Extension header bytes of a request carrying a payload: RETH for RDMA WRITE, none for SEND, ImmDt for
    immediate data, IETH for SEND with invalidate (IB spec vol. 1 ch. 9.2-9.3, approximated as extra bytes of the
    first packet)."""
    return (RETH if opcode.writes_remote else 0) + (IMMDT if opcode.carries_imm else 0) + \
        (IETH if opcode is Opcode.SEND_WITH_INV else 0)


def receive_wqe_fetch(qp, opcode: Opcode) -> list[Step]:
    """What fetching the receive WQE costs the responder of ``qp`` for an ``opcode`` that consumes one: a DMA read
    of one WQE of its queue (16 B per scatter entry, an SRQ's next-segment more) on the responder's PCIe link.

    mlx5 posts receives with no doorbell but the doorbell record in host memory (``mlx5_post_recv``), so the NIC
    reads receive WQEs by DMA; ConnectX prefetches them for the receives posted ahead, which is why the read runs
    beside the payload (a fork from the first packet's arrival) and costs PCIe link time, not latency."""
    if not opcode.consumes_receive:
        return []
    peer = qp.remote.node
    return [Fork((Rebase(False), *dma_read(peer.pcie, qp.remote.receives.wqe_bytes)))]


def receive_completion(peer, opcode: Opcode) -> list[Step]:
    """The responder's receive CQE for an ``opcode`` that consumes a receive: written on the responder's PCIe link
    after the payload (a fork from its last TLP), ending at the check :data:`RECEIVED` when it is in memory."""
    if not opcode.consumes_receive:
        return []
    cqe = dma_write(peer.pcie, peer.nic.params.cqe_bytes)
    return [Fork((Rebase(True, -peer.pcie.params.write_latency_ps), *cqe, Rebase(True),
                  Check(RECEIVED, 0, label=RECEIVED)))]


RECEIVED = "received"
"""The check (and its label: the vectorized core reports its times) where a receive-consuming request's receive CQE
is in memory: the receive completes then."""
ARRIVED = "arrived"
"""The label of a receive-consuming request's check at the responder (the vectorized core reports its times): it
takes a receive there, if one is posted by then."""


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


def work_request_path(qp, wr: SendWR, now_ps: int, listed: bool = False) -> Path:
    """The path ``wr`` posted on ``qp`` at ``now_ps`` takes (``listed``: in a list of several, see
    :attr:`Shape.fetched`)."""
    return posted_path(qp, wr, now_ps, listed)[2]


def posted_path(qp, wr: SendWR, now_ps: int, listed: bool) -> tuple[Sequence[Sge], bool, Path]:
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
    if known is not None and known[0] is nic.lookup(wr.lkey) and known[1] is key_mr(pnic, wr.rkey):
        sges = known[2]
        return (sges if not sges or sges[0].addr == wr.local_addr else local_sges(wr)), known[3], known[4]
    sges, sig = local_sges(wr), signaled(qp, wr)
    found = _path_of(qp, wr, sges, sig, now_ps, listed)
    opcode = wr.opcode
    if (wr.sg_list is None and qp.node.topology is None and qp.remote.node.topology is None
            and not opcode.is_atomic and (opcode.writes_remote or not opcode.consumes_receive)):
        qp.paths[key] = (nic.lookup(wr.lkey), key_mr(pnic, wr.rkey), tuple(sges), sig, found)
    return sges, sig, found


_POSTED = "posted"
"""First item of :func:`posted_path`'s keys in a QP's path cache (:func:`path`'s keys begin with an opcode)."""


def _path_of(qp, wr: SendWR, sges: Sequence[Sge], sig: bool, now_ps: int, listed: bool) -> Path:
    """:func:`work_request_path` given ``wr``'s :func:`local_sges` and whether it is :func:`signaled`."""
    node, peer = qp.node, qp.remote.node
    local_mrs = [] if wr.is_inline else [node.nic.lookup(sge.lkey) for sge in sges]  # inline: the WQE holds the data
    local_mr = local_mrs[0] if local_mrs else None
    remote_mr = key_mr(peer.nic, wr.rkey) if not wr.opcode.consumes_receive or wr.opcode.writes_remote else \
        receive_mr(qp.remote)
    checked = checked_accesses(qp, local_mrs, remote_mr)
    gather = () if len(local_mrs) < 2 else tuple((sge.length, memory_target(mr, now_ps))
                                                 for sge, mr in zip(sges, local_mrs))
    fence = bool(wr.send_flags & SEND_FENCE)
    shape = Shape(gather, sig, fence, listed) if gather or listed else _ONE_SGE[sig, fence]
    # An opcode the QP's service does not carry fails at the requester: its path is a SEND's up to there.
    opcode = wr.opcode if carries(qp.qp_type, wr.opcode) else Opcode.SEND
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

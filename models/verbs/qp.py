"""Queue pairs (RC, UC, UD): ``ibv_create_qp``, ``ibv_modify_qp`` and the RESET->INIT->RTR->RTS sequences perftest
runs, ``ibv_query_qp``, ``ibv_post_send`` (receive queues and SRQs: :mod:`models.verbs.recv`; address handles:
:mod:`models.verbs.ah`).

Data transfer is asynchronous: :func:`ibv_post_send` starts a simulated work request whose completion appears in
the CQ. Failures raise :class:`~sim.core.VerbsError` with the errno rdma-core returns.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from models.ib.mr_checks import EFA_VENDOR_ID
from models.nic.datapath import send_turns
from models.nic.device import DeviceCap
from models.nic.transport import QP_UD
from models.nic.work_request import start_work_request
from models.nic.wqe import RNR_RETRY_INFINITE, Access, QpState, SendWR, WcOpcode, WcStatus, WorkCompletion
from models.node import Node
from models.verbs.ah import data_path_qp, datagram_destination
from models.verbs.cq import CompletionQueue, cq_clean
from models.verbs.device import ProtectionDomain
from models.verbs.qp_state import (AhAttr, PathMtu, QPAttr, QpAttrMask, QpType, ack_timeout_ps, apply_attrs,
                                   check_modify_qp, controlled_qkey_allowed, modify_qp_mask, rnr_timer_ps,
                                   sq_holds_posts)
from models.verbs.receive_queue import ReceiveQueue, SharedReceiveQueue, check_rq_caps, rq_geometry
from models.verbs.send_checks import check_send_caps, check_send_wr, sq_state_max_gs
from models.verbs.xrc_path import xrc_sender
from models.versions import node_kernel
from sim.core import VerbsError
from sim.core.env import UniformDraws
from sim.core.interpreter import Semaphore


PERFTEST_QKEY = 0x11111111
"""perftest's ``DEF_QKEY``: the Q_Key of its UD QPs."""


@dataclass(eq=False)
class QueuePair:
    """A ``struct ibv_qp`` of type ``qp_type``: its attributes move through the state machine by
    :func:`ibv_modify_qp`; :meth:`connect` (RC, UC) and :meth:`ready_datagrams` (UD) are the RESET->INIT->RTR->RTS
    sequences perftest runs."""

    pd: ProtectionDomain
    send_cq: CompletionQueue
    max_send_wr: int
    qp_num: int
    attr: QPAttr = field(default_factory=QPAttr)
    """What ibv_modify_qp set (qp_state included); the data path reads its timers and limits from here."""
    remote: QueuePair | None = None
    outstanding: int = 0
    """Work requests posted whose completion (or a later one covering them) has not reached the CQ yet."""
    sq_used: int = 0
    """Send queue slots taken: work requests posted whose completion, or a later one covering them, has not been
    polled (mlx5 advances the send queue's tail in ``poll_cq``; ``mlx5_post_send`` checks head - tail)."""
    sq_reset_seq: int = 0
    """Posting number of the first work request since the QP last moved to RESET, which discarded the send queue
    (``mlx5_init_qp_indices``): an earlier one still in flight then completes nothing."""
    gates: dict[str, Semaphore] | None = None
    """The gates its work requests pass (the READ/atomic slots, :data:`models.nic.datapath.READ_SLOT`)."""
    poll_delays: UniformDraws | None = None
    paths: dict = field(default_factory=dict)
    """The data path's step lists of this QP's kinds of work request (:func:`models.nic.datapath.path`)."""
    seq_of: dict = field(default_factory=dict)
    """Posting sequence number of each in-flight work request (by id)."""
    turns: dict = field(default_factory=send_turns)
    """The send queue's order at the send engine and the transmit port (:func:`models.nic.datapath.send_turns`)."""
    finished: dict = field(default_factory=dict)
    """Work requests done but waiting for an earlier one before their completion is delivered."""
    posted_count: int = 0
    next_completion: int = 0
    last_completion_ps: int = 0
    rnr_naks: int = 0
    """RNR NAKs this QP's requests received."""
    sq_stalled_until: int = 0
    """A requester-side page fault stalls the send queue until then: later WQEs are translated no earlier."""
    sq_failed: bool = False
    """The requester found a local error in one of its work requests (a key, or an access of its own memory whose
    page fault failed: the payload's read, a READ response's write): its send queue stops there, and the later work
    requests are flushed at their next requester-side check, their accesses not made, though the QP's state changes
    only when that error completion is delivered (:func:`~models.nic.completion.complete_at`). rxe moves the QP to
    ERR at once (rxe_req.c at its ``err:`` label, rxe_comp.c after ``COMPST_ERROR``); mlx5 completes the WQE in
    error when the driver resumes the fault with an error (odp.c ``mlx5_ib_page_fault_resume``), the send queue
    having stalled behind it. Cleared by RESET and by SQE -> RTS."""
    qp_type: QpType = QpType.RC
    max_send_sge: int = 1
    """``cap.max_send_sge``: SGEs one work request may have."""
    sq_state_max_gs: int = -1
    """mlx5's ``sq.qp_state_max_gs``: SGEs a post may have in the QP's state (:func:`sq_state_max_gs`)."""
    max_inline_data: int = 0
    """``cap.max_inline_data``: largest ``IBV_SEND_INLINE`` payload (bytes)."""
    sq_sig_all: bool = True
    """Every work request completes; False: only those posted with ``IBV_SEND_SIGNALED`` (and errors)."""
    unsignaled: int = 0
    """Unsignaled work requests done and still holding their send-queue slots until the next completion."""
    destroyed: bool = False

    recv_cq: CompletionQueue | None = None
    """Where receive completions go (the send CQ unless the QP was created with its own)."""
    rq: ReceiveQueue = field(default_factory=lambda: ReceiveQueue(0, 0))
    """The QP's own receive queue (depth 0: created without receives, or on an SRQ)."""
    srq: SharedReceiveQueue | None = None
    """The SRQ the QP takes its receives from instead."""
    rnr_blocked: object | None = None
    """As responder: the incoming request it sent an RNR NAK for and waits to see again (later ones are dropped)."""
    senders: dict = field(default_factory=dict)
    """UD: the data path's view of the QP per destination (:func:`models.verbs.ah.sender_to`)."""
    absent_qps: dict = field(default_factory=dict)
    """UD: the :class:`~models.verbs.ah.AbsentQp` of each (LID, QP number) it sent to that has no UD QP, made once
    (:func:`models.verbs.ah.absent_qp`)."""
    missing: object | None = None
    """As responder: the incoming request whose packets the link lost, awaited again (later ones are dropped)."""
    nak_sent: bool = False
    """As responder: it sent a NAK PSN sequence error for the gap ``missing`` leaves (``rxe`` ``sent_psn_nak``)."""
    sequence_naks: int = 0
    """As responder: the NAKs PSN sequence error it sent."""
    awaiting: list = field(default_factory=list)
    """As requester: its work requests waiting for their ACK timers, in the order they began to."""
    held_posts: list = field(default_factory=list)
    """Work requests posted in SQD, waiting for RTS (:func:`~models.verbs.qp_state.sq_holds_posts`): each with the
    QP the data path takes for it (:func:`_path_qp`), whether it was posted in a list, and when (ps)."""
    frames_lost: int = 0
    """Request, acknowledgement and response frames of this QP's work requests the links lost."""
    next_psn: int = 0
    """As requester: the PSN its next request takes (from ``sq_psn``, advanced by each request's packets)."""
    expected_psn: int = 0
    """As responder: the PSN it expects next (from ``rq_psn``, advanced by each request it executes)."""
    psn_synced: bool = False
    """As responder: a request has arrived with the expected PSN since ``rq_psn`` was set (PSNs checked until)."""
    xrc_domain: object | None = None
    """XRC target: its XRC domain (:class:`~models.verbs.xrc.XrcDomain`), whose XRC SRQs it receives into."""
    usecnt: int = 0
    """XRC target: the processes' opens holding it (``real_qp->usecnt``: :class:`~models.verbs.xrc.OpenedQp`)."""
    error_completing: bool = False
    """The error completion that moved the QP to ERR is on its way to the send CQ: its receives flush once it is
    there (:meth:`error_completed`)."""

    xrc_srq_valid = True
    """As responder: the request names a receive queue it has (only an XRC target's view, for a request naming no
    XRC SRQ of its domain, says otherwise: :class:`~models.verbs.xrc_path.XrcTarget`)."""

    def __post_init__(self) -> None:
        if self.recv_cq is None:
            self.recv_cq = self.send_cq
        self.pd.usecnt += 1  # ib_create_qp_user: atomic_inc(&pd->usecnt), and the CQs'
        for cq in self.cqs:
            cq.usecnt += 1

    @property
    def cqs(self) -> tuple[CompletionQueue, ...]:
        """Its send CQ and its receive CQ, once when they are one."""
        return (self.send_cq,) if self.recv_cq is self.send_cq else (self.send_cq, self.recv_cq)

    @property
    def receives(self) -> ReceiveQueue:
        """The queue an incoming SEND (or WRITE with immediate) consumes from: the SRQ, else the QP's own."""
        return self.rq if self.srq is None else self.srq

    def deliver_receive(self, queue: ReceiveQueue, wc: WorkCompletion) -> None:
        """A receive taken from ``queue`` completes: its completion reaches the receive CQ (an XRC SRQ's own CQ),
        and its slot is free once that is polled."""
        wc.release = queue.release_at_poll()
        (self.recv_cq if queue.cq is None else queue.cq).push(wc)

    def flush_receives(self) -> None:
        """The QP's own posted receives complete with IBV_WC_WR_FLUSH_ERR (an SRQ's stay for its other QPs)."""
        now = self.pd.context.env.now
        for wr in self.rq.flush():
            self.deliver_receive(self.rq, WorkCompletion(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0,
                                                         self.qp_num, now, now))

    @functools.cached_property
    def node(self) -> Node:
        """The node this QP lives on (its PD's, for good: looked up once)."""
        return self.pd.context.node

    @property
    def state(self) -> QpState:
        """``qp_state``."""
        return self.attr.qp_state

    @property
    def min_rnr_timer_ps(self) -> int:
        """Responder attribute: how long a requester waits after this QP sends an RNR NAK (ps)."""
        return rnr_timer_ps(self.attr.min_rnr_timer)

    @property
    def ack_timeout_ps(self) -> int | None:
        """Requester attribute: how long it waits for an acknowledgement before sending again (None: for ever)."""
        return ack_timeout_ps(self.attr.timeout)

    @property
    def path_mtu_bytes(self) -> int:
        """The payload bytes of one packet this QP sends: ``path_mtu``; a UD QP's, which has none, is the port's
        active MTU."""
        if self.qp_type is QpType.UD:
            return PathMtu.at_most(self.pd.context.fabric.params.mtu).nbytes
        return PathMtu(self.attr.path_mtu).nbytes

    @property
    def rnr_retry(self) -> int:
        """Requester attribute: RNR retries before IBV_WC_RNR_RETRY_EXC_ERR; 7 means retry forever."""
        return self.attr.rnr_retry

    def connect(self, remote: QueuePair, rd_atomic: int | None = None, timeout: int = 14) -> None:
        """Bring both QPs (RC or UC) to RTS connected to each other, with the attributes and masks perftest's
        ``ctx_connect`` sets for their type (PSNs 0 where perftest draws them at random, so that runs repeat);
        ``rd_atomic`` is both RC QPs' max_rd_atomic and max_dest_rd_atomic (perftest -o), default the device's
        max_qp_rd_atom; ``timeout`` their ACK timeout encoding (perftest -u; its default 14 is 4.096 us * 2**14 =
        67 ms)."""
        for qp, peer in ((self, remote), (remote, self)):
            qp.remote = peer
            to_init, to_rtr, to_rts = PERFTEST_MASKS[qp.qp_type]
            reads = qp.node.nic.params.max_rd_atomic if rd_atomic is None else rd_atomic
            mtu = PathMtu.at_most(qp.pd.context.fabric.params.mtu)
            ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qp_access_flags=int(
                Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC)), to_init)
            ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTR, path_mtu=mtu, dest_qp_num=peer.qp_num, rq_psn=0,
                                     max_dest_rd_atomic=reads, min_rnr_timer=PERFTEST_MIN_RNR_TIMER,
                                     ah_attr=AhAttr(port_num=1)), to_rtr)
            ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS, timeout=timeout, retry_cnt=7,
                                     rnr_retry=RNR_RETRY_INFINITE, sq_psn=0, max_rd_atomic=reads), to_rts)

    def ready_datagrams(self, qkey: int = PERFTEST_QKEY) -> None:
        """Bring a UD QP to RTS with Q_Key ``qkey`` (perftest's ``DEF_QKEY`` by default) and the masks perftest
        passes for UD (no remote QP: each work request names its destination)."""
        to_init, to_rtr, to_rts = PERFTEST_MASKS[QpType.UD]
        ibv_modify_qp(self, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qkey=qkey), to_init)
        ibv_modify_qp(self, QPAttr(qp_state=QpState.RTR), to_rtr)
        ibv_modify_qp(self, QPAttr(qp_state=QpState.RTS, sq_psn=0), to_rts)

    def to_send_queue_error(self) -> None:
        """A UC or UD send completed in error: the QP moves to SQE, where its later work requests are flushed and
        its receive side goes on taking messages."""
        self.attr.qp_state = self.attr.cur_qp_state = QpState.SQE

    def to_error(self, completing: bool = False) -> None:
        """Move to the error state: outstanding and later work requests complete with WR_FLUSH_ERR, and so do
        the receives posted to the QP's own queue, at once or, when ``completing`` (a request of the QP failed and
        its completion is on its way), once that completion is in the send CQ: the failed request completes first,
        then the QP flushes (rxe_comp.c ``COMPST_ERROR``: ``do_complete``, then ``rxe_qp_error``)."""
        self.attr.qp_state = self.attr.cur_qp_state = QpState.ERR
        self.error_completing = completing
        if not completing:
            self.flush_receives()

    def error_completed(self) -> None:
        """The error completion that moved the QP to ERR reached the send CQ: the receives flush now (unless the
        QP has left ERR meanwhile)."""
        if self.error_completing:
            self.error_completing = False
            if self.state is QpState.ERR:
                self.flush_receives()


PERFTEST_TO_INIT = QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS
PERFTEST_TO_RTR = (QpAttrMask.STATE | QpAttrMask.AV | QpAttrMask.PATH_MTU | QpAttrMask.DEST_QPN
                   | QpAttrMask.RQ_PSN | QpAttrMask.MAX_DEST_RD_ATOMIC | QpAttrMask.MIN_RNR_TIMER)
PERFTEST_TO_RTS = (QpAttrMask.STATE | QpAttrMask.TIMEOUT | QpAttrMask.RETRY_CNT | QpAttrMask.RNR_RETRY
                   | QpAttrMask.SQ_PSN | QpAttrMask.MAX_QP_RD_ATOMIC)
"""The masks perftest's ``ctx_modify_qp_to_init``/``_to_rtr``/``_to_rts`` pass for RC."""
PERFTEST_MASKS = {
    QpType.RC: (PERFTEST_TO_INIT, PERFTEST_TO_RTR, PERFTEST_TO_RTS),
    QpType.UC: (PERFTEST_TO_INIT, QpAttrMask.STATE | QpAttrMask.AV | QpAttrMask.PATH_MTU | QpAttrMask.DEST_QPN
                | QpAttrMask.RQ_PSN, QpAttrMask.STATE | QpAttrMask.SQ_PSN),
    QpType.UD: (QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.QKEY, QpAttrMask.STATE,
                QpAttrMask.STATE | QpAttrMask.SQ_PSN),
    QpType.XRC_SEND: (PERFTEST_TO_INIT, PERFTEST_TO_RTR, PERFTEST_TO_RTS),
    QpType.XRC_RECV: (PERFTEST_TO_INIT, PERFTEST_TO_RTR, PERFTEST_TO_RTS)}
"""The masks perftest passes for each QP type (``ctx_modify_qp_to_init``/``_to_rtr``/``_to_rts``): UC drops RC's
read/atomic and retry attributes, UD sets a Q_Key and no path; XRC QPs get RC's, of which uverbs drops what each
side ignores (:func:`~models.verbs.qp_state.modify_qp_mask`)."""
PERFTEST_MIN_RNR_TIMER = 12
"""perftest's ``MIN_RNR_TIMER``: 0.64 ms."""


def ibv_modify_qp(qp: QueuePair, attr: QPAttr, attr_mask: int) -> None:
    """Change the attributes of ``qp`` selected by ``attr_mask`` (``enum ibv_qp_attr_mask``), moving it to
    ``attr.qp_state`` when ``IBV_QP_STATE`` is set; on error nothing changes.

    :raises VerbsError: see :func:`~models.verbs.qp_state.check_modify_qp` (``EINVAL`` for an illegal
        transition or attribute, ``EOPNOTSUPP`` for unknown mask bits, ``EPERM`` for a controlled Q_Key the process
        may not set: :func:`~models.verbs.qp_state.controlled_qkey_allowed` of its kernel and
        :attr:`~models.verbs.device.Context.cap_net_raw`).
    """
    attr_mask = modify_qp_mask(qp.qp_type, attr_mask)
    new = check_modify_qp(qp.qp_type, qp.state, attr, attr_mask, qp.node.nic.params.max_rd_atomic,
                          controlled_qkey_allowed(node_kernel(qp.node), qp.pd.context.cap_net_raw))
    before = qp.state
    qp.attr = apply_attrs(qp.attr, attr, attr_mask, new)
    qp.sq_state_max_gs = sq_state_max_gs(qp, new)
    if attr_mask & QpAttrMask.SQ_PSN or new is QpState.RESET:
        qp.next_psn = qp.attr.sq_psn
    if attr_mask & QpAttrMask.RQ_PSN or new is QpState.RESET:
        qp.expected_psn, qp.psn_synced = qp.attr.rq_psn, False
    if sq_holds_posts(before) and not sq_holds_posts(new) and qp.held_posts:
        _release_held_posts(qp)
    if new is QpState.ERR and before is not QpState.ERR:
        qp.flush_receives()
    elif new is QpState.RESET:  # (mlx5_modify_qp: the QP's completions cleaned, then its queues' indices reset)
        qp.error_completing = qp.sq_failed = False
        for cq in qp.cqs:
            cq_clean(cq, qp.qp_num)
        qp.rq.reset()
        qp.sq_used, qp.sq_reset_seq = 0, qp.posted_count
        qp.rnr_blocked = qp.missing = None
        qp.nak_sent = False
    if before is QpState.SQE and new is QpState.RTS:
        qp.sq_failed = False
    if before is QpState.RTR and new is QpState.RTS:
        env = qp.pd.context.env
        qp.gates = None  # the READ/atomic slots are counted at the first post, once the responder is known
        qp.paths.clear()  # the step lists follow the new attributes (path MTU, READ/atomic slots)
        qp.senders.clear()
        qp.absent_qps.clear()
        if qp.poll_delays is None:
            qp.poll_delays = UniformDraws(env.rng(poll_stream(qp)), qp.node.host.params.poll_period_ps)


def poll_stream(qp: QueuePair) -> str:
    """The name of the random stream of ``qp``'s poll delays: one per QP. QP numbers repeat across the NICs of a
    node with several, so a QP on another NIC than the node's first has its NIC in the name."""
    node = qp.node
    where = node.name if node.device == "nic0" else f"{node.name}.{node.device}"
    return f"{where}.cpu.qp{qp.qp_num}"


def ibv_query_qp(qp: QueuePair, attr_mask: int) -> QPAttr:
    """A copy of the attributes of ``qp`` (mlx5 fills every field whatever ``attr_mask`` selects), its PSNs as they
    have advanced: ``sq_psn`` the next its send queue uses, ``rq_psn`` the next its responder expects."""
    return dataclasses.replace(qp.attr, ah_attr=dataclasses.replace(qp.attr.ah_attr), sq_psn=qp.next_psn,
                               rq_psn=qp.expected_psn)


def check_qp_type(nic_params, qp_type: QpType) -> None:
    """The QP types the device's provider creates. mlx5: every type modelled. EFA (rdma-core providers/efa/verbs.c,
    ``efa_create_qp``): UD only, and SRD through ``efadv_create_driver_qp`` (reliable; RDMA READ and WRITE on
    devices with those caps), which the model runs as its RC; any other type is refused ("Unsupported QP type").

    XRC QPs need the device's XRC capability (mlx5_ib ``create_qp``: ``MLX5_CAP_GEN(mdev, xrc)``; EFA has none).

    :raises VerbsError: ``EOPNOTSUPP`` for a UC QP on EFA, an XRC QP on a device without XRC.
    """
    if nic_params.device.vendor_id == EFA_VENDOR_ID and qp_type is QpType.UC:
        raise VerbsError("EOPNOTSUPP", "EFA creates UD QPs and SRD ones (the model's RC), not UC (efa_create_qp: "
                         "Unsupported QP type)", call="ibv_create_qp")
    if qp_type in (QpType.XRC_SEND, QpType.XRC_RECV) and not nic_params.device.cap_flags & DeviceCap.XRC:
        raise VerbsError("EOPNOTSUPP", f"{qp_type.name}: the device has no XRC (IBV_DEVICE_XRC not in its "
                         "device_cap_flags)", call="ibv_create_qp")


def ibv_create_qp(pd: ProtectionDomain, send_cq: CompletionQueue, max_send_wr: int, *, max_send_sge: int = 1,
                  max_inline_data: int | None = None, sq_sig_all: bool = True, recv_cq: CompletionQueue | None = None,
                  max_recv_wr: int = 0, max_recv_sge: int = 1, srq: SharedReceiveQueue | None = None,
                  qp_type: QpType = QpType.RC) -> QueuePair:
    """Create a QP of ``qp_type`` (``struct ibv_qp_init_attr``: its ``cap`` and ``sq_sig_all``; ``max_inline_data``
    None: as much as the NIC's WQE holds; ``recv_cq`` defaults to ``send_cq``); a UD QP is reachable by datagram
    from then on (:attr:`models.fabric.Fabric.datagram_qps`). Its receive queue is as deep and wide as
    mlx5 makes it (:func:`~models.verbs.receive_queue.rq_geometry`: ``qp.rq.depth``, ``qp.rq.max_sge`` are the ``cap``
    ibv_create_qp returns); on an ``srq`` the QP has none and ``max_recv_wr`` is ignored. An XRC initiator
    (``XRC_SEND``) has no receive side: its receive caps, SRQ and receive CQ are ignored, as uverbs' ``create_qp``
    zeroes them and libibverbs sends no receive CQ for it; an XRC target is made from an XRC domain
    (:func:`models.verbs.xrc.create_xrc_qp_user`).

    :raises VerbsError: ``EOPNOTSUPP`` for a type the device's provider does not create (:func:`check_qp_type`);
        ``EINVAL`` for an XRC target here (libibverbs ``ibv_cmd_create_qp_ex2``: XRC_RECV needs
        IBV_QP_INIT_ATTR_XRCD), when max_send_wr, max_recv_wr or max_recv_sge is out of the device's range, the
        send caps are (see :func:`~models.verbs.send_checks.check_send_caps`), or the SRQ belongs to another device or
        is an XRC SRQ (uverbs ``create_qp``: ``srq->srq_type == IB_SRQT_XRC``).
    """
    call = "ibv_create_qp"
    nic = pd.context.node.nic
    check_qp_type(nic.params, QpType(qp_type))
    if qp_type is QpType.XRC_RECV:
        raise VerbsError("EINVAL", "an XRC_RECV QP is created on an XRC domain (IBV_QP_INIT_ATTR_XRCD), not a PD",
                         call=call)
    if qp_type is QpType.XRC_SEND:
        max_recv_wr, max_recv_sge, srq, recv_cq = 0, 0, None, None
    limit = nic.params.max_qp_wr
    if not 1 <= max_send_wr <= limit:
        raise VerbsError("EINVAL", f"max_send_wr {max_send_wr} outside 1..{limit} (device max_qp_wr)", call=call)
    inline = nic.params.max_inline if max_inline_data is None else max_inline_data
    check_send_caps(nic.params, max_send_sge, inline)
    if srq is not None:
        if srq.pd.context.node is not pd.context.node or srq.xrcd is not None:
            raise VerbsError("EINVAL", "the SRQ belongs to another device or is an XRC SRQ (those serve XRC target "
                             "QPs only)", call=call)
        rq = ReceiveQueue(0, 0)
    else:
        check_rq_caps(max_recv_wr, max_recv_sge, limit, nic.params.device.max_sge, call)
        rq = ReceiveQueue(*rq_geometry(max_recv_wr, max_recv_sge))
    qp = QueuePair(pd, send_cq, max_send_wr, nic.new_handle(), max_send_sge=max_send_sge, max_inline_data=inline,
                   sq_sig_all=sq_sig_all, recv_cq=recv_cq, rq=rq, srq=srq, qp_type=QpType(qp_type))
    if srq is not None:
        srq.qps.append(qp)
    if qp.qp_type is QpType.UD:
        fabric = pd.context.fabric
        fabric.datagram_qps[(fabric.lid(nic.name), qp.qp_num)] = qp
    return qp


def ibv_post_send(qp: QueuePair, wr: SendWR | list[SendWR]) -> None:
    """Post one work request, or a list of them in one call (a chain of ``ibv_send_wr``: one doorbell, so the NIC
    fetches their WQEs by DMA); completions will be pushed to ``qp.send_cq``. A list is checked one work request
    at a time: those before the first that fails stay posted, as with ``ibv_post_send``'s ``bad_wr``.

    A post is accepted in every state from RTS on, as mlx5 accepts it: in ERR and SQE the work requests complete
    ``IBV_WC_WR_FLUSH_ERR``, in SQD they wait until the QP is back in RTS
    (:func:`~models.verbs.qp_state.sq_holds_posts`).

    :raises VerbsError: the checks of
        :func:`~models.verbs.send_checks.check_send_wr` (``ENOMEM`` for a full send queue, a QP that has not been in
        RTS since it was created or reset (RESET, INIT, RTR), too many SGEs or too much inline data,
        ``EOPNOTSUPP`` for an atomic without atomic support, ``EINVAL`` for inline data on a READ or an atomic, or
        immediate data beyond 32 bits); on a UD QP those of :func:`~models.verbs.ah.datagram_destination`
        (``EINVAL`` without a live AH of the device). An opcode a UC or UD QP does not carry is posted, as mlx5
        posts it, and completes in error (:mod:`models.nic.transport`).
    :raises ProtocolError: a UD work request's address names no port of the fabric.
    """
    wrs = wr if isinstance(wr, list) else [wr]
    listed, runner = len(wrs) > 1, qp.pd.context.env.step_runner
    for one in wrs:
        check_send_wr(qp, one)
        path_qp = _path_qp(qp, one)
        qp.outstanding += 1
        qp.sq_used += 1
        qp.seq_of[id(one)] = qp.posted_count
        qp.posted_count += 1
        if sq_holds_posts(qp.state):
            qp.held_posts.append((one, path_qp, listed, qp.pd.context.env.now))
            continue
        seq, offset = one.order if one.order is not None else (runner.number(), 0)
        start_work_request(path_qp, one, seq, offset, listed=listed)


def _path_qp(qp: QueuePair, wr: SendWR):
    """What the data path takes as the QP of ``wr``: a UD QP's view towards the work request's destination
    (:func:`~models.verbs.ah.data_path_qp`), an XRC initiator's towards the XRC SRQ it names
    (:func:`~models.verbs.xrc_path.xrc_sender`), else the QP itself."""
    if qp.qp_type is QP_UD:
        return data_path_qp(qp, datagram_destination(qp, wr))
    return xrc_sender(qp, wr.remote_srqn) if qp.qp_type is QpType.XRC_SEND else qp


def _release_held_posts(qp: QueuePair) -> None:
    """``qp`` left SQD: the work requests posted meanwhile are taken up in posting order (in RTS they run, in ERR
    they flush); to RESET they are discarded, as resetting a QP discards its send queue without completions."""
    held, qp.held_posts = qp.held_posts, []
    if qp.state is QpState.RESET:
        for one, *_ in held:
            del qp.seq_of[id(one)]
        qp.outstanding -= len(held)
        qp.posted_count -= len(held)  # they were the newest: every post since SQD was held
        return
    runner = qp.pd.context.env.step_runner
    for one, path_qp, listed, posted in held:
        start_work_request(path_qp, one, runner.number(), 0, listed, posted)

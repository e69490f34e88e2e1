"""The verbs API (rdma-core names and errno semantics): context, PD, MR, CQ, QP (RC, UC, UD), post and poll
(receive queues and SRQs: :mod:`models.verbs.recv`; address handles: :mod:`models.verbs.ah`).

Registration and queue creation are immediate calls that return their simulated cost; data transfer is
asynchronous: :func:`ibv_post_send` starts a simulated work request whose completion appears in the CQ.
Failures raise :class:`~sim.core.VerbsError` with the errno rdma-core returns.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from models.fabric import Fabric
from models.ib.implicit_odp import (MLX5_IMR_KSM_ENTRIES, SIZE_MAX, ImplicitOdpBacking, is_implicit_request,
                                    parent_create_ps)
from models.ib.mkey_page import ib_umem_num_dma_blocks, mkey_page_size, page_segments
from models.ib.mr_backing import OdpBacking
from models.ib.mr_checks import (EFA_VENDOR_ID, PAGE_SIZE, U64, check_max_mr_size, efa_alloc_mr,
                                ib_check_mr_access)
from models.ib.umem_odp import create_user_odp_mr, mlx5_ib_init_odp_mr
from models.nic.datapath import send_turns
from models.nic.work_request import start_work_request
from models.nic.translation import MrBacking
from models.nic.transport import QP_UD
from models.nic.wqe import RNR_RETRY_INFINITE, Access, QpState, SendWR, WcOpcode, WcStatus, WorkCompletion
from models.node import Node
from models.verbs.qp_state import (AhAttr, PathMtu, QPAttr, QpAttrMask, QpType, ack_timeout_ps, apply_attrs,
                                   check_modify_qp, controlled_qkey_allowed, rnr_timer_ps, sq_holds_posts)
from models.verbs.ah import data_path_qp, datagram_destination
from models.verbs.receive_queue import ReceiveQueue, SharedReceiveQueue, check_rq_caps, rq_geometry
from models.verbs.send_checks import check_send_caps, check_send_wr, sq_state_max_gs
from models.versions import node_kernel
from sim.core import PS_PER_US, Environment, VerbsError
from sim.core.env import UniformDraws
from sim.core.interpreter import Semaphore


REG_MR_FIXED_PS = 35 * PS_PER_US
"""uverbs ioctl + mkey creation per ibv_reg_mr; torchcomms measures register+deregister of 8 KB at 54.5 us,
split about 2:1 between the two like the calibrated pin/unpin costs."""
DEREG_MR_FIXED_PS = 19 * PS_PER_US
"""uverbs ioctl + mkey destruction per ibv_dereg_mr (the rest of the 54.5 us above)."""
PERFTEST_QKEY = 0x11111111
"""perftest's ``DEF_QKEY``: the Q_Key of its UD QPs."""


@dataclass(eq=False)
class Context:
    """An opened device (``ibv_open_device``) on one node."""

    node: Node
    env: Environment
    fabric: Fabric
    async_events: deque = field(default_factory=deque)
    """Asynchronous events not yet read (:func:`models.verbs.recv.ibv_get_async_event`)."""
    cap_net_raw: bool = False
    """The process that opened it holds CAP_NET_RAW, so it may set controlled Q_Keys (the system's
    privileged-qkey mode, which lets every process, counts the same). Default False: an ordinary user's program."""


@dataclass(eq=False)
class ProtectionDomain:
    """``struct ibv_pd``."""

    context: Context
    handle: int
    usecnt: int = 0
    """Objects that use it (MRs, QPs): the kernel's ``pd->usecnt``; :func:`~models.verbs.destroy.ibv_dealloc_pd`
    refuses while it is not 0."""
    destroyed: bool = False


@dataclass(eq=False)
class MemoryRegion:
    """``struct ibv_mr``: the registered range, its keys and rights; checked on every access."""

    pd: ProtectionDomain
    addr: int
    length: int
    access: Access
    lkey: int
    rkey: int
    reg_ps: int
    valid: bool = True
    """The NIC's key works (false after deregistration or a NIC reset)."""
    registered: bool = True
    """The kernel object exists (until ibv_dereg_mr)."""
    backing: MrBacking | None = None
    """How pages reach the NIC; None for pinned host memory (always translatable)."""
    iova: int | None = None
    """Address the keys are used with; defaults to ``addr`` (for a dma-buf MR ``addr`` is the offset)."""
    mr_type: str = "MR"
    """rdma-core's ``IBV_MR_TYPE_MR`` or ``IBV_MR_TYPE_DMABUF_MR`` (``"DMABUF_MR"``)."""
    page_size: int = PAGE_SIZE
    """Bytes one of its translation entries covers (:func:`~models.ib.mkey_page.mkey_page_size`)."""

    def __post_init__(self) -> None:
        self._bits = int(self.access)
        if self.iova is None:
            self.iova = self.addr
        self.pd.usecnt += 1  # ib_uverbs_reg_mr and friends: atomic_inc(&pd->usecnt)

    @property
    def mtt_entries(self) -> int:
        """Translation entries the NIC holds for the MR (``ib_umem_num_dma_blocks``); an implicit ODP MR's parent
        holds its KSM entries (its children's are their own)."""
        if isinstance(self.backing, ImplicitOdpBacking):
            return MLX5_IMR_KSM_ENTRIES
        return ib_umem_num_dma_blocks(self.iova, self.length, self.page_size)

    def change_access(self, access: Access) -> None:
        """Grant ``access`` from now on (``ibv_rereg_mr`` with ``IBV_REREG_MR_CHANGE_ACCESS``)."""
        self.access = access
        self._bits = int(access)

    def allows(self, addr: int, length: int, needed: int) -> bool:
        """True when ``[addr, addr+length)`` (in the MR's iova space) lies inside the MR and the ``needed``
        access bits are granted."""
        return (self.valid and self.iova <= addr and addr + length <= self.iova + self.length
                and (self._bits & needed) == needed)


@dataclass(eq=False)
class CompletionQueue:
    """``struct ibv_cq`` with a simpy event for processes that wait for the next completion."""

    context: Context
    cqe: int
    entries: deque[WorkCompletion] = field(default_factory=deque)
    _waiter: simpy.Event | None = None
    usecnt: int = 0
    """QPs that use it: the kernel's ``cq->usecnt``; :func:`~models.verbs.destroy.ibv_destroy_cq` refuses while it
    is not 0."""
    cleaned: set[int] = field(default_factory=set)
    """Numbers of destroyed QPs: their completions are dropped (mlx5 cleans them from its CQ,
    ``__mlx5_ib_cq_clean``)."""
    destroyed: bool = False

    def push(self, wc: WorkCompletion) -> None:
        """Deliver a completion (the NIC side); one of a destroyed QP is dropped (freeing its SRQ slot)."""
        if wc.qp_num in self.cleaned:
            free_slots(wc)
            return
        if len(self.entries) >= self.cqe:
            raise VerbsError("EOVERFLOW", f"CQ overrun: more than {self.cqe} completions unpolled "
                             "(create the CQ with more entries or poll more often)", call="ibv_poll_cq")
        self.entries.append(wc)
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            waiter.succeed()

    def wait(self) -> simpy.Event:
        """An event that fires when the CQ holds at least one completion."""
        if self.entries:
            ev = simpy.Event(self.context.env)
            ev.succeed()
            return ev
        if self._waiter is None:
            self._waiter = simpy.Event(self.context.env)
        return self._waiter


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
    """Work requests posted in SQD, waiting for RTS (:func:`~models.verbs.qp_state.sq_holds_posts`): each with its
    UD destination (or None), whether it was posted in a list, and when (ps)."""
    frames_lost: int = 0
    """Request, acknowledgement and response frames of this QP's work requests the links lost."""
    next_psn: int = 0
    """As requester: the PSN its next request takes (from ``sq_psn``, advanced by each request's packets)."""
    expected_psn: int = 0
    """As responder: the PSN it expects next (from ``rq_psn``, advanced by each request it executes)."""
    psn_synced: bool = False
    """As responder: a request has arrived with the expected PSN since ``rq_psn`` was set (PSNs checked until)."""

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
        """A receive taken from ``queue`` completes: its completion reaches the receive CQ, and its slot is free
        once that is polled."""
        wc.release = queue.release_at_poll()
        self.recv_cq.push(wc)

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

    def to_error(self) -> None:
        """Move to the error state: outstanding and later work requests complete with WR_FLUSH_ERR, and so do
        the receives posted to the QP's own queue."""
        self.attr.qp_state = self.attr.cur_qp_state = QpState.ERR
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
                QpAttrMask.STATE | QpAttrMask.SQ_PSN)}
"""The masks perftest passes for each QP type (``ctx_modify_qp_to_init``/``_to_rtr``/``_to_rts``): UC drops RC's
read/atomic and retry attributes, UD sets a Q_Key and no path."""
PERFTEST_MIN_RNR_TIMER = 12
"""perftest's ``MIN_RNR_TIMER``: 0.64 ms."""


def ibv_modify_qp(qp: QueuePair, attr: QPAttr, attr_mask: int) -> None:
    """Change the attributes of ``qp`` selected by ``attr_mask`` (``enum ibv_qp_attr_mask``), moving it to
    ``attr.qp_state`` when ``IBV_QP_STATE`` is set; on error nothing changes.

    :raises VerbsError: see :func:`~models.verbs.qp_state.check_modify_qp` (``EINVAL`` for an illegal
        transition or attribute, ``EOPNOTSUPP`` for unknown mask bits, ``EPERM`` for a controlled Q_Key the process
        may not set: :func:`~models.verbs.qp_state.controlled_qkey_allowed` of its kernel and
        :attr:`Context.cap_net_raw`).
    """
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
        for cq in qp.cqs:
            cq_clean(cq, qp.qp_num)
        qp.rq.reset()
        qp.sq_used, qp.sq_reset_seq = 0, qp.posted_count
        qp.rnr_blocked = qp.missing = None
        qp.nak_sent = False
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


def ibv_open_device(node: Node, env: Environment, fabric: Fabric, *, cap_net_raw: bool = False) -> Context:
    """Open the NIC of ``node``, attached to ``fabric`` (datagrams to its port's LID reach it from then on), for a
    process with CAP_NET_RAW or without (:attr:`Context.cap_net_raw`)."""
    if fabric is not None and node.nic.name in fabric.endpoints:  # (a test bed may open a device off any fabric)
        fabric.ports[fabric.lid(node.nic.name)] = node
    return Context(node, env, fabric, cap_net_raw=cap_net_raw)


def ibv_alloc_pd(context: Context) -> ProtectionDomain:
    """Allocate a protection domain."""
    return ProtectionDomain(context, context.node.nic.new_handle())


def ibv_reg_mr(pd: ProtectionDomain, addr: int, length: int, access: Access) -> MemoryRegion:
    """Register host memory: check like rdma-core and ``ib_umem_get``, pin the pages, create the keys. Mappings
    are whole pages (:meth:`~models.host.HostMemory.mapped_length`): any part of a mapped page registers.

    With ``ON_DEMAND`` nothing is pinned and no page is looked at: the NIC faults pages in on first touch (ODP,
    :mod:`models.ib.umem_odp`); address 0 with length ``SIZE_MAX`` registers an implicit ODP MR over the whole
    address space (:mod:`models.ib.implicit_odp`).

    :raises VerbsError: ``EINVAL`` for length 0, overflow or REMOTE_WRITE/REMOTE_ATOMIC without
        LOCAL_WRITE or access bits outside IB_ACCESS_SUPPORTED; ``EOPNOTSUPP`` for ON_DEMAND on a device without
        ODP or FLUSH rights on a device without flush; ``EFAULT`` for a range beyond the process's mappings;
        ``ENOMEM`` past RLIMIT_MEMLOCK; for ON_DEMAND, ``EOVERFLOW`` for overflow and ``EINVAL`` for an implicit
        MR on a device without implicit ODP.
    """
    call = "ibv_reg_mr"
    access = Access(access)
    nic = pd.context.node.nic
    access = check_reg_args(pd.context.node, addr, length, access, call)
    check_max_mr_size(nic.params.max_mr_size, length, call)
    if isinstance(backing := _odp_backing(pd, addr, length, access), ImplicitOdpBacking):
        return _reg_implicit_mr(pd, access, backing, call)
    page = host_page_size(pd.context.node, addr, length) if backing is None else \
        mkey_page_size(nic.params, addr, (), is_dmabuf=False, odp_page=backing.page_size)

    def umem() -> tuple[int, MrBacking | None]:
        cost = pd.context.node.host.pin(addr, length, call=call) if backing is None else \
            mlx5_ib_init_odp_mr(pd.context.node, backing, length, pd.context.env.now)
        return REG_MR_FIXED_PS + cost, backing

    mr = reg_create(pd, addr, length, access, umem, call, page=page)
    cost = mr.reg_ps - REG_MR_FIXED_PS
    if backing is None:
        host = pd.context.node.host
        trace_registration(mr, call, ("pin_user_pages", cost, {"pages": host.pages_spanned(addr, length)}),
                           mr.mtt_entries)
    else:
        mapped = int(backing.mapped.sum())
        trace_registration(mr, call, ("mlx5_ib_init_odp_mr", cost, {"pages": mapped}) if cost else None, mapped)
    return mr


def host_page_size(node: Node, addr: int, length: int) -> int:
    """The translation page of pinned host memory ``[addr, addr+length)``: :func:`mkey_page_size` over the
    pages of the host's backing (4 KiB, THP or hugetlbfs)."""
    segments = page_segments(addr, length, node.host.params.mtt_page_size)
    return mkey_page_size(node.nic.params, addr, segments, is_dmabuf=False)


def _odp_backing(pd: ProtectionDomain, addr: int, length: int, access: Access) -> MrBacking | None:
    """The backing of an ON_DEMAND registration (explicit or implicit), None for a pinned one."""
    if not access & Access.ON_DEMAND:
        return None
    node = pd.context.node
    page, odp = node.host.params.page_size, node.nic.params.odp
    if is_implicit_request(addr, length):
        env, track = pd.context.env, node.nic.name
        trace = (lambda name, at_ps, **args: env.trace.instant(track, name, at_ps=at_ps, **args)) \
            if env.trace.enabled else (lambda name, at_ps, **args: None)
        return ImplicitOdpBacking(page, odp, node.nic.params.umr, node.host, trace)
    return OdpBacking(addr, length, page, odp, node.host)


def _reg_implicit_mr(pd: ProtectionDomain, access: Access, backing: ImplicitOdpBacking, call: str) -> MemoryRegion:
    """``mlx5_ib_alloc_implicit_mr``: the parent KSM mkey, written zapped by one UMR; its children hold their
    own translation entries as faults create them, so the NIC's table is not charged here."""
    umr = pd.context.node.nic.params.umr
    mr = reg_create(pd, 0, SIZE_MAX, access, lambda: (REG_MR_FIXED_PS + parent_create_ps(umr), backing), call)
    trace_registration(mr, call, None, MLX5_IMR_KSM_ENTRIES)
    return mr


def reg_create(pd: ProtectionDomain, addr: int, length: int, access: Access,
               umem: Callable[[], tuple[int, MrBacking | None]], call: str, *, page: int | None = None,
               iova: int | None = None, key: Callable[[], int] | None = None, mr_type: str = "MR") -> MemoryRegion:
    """mlx5's ``reg_create`` (drivers/infiniband/hw/mlx5/mr.c) and the NIC's records of every registration: the
    MR's translation entries reserved in the NIC's table (``ib_umem_num_dma_blocks`` of ``page``-sized blocks from
    ``iova``, default ``addr``; ``page`` None: none charged, as for an implicit ODP parent), then ``umem()`` (pin the
    pages, map the dma-buf, get the peer pages: it returns the registration's time in ps and the MR's backing), whose
    failure gives the entries back; then the mkey recorded in the NIC's key table: a fresh key, or ``key()`` for one
    ``umem()`` made.

    :raises VerbsError: ``ENOMEM`` when the NIC's translation table would overflow; what ``umem()`` raises.
    """
    nic = pd.context.node.nic
    start = addr if iova is None else iova
    entries = 0 if page is None else nic.reserve_translations(ib_umem_num_dma_blocks(start, length, page), call=call)
    try:
        reg_ps, backing = umem()
    except BaseException:
        nic.release_translations(entries)
        raise
    key = nic.new_key() if key is None else key()
    mr = MemoryRegion(pd, addr, length, Access(access), key, key, reg_ps, backing=backing, iova=iova,
                      mr_type=mr_type, page_size=PAGE_SIZE if page is None else page)
    nic.mrs[key] = mr
    return mr


def trace_registration(mr: MemoryRegion, call: str, pinning: tuple[str, int, dict] | None, entries: int) -> None:
    """Trace a registration that took ``mr.reg_ps`` from now: the verb as a slice on the NIC's track, its
    pinning step ``(name, ps, args)`` first (none for ODP), and ``MkeyCreated`` with ``entries`` translation
    entries written when it returns (the fixed ioctl and mkey cost is not split further)."""
    env = mr.pd.context.env
    if not env.trace.enabled:
        return
    nic, start = mr.pd.context.node.nic.name, env.now
    env.trace.slice(nic, call, start, start + mr.reg_ps, length=mr.length, access=mr.access.name or "0")
    if pinning is not None:
        name, cost, args = pinning
        env.trace.slice(nic, name, start, start + cost, **args)
    env.trace.instant(nic, "MkeyCreated", at_ps=start + mr.reg_ps, lkey=mr.lkey, mtt_entries=entries)


def ibv_dereg_mr(mr: MemoryRegion) -> int:
    """Invalidate the keys, then unpin; return the simulated cost (ps).

    :raises VerbsError: ``EINVAL`` when the MR was already deregistered.
    """
    if not mr.registered:
        raise VerbsError("EINVAL", "MR already deregistered", call="ibv_dereg_mr")
    node = mr.pd.context.node
    mr.valid = mr.registered = False
    mr.pd.usecnt -= 1
    node.nic.mrs.pop(mr.lkey, None)  # gone already after a NIC reset
    if not isinstance(mr.backing, ImplicitOdpBacking):
        node.nic.release_translations(mr.mtt_entries)
    if mr.backing is not None:
        return DEREG_MR_FIXED_PS + mr.backing.release(mr.pd.context.env.now)
    return DEREG_MR_FIXED_PS + node.host.unpin(mr.addr, mr.length)


REREG_CHANGE_TRANSLATION, REREG_CHANGE_PD, REREG_CHANGE_ACCESS = 1, 2, 4
"""``enum ibv_rereg_mr_flags``."""


def ibv_rereg_mr(mr: MemoryRegion, flags: int, pd: ProtectionDomain | None = None, addr: int = 0,
                 length: int = 0, access: Access = Access(0)) -> int:
    """Modify a host MR in place (new range and/or access rights; keys are kept); return the cost (ps).

    :raises VerbsError: ``EINVAL`` for a dma-buf MR (rdma-core refuses anything but IBV_MR_TYPE_MR), unknown
        flags, or any check :func:`ibv_reg_mr` would fail; ``ENOMEM``/``EFAULT`` when re-pinning fails.
    """
    call = "ibv_rereg_mr"
    if mr.mr_type != "MR":
        raise VerbsError("EINVAL", f"only IBV_MR_TYPE_MR can be re-registered, not {mr.mr_type} "
                         "(IBV_REREG_MR_ERR_INPUT)", call=call)
    if not flags or flags & ~(REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS):
        raise VerbsError("EINVAL", f"flags {flags:#x}: need a combination of CHANGE_TRANSLATION, CHANGE_PD, "
                         "CHANGE_ACCESS", call=call)
    if mr.backing is not None:
        raise VerbsError("EOPNOTSUPP", "re-registering an ODP MR in place is not modelled", call=call)
    new_access = Access(access) if flags & REREG_CHANGE_ACCESS else mr.access
    new_addr, new_length = (addr, length) if flags & REREG_CHANGE_TRANSLATION else (mr.addr, mr.length)
    new_pd = pd if flags & REREG_CHANGE_PD else mr.pd
    if new_pd is None or new_pd.context is not mr.pd.context:
        raise VerbsError("EINVAL", "CHANGE_PD needs a PD of the same device", call=call)
    new_access = check_reg_args(mr.pd.context.node, new_addr, new_length, new_access, call)
    host, nic = mr.pd.context.node.host, mr.pd.context.node.nic
    cost = 0
    if flags & REREG_CHANGE_TRANSLATION:
        cost += host.unpin(mr.addr, mr.length)
        try:
            cost += host.pin(new_addr, new_length, call=call)
        except VerbsError:
            host.pin(mr.addr, mr.length, call=call)
            raise
        nic.release_translations(mr.mtt_entries)
        mr.addr, mr.iova, mr.length = new_addr, new_addr, new_length
        mr.page_size = host_page_size(mr.pd.context.node, new_addr, new_length)
        nic.translations += mr.mtt_entries  # the same limit as before: the model checks it at registration only
    mr.pd.usecnt -= 1
    new_pd.usecnt += 1
    mr.pd = new_pd
    mr.change_access(new_access)
    return REG_MR_FIXED_PS + cost


def check_reg_args(node: Node, addr: int, length: int, access: Access, call: str) -> Access:
    """The argument checks of registering host or peer memory on ``node``'s NIC, in the kernel's order:
    uverbs' :func:`ib_check_mr_access`, EFA's :func:`~models.ib.mr_checks.efa_alloc_mr`, then :func:`ib_umem_get`'s,
    or for an ON_DEMAND range mlx5's :func:`~models.ib.umem_odp.create_user_odp_mr`'s (not pinned, so it needs
    no mlock rights). Returns the rights the MR keeps (EFA drops the optional bits such as RELAXED_ORDERING)."""
    ib_check_mr_access(node.nic.params, access, call)
    if node.nic.params.device.vendor_id == EFA_VENDOR_ID:  # efa_reg_mr: efa_alloc_mr before ib_umem_get
        access = efa_alloc_mr(node.nic.params, access, call)
    if access & Access.ON_DEMAND:
        create_user_odp_mr(node, addr, length, addr, call)
    else:
        ib_umem_get(node.host, addr, length, call)
    return access


def ib_umem_get(host, addr: int, length: int, call: str) -> None:
    """The argument checks of ``ib_umem_get`` (drivers/infiniband/core/umem.c, read at torvalds/linux 0446cad9ca38, a
    5.x tree; later trees were not compared), before it charges RLIMIT_MEMLOCK and pins
    (:meth:`~models.host.Host.pin`): ``addr + length`` wraps past 2**64 or its page alignment does -> EINVAL (so
    ``addr + length == 2**64`` is refused); ``can_do_mlock()`` false (RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK) ->
    EPERM; no pages -> EINVAL.

    :raises VerbsError: as above.
    """
    end = addr + length
    if addr < 0 or length < 0 or end % U64 < addr or end > U64 - PAGE_SIZE:
        raise VerbsError("EINVAL", f"addr 0x{addr:x} + length {length} overflows (ib_umem_get)", call=call)
    if host.params.memlock_limit == 0:
        raise VerbsError("EPERM", "RLIMIT_MEMLOCK is 0 and the process lacks CAP_IPC_LOCK (can_do_mlock)", call=call)
    if length == 0:
        raise VerbsError("EINVAL", "length 0 pins no pages (ib_umem_get: npages == 0)", call=call)



def ibv_create_cq(context: Context, cqe: int) -> CompletionQueue:
    """Create a completion queue with room for ``cqe`` completions.

    :raises VerbsError: ``EINVAL`` for cqe < 1 or above the device's ``max_cqe`` (mlx5_create_cq: "CQE is too big").
    """
    if cqe < 1:
        raise VerbsError("EINVAL", f"cqe must be >= 1, got {cqe}", call="ibv_create_cq")
    limit = context.node.nic.params.device.max_cqe
    if cqe > limit:
        raise VerbsError("EINVAL", f"cqe {cqe} is above the device's max_cqe ({limit})", call="ibv_create_cq")
    return CompletionQueue(context, cqe)


def check_qp_type(nic_params, qp_type: QpType) -> None:
    """The QP types the device's provider creates. mlx5: every type modelled. EFA (rdma-core providers/efa/verbs.c,
    ``efa_create_qp``): UD only, and SRD through ``efadv_create_driver_qp`` (reliable; RDMA READ and WRITE on
    devices with those caps), which the model runs as its RC; any other type is refused ("Unsupported QP type").

    :raises VerbsError: ``EOPNOTSUPP`` for a UC QP on EFA.
    """
    if nic_params.device.vendor_id == EFA_VENDOR_ID and qp_type is QpType.UC:
        raise VerbsError("EOPNOTSUPP", "EFA creates UD QPs and SRD ones (the model's RC), not UC (efa_create_qp: "
                         "Unsupported QP type)", call="ibv_create_qp")


def ibv_create_qp(pd: ProtectionDomain, send_cq: CompletionQueue, max_send_wr: int, *, max_send_sge: int = 1,
                  max_inline_data: int | None = None, sq_sig_all: bool = True, recv_cq: CompletionQueue | None = None,
                  max_recv_wr: int = 0, max_recv_sge: int = 1, srq: SharedReceiveQueue | None = None,
                  qp_type: QpType = QpType.RC) -> QueuePair:
    """Create a QP of ``qp_type`` (``struct ibv_qp_init_attr``: its ``cap`` and ``sq_sig_all``; ``max_inline_data``
    None: as much as the NIC's WQE holds; ``recv_cq`` defaults to ``send_cq``); a UD QP is reachable by datagram
    from then on (:attr:`models.fabric.Fabric.datagram_qps`). Its receive queue is as deep and wide as
    mlx5 makes it (:func:`~models.verbs.receive_queue.rq_geometry`: ``qp.rq.depth``, ``qp.rq.max_sge`` are the ``cap``
    ibv_create_qp returns); on an ``srq`` the QP has none and ``max_recv_wr`` is ignored.

    :raises VerbsError: ``EOPNOTSUPP`` for a type the device's provider does not create (:func:`check_qp_type`);
        ``EINVAL`` when max_send_wr, max_recv_wr or max_recv_sge is out of the device's range, the send caps are
        (see :func:`~models.verbs.send_checks.check_send_caps`), or the SRQ belongs to another device.
    """
    call = "ibv_create_qp"
    nic = pd.context.node.nic
    check_qp_type(nic.params, QpType(qp_type))
    limit = nic.params.max_qp_wr
    if not 1 <= max_send_wr <= limit:
        raise VerbsError("EINVAL", f"max_send_wr {max_send_wr} outside 1..{limit} (device max_qp_wr)", call=call)
    inline = nic.params.max_inline if max_inline_data is None else max_inline_data
    check_send_caps(nic.params, max_send_sge, inline)
    if srq is not None:
        if srq.pd.context.node is not pd.context.node:
            raise VerbsError("EINVAL", "the SRQ belongs to another device", call=call)
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
        dest = datagram_destination(qp, one) if qp.qp_type is QP_UD else None
        qp.outstanding += 1
        qp.sq_used += 1
        qp.seq_of[id(one)] = qp.posted_count
        qp.posted_count += 1
        if sq_holds_posts(qp.state):
            qp.held_posts.append((one, dest, listed, qp.pd.context.env.now))
            continue
        seq, offset = one.order if one.order is not None else (runner.number(), 0)
        start_work_request(qp if dest is None else data_path_qp(qp, dest), one, seq, offset, listed=listed)


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
    for one, dest, listed, posted in held:
        start_work_request(qp if dest is None else data_path_qp(qp, dest), one, runner.number(), 0, listed, posted)


def ibv_poll_cq(cq: CompletionQueue, num_entries: int) -> list[WorkCompletion]:
    """Take up to ``num_entries`` completions, oldest first; each frees the queue slots it covers
    (:func:`free_slots`)."""
    out = []
    while cq.entries and len(out) < num_entries:
        out.append(free_slots(cq.entries.popleft()))
    return out


def cq_clean(cq: CompletionQueue, qp_num: int) -> None:
    """Take QP ``qp_num``'s completions out of ``cq``, freeing the slots they cover (an SRQ's matters: its other QPs
    take receives from it), as ``mlx5_cq_clean`` does when the QP is destroyed or moved to RESET."""
    kept = type(cq.entries)()
    for wc in cq.entries:
        if wc.qp_num == qp_num:
            free_slots(wc)
        else:
            kept.append(wc)
    cq.entries = kept


def free_slots(wc: WorkCompletion) -> WorkCompletion:
    """``wc``, the queue slots it covers freed: a receive's receive queue slot, a send's send queue slot and those of
    the unsignaled work requests before it (mlx5's poll and CQ clean advance the queue's tail)."""
    if wc.release is not None:
        wc.release()
        wc.release = None
    return wc

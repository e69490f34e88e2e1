"""UC and UD QPs: the opcodes each service carries (mlx5 posts the others and completes them LOC_QP_OP_ERR), no
acknowledgements (the requester completes once it has sent; what the responder cannot take is dropped), address
handles and their errno values, Q_Keys, UD's one-packet limit and the 40-byte GRH, and the modify_qp masks of each
type."""

from __future__ import annotations

import numpy as np
import pytest

from models.fabric import DETH, TRANSPORT_HEADER, Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams
from models.nic.datapath import path
from models.nic.transport import GRH_BYTES, QpType, grh, packet_headers, port_gid, sent_qkey
from models.nic.translation import mr_bytes
from models.nic.wqe import Access, Opcode, QpState, RecvWR, SendWR, Sge, WcFlags, WcOpcode, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.ah import AbsentQp, data_path_qp, datagram_destination, ibv_create_ah, ibv_destroy_ah, ibv_query_gid
from models.verbs.destroy import ibv_dealloc_pd, ibv_destroy_qp
from models.verbs.qp_state import AhAttr, QPAttr, QpAttrMask as M
from models.verbs.query import ibv_query_port
from models.verbs.recv import ibv_post_recv
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send
from sim.core import Environment, ProtocolError, VerbsError
from sim.core.steps import Claim

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
SIZE = 64 * 1024
QKEY = 0x11111111


class Bed:
    """Two nodes, each with a PD, a 64 KiB registered host buffer (zeros; node a's holds 0, 1, 2, ... in data mode)
    and one CQ."""

    def __init__(self, data: bool = False, transport: str = "ib", mtu: int = 4096,
                 host: HostParams = HostParams(memlock_limit=1 << 22), nic: NicParams = NicParams()) -> None:
        self.env = Environment(1, data=data)
        self.fabric = Fabric(FabricParams(transport=transport, mtu=mtu))
        self.nodes = [Node.create(n, host, PcieParams(), nic) for n in "ab"]
        self.pds, self.mrs, self.cqs = [], [], []
        for k, node in enumerate(self.nodes):
            self.fabric.attach(node.nic.name)
            pd = ibv_alloc_pd(ibv_open_device(node, self.env, self.fabric))
            buf = node.host.allocate("buf", SIZE)
            if data:
                node.host.fill("buf", lambda k=k: (np.arange(SIZE) % 251).astype(np.uint8) if k == 0
                               else np.zeros(SIZE, np.uint8))
            self.pds.append(pd)
            self.mrs.append(ibv_reg_mr(pd, buf.addr, SIZE, RW))
            self.cqs.append(ibv_create_cq(pd.context, 256))

    def qp(self, side: int, qp_type: QpType, **kw):
        return ibv_create_qp(self.pds[side], self.cqs[side], 16, qp_type=qp_type, max_recv_wr=8, **kw)

    def uc_pair(self):
        qa, qb = self.qp(0, QpType.UC), self.qp(1, QpType.UC)
        qa.connect(qb)
        return qa, qb

    def ud_pair(self, qkey_b: int = QKEY):
        qa, qb = self.qp(0, QpType.UD), self.qp(1, QpType.UD)
        qa.ready_datagrams(QKEY)
        qb.ready_datagrams(qkey_b)
        return qa, qb

    def ah(self, side: int = 0, to: int = 1, **kw):
        """An AH on node ``side`` for node ``to``'s port (by LID, or by GID with ``is_global``)."""
        lid = ibv_query_port(self.pds[to].context, 1).lid
        attr = AhAttr(dlid=lid, **kw)
        if attr.is_global:
            attr.dgid = ibv_query_gid(self.pds[to].context, 1, 0)
        return ibv_create_ah(self.pds[side], attr)

    def wr(self, wr_id: int, opcode: Opcode, length: int, **kw) -> SendWR:
        a, b = self.mrs
        return SendWR(wr_id, opcode, a.addr, length, a.lkey, b.addr, b.rkey, **kw)

    def recv(self, qp, wr_id: int, length: int) -> None:
        """Post a receive of ``length`` bytes at the start of the buffer of ``qp``'s node."""
        mr = self.mrs[self.nodes.index(qp.node)]
        ibv_post_recv(qp, RecvWR(wr_id, (Sge(mr.addr, length, mr.lkey),)))

    def run(self):
        self.env.run()
        return [ibv_poll_cq(cq, 64) for cq in self.cqs]


# --- what each service carries -----------------------------------------------------------------------------------

@pytest.mark.parametrize("qp_type, opcode, status", [
    (QpType.UC, Opcode.RDMA_WRITE, WcStatus.SUCCESS),
    (QpType.UC, Opcode.RDMA_WRITE_WITH_IMM, WcStatus.SUCCESS),
    (QpType.UC, Opcode.SEND, WcStatus.SUCCESS),
    (QpType.UC, Opcode.RDMA_READ, WcStatus.LOC_QP_OP_ERR),
    (QpType.UC, Opcode.ATOMIC_FETCH_AND_ADD, WcStatus.LOC_QP_OP_ERR),
    (QpType.UC, Opcode.ATOMIC_CMP_AND_SWP, WcStatus.LOC_QP_OP_ERR),
    (QpType.UD, Opcode.SEND, WcStatus.SUCCESS),
    (QpType.UD, Opcode.SEND_WITH_IMM, WcStatus.SUCCESS),
    (QpType.UD, Opcode.RDMA_WRITE, WcStatus.LOC_QP_OP_ERR),
    (QpType.UD, Opcode.RDMA_READ, WcStatus.LOC_QP_OP_ERR),
    (QpType.UD, Opcode.ATOMIC_FETCH_AND_ADD, WcStatus.LOC_QP_OP_ERR),
])
def test_opcodes_a_service_does_not_carry_are_posted_and_complete_loc_qp_op_err(qp_type, opcode, status):
    bed = Bed()
    if qp_type is QpType.UC:
        qa, qb = bed.uc_pair()
        extra = {}
    else:
        qa, qb = bed.ud_pair()
        extra = {"ah": bed.ah(), "remote_qpn": qb.qp_num, "remote_qkey": QKEY}
    bed.recv(qb, 9, 4096 + GRH_BYTES)
    ibv_post_send(qa, bed.wr(1, opcode, 256, **extra))  # mlx5 refuses none of them at post
    sent, _ = bed.run()
    assert [wc.status for wc in sent] == [status]
    assert qa.state is (QpState.RTS if status is WcStatus.SUCCESS else QpState.SQE)


def test_a_send_queue_error_moves_uc_to_sqe_flushes_later_sends_and_keeps_receiving():
    bed = Bed()
    qa, qb = bed.uc_pair()
    ibv_post_send(qa, [bed.wr(1, Opcode.RDMA_READ, 64), bed.wr(2, Opcode.RDMA_WRITE, 64)])
    sent, _ = bed.run()
    assert [wc.status for wc in sent] == [WcStatus.LOC_QP_OP_ERR, WcStatus.WR_FLUSH_ERR]
    assert qa.state is QpState.SQE
    ibv_modify_qp(qa, QPAttr(qp_state=QpState.RTS), M.STATE)  # SQE -> RTS is legal for UC (ib_modify_qp_is_ok)
    bed.recv(qa, 5, 64)
    ibv_post_send(qb, SendWR(3, Opcode.SEND, bed.mrs[1].addr, 64, bed.mrs[1].lkey, 0, 0))
    ibv_post_send(qa, bed.wr(4, Opcode.RDMA_WRITE, 64))
    at_a, at_b = bed.run()
    assert sorted((wc.wr_id, wc.opcode, wc.status) for wc in at_a) == [
        (4, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS), (5, WcOpcode.RECV, WcStatus.SUCCESS)]
    assert [(wc.wr_id, wc.status) for wc in at_b] == [(3, WcStatus.SUCCESS)]


# --- unacknowledged: completion at send, drops without a word --------------------------------------------------

def _write_completion_ps(qp_type: QpType) -> int:
    bed = Bed()
    if qp_type is QpType.RC:
        qa, qb = bed.qp(0, QpType.RC), bed.qp(1, QpType.RC)
        qa.connect(qb)
    else:
        qa, qb = bed.uc_pair()
    ibv_post_send(qa, bed.wr(1, Opcode.RDMA_WRITE, 4096))
    (wc,), _ = bed.run()
    assert wc.status is WcStatus.SUCCESS
    return wc.completed_ps


def test_uc_write_completes_before_rc_write_by_more_than_the_wire_round_trip():
    """UC writes its CQE once the message has left; RC waits for the ACK (two fabric latencies later at least)."""
    uc, rc = _write_completion_ps(QpType.UC), _write_completion_ps(QpType.RC)
    assert rc - uc > 2 * FabricParams().latency_ps


@pytest.mark.parametrize("case", ["no receive", "bad rkey", "responder in INIT"])
def test_uc_requests_the_responder_cannot_take_are_dropped_and_the_requester_succeeds(case):
    bed = Bed()
    qa, qb = bed.uc_pair()
    if case == "responder in INIT":
        ibv_modify_qp(qb, QPAttr(qp_state=QpState.RESET), M.STATE)
        ibv_modify_qp(qb, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1),
                      M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS)
        bed.recv(qb, 9, 4096)
    wr = bed.wr(1, Opcode.SEND, 512) if case != "bad rkey" else bed.wr(1, Opcode.RDMA_WRITE_WITH_IMM, 512)
    if case == "bad rkey":
        wr.rkey = 0x7
        bed.recv(qb, 9, 4096)
    ibv_post_send(qa, wr)
    sent, received = bed.run()
    assert [wc.status for wc in sent] == [WcStatus.SUCCESS]
    assert received == [] and qa.rnr_naks == 0
    assert qb.state is (QpState.INIT if case == "responder in INIT" else QpState.RTS)
    assert len(qb.rq.posted) == (0 if case == "no receive" else 1)  # the receive is still there


def test_a_uc_receive_too_small_completes_loc_len_err_and_the_requester_does_not_learn_it():
    bed = Bed()
    qa, qb = bed.uc_pair()
    bed.recv(qb, 9, 100)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, 512))
    sent, received = bed.run()
    assert [wc.status for wc in sent] == [WcStatus.SUCCESS]
    assert [(wc.wr_id, wc.status) for wc in received] == [(9, WcStatus.LOC_LEN_ERR)]


# --- UD: AHs, Q_Keys, one packet, the GRH ------------------------------------------------------------------------

def test_ud_send_scatters_the_grh_then_the_payload_and_counts_both():
    bed = Bed(data=True, transport="roce")
    qa, qb = bed.ud_pair()
    ah = bed.ah(is_global=True)
    bed.recv(qb, 9, 4096 + GRH_BYTES)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND_WITH_IMM, 1000, ah=ah, remote_qpn=qb.qp_num, remote_qkey=QKEY,
                             imm_data=0xABCD))
    sent, (wc,) = bed.run()
    assert [s.status for s in sent] == [WcStatus.SUCCESS]
    assert (wc.status, wc.opcode, wc.byte_len, wc.src_qp) == (WcStatus.SUCCESS, WcOpcode.RECV, 1000 + 40, qa.qp_num)
    assert wc.wc_flags == WcFlags.GRH | WcFlags.WITH_IMM and wc.imm_data == 0xABCD
    landed = mr_bytes(bed.mrs[1], bed.mrs[1].addr, 1040)
    sgid, dgid = ibv_query_gid(bed.pds[0].context, 1, 0), ibv_query_gid(bed.pds[1].context, 1, 0)
    assert bytes(landed[:40]) == grh(sgid, dgid, 1000, True)
    assert landed[0] >> 4 == 6 and bytes(landed[8:24]) == sgid and bytes(landed[24:40]) == dgid
    assert np.array_equal(landed[40:], (np.arange(1000) % 251).astype(np.uint8))


def test_ud_without_grh_on_infiniband_reserves_the_40_bytes_and_sets_no_grh_flag():
    bed = Bed(data=True)
    qa, qb = bed.ud_pair()
    bed.recv(qb, 9, 100 + GRH_BYTES)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, 100, ah=bed.ah(), remote_qpn=qb.qp_num, remote_qkey=QKEY))
    _, (wc,) = bed.run()
    assert (wc.status, wc.byte_len, wc.wc_flags) == (WcStatus.SUCCESS, 140, WcFlags(0))
    landed = mr_bytes(bed.mrs[1], bed.mrs[1].addr, 140)
    assert np.array_equal(landed[40:], np.arange(100, dtype=np.uint8))


@pytest.mark.parametrize("capacity, status", [(512 + 40, WcStatus.SUCCESS), (512 + 39, WcStatus.LOC_LEN_ERR),
                                              (512, WcStatus.LOC_LEN_ERR)])
def test_a_ud_receive_must_hold_the_payload_and_the_grh(capacity, status):
    bed = Bed()
    qa, qb = bed.ud_pair()
    bed.recv(qb, 9, capacity)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, 512, ah=bed.ah(), remote_qpn=qb.qp_num, remote_qkey=QKEY))
    sent, received = bed.run()
    assert [wc.status for wc in sent] == [WcStatus.SUCCESS]
    assert [wc.status for wc in received] == [status]


@pytest.mark.parametrize("mtu, length, status", [(4096, 4096, WcStatus.SUCCESS), (4096, 4097, WcStatus.LOC_LEN_ERR),
                                                 (1024, 1024, WcStatus.SUCCESS), (1024, 1025, WcStatus.LOC_LEN_ERR),
                                                 (1500, 1025, WcStatus.LOC_LEN_ERR)])
def test_a_ud_message_is_one_packet_of_the_ports_active_mtu(mtu, length, status):
    bed = Bed(mtu=mtu)
    qa, qb = bed.ud_pair()
    bed.recv(qb, 9, 4096 + GRH_BYTES)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, length, ah=bed.ah(), remote_qpn=qb.qp_num, remote_qkey=QKEY))
    sent, received = bed.run()
    assert [wc.status for wc in sent] == [status]
    assert len(received) == (status is WcStatus.SUCCESS)


@pytest.mark.parametrize("wr_qkey, qp_qkey, delivered", [
    (QKEY, QKEY, True), (QKEY + 1, QKEY, False),
    (0x80000000, QKEY, True),  # controlled: the sender's own Q_Key (QKEY) goes out
    (0x80000000, QKEY + 1, False),
])
def test_q_key_mismatch_drops_the_datagram_silently(wr_qkey, qp_qkey, delivered):
    bed = Bed()
    qa, qb = bed.ud_pair(qkey_b=qp_qkey)
    bed.recv(qb, 9, 4096)
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, 64, ah=bed.ah(), remote_qpn=qb.qp_num, remote_qkey=wr_qkey))
    sent, received = bed.run()
    assert [wc.status for wc in sent] == [WcStatus.SUCCESS]
    assert len(received) == delivered and len(qb.rq.posted) == (not delivered)


def test_sent_qkey_takes_the_qps_own_for_a_controlled_qkey():
    assert sent_qkey(0x80000001, 5) == 5 and sent_qkey(0x7FFFFFFF, 5) == 0x7FFFFFFF


def test_one_ud_qp_sends_to_two_destinations_and_each_gets_its_own():
    bed = Bed()
    qa = bed.qp(0, QpType.UD)
    qa.ready_datagrams(QKEY)
    qb, qc = bed.qp(1, QpType.UD), bed.qp(1, QpType.UD)
    for qp in (qb, qc):
        qp.ready_datagrams(QKEY)
        bed.recv(qp, qp.qp_num, 4096)
    ah = bed.ah()
    ibv_post_send(qa, [bed.wr(1, Opcode.SEND, 10, ah=ah, remote_qpn=qb.qp_num, remote_qkey=QKEY),
                       bed.wr(2, Opcode.SEND, 20, ah=ah, remote_qpn=qc.qp_num, remote_qkey=QKEY)])
    sent, received = bed.run()
    assert [wc.wr_id for wc in sent] == [1, 2]
    assert sorted((wc.qp_num, wc.byte_len) for wc in received) == [(qb.qp_num, 50), (qc.qp_num, 60)]


# --- AH and UD post errno values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("transport, attr, errno", [
    ("ib", AhAttr(dlid=2, port_num=2), "EINVAL"),
    ("ib", AhAttr(dlid=2, port_num=0), "EINVAL"),
    ("roce", AhAttr(dlid=2), "EINVAL"),  # RoCE needs a GRH
])
def test_ibv_create_ah_errno(transport, attr, errno):
    bed = Bed(transport=transport)
    with pytest.raises(VerbsError) as err:
        ibv_create_ah(bed.pds[0], attr)
    assert err.value.errno == errno and bed.pds[0].usecnt == 1  # only the MR holds it


def test_an_ah_holds_its_pd_until_destroyed_and_destroys_once():
    bed = Bed()
    pd = ibv_alloc_pd(bed.pds[0].context)
    ah = ibv_create_ah(pd, AhAttr(dlid=2))
    with pytest.raises(VerbsError) as err:
        ibv_dealloc_pd(pd)
    assert err.value.errno == "EBUSY"
    ibv_destroy_ah(ah)
    with pytest.raises(VerbsError) as err:
        ibv_destroy_ah(ah)
    assert err.value.errno == "EINVAL"
    ibv_dealloc_pd(pd)
    with pytest.raises(VerbsError) as err:
        ibv_create_ah(pd, AhAttr(dlid=2))
    assert err.value.errno == "EINVAL"


def test_ud_posts_need_a_live_ah_of_the_device_and_a_port():
    bed = Bed()
    qa, qb = bed.ud_pair()
    for ah, errno in ((None, "EINVAL"), (bed.ah(side=1, to=0), "EINVAL")):
        with pytest.raises(VerbsError) as err:
            ibv_post_send(qa, bed.wr(1, Opcode.SEND, 8, ah=ah, remote_qpn=qb.qp_num, remote_qkey=QKEY))
        assert err.value.errno == errno
    dead = bed.ah()
    ibv_destroy_ah(dead)
    with pytest.raises(VerbsError):
        ibv_post_send(qa, bed.wr(1, Opcode.SEND, 8, ah=dead, remote_qpn=qb.qp_num, remote_qkey=QKEY))
    with pytest.raises(ProtocolError, match="no port has LID 9"):
        ibv_post_send(qa, bed.wr(1, Opcode.SEND, 8, ah=ibv_create_ah(bed.pds[0], AhAttr(dlid=9)),
                                 remote_qpn=qb.qp_num, remote_qkey=QKEY))
    assert qa.outstanding == 0


def _qp_number_of(bed: Bed, qb, kind: str) -> int:
    """A QP number on node b: one never created, one destroyed, or the live ``qb``."""
    if kind == "never created":
        return 999
    if kind == "destroyed":
        gone = bed.qp(1, QpType.UD)
        gone.ready_datagrams(QKEY)
        ibv_destroy_qp(gone)
        return gone.qp_num
    return qb.qp_num


@pytest.mark.parametrize("target, state", [("never created", None), ("destroyed", None), ("qb", QpState.RESET),
                                           ("qb", QpState.INIT), ("qb", QpState.ERR)])
def test_a_datagram_to_a_qp_number_without_a_receiving_qp_is_dropped_at_the_responder(target, state):
    """The requester completes it successfully (it does not wait for the remote side); the responder's port takes
    it in and drops it without a word: no receive of the node's live QP completes."""
    bed = Bed()
    qa, qb = bed.ud_pair()
    bed.recv(qb, 5, 4096)
    qpn = _qp_number_of(bed, qb, target)
    if state is not None:
        ibv_modify_qp(qb, QPAttr(qp_state=QpState.ERR if state is QpState.ERR else QpState.RESET), M.STATE)
    if state is QpState.INIT:
        ibv_modify_qp(qb, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qkey=QKEY),
                      M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY)
    rx = bed.nodes[1].nic.rx_port
    busy = rx.busy_ps
    ibv_post_send(qa, bed.wr(1, Opcode.SEND, 64, ah=bed.ah(), remote_qpn=qpn, remote_qkey=QKEY))
    sent, received = bed.run()
    assert [(wc.wr_id, wc.status) for wc in sent] == [(1, WcStatus.SUCCESS)]
    assert [wc for wc in received if wc.status is WcStatus.SUCCESS] == []
    assert rx.busy_ps > busy  # the datagram did reach the port


def test_datagrams_to_a_missing_qp_number_share_one_absent_qp_and_its_sender():
    """Each (port, QP number) without a UD QP is one destination to the sender: the same AbsentQp, so the same
    data-path view and step lists, whatever else the sender has sent to; another number is another."""
    bed = Bed()
    qa, qb = bed.ud_pair()
    to = lambda qpn: datagram_destination(qa, bed.wr(1, Opcode.SEND, 64, ah=bed.ah(), remote_qpn=qpn,
                                                     remote_qkey=QKEY))
    first = to(999)
    assert isinstance(first, AbsentQp) and first.qp_num == 999 and first.node is bed.nodes[1]
    assert data_path_qp(qa, to(qb.qp_num)).remote is qb
    assert to(999) is first and data_path_qp(qa, to(999)) is data_path_qp(qa, first)
    assert to(998) is not first and to(998).qp_num == 998


def test_query_port_and_gid_name_the_port():
    bed = Bed()
    lids = [ibv_query_port(pd.context, 1).lid for pd in bed.pds]
    assert lids == [1, 2]
    assert ibv_query_gid(bed.pds[1].context, 1, 0) == port_gid(2)
    with pytest.raises(VerbsError) as err:
        ibv_query_gid(bed.pds[1].context, 1, 1)
    assert err.value.errno == "EINVAL"


# --- modify_qp: each type's attribute sets ---------------------------------------------------------------------

@pytest.mark.parametrize("qp_type, mask, problem", [
    (QpType.UD, M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY, None),
    (QpType.UD, M.STATE | M.PKEY_INDEX | M.PORT, "requires IBV_QP_QKEY"),
    (QpType.UD, M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY | M.ACCESS_FLAGS, "does not accept"),  # no access flags
    (QpType.UC, M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, None),
    (QpType.UC, M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS | M.QKEY, "does not accept"),  # nor UC a Q_Key
])
def test_reset_to_init_takes_each_types_attributes(qp_type, mask, problem):
    bed = Bed()
    qp = bed.qp(0, qp_type)
    attr = QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qkey=QKEY)
    if problem is None:
        ibv_modify_qp(qp, attr, mask)
        assert qp.state is QpState.INIT
    else:
        with pytest.raises(VerbsError, match=problem) as err:
            ibv_modify_qp(qp, attr, mask)
        assert err.value.errno == "EINVAL" and qp.state is QpState.RESET


@pytest.mark.parametrize("qp_type, mask, problem", [
    (QpType.UC, M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN, None),
    (QpType.UC, M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN, "requires IBV_QP_RQ_PSN"),
    (QpType.UC, M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MIN_RNR_TIMER, "does not accept"),
    (QpType.UD, M.STATE, None),
    (QpType.UD, M.STATE | M.DEST_QPN, "does not accept"),
    (QpType.UD, M.STATE | M.AV, "does not accept"),
])
def test_init_to_rtr_takes_each_types_attributes(qp_type, mask, problem):
    bed = Bed()
    qp = bed.qp(0, qp_type)
    init = M.STATE | M.PKEY_INDEX | M.PORT | (M.QKEY if qp_type is QpType.UD else M.ACCESS_FLAGS)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qkey=QKEY), init)
    attr = QPAttr(qp_state=QpState.RTR, path_mtu=5, dest_qp_num=3, ah_attr=AhAttr(dlid=2))
    if problem is None:
        ibv_modify_qp(qp, attr, mask)
        assert qp.state is QpState.RTR
    else:
        with pytest.raises(VerbsError, match=problem):
            ibv_modify_qp(qp, attr, mask)


@pytest.mark.parametrize("qp_type, headers", [(QpType.UD, DETH), (QpType.UC, 0), (QpType.RC, 0)])
@pytest.mark.parametrize("transport", ["ib", "roce"])
def test_every_ud_packet_carries_a_deth_on_the_wire(qp_type, headers, transport):
    """The request's transmit claim serializes payload, the fabric's headers and, on UD, the 8-byte DETH."""
    bed = Bed(transport=transport)
    if qp_type is QpType.UD:
        qa, qb = bed.ud_pair()
        qp = data_path_qp(qa, qb)
    else:
        qp = bed.qp(0, qp_type)
        qp.connect(bed.qp(1, qp_type))
    assert packet_headers(qp_type) == headers
    steps = path(qp, Opcode.SEND, 1000, False).steps
    [claim] = [s for s in steps if isinstance(s, Claim) and s.server is bed.nodes[0].nic.tx_port]
    params = bed.fabric.params
    assert params.wire_bytes(1000, 0, headers) == 1000 + TRANSPORT_HEADER[transport] + headers
    assert claim.service_ps == params.serialize_ps(1000, 0, headers)

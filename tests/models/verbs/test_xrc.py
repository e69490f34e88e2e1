"""XRC: domains, XRC SRQs, initiator and target QPs, their state machine and their traffic, each rule from the source
it names (rdma-core libibverbs/cmd.c, cmd_srq.c, cmd_qp.c, providers/mlx5; Linux drivers/infiniband/core/
uverbs_cmd.c, uverbs_std_types.c, verbs.c; the rxe XRC series for the responder's XRCETH check)."""

from __future__ import annotations

import numpy as np
import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.device import DeviceAttrs, DeviceCap
from models.nic.nic import NicParams
from models.nic.wqe import Access, Opcode, QpState, RecvWR, SendWR, Sge, WcOpcode, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.destroy import ibv_destroy_qp, ibv_destroy_srq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send
from models.verbs.qp_ex import MLX5_SUPPORTED_SEND_OPS, SendOps, ibv_create_qp_ex
from models.verbs.qp_state import QPAttr, QpAttrMask, QpType, modify_qp_mask
from models.verbs.recv import SrqAttr, ibv_post_recv, ibv_post_srq_recv
from models.verbs.xrc import (O_CREAT, O_EXCL, QpOpenAttrMask, SrqInitAttrMask, SrqType, XrcdInitAttrMask,
                              create_xrc_qp_user, ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num, ibv_open_qp,
                              ibv_open_xrcd)
from sim.core import Environment, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
SIZE = 64 * 1024
FD_OFLAGS = XrcdInitAttrMask.FD | XrcdInitAttrMask.OFLAGS
XRC_SRQ = SrqInitAttrMask.TYPE | SrqInitAttrMask.PD | SrqInitAttrMask.XRCD | SrqInitAttrMask.CQ
OPEN_ALL = QpOpenAttrMask.NUM | QpOpenAttrMask.XRCD | QpOpenAttrMask.TYPE


class Bed:
    """Node a (the initiator's side) and node b (the target's): a PD, a registered host buffer and a CQ each; b
    has an XRC domain on a file, an XRC SRQ in it and a target QP; a an initiator QP connected to the target."""

    def __init__(self, data: bool = False, host: HostParams | None = None) -> None:
        self.env = Environment(1, data=data)
        fabric = Fabric(FabricParams())
        host = host or HostParams(memlock_limit=1 << 22)
        self.nodes = [Node.create(n, host, PcieParams(), NicParams()) for n in "ab"]
        self.pds, self.mrs, self.cqs = [], [], []
        for node in self.nodes:
            fabric.attach(node.nic.name)
            pd = ibv_alloc_pd(ibv_open_device(node, self.env, fabric))
            buf = node.host.allocate("buf", SIZE)
            if data:
                node.host.fill("buf", lambda: np.arange(SIZE, dtype=np.uint64).astype(np.uint8))
            self.pds.append(pd)
            self.mrs.append(ibv_reg_mr(pd, buf.addr, SIZE, RW))
            self.cqs.append(ibv_create_cq(pd.context, 256))
        self.ctx = self.pds[1].context
        self.fd = self.nodes[1].fds.open("/tmp/xrcd")
        self.xrcd = ibv_open_xrcd(self.ctx, FD_OFLAGS, self.fd, O_CREAT)
        self.srq = self.xrc_srq()
        self.tgt = create_xrc_qp_user(self.xrcd)
        self.ini = ibv_create_qp(self.pds[0], self.cqs[0], 16, qp_type=QpType.XRC_SEND)
        self.ini.connect(self.tgt)

    def xrc_srq(self, xrcd=None, pd=None):
        return ibv_create_srq_ex(self.ctx, XRC_SRQ, SrqAttr(16, 1), srq_type=SrqType.XRC, pd=pd or self.pds[1],
                                 xrcd=xrcd or self.xrcd, cq=self.cqs[1])

    def recv(self, wr_id: int, offset: int = 0, length: int = 4096, mr=None) -> RecvWR:
        mr = mr or self.mrs[1]
        return RecvWR(wr_id, (Sge(mr.addr + offset, length, mr.lkey),))

    def send(self, wr_id: int, srqn: int, opcode: Opcode = Opcode.SEND, length: int = 256, rkey=None) -> SendWR:
        a, b = self.mrs
        return SendWR(wr_id, opcode, a.addr, length, a.lkey, b.addr + 8192, b.rkey if rkey is None else rkey,
                      remote_srqn=srqn)

    def run(self) -> None:
        self.env.run(until=self.env.now + 10**10)


def _refused(call, errno: str, words: str) -> None:
    with pytest.raises(VerbsError) as err:
        call()
    assert err.value.errno == errno and words in str(err.value)


# --- XRC domains: ib_uverbs_open_xrcd, ibv_cmd_open_xrcd, uverbs_free_xrcd, ib_uverbs_dealloc_xrcd -------------

def test_open_xrcd_comp_mask_checks_of_ibv_cmd_open_xrcd():
    bed = Bed()
    _refused(lambda: ibv_open_xrcd(bed.ctx, XrcdInitAttrMask.RESERVED, -1, O_CREAT), "EOPNOTSUPP", "RESERVED")
    _refused(lambda: ibv_open_xrcd(bed.ctx, XrcdInitAttrMask.FD, -1, O_CREAT), "EINVAL", "OFLAGS")


def test_open_xrcd_file_rules_of_ib_uverbs_open_xrcd():
    """A bad fd is EBADF; a file without a domain and no O_CREAT is EAGAIN; O_EXCL on one with a domain EINVAL;
    a second open of the same file shares the domain; fd -1 makes a new private domain each time."""
    bed = Bed()
    fds = bed.nodes[1].fds
    _refused(lambda: ibv_open_xrcd(bed.ctx, FD_OFLAGS, 77, O_CREAT), "EBADF", "fd 77")
    other = fds.open("/tmp/other")
    _refused(lambda: ibv_open_xrcd(bed.ctx, FD_OFLAGS, other, 0), "EAGAIN", "O_CREAT")
    _refused(lambda: ibv_open_xrcd(bed.ctx, FD_OFLAGS, bed.fd, O_CREAT | O_EXCL), "EINVAL", "O_EXCL")
    again = ibv_open_xrcd(bed.ctx, FD_OFLAGS, fds.open("/tmp/xrcd"), 0)  # the same file through another fd
    assert again.domain is bed.xrcd.domain and again is not bed.xrcd
    private = [ibv_open_xrcd(bed.ctx, FD_OFLAGS, -1, O_CREAT).domain for _ in range(2)]
    assert private[0] is not private[1] and bed.xrcd.domain not in private


def test_open_xrcd_needs_the_devices_xrc_capability():
    """mlx5_ib ``alloc_xrcd``: no XRC in the device caps is EOPNOTSUPP (EFA has no open_xrcd)."""
    env, fabric = Environment(1), Fabric(FabricParams())
    nic = NicParams(device=DeviceAttrs(cap_flags=DeviceCap.MEM_WINDOW))
    node = Node.create("a", HostParams(), PcieParams(), nic)
    fabric.attach(node.nic.name)
    ctx = ibv_open_device(node, env, fabric)
    _refused(lambda: ibv_open_xrcd(ctx, FD_OFLAGS, -1, O_CREAT), "EOPNOTSUPP", "XRC")
    _refused(lambda: ibv_create_qp(ibv_alloc_pd(ctx), ibv_create_cq(ctx, 4), 4, qp_type=QpType.XRC_SEND),
             "EOPNOTSUPP", "XRC")


def test_close_xrcd_busy_while_its_srqs_or_qps_exist_then_the_last_close_frees_the_file():
    """``uverbs_free_xrcd``: ``uxrcd->refcnt`` EBUSY; ``ib_uverbs_dealloc_xrcd``: the domain stays while another
    open of its file holds it, and goes (its file free for a new O_EXCL domain) with the last."""
    bed = Bed()
    _refused(lambda: ibv_close_xrcd(bed.xrcd), "EBUSY", "SRQ(s) or QP(s)")
    second = ibv_open_xrcd(bed.ctx, FD_OFLAGS, bed.fd, 0)
    ibv_close_xrcd(second)  # the other open, the SRQ and the target keep the domain
    assert bed.nodes[1].nic.xrcd_tree[bed.nodes[1].fds.fget(bed.fd)] is bed.xrcd.domain
    ibv_destroy_qp(bed.tgt)
    ibv_destroy_srq(bed.srq)
    ibv_close_xrcd(bed.xrcd)
    _refused(lambda: ibv_close_xrcd(bed.xrcd), "EINVAL", "closed already")
    assert ibv_open_xrcd(bed.ctx, FD_OFLAGS, bed.fd, O_CREAT | O_EXCL).domain is not bed.xrcd.domain


# --- XRC SRQs: ibv_create_srq_ex, mlx5_create_srq_ex, ibv_cmd_create_srq_ex, __uverbs_create_xsrq -------------

def test_create_srq_ex_checks():
    bed = Bed()
    attr = SrqAttr(16, 1)
    _refused(lambda: ibv_create_srq_ex(bed.ctx, SrqInitAttrMask.TYPE | SrqInitAttrMask.PD | SrqInitAttrMask.CQ, attr,
                                       srq_type=SrqType.XRC, pd=bed.pds[1], cq=bed.cqs[1]), "EINVAL", "XRCD")
    _refused(lambda: ibv_create_srq_ex(bed.ctx, XRC_SRQ, SrqAttr(0, 1), srq_type=SrqType.XRC, pd=bed.pds[1],
                                       xrcd=bed.xrcd, cq=bed.cqs[1]), "EINVAL", "max_wr 0")
    _refused(lambda: ibv_create_srq_ex(bed.ctx, XRC_SRQ, attr, srq_type=7, pd=bed.pds[1], xrcd=bed.xrcd,
                                       cq=bed.cqs[1]), "EINVAL", "srq_type 7")
    _refused(lambda: ibv_create_srq_ex(bed.ctx, XRC_SRQ, attr, srq_type=SrqType.XRC, pd=bed.pds[0], xrcd=bed.xrcd,
                                       cq=bed.cqs[1]), "EINVAL", "no PD of this device")
    _refused(lambda: ibv_create_srq_ex(bed.ctx, SrqInitAttrMask.PD, attr), "EINVAL", "no PD of this device")
    basic = ibv_create_srq_ex(bed.ctx, SrqInitAttrMask.PD, attr, pd=bed.pds[1])
    assert basic.xrcd is None and basic.cq is None


def test_get_srq_num_names_each_srq_and_an_xrc_srq_holds_its_cq_and_pd():
    """``mlx5_get_srq_num`` gives any SRQ's number; ``ib_create_srq_user`` raises the PD's and CQ's use counts."""
    bed = Bed()
    other = bed.xrc_srq()
    assert ibv_get_srq_num(bed.srq) != ibv_get_srq_num(other)
    assert bed.cqs[1].usecnt == 2 and bed.pds[1].usecnt >= 2
    ibv_destroy_srq(other)
    assert bed.cqs[1].usecnt == 1


def test_a_basic_qp_cannot_take_an_xrc_srq():
    """uverbs ``create_qp``: ``srq->srq_type == IB_SRQT_XRC`` is EINVAL."""
    bed = Bed()
    _refused(lambda: ibv_create_qp(bed.pds[1], bed.cqs[1], 4, srq=bed.srq), "EINVAL", "XRC SRQ")


# --- XRC QPs: create_qp, ib_open_qp, ibv_cmd_open_qp, modify_qp_mask, qp_state_table ---------------------------

def test_xrc_recv_is_made_on_a_domain_not_a_pd():
    """libibverbs ``ibv_cmd_create_qp_ex2``: XRC_RECV without IBV_QP_INIT_ATTR_XRCD is EINVAL."""
    bed = Bed()
    _refused(lambda: ibv_create_qp(bed.pds[1], bed.cqs[1], 4, qp_type=QpType.XRC_RECV), "EINVAL", "XRC domain")


def test_xrc_send_has_no_receive_side():
    """uverbs ``create_qp`` zeroes an XRC_INI's max_recv_wr and max_recv_sge: a receive finds no room."""
    bed = Bed()
    ini = ibv_create_qp(bed.pds[0], bed.cqs[0], 4, qp_type=QpType.XRC_SEND, max_recv_wr=8)
    assert ini.rq.depth == 0 and ini.srq is None and ini.recv_cq is ini.send_cq


def test_open_qp_checks_of_ibv_cmd_open_qp_and_ib_open_qp():
    bed = Bed()
    num = bed.tgt.qp_num
    _refused(lambda: ibv_open_qp(bed.ctx, QpOpenAttrMask.RESERVED, num, QpType.XRC_RECV, bed.xrcd), "EOPNOTSUPP",
             "RESERVED")
    _refused(lambda: ibv_open_qp(bed.ctx, QpOpenAttrMask.NUM | QpOpenAttrMask.XRCD, num, QpType.XRC_RECV,
                                 bed.xrcd), "EINVAL", "_TYPE")
    _refused(lambda: ibv_open_qp(bed.ctx, OPEN_ALL, num, QpType.RC, bed.xrcd), "EINVAL", "only XRC target")
    _refused(lambda: ibv_open_qp(bed.ctx, OPEN_ALL, num + 1000, QpType.XRC_RECV, bed.xrcd), "EINVAL", "no target QP")
    private = ibv_open_xrcd(bed.ctx, FD_OFLAGS, -1, O_CREAT)
    _refused(lambda: ibv_open_qp(bed.ctx, OPEN_ALL, num, QpType.XRC_RECV, private), "EINVAL", "no target QP")
    opened = ibv_open_qp(bed.ctx, OPEN_ALL, num, QpType.XRC_RECV, bed.xrcd)
    assert opened.qp_num == num and opened.state is QpState.RTS


def test_the_target_lives_until_its_last_open_is_destroyed():
    """``__ib_destroy_shared_qp``: the real QP leaves the domain's ``tgt_qps`` with its last open."""
    bed = Bed()
    second = ibv_open_xrcd(bed.ctx, FD_OFLAGS, bed.fd, 0)
    opened = ibv_open_qp(bed.ctx, OPEN_ALL, bed.tgt.qp_num, QpType.XRC_RECV, second)
    ibv_destroy_qp(bed.tgt)
    assert bed.tgt.qp_num in bed.xrcd.domain.tgt_qps and not opened.real_qp.destroyed
    _refused(lambda: ibv_close_xrcd(second), "EBUSY", "SRQ(s) or QP(s)")
    ibv_destroy_qp(opened)
    assert bed.tgt.qp_num not in bed.xrcd.domain.tgt_qps and opened.real_qp.destroyed


def test_modify_qp_mask_drops_what_each_xrc_side_ignores():
    """uverbs ``modify_qp_mask``: XRC_INI loses MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER, XRC_TGT MAX_QP_RD_ATOMIC,
    RETRY_CNT and RNR_RETRY; other types keep their mask."""
    everything = int(sum(QpAttrMask))
    assert everything & ~modify_qp_mask(QpType.XRC_SEND, everything) == (QpAttrMask.MAX_DEST_RD_ATOMIC
                                                                           | QpAttrMask.MIN_RNR_TIMER)
    assert everything & ~modify_qp_mask(QpType.XRC_RECV, everything) == (QpAttrMask.MAX_QP_RD_ATOMIC
                                                                           | QpAttrMask.RETRY_CNT
                                                                           | QpAttrMask.RNR_RETRY)
    assert modify_qp_mask(QpType.RC, everything) == everything


@pytest.mark.parametrize("side, mask, words", [
    ("tgt", QpAttrMask.STATE | QpAttrMask.SQ_PSN, "requires IBV_QP_TIMEOUT"),
    ("ini", QpAttrMask.STATE | QpAttrMask.TIMEOUT | QpAttrMask.SQ_PSN, "requires IBV_QP_RETRY_CNT"),
])
def test_rtr_to_rts_required_attributes_of_qp_state_table(side, mask, words):
    """``qp_state_table`` RTR -> RTS: XRC_TGT needs TIMEOUT and SQ_PSN only, XRC_INI RC's five."""
    bed = Bed()
    qp = bed.tgt if side == "tgt" else bed.ini
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RESET), QpAttrMask.STATE)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, port_num=1), QpAttrMask.STATE | QpAttrMask.PKEY_INDEX
                  | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS)
    rtr = QpAttrMask.STATE | QpAttrMask.AV | QpAttrMask.PATH_MTU | QpAttrMask.DEST_QPN | QpAttrMask.RQ_PSN
    tgt_rtr = QpAttrMask.MAX_DEST_RD_ATOMIC | QpAttrMask.MIN_RNR_TIMER if side == "tgt" else 0
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTR, path_mtu=3), rtr | tgt_rtr)
    _refused(lambda: ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS), mask), "EINVAL", words)
    if side == "tgt":  # what an initiator needs is dropped from a target's mask, not refused
        ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS, timeout=14), mask | QpAttrMask.TIMEOUT
                      | QpAttrMask.RETRY_CNT | QpAttrMask.RNR_RETRY | QpAttrMask.MAX_QP_RD_ATOMIC)
        assert qp.state is QpState.RTS and qp.attr.retry_cnt == 0


def test_a_target_has_no_send_queue():
    """mlx5: the target's ``sq.wqe_cnt`` is 0, so a post overflows (ENOMEM)."""
    bed = Bed()
    _refused(lambda: ibv_post_send(bed.tgt, bed.send(1, 0)), "ENOMEM", "no send queue")


# --- traffic -------------------------------------------------------------------------------------------------

def test_send_lands_in_the_named_srq_and_completes_in_its_cq():
    """xrc_traffic (rdma-core tests/utils.py): the SEND is received from the SRQ ``remote_srqn`` names, its
    completion in the SRQ's CQ carrying the target QP's number (rxe XRC ``do_complete``: ``pkt->rcq``)."""
    bed = Bed(data=True)
    second = bed.xrc_srq()
    ibv_post_srq_recv(bed.srq, bed.recv(1))
    ibv_post_srq_recv(second, bed.recv(2, offset=4096))
    ibv_post_send(bed.ini, bed.send(10, ibv_get_srq_num(second)))
    bed.run()
    sent, received = ibv_poll_cq(bed.cqs[0], 4), ibv_poll_cq(bed.cqs[1], 4)
    assert [(wc.wr_id, wc.status) for wc in sent] == [(10, WcStatus.SUCCESS)]
    assert [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num) for wc in received] == [
        (2, WcStatus.SUCCESS, WcOpcode.RECV, 256, bed.tgt.qp_num)]
    host = [node.host.data["buf"] for node in bed.nodes]
    assert np.array_equal(host[1][4096:4096 + 256], host[0][:256])
    assert len(bed.srq.posted) == 1


@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE, Opcode.RDMA_READ])
def test_rdma_through_the_target_checks_the_rkey_in_the_srqs_pd(opcode):
    """rxe XRC ``check_rkey``: ``lookup_mr(pkt->pd, ...)`` with the named SRQ's PD: an MR of that PD is reached, one
    of another PD of the same node is a NAK Remote Access Error."""
    bed = Bed()
    ibv_post_send(bed.ini, bed.send(1, ibv_get_srq_num(bed.srq), opcode))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(bed.cqs[0], 4)] == [WcStatus.SUCCESS]
    bed = Bed()
    other_pd = ibv_alloc_pd(bed.ctx)
    foreign = bed.xrc_srq(pd=other_pd)
    ibv_post_send(bed.ini, bed.send(2, ibv_get_srq_num(foreign), opcode))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(bed.cqs[0], 4)] == [WcStatus.REM_ACCESS_ERR]


@pytest.mark.parametrize("opcode", [Opcode.SEND, Opcode.RDMA_WRITE])
@pytest.mark.parametrize("where", ["unknown", "other domain", "basic srq"])
def test_an_srq_number_outside_the_targets_domain_is_a_remote_access_error(opcode, where):
    """rxe XRC ``check_resource``: no SRQ with the number, or one whose XRC domain is not the target's, is
    RESPST_ERR_INVALID_XRCETH: NAK Remote Access Error (IBV_WC_REM_ACCESS_ERR), the target moving to ERR."""
    bed = Bed()
    if where == "unknown":
        srqn = 0xFFFFFF
    elif where == "other domain":
        other = ibv_open_xrcd(bed.ctx, FD_OFLAGS, -1, O_CREAT)
        srqn = ibv_get_srq_num(bed.xrc_srq(xrcd=other))
    else:
        srqn = ibv_get_srq_num(ibv_create_srq_ex(bed.ctx, SrqInitAttrMask.PD, SrqAttr(4, 1), pd=bed.pds[1]))
    ibv_post_srq_recv(bed.srq, bed.recv(1))
    ibv_post_send(bed.ini, bed.send(1, srqn, opcode))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(bed.cqs[0], 4)] == [WcStatus.REM_ACCESS_ERR]
    assert bed.tgt.state is QpState.ERR and ibv_poll_cq(bed.cqs[1], 4) == []


def test_no_receive_in_the_named_srq_is_an_rnr_nak_then_it_lands():
    """RC's rules through the target: an empty SRQ answers RNR NAKs until a receive is posted (rnr_retry 7)."""
    bed = Bed()
    ibv_post_send(bed.ini, bed.send(1, ibv_get_srq_num(bed.srq)))
    bed.env.run(until=bed.env.now + 10**9)
    assert ibv_poll_cq(bed.cqs[0], 4) == [] and bed.ini.rnr_naks >= 1
    ibv_post_srq_recv(bed.srq, bed.recv(5))
    bed.run()
    assert [wc.wr_id for wc in ibv_poll_cq(bed.cqs[1], 4)] == [5]


def test_an_initiator_post_recv_finds_no_receive_queue():
    """An XRC_INI has no receive queue (max_recv_wr 0): mlx5_post_recv overflows (ENOMEM)."""
    bed = Bed()
    _refused(lambda: ibv_post_recv(bed.ini, bed.recv(1, mr=bed.mrs[0])), "ENOMEM", "receive queue full")


def test_the_extended_builder_names_the_srq_with_wr_set_xrc_srqn():
    """mlx5_qp_fill_wr_pfns: an XRC_SEND QP gets RC's builders and ``wr_set_xrc_srqn``
    (``mlx5_send_wr_set_xrc_srqn``); an RC QP has no such setter (EOPNOTSUPP)."""
    bed = Bed()
    ex = ibv_create_qp_ex(bed.pds[0], bed.cqs[0], 16, SendOps.SEND | SendOps.RDMA_WRITE, qp_type=QpType.XRC_SEND)
    assert ex.builders == MLX5_SUPPORTED_SEND_OPS[QpType.RC]
    ex.qp.connect(create_xrc_qp_user(bed.xrcd))
    ibv_post_srq_recv(bed.srq, bed.recv(3))
    ex.wr_start()
    ex.wr_id = 9
    ex.wr(Opcode.SEND)
    ex.wr_set_sge(bed.mrs[0].lkey, bed.mrs[0].addr, 64)
    ex.wr_set_xrc_srqn(ibv_get_srq_num(bed.srq))
    ex.wr_complete()
    bed.run()
    assert [(wc.wr_id, wc.status) for wc in ibv_poll_cq(bed.cqs[1], 4)] == [(3, WcStatus.SUCCESS)]
    rc = ibv_create_qp_ex(bed.pds[0], bed.cqs[0], 16, SendOps.SEND)
    rc.wr_start()
    rc.wr(Opcode.SEND)
    _refused(lambda: rc.wr_set_xrc_srqn(1), "EOPNOTSUPP", "wr_set_xrc_srqn")


def test_xrc_traffic_through_odp_buffers_faults_in_on_both_sides():
    """rdma-core tests/test_odp.py ``OdpXRC``: the XRC set of ``internal_fill_odp_caps`` has SEND (the initiator's
    gather) and SRQ_RECV (an XRC receive always comes from an SRQ, ``mlx5_ib_mr_responder_pfault_handler_srq``),
    so a SEND from pages the NIC lacks into an SRQ receive of pages it lacks faults both in and completes."""
    bed = Bed(host=HostParams(memlock_limit=1 << 22, prefaulted=False))
    odp = []
    for side in (0, 1):
        buf = bed.nodes[side].host.allocate("odp", 8192)
        odp.append(ibv_reg_mr(bed.pds[side], buf.addr, 8192, RW | Access.ON_DEMAND))
    ibv_post_srq_recv(bed.srq, bed.recv(4, mr=odp[1]))
    ibv_post_send(bed.ini, SendWR(1, Opcode.SEND, odp[0].addr, 4096, odp[0].lkey, 0, 0,
                                  remote_srqn=ibv_get_srq_num(bed.srq)))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(bed.cqs[0], 4)] == [WcStatus.SUCCESS]
    assert [(wc.wr_id, wc.status) for wc in ibv_poll_cq(bed.cqs[1], 4)] == [(4, WcStatus.SUCCESS)]
    assert odp[0].backing.faults >= 1 and odp[1].backing.faults >= 1

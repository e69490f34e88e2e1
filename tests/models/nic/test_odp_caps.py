"""ODP capabilities per device profile (mlx5's ``internal_fill_odp_caps``, drivers/infiniband/hw/mlx5/odp.c), as
``ibv_query_device_ex`` reports them, and what they allow on the data path: a page fault is taken only for an
operation and transport the device's capabilities name (``mlx5_ib_odp_opcode_cap``); elsewhere an access through
pages the NIC does not hold fails as an access without a valid translation does."""

from __future__ import annotations

import pytest

from models.host import HostParams
from models.nic.device import DeviceAttrs
from models.nic.nic import NicParams
from models.nic.odp_caps import OdpTransportCaps as T
from models.nic.odp_caps import mlx5_ib_odp_opcode_cap
from models.nic.transport import QpType
from models.nic.wqe import Access, Opcode, RecvWR, SendWR, Sge, WcStatus
from models.presets import NIC_PRESETS
from models.verbs.advise import IBV_ADVISE_MR_FLAG_FLUSH, AdviseMrAdvice, ibv_advise_mr
from models.verbs.mr import ibv_reg_mr
from models.verbs.query import OdpGeneralCaps, ibv_query_device_ex
from models.verbs.recv import ibv_post_recv
from models.verbs.qp import ibv_post_send
from tests.models.verbs.test_device_query import _context
from tests.models.verbs.test_uc_ud import QKEY, RW, Bed

COLD = HostParams(memlock_limit=1 << 22, prefaulted=False)
"""Pages the CPU has not touched: an ODP registration's snapshot (``mlx5_ib_init_odp_mr``) maps none of them."""
RC_ALL = T.SEND | T.RECV | T.WRITE | T.READ | T.ATOMIC | T.SRQ_RECV


@pytest.mark.parametrize("preset, rc, ud, xrc", [
    ("connectx7", RC_ALL, T.SEND, T.SEND | T.WRITE | T.READ | T.ATOMIC | T.SRQ_RECV),
    ("connectx6", RC_ALL & ~T.ATOMIC, T.SEND, T.SEND | T.WRITE | T.READ | T.SRQ_RECV),
    ("connectx5", RC_ALL & ~T.ATOMIC, T.SEND, T.SEND | T.WRITE | T.READ | T.SRQ_RECV),
])
def test_query_device_ex_reports_each_transports_odp_caps_per_device(preset, rc, ud, xrc):
    """``internal_fill_odp_caps``: SUPPORT, then each transport's bits copied from the firmware's ``odp_cap``
    (RC SEND and RECV included, which ibv_rc_pingpong -o checks before it runs); UC has none."""
    ex = ibv_query_device_ex(_context(NicParams(**NIC_PRESETS[preset])))
    assert ex.odp_caps.general_caps & OdpGeneralCaps.SUPPORT
    assert (ex.odp_caps.rc_odp_caps, ex.odp_caps.uc_odp_caps, ex.odp_caps.ud_odp_caps, ex.xrc_odp_caps) == (
        rc, T(0), ud, xrc)


def test_a_device_without_odp_reports_no_transport_caps():
    """``internal_fill_odp_caps`` starts from a zeroed ``ib_odp_caps`` and returns early without ODP."""
    ex = ibv_query_device_ex(_context(NicParams(**NIC_PRESETS["efa"])))
    assert (ex.odp_caps.general_caps, ex.odp_caps.rc_odp_caps, ex.odp_caps.ud_odp_caps, ex.xrc_odp_caps) == (
        OdpGeneralCaps(0), T(0), T(0), T(0))


@pytest.mark.parametrize("opcode, receive, srq, cap", [
    (Opcode.SEND, False, False, T.SEND), (Opcode.SEND_WITH_IMM, False, False, T.SEND),
    (Opcode.RDMA_WRITE, False, False, T.WRITE), (Opcode.RDMA_WRITE_WITH_IMM, False, False, T.WRITE),
    (Opcode.RDMA_READ, False, False, T.READ), (Opcode.ATOMIC_CMP_AND_SWP, False, False, T.ATOMIC),
    (Opcode.ATOMIC_FETCH_AND_ADD, False, False, T.ATOMIC),
    (Opcode.SEND, True, False, T.RECV), (Opcode.SEND, True, True, T.SRQ_RECV),
])
def test_the_capability_each_fault_needs(opcode, receive, srq, cap):
    """``mlx5_ib_odp_opcode_cap`` (the table indexed by the WQE's opcode) for the requester's faults; RECV or
    SRQ_RECV for a receive's scatter (``mlx5_ib_mr_responder_pfault_handler_rq`` / ``_srq``)."""
    assert mlx5_ib_odp_opcode_cap(opcode, receive=receive, srq=srq) is cap


def _odp_buffer(bed: Bed, side: int, name: str = "odp", size: int = 8192):
    """A buffer on node ``side`` the CPU has not touched, registered ON_DEMAND (none of its pages in the NIC)."""
    buf = bed.nodes[side].host.allocate(name, size)
    return ibv_reg_mr(bed.pds[side], buf.addr, size, RW | Access.ON_DEMAND)


def test_a_uc_send_from_an_odp_buffer_fails_where_an_rc_send_faults_it_in():
    """uc_odp_caps is empty on every mlx5 profile: the UC requester takes no page fault for its gather, the
    send fails LOC_PROT_ERR with no fault counted; the same SEND on RC (rc_odp_caps SEND) faults and succeeds."""
    for qp_type, status, faults in ((QpType.UC, WcStatus.LOC_PROT_ERR, 0), (QpType.RC, WcStatus.SUCCESS, 1)):
        bed = Bed(host=COLD)
        mr = _odp_buffer(bed, 0)
        qa, qb = bed.qp(0, qp_type), bed.qp(1, qp_type)
        qa.connect(qb)
        bed.recv(qb, 9, 4096)
        ibv_post_send(qa, SendWR(1, Opcode.SEND, mr.addr, 4096, mr.lkey, 0, 0))
        sent, _ = bed.run()
        assert [wc.status for wc in sent] == [status]
        assert mr.backing.faults == faults


def test_a_ud_receive_into_odp_pages_the_nic_lacks_fails_and_one_into_pages_it_holds_succeeds():
    """ud_odp_caps is SEND only (no RECV): the responder raises no fault for a UD receive's scatter. The receive
    completes LOC_PROT_ERR while the NIC lacks its pages; once ``ibv_advise_mr`` prefetched them the same receive
    needs no fault and completes."""
    for prefetch, status in ((False, WcStatus.LOC_PROT_ERR), (True, WcStatus.SUCCESS)):
        bed = Bed(host=COLD)
        mr = _odp_buffer(bed, 1)
        qa, qb = bed.ud_pair()
        if prefetch:
            took = ibv_advise_mr(bed.pds[1], AdviseMrAdvice.PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
                                 [Sge(mr.addr, 8192, mr.lkey)])
            bed.env.run(until=bed.env.now + took)
        ibv_post_recv(qb, RecvWR(9, (Sge(mr.addr, 8192, mr.lkey),)))
        ibv_post_send(qa, bed.wr(1, Opcode.SEND, 1024, ah=bed.ah(), remote_qpn=qb.qp_num, remote_qkey=QKEY))
        sent, received = bed.run()
        assert [wc.status for wc in sent] == [WcStatus.SUCCESS]  # UD: the requester completes once it has sent
        assert [wc.status for wc in received] == [status]
        assert mr.backing.faults == 0


def test_an_rdma_write_to_an_odp_target_faults_in_on_every_mlx5_profile():
    """rc_odp_caps WRITE on ConnectX-5, -6 and -7: the responder's fault is taken (an RNR NAK, then success)."""
    for part in (4119, 4123, 4129):
        bed = Bed(host=COLD, nic=NicParams(device=DeviceAttrs(vendor_part_id=part)))
        mr = _odp_buffer(bed, 1)
        qa, qb = bed.qp(0, QpType.RC), bed.qp(1, QpType.RC)
        qa.connect(qb)
        wr = bed.wr(1, Opcode.RDMA_WRITE, 4096)
        ibv_post_send(qa, SendWR(1, Opcode.RDMA_WRITE, wr.local_addr, 4096, wr.lkey, mr.addr, mr.rkey))
        sent, _ = bed.run()
        assert [wc.status for wc in sent] == [WcStatus.SUCCESS] and mr.backing.faults >= 1

"""The QP's path MTU sets the packets on the wire: a stream of WRITEs runs at the fabric's efficiency for packets
of that MTU, not the fabric's."""

import pytest

from models.fabric import RETH, FabricParams
from models.nic.wqe import Opcode, QpState, SendWR
from models.verbs.qp_state import AhAttr, PathMtu, QPAttr, QpAttrMask as M
from models.verbs.verbs import ibv_modify_qp, ibv_poll_cq, ibv_post_send
from tests.models.test_atomics import Bed

SIZE, COUNT = 16384, 60


def _reconnect(qp, peer, mtu: PathMtu) -> None:
    """Take ``qp`` through RESET -> INIT -> RTR -> RTS again, with path MTU ``mtu``."""
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RESET), M.STATE)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qp_access_flags=0xE),
                  M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTR, path_mtu=mtu, dest_qp_num=peer.qp_num, rq_psn=0,
                             max_dest_rd_atomic=16, min_rnr_timer=12, ah_attr=AhAttr()),
                  M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS, timeout=14, retry_cnt=7, rnr_retry=7, sq_psn=0, max_rd_atomic=16),
                  M.STATE | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN | M.MAX_QP_RD_ATOMIC)


def _stream_Bps(mtu: PathMtu | None) -> float:
    bed = Bed()
    qa, qb = bed.pair(depth=COUNT)
    if mtu is not None:
        _reconnect(qa, qb, mtu)
    la, rb = bed.mrs
    for k in range(COUNT):
        ibv_post_send(qa, SendWR(k, Opcode.RDMA_WRITE, la.addr, SIZE, la.lkey, rb.addr, rb.rkey))
    bed.env.run()
    done = [wc.completed_ps for wc in ibv_poll_cq(qa.send_cq, COUNT)]
    half = COUNT // 2
    return (COUNT - 1 - half) * SIZE * 1e12 / (done[-1] - done[half])


@pytest.mark.parametrize("mtu", [PathMtu.MTU_256, PathMtu.MTU_1024])
def test_write_stream_runs_at_the_efficiency_of_the_qps_mtu(mtu):
    expected = FabricParams(mtu=mtu.nbytes).efficiency(SIZE, RETH)
    assert expected < FabricParams().efficiency(SIZE, RETH)
    assert _stream_Bps(mtu) == pytest.approx(expected, rel=0.01)


def test_connect_uses_the_fabrics_mtu():
    assert _stream_Bps(None) == pytest.approx(FabricParams().efficiency(SIZE, RETH), rel=0.01)

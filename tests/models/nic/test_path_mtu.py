"""The QP's path MTU sets the packets on the wire: a stream of WRITEs runs at the fabric's efficiency for packets
of that MTU, not the fabric's."""

import pytest

from models.fabric import RETH, FabricParams
from models.nic.wqe import Opcode, SendWR
from models.verbs.qp_state import PathMtu
from models.verbs.cq import ibv_poll_cq
from models.verbs.qp import ibv_post_send
from tests.models.verbs.test_atomics import Bed, reconnect

SIZE, COUNT = 16384, 60


def _stream_Bps(mtu: PathMtu | None) -> float:
    bed = Bed()
    qa, qb = bed.pair(depth=COUNT)
    if mtu is not None:
        reconnect(qa, qb, mtu)
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

"""The API's enums are ints with rdma-core's values (libibverbs/verbs.h ``enum ibv_wc_status``, ``ibv_wr_opcode``,
``ibv_qp_state``, ``ibv_qp_type``), as pyverbs' are, so a script written with pyverbs' integer constants runs."""

from __future__ import annotations

import pytest

from sim.api import (QP, SGE, Opcode, QPCap, QPInitAttr, QpState, QpType, SendWR, Testbed, VerbsError,
                     WcStatus)
from tests.sim.api.test_api_recv import Side, connect, poll_n


@pytest.mark.parametrize("member, value", [
    (WcStatus.SUCCESS, 0), (WcStatus.LOC_PROT_ERR, 4), (WcStatus.WR_FLUSH_ERR, 5), (WcStatus.REM_ACCESS_ERR, 10),
    (Opcode.RDMA_WRITE, 0), (Opcode.RDMA_WRITE_WITH_IMM, 1), (Opcode.SEND, 2), (Opcode.SEND_WITH_IMM, 3),
    (Opcode.RDMA_READ, 4), (Opcode.ATOMIC_CMP_AND_SWP, 5), (Opcode.ATOMIC_FETCH_AND_ADD, 6),
    (QpState.RESET, 0), (QpState.INIT, 1), (QpState.RTR, 2), (QpState.RTS, 3), (QpState.SQD, 4),
    (QpState.SQE, 5), (QpState.ERR, 6), (QpType.RC, 2), (QpType.UC, 3), (QpType.UD, 4),
])
def test_each_member_is_the_int_verbs_h_gives_it(member, value):
    assert isinstance(member, int) and member == value and int(member) == value
    assert f"{member}" == str(member) == f"{type(member).__name__}.{member.name}"   # printed by name, not number


def test_a_script_with_pyverbs_integer_constants_runs():
    """``QPInitAttr(qp_type=IBV_QPT_RC)``, ``SendWR(opcode=IBV_WR_RDMA_WRITE)`` and ``wc.status == IBV_WC_SUCCESS``
    as rdma-core's tests write them; an opcode the device does not post is EINVAL (``mlx5_post_send``: bad
    opcode)."""
    bed = Testbed(data=True)
    a, b = Side(bed, "a"), Side(bed, "b")
    qa = QP(a.pd, QPInitAttr(qp_type=2, scq=a.scq, rcq=a.rcq, cap=QPCap(max_send_wr=4)))
    qb = QP(b.pd, QPInitAttr(qp_type=2, scq=b.scq, rcq=b.rcq, cap=QPCap(max_send_wr=4)))
    assert qa.qp_type is QpType.RC
    connect(qa, qb, b.ctx)
    connect(qb, qa, a.ctx)
    a.mr.write(b"ints", 4)
    wr = SendWR(wr_id=7, opcode=0, num_sge=1, sg=[SGE(a.mr.buf, 4, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    qa.post_send(wr)
    (wc,) = poll_n(a.scq, 1)
    assert wc.status == 0 and wc.opcode == 1 and qa.qp_state == 3 and b.mr.read(4, 0) == b"ints"
    with pytest.raises(VerbsError) as info:
        SendWR(opcode=99, num_sge=1, sg=[SGE(a.mr.buf, 4, a.mr.lkey)])
    assert info.value.errno == "EINVAL"

"""``ibv_query_qp_data_in_order`` through the API, held to rdma-core v59: libibverbs/verbs.c
``ibv_query_qp_data_in_order`` (check_comp_mask on the flags, WHOLE_MSG implies ALIGNED_128_BYTES, RETURN_CAPS
returns the bits), providers/mlx5/verbs.c ``mlx5_query_qp_data_in_order`` (the HCA cap ``qp_data_in_order``, a
QP in RTS) and providers/efa/verbs.c ``efa_query_qp_data_in_order`` (DATA_POLLING_128); rdma-core's
tests/test_qp.py ``test_query_data_in_order`` names the valid answers."""

import pytest

from sim.api import (CQ, PD, QP, Context, DataInOrderCaps, Opcode, QPCap, QPInitAttr, QueryDataInOrderFlags,
                     Testbed)
from tests.sim.api.test_api import rc_pair

CAPS = QueryDataInOrderFlags.RETURN_CAPS
VALID_CAPS = {0, DataInOrderCaps.ALIGNED_128_BYTES, DataInOrderCaps.WHOLE_MSG | DataInOrderCaps.ALIGNED_128_BYTES}


@pytest.mark.parametrize("nic", [{}, {"qp_data_in_order": True}, {"preset": "efa"},
                                 {"preset": "efa", "data_polling_128": True}])
def test_the_answers_are_those_rdma_cores_test_accepts(nic):
    """test_query_data_in_order: 0 or 1 with flags 0, one of three capability sets with RETURN_CAPS."""
    qp = rc_pair(Testbed({"a": {"nic": nic}, "b": {"nic": nic}}))[0][4]
    assert qp.query_data_in_order(Opcode.SEND) in (0, 1)
    assert qp.query_data_in_order(Opcode.SEND, CAPS) in VALID_CAPS


def test_an_mlx5_device_with_the_capability_writes_whole_messages_in_order_once_in_rts():
    testbed = Testbed({"a": {"nic": {"qp_data_in_order": True}}, "b": {}})
    ctx = Context(testbed, "a")
    pd, cq = PD(ctx), CQ(ctx, 8)
    fresh = QP(pd, QPInitAttr(scq=cq, rcq=cq, cap=QPCap(max_send_wr=8)))  # RESET: the QP context says nothing
    assert fresh.query_data_in_order(Opcode.RDMA_WRITE, CAPS) == 0
    qp = rc_pair(testbed)[0][4]
    assert qp.query_data_in_order(Opcode.RDMA_WRITE) == 1
    assert qp.query_data_in_order(Opcode.RDMA_WRITE, CAPS) == DataInOrderCaps.WHOLE_MSG | \
        DataInOrderCaps.ALIGNED_128_BYTES  # libibverbs adds the 128-byte answer to the whole message's


def test_without_the_capability_mlx5_answers_not_in_order():
    qp = rc_pair(Testbed())[0][4]
    assert qp.query_data_in_order(Opcode.RDMA_READ) == 0 and qp.query_data_in_order(Opcode.RDMA_READ, CAPS) == 0


def test_efa_with_data_polling_128_reports_aligned_blocks_but_not_whole_messages():
    efa = {"preset": "efa"}
    qp = rc_pair(Testbed({"a": {"nic": {**efa, "data_polling_128": True}}, "b": {"nic": efa}}))[0][4]
    assert qp.query_data_in_order(Opcode.SEND) == 0  # flags 0 asks for WHOLE_MSG only
    assert qp.query_data_in_order(Opcode.SEND, CAPS) == DataInOrderCaps.ALIGNED_128_BYTES


def test_flags_outside_the_known_ones_answer_zero():
    """check_comp_mask: an unknown flag bit makes libibverbs answer 0 without asking the provider."""
    qp = rc_pair(Testbed({"a": {"nic": {"qp_data_in_order": True}}, "b": {}}))[0][4]
    assert qp.query_data_in_order(Opcode.SEND, 1 << 2) == 0
    assert qp.query_data_in_order(Opcode.SEND, CAPS | QueryDataInOrderFlags.DEVICE_ONLY) != 0

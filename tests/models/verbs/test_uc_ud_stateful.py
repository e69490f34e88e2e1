"""The receive-and-send state machine of tests/models/verbs/test_recv_stateful.py on UC and UD QP pairs: never a crash,
every illegal call its errno (a post in SQE is accepted and flushed), every posted work request exactly one completion (UD's
WRITE with immediate: LOC_QP_OP_ERR, its 9000-byte SEND: LOC_LEN_ERR), every receive consumed at most once (a UD
one counting the GRH)."""

from __future__ import annotations

from hypothesis import settings

from models.nic.transport import GRH_BYTES, QpType
from models.nic.wqe import SendWR, WcStatus
from models.verbs.ah import ibv_create_ah
from models.verbs.qp_state import AhAttr
from tests.models.verbs.test_recv_stateful import ReceivesAndSends
from tests.properties import examples

UNACKED_STATUSES = {WcStatus.SUCCESS, WcStatus.LOC_QP_OP_ERR, WcStatus.LOC_LEN_ERR, WcStatus.WR_FLUSH_ERR}


class UcReceivesAndSends(ReceivesAndSends):
    create = {"qp_type": QpType.UC}
    send_statuses = UNACKED_STATUSES

    def bring_up(self) -> None:
        self.qa.connect(self.qb)


class UdReceivesAndSends(ReceivesAndSends):
    create = {"qp_type": QpType.UD}
    send_statuses = UNACKED_STATUSES
    receive_overhead = GRH_BYTES

    def bring_up(self) -> None:
        for qp in (self.qa, self.qb):
            qp.ready_datagrams()
        self.ah = ibv_create_ah(self.qa.pd, AhAttr(dlid=2))

    def addressed(self, wr: SendWR) -> SendWR:
        wr.ah, wr.remote_qpn, wr.remote_qkey = self.ah, self.qb.qp_num, self.qb.attr.qkey
        return wr


TestUcReceivesAndSends = UcReceivesAndSends.TestCase
TestUcReceivesAndSends.settings = settings(max_examples=examples(40), stateful_step_count=30, deadline=None)
TestUdReceivesAndSends = UdReceivesAndSends.TestCase
TestUdReceivesAndSends.settings = settings(max_examples=examples(40), stateful_step_count=30, deadline=None)

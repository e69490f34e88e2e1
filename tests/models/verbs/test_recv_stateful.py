"""Random sequences of receive posts, receive-consuming sends, QP errors, simulated time and polls on one RC QP pair:
never a crash, every illegal call the errno a reference count predicts, every posted work request exactly one
completion, every posted receive consumed at most once."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from models.nic.wqe import Opcode, QpState, RecvWR, SendWR, Sge, WcOpcode, WcStatus
from models.verbs.qp_state import QPAttr
from models.verbs.recv import ibv_post_recv
from models.verbs.cq import ibv_poll_cq
from models.verbs.qp import ibv_modify_qp, ibv_post_send
from sim.core import VerbsError
from tests.models.verbs.test_recv import Bed, connect
from tests.properties import examples

SEND_STATUSES = {WcStatus.SUCCESS, WcStatus.RNR_RETRY_EXC_ERR, WcStatus.REM_INV_REQ_ERR, WcStatus.REM_OP_ERR,
                 WcStatus.RETRY_EXC_ERR, WcStatus.REM_ACCESS_ERR, WcStatus.WR_FLUSH_ERR}
RECV_STATUSES = {WcStatus.SUCCESS, WcStatus.LOC_LEN_ERR, WcStatus.LOC_PROT_ERR, WcStatus.WR_FLUSH_ERR}


class ReceivesAndSends(RuleBasedStateMachine):
    """On an RC pair; subclasses run the same rules on other QP types (tests/models/verbs/test_uc_ud_stateful.py)."""

    create: dict = {}
    """Extra ``ibv_create_qp`` arguments of both QPs."""
    send_statuses = SEND_STATUSES
    receive_overhead = 0
    """Bytes a successful receive counts beyond the message (UD's GRH)."""

    def __init__(self):
        super().__init__()
        self.bed = Bed()
        self.qa = self.bed.qp(0, max_recv_wr=1, **self.create)
        self.qb = self.bed.qp(1, max_recv_wr=4, max_recv_sge=2, **self.create)
        self.bring_up()
        self.sends: dict[int, int] = {}  # wr_id -> length
        self.receives: set[int] = set()
        self.send_done: list = []
        self.recv_done: list = []

    def bring_up(self) -> None:
        """Both QPs to RTS, the requester's RNR retries few and short."""
        connect(self.qa, self.qb, rnr_retry=2, min_rnr_timer=1)

    def addressed(self, wr: SendWR) -> SendWR:
        """``wr`` with whatever its QP type needs besides (UD: its destination)."""
        return wr

    @rule(pieces=st.lists(st.sampled_from([0, 64, 512, 4096]), max_size=3), bad_key=st.booleans())
    def post_recv(self, pieces, bad_key):
        mr, qb = self.bed.mrs[1], self.qb
        wr_id = len(self.receives) + 1000 * len(self.recv_done) + 7 * len(pieces)
        while wr_id in self.receives:
            wr_id += 1
        wr = RecvWR(wr_id, tuple(Sge(mr.addr + 8192 * k, n, mr.lkey + bad_key) for k, n in enumerate(pieces)))
        held = len(self.receives) - len(self.recv_done)  # a slot is free once its completion is polled
        expected = "ENOMEM" if held >= qb.rq.depth else "EINVAL" if len(pieces) > qb.rq.max_sge else None
        try:
            ibv_post_recv(qb, wr)
        except VerbsError as err:
            assert err.errno == expected, (err, expected)
            return
        assert expected is None
        self.receives.add(wr_id)

    @rule(opcode=st.sampled_from([Opcode.SEND, Opcode.SEND_WITH_IMM, Opcode.RDMA_WRITE_WITH_IMM]),
          length=st.sampled_from([1, 64, 600, 4096, 9000]), imm=st.sampled_from([0, 0xFFFFFFFF, 2**32]))
    def post_send(self, opcode, length, imm):
        a, b = self.bed.mrs
        wr = self.addressed(SendWR(len(self.sends), opcode, a.addr, length, a.lkey, b.addr, b.rkey, imm_data=imm))
        held = len(self.sends) - len(self.send_done)  # mlx5 moves the SQ's tail as it polls (mlx5_parse_cqe)
        expected = "ENOMEM" if held >= self.qa.max_send_wr else "EINVAL" if imm >= 2**32 else None
        try:
            ibv_post_send(self.qa, wr)
        except VerbsError as err:
            assert err.errno == expected, (err, expected)
            return
        assert expected is None
        self.sends[wr.wr_id] = length

    @rule(which=st.sampled_from(["requester", "responder"]))
    def to_error(self, which):
        ibv_modify_qp(self.qa if which == "requester" else self.qb, QPAttr(qp_state=QpState.ERR), 1)

    @rule(us=st.sampled_from([1, 5, 40]))
    def run(self, us):
        self.bed.run(us * 1_000_000)

    @rule()
    def poll(self):
        self.send_done += ibv_poll_cq(self.qa.send_cq, 256)
        self.recv_done += ibv_poll_cq(self.qb.recv_cq, 256)

    @invariant()
    def completions_are_legal_and_unique(self):
        sent = [wc.wr_id for wc in self.send_done]
        assert sent == sorted(set(sent)) and set(sent) <= set(self.sends)  # in order, once each
        got = [wc.wr_id for wc in self.recv_done]
        assert len(got) == len(set(got)) and set(got) <= self.receives
        for wc in self.send_done:
            assert wc.status in self.send_statuses
            assert wc.byte_len == (self.sends[wc.wr_id] if wc.status is WcStatus.SUCCESS else 0)
        for wc in self.recv_done:
            assert wc.status in RECV_STATUSES and wc.opcode in (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM)
            assert wc.status is not WcStatus.SUCCESS or wc.byte_len - self.receive_overhead in self.sends.values()

    def teardown(self):
        self.bed.env.run()
        self.poll()
        self.completions_are_legal_and_unique()
        assert sorted(wc.wr_id for wc in self.send_done) == sorted(self.sends)  # every send exactly once
        assert self.qa.outstanding == 0 and self.qb.rq.held == len(self.qb.rq.posted)
        assert len(self.recv_done) + len(self.qb.rq.posted) == len(self.receives)  # each receive at most once
        assert {wc.wr_id for wc in self.recv_done}.isdisjoint(r.wr_id for r in self.qb.rq.posted)
        if self.qb.state is QpState.ERR:
            assert not self.qb.rq.posted


TestReceivesAndSends = ReceivesAndSends.TestCase
TestReceivesAndSends.settings = settings(max_examples=examples(60), stateful_step_count=30, deadline=None)

"""The QP state machine: ibv_modify_qp's transitions and attribute checks, ibv_query_qp, posting outside RTS."""

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from models.dmabuf.core import DmaBufCore, KernelConfig
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.datapath import rd_atomic_slots
from models.nic.nic import NicParams
from models.nic.wqe import SEND_SIGNALED, Access, Opcode, QpState, SendWR, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.qp_state import AhAttr, PathMtu, QPAttr, QpAttrMask as M, QpType, check_modify_qp, rnr_timer_ps
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send, ibv_query_qp
from sim.core import PS_PER_US, Environment, VerbsError
from tests.properties import examples

S = QpState
DEVICE_RD_ATOMIC = NicParams().max_rd_atomic

RC_REQUIRED = {
    (S.RESET, S.RESET): M(0), (S.RESET, S.INIT): M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS,
    (S.INIT, S.INIT): M(0), (S.INIT, S.RTR): (M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC
                                            | M.MIN_RNR_TIMER),
    (S.RTR, S.RTS): M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN | M.MAX_QP_RD_ATOMIC,
    (S.RTS, S.RTS): M(0), (S.RTS, S.SQD): M(0), (S.SQD, S.RTS): M(0), (S.SQD, S.SQD): M(0), (S.SQE, S.RTS): M(0),
    **{(s, S.RESET): M(0) for s in S if s is not S.RESET}, **{(s, S.ERR): M(0) for s in S if s is not S.RESET},
}
"""The RC column of the kernel's qp_state_table (verbs.c): legal pairs and their required attributes."""

VALID = QPAttr(pkey_index=0, port_num=1, qp_access_flags=int(Access.REMOTE_WRITE), ah_attr=AhAttr(dlid=2),
               path_mtu=PathMtu.MTU_4096, dest_qp_num=5, rq_psn=17, sq_psn=23, max_dest_rd_atomic=4,
               min_rnr_timer=12, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=4)
"""An attribute record whose every value is acceptable."""
SETTABLE = [M.PKEY_INDEX, M.PORT, M.ACCESS_FLAGS, M.AV, M.PATH_MTU, M.DEST_QPN, M.RQ_PSN, M.MAX_DEST_RD_ATOMIC,
            M.MIN_RNR_TIMER, M.TIMEOUT, M.RETRY_CNT, M.RNR_RETRY, M.SQ_PSN, M.MAX_QP_RD_ATOMIC]


def _qps():
    env = Environment(1)
    fabric = Fabric(FabricParams())
    qps = []
    for name in "ab":
        node = Node.create(name, HostParams(), PcieParams(), NicParams())
        fabric.attach(node.nic.name)
        pd = ibv_alloc_pd(ibv_open_device(node, env, fabric))
        qps.append(ibv_create_qp(pd, ibv_create_cq(pd.context, 16), 8))
    return qps


PATH = {S.RESET: [], S.INIT: [S.INIT], S.RTR: [S.INIT, S.RTR], S.RTS: [S.INIT, S.RTR, S.RTS],
        S.SQD: [S.INIT, S.RTR, S.RTS, S.SQD], S.ERR: [S.INIT, S.ERR]}
"""Legal modify sequences from RESET to each state reachable by ibv_modify_qp (SQE only comes from hardware)."""


def _drive(qp, state):
    cur = S.RESET
    for nxt in PATH[state]:
        ibv_modify_qp(qp, dataclasses.replace(VALID, qp_state=nxt), M.STATE | RC_REQUIRED[cur, nxt])
        cur = nxt
    assert qp.state is state


def _modify_errno(qp, attr, mask):
    before = ibv_query_qp(qp, 0)
    with pytest.raises(VerbsError) as info:
        ibv_modify_qp(qp, attr, mask)
    assert ibv_query_qp(qp, 0) == before  # a refused modify changes nothing
    return info.value


REACHABLE = [(cur, new) for cur in PATH for new in S]


@pytest.mark.parametrize("cur, new", REACHABLE, ids=[f"{c.value}->{n.value}" for c, n in REACHABLE])
def test_every_transition_with_its_required_attributes(cur, new):
    qp, _ = _qps()
    _drive(qp, cur)
    attr, mask = dataclasses.replace(VALID, qp_state=new), M.STATE | RC_REQUIRED.get((cur, new), M(0))
    if (cur, new) not in RC_REQUIRED:
        err = _modify_errno(qp, attr, mask)
        assert err.errno == "EINVAL" and "not a legal transition" in str(err)
        return
    ibv_modify_qp(qp, attr, mask)
    assert qp.state is new and ibv_query_qp(qp, 0).qp_state is new
    for bit in M(RC_REQUIRED[cur, new]):  # each required attribute left out is refused
        qp2, _ = _qps()
        _drive(qp2, cur)
        err = _modify_errno(qp2, attr, mask & ~bit)
        assert err.errno == "EINVAL" and f"requires IBV_QP_{bit.name}" in str(err)


@pytest.mark.parametrize("new", list(S))
def test_sqe_rows(new):
    """SQE is entered by the hardware only, so its row is checked without a QP."""
    attr = QPAttr(qp_state=new)
    if (S.SQE, new) in RC_REQUIRED:
        assert check_modify_qp(QpType.RC, S.SQE, attr, M.STATE, DEVICE_RD_ATOMIC) is new
    else:
        with pytest.raises(VerbsError) as info:
            check_modify_qp(QpType.RC, S.SQE, attr, M.STATE, DEVICE_RD_ATOMIC)
        assert info.value.errno == "EINVAL"
    with pytest.raises(VerbsError):  # RC may not change its access flags leaving SQE (UC may)
        check_modify_qp(QpType.RC, S.SQE, QPAttr(qp_state=S.RTS), M.STATE | M.ACCESS_FLAGS, DEVICE_RD_ATOMIC)
    assert check_modify_qp(QpType.UC, S.SQE, QPAttr(qp_state=S.RTS), M.STATE | M.ACCESS_FLAGS, 1) is S.RTS


@pytest.mark.parametrize("cur, new, extra", [
    (S.RESET, S.INIT, M.PATH_MTU), (S.INIT, S.RTR, M.SQ_PSN), (S.RTR, S.RTS, M.DEST_QPN), (S.RTS, S.RTS, M.PORT),
    (S.RTS, S.RTS, M.RNR_RETRY), (S.RTS, S.SQD, M.TIMEOUT), (S.INIT, S.ERR, M.PORT), (S.INIT, S.INIT, M.AV),
])
def test_an_attribute_the_transition_does_not_accept_is_einval(cur, new, extra):
    qp, _ = _qps()
    _drive(qp, cur)
    err = _modify_errno(qp, dataclasses.replace(VALID, qp_state=new), M.STATE | RC_REQUIRED[cur, new] | extra)
    assert err.errno == "EINVAL" and f"does not accept IBV_QP_{extra.name}" in str(err)


def test_optional_attributes_change_in_rts_and_sqd():
    qp, _ = _qps()
    _drive(qp, S.RTS)
    ibv_modify_qp(qp, QPAttr(min_rnr_timer=1), M.MIN_RNR_TIMER)  # RTS -> RTS without IBV_QP_STATE
    assert qp.state is S.RTS and qp.min_rnr_timer_ps == 10 * PS_PER_US
    ibv_modify_qp(qp, QPAttr(qp_state=S.SQD), M.STATE)
    ibv_modify_qp(qp, QPAttr(qp_state=S.SQD, rnr_retry=3, timeout=20), M.STATE | M.RNR_RETRY | M.TIMEOUT)
    ibv_modify_qp(qp, QPAttr(qp_state=S.RTS), M.STATE)
    got = ibv_query_qp(qp, M.RNR_RETRY | M.TIMEOUT)
    assert (qp.state, qp.rnr_retry, got.rnr_retry, got.timeout) == (S.RTS, 3, 3, 20)


@pytest.mark.parametrize("change, mask, errno, words", [
    ({"port_num": 2}, M.PORT, "EINVAL", "port_num 2"),
    ({"port_num": 0}, M.PORT, "EINVAL", "port_num 0"),
    ({"path_mtu": 6}, M.PATH_MTU, "EINVAL", "path_mtu 6"),
    ({"path_mtu": 0}, M.PATH_MTU, "EINVAL", "path_mtu 0"),
    ({"ah_attr": AhAttr(port_num=3)}, M.AV, "EINVAL", "ah_attr.port_num 3"),
    ({"max_dest_rd_atomic": DEVICE_RD_ATOMIC + 1}, M.MAX_DEST_RD_ATOMIC, "EINVAL", "max_dest_rd_atomic"),
    ({"max_rd_atomic": DEVICE_RD_ATOMIC + 1}, M.MAX_QP_RD_ATOMIC, "EINVAL", "max_rd_atomic"),
    ({"qp_state": "RTS"}, M.STATE, "EINVAL", "not a QP state"),
    ({}, M(1 << 30), "EOPNOTSUPP", "outside enum ibv_qp_attr_mask"),
])
def test_attribute_values_are_checked(change, mask, errno, words):
    qp, _ = _qps()
    steps = [(S.INIT, RC_REQUIRED[S.RESET, S.INIT]), (S.RTR, RC_REQUIRED[S.INIT, S.RTR]),
             (S.RTS, RC_REQUIRED[S.RTR, S.RTS])]
    for state, required in steps:  # the first transition that takes the attribute tries the bad value
        attr = dataclasses.replace(VALID, qp_state=state)
        if mask & (required | M.STATE) or mask not in SETTABLE:
            err = _modify_errno(qp, dataclasses.replace(attr, **change), M.STATE | required | mask)
            assert err.errno == errno and words in str(err) and err.call == "ibv_modify_qp"
            return
        ibv_modify_qp(qp, attr, M.STATE | required)
    pytest.fail("no transition took the attribute")


def test_cur_state_is_only_accepted_from_rtr_on():
    qp, _ = _qps()
    _drive(qp, S.INIT)
    err = _modify_errno(qp, dataclasses.replace(VALID, qp_state=S.INIT, cur_qp_state=S.INIT), M.STATE | M.CUR_STATE)
    assert err.errno == "EINVAL" and "IB_QP_CUR_STATE" in str(err)
    qp2, _ = _qps()
    _drive(qp2, S.RTS)
    ibv_modify_qp(qp2, QPAttr(qp_state=S.RTS, cur_qp_state=S.RTS), M.STATE | M.CUR_STATE)
    assert qp2.state is S.RTS


def test_query_returns_what_connect_set_and_a_copy():
    qa, qb = _qps()
    qa.connect(qb)
    got = ibv_query_qp(qa, 0)
    assert (got.qp_state, got.dest_qp_num, got.path_mtu, got.port_num) == (S.RTS, qb.qp_num, PathMtu.MTU_4096, 1)
    assert (got.max_rd_atomic, got.max_dest_rd_atomic) == (DEVICE_RD_ATOMIC, DEVICE_RD_ATOMIC)
    assert rd_atomic_slots(qa) == DEVICE_RD_ATOMIC and qa.min_rnr_timer_ps == 640 * PS_PER_US and qa.rnr_retry == 7
    got.ah_attr.dlid, got.rnr_retry = 99, 0
    assert qa.attr.ah_attr.dlid != 99 and qa.rnr_retry == 7


def test_psns_are_masked_to_24_bits_and_reset_clears_attributes():
    qp, _ = _qps()
    _drive(qp, S.INIT)
    ibv_modify_qp(qp, dataclasses.replace(VALID, qp_state=S.RTR, rq_psn=0x1234567),
                  M.STATE | RC_REQUIRED[S.INIT, S.RTR])
    assert ibv_query_qp(qp, M.RQ_PSN).rq_psn == 0x234567
    ibv_modify_qp(qp, QPAttr(qp_state=S.RESET), M.STATE)
    assert ibv_query_qp(qp, 0) == QPAttr()


def test_rnr_timer_encodings():
    assert [rnr_timer_ps(e) // PS_PER_US for e in (0, 1, 12, 31)] == [655360, 10, 640, 491520]


@pytest.mark.parametrize("states, errno", [
    ([S.RESET], "ENOMEM"), ([S.INIT], "ENOMEM"), ([S.RTR], "ENOMEM"),
    ([S.ERR], "ENOMEM"),                                  # ERR reached from INIT: the send queue never opened
    ([S.RTS, S.RESET, S.INIT], "ENOMEM")])                # RESET closes it again
def test_post_send_before_rts_exceeds_mlx5s_closed_sge_limit(states, errno):
    qp, _ = _qps()
    _drive(qp, states[0])
    for state in states[1:]:
        ibv_modify_qp(qp, dataclasses.replace(VALID, qp_state=state), M.STATE | RC_REQUIRED.get((qp.state, state), 0))
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qp, SendWR(0, Opcode.RDMA_WRITE, 0, 8, 0, 0, 0))
    assert info.value.errno == errno and qp.state.name in str(info.value) and qp.outstanding == 0


class ModifyQpMachine(RuleBasedStateMachine):
    """Random ibv_modify_qp calls: never a crash, an illegal call is EINVAL/EOPNOTSUPP and changes nothing, a
    legal one moves to the asked state and keeps the asked values."""

    def __init__(self):
        super().__init__()
        self.qp, _ = _qps()

    @rule(new=st.sampled_from(list(S) + [None]), bits=st.lists(st.sampled_from(SETTABLE + [M.CUR_STATE]), max_size=8),
          port=st.sampled_from([1, 1, 2]), mtu=st.sampled_from([3, 5, 7]), rd=st.integers(0, DEVICE_RD_ATOMIC + 2),
          rnr=st.integers(0, 7), cur_ok=st.booleans())
    def modify(self, new, bits, port, mtu, rd, rnr, cur_ok):
        mask = M(sum(set(bits))) | (M.STATE if new is not None else M(0))
        cur = self.qp.state
        attr = dataclasses.replace(VALID, qp_state=new or S.RESET, cur_qp_state=cur if cur_ok else S.SQE,
                                   port_num=port, path_mtu=mtu, max_rd_atomic=rd, max_dest_rd_atomic=rd, rnr_retry=rnr)
        before = ibv_query_qp(self.qp, 0)
        try:
            ibv_modify_qp(self.qp, attr, mask)
        except VerbsError as err:
            assert err.errno == "EINVAL" and ibv_query_qp(self.qp, 0) == before
            return
        from_state = attr.cur_qp_state if mask & M.CUR_STATE else cur
        target = new if new is not None else from_state
        assert (from_state, target) in RC_REQUIRED and self.qp.state is target
        got = ibv_query_qp(self.qp, 0)
        if target is not S.RESET:
            assert (mask & M.PORT == 0 or got.port_num == 1) and (mask & M.RNR_RETRY == 0 or got.rnr_retry == rnr)
            assert mask & M.PATH_MTU == 0 or (got.path_mtu == mtu and mtu in set(PathMtu))

    @rule(new=st.sampled_from(list(S)), extra=st.sampled_from([M(0), M(0), M.MIN_RNR_TIMER, M.PORT]))
    def step(self, new, extra):
        """A transition with its required attributes (and perhaps one more): legal exactly when the kernel's
        table lists the pair and accepts the extra attribute; this walks the machine through its states."""
        cur, mask = self.qp.state, M.STATE | RC_REQUIRED.get((self.qp.state, new), M(0)) | extra
        try:
            ibv_modify_qp(self.qp, dataclasses.replace(VALID, qp_state=new), mask)
        except VerbsError as err:
            assert err.errno == "EINVAL" and self.qp.state is cur
            assert (cur, new) not in RC_REQUIRED or extra
            return
        assert (cur, new) in RC_REQUIRED and self.qp.state is new

    @invariant()
    def attributes_name_the_state(self):
        assert self.qp.attr.cur_qp_state is self.qp.attr.qp_state


TestModifyQp = ModifyQpMachine.TestCase
TestModifyQp.settings = settings(max_examples=examples(60), stateful_step_count=25, deadline=None)


def _ud_qp(version: str | None, cap_net_raw: bool):
    env = Environment(1)
    fabric = Fabric(FabricParams())
    node = Node.create("a", HostParams(), PcieParams(), NicParams())
    if version is not None:
        node.kernel = DmaBufCore(env, KernelConfig(version=version))
    fabric.attach(node.nic.name)
    pd = ibv_alloc_pd(ibv_open_device(node, env, fabric, cap_net_raw=cap_net_raw))
    return ibv_create_qp(pd, ibv_create_cq(pd.context, 16), 8, qp_type=QpType.UD)


UD_INIT = QPAttr(qp_state=S.INIT, pkey_index=0, port_num=1)
UD_INIT_MASK = M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY


@pytest.mark.parametrize("version, cap_net_raw, qkey, errno", [
    (None, False, 0x80000000, "EPERM"),  # the default kernel (6.18)
    ("6.19", False, 0xFFFFFFFF, "EPERM"),
    ("6.4", False, 0x80000001, "EPERM"),
    ("6.3", False, 0x80000000, None),  # before 0cadb4db79e1 anyone may
    ("5.15", False, 0x80000000, None),
    ("6.19", True, 0x80000000, None),  # CAP_NET_RAW may
    ("6.19", False, 0x7FFFFFFF, None),  # not a controlled Q_Key
    ("6.19", False, 0x11111111, None)])
def test_a_controlled_qkey_needs_privilege_from_6_4(version, cap_net_raw, qkey, errno):
    qp = _ud_qp(version, cap_net_raw)
    attr = dataclasses.replace(UD_INIT, qkey=qkey)
    if errno is None:
        ibv_modify_qp(qp, attr, UD_INIT_MASK)
        assert qp.state is S.INIT and qp.attr.qkey == qkey
        return
    with pytest.raises(VerbsError) as err:
        ibv_modify_qp(qp, attr, UD_INIT_MASK)
    assert err.value.errno == errno and "controlled Q_Key" in str(err.value)
    assert qp.state is S.RESET and qp.attr.qkey == 0  # nothing changed


@pytest.mark.parametrize("attr, mask, errno", [
    # modify_qp checks the port before the Q_Key, and the Q_Key before the driver's transition check
    (dataclasses.replace(UD_INIT, qkey=0x80000000, port_num=2), UD_INIT_MASK, "EINVAL"),
    (QPAttr(qp_state=S.RTS, qkey=0x80000000), M.STATE | M.QKEY, "EPERM"),
    (QPAttr(qp_state=S.RTS, qkey=0x80000000), M.STATE, "EINVAL")])  # without IBV_QP_QKEY the key is not read
def test_the_controlled_qkey_check_comes_where_modify_qp_makes_it(attr, mask, errno):
    with pytest.raises(VerbsError) as err:
        ibv_modify_qp(_ud_qp("6.19", False), attr, mask)
    assert err.value.errno == errno


MRS = {}
"""The requester's and the responder's MR of the last :func:`_connected` pair."""


def _write(wr_id: int) -> SendWR:
    """An 8-byte RDMA WRITE between the MRs of :func:`_connected`."""
    src, dst = MRS["a"], MRS["b"]
    return SendWR(wr_id, Opcode.RDMA_WRITE, src.addr, 8, src.lkey, dst.addr, dst.rkey, send_flags=SEND_SIGNALED)


def _connected():
    qa, qb = _qps()
    qa.connect(qb)
    for name, qp in (("a", qa), ("b", qb)):
        buf = qp.node.host.allocate("buf", 4096)
        MRS[name] = ibv_reg_mr(qp.pd, buf.addr, 4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    return qa, qb


@pytest.mark.parametrize("states, statuses", [
    ([S.ERR], [WcStatus.WR_FLUSH_ERR]),                    # ERR from RTS: the send queue stays open, the NIC flushes
    ([S.SQD, S.ERR], [WcStatus.WR_FLUSH_ERR] * 2),         # held in SQD, then flushed with the one posted in ERR
    ([S.SQD, S.RTS], [WcStatus.SUCCESS])])                 # held in SQD, run once back in RTS
def test_posts_after_rts_are_accepted_in_every_state_as_mlx5_accepts_them(states, statuses):
    """``_mlx5_post_send`` reads no QP state: from RTS on, a post is accepted; ERR flushes it, SQD holds it."""
    qa, qb = _connected()
    for state in states:
        ibv_modify_qp(qa, QPAttr(qp_state=state), M.STATE)
        if state is not S.RTS:
            ibv_post_send(qa, _write(qa.posted_count))
    qa.pd.context.env.run()
    wcs = ibv_poll_cq(qa.send_cq, 8)
    assert [(wc.wr_id, wc.status) for wc in wcs] == list(enumerate(statuses)) and qa.outstanding == 0


def test_a_post_in_sqd_waits_until_rts_and_then_runs_in_posting_order():
    qa, qb = _connected()
    env = qa.pd.context.env
    ibv_modify_qp(qa, QPAttr(qp_state=S.SQD), M.STATE)
    for wr_id in (1, 2):
        ibv_post_send(qa, _write(wr_id))
    env.run(until=env.now + 100 * PS_PER_US)
    assert ibv_poll_cq(qa.send_cq, 8) == [] and qa.outstanding == 2  # nothing taken up in SQD
    back = env.now
    ibv_modify_qp(qa, QPAttr(qp_state=S.RTS), M.STATE)
    env.run()
    wcs = ibv_poll_cq(qa.send_cq, 8)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    assert all(wc.posted_ps < back < wc.completed_ps for wc in wcs) and qa.outstanding == 0


def test_a_qp_reset_in_sqd_discards_what_it_held_and_posts_again_from_rts():
    qa, qb = _connected()
    ibv_modify_qp(qa, QPAttr(qp_state=S.SQD), M.STATE)
    ibv_post_send(qa, _write(1))
    ibv_modify_qp(qa, QPAttr(qp_state=S.RESET), M.STATE)
    assert qa.outstanding == 0 and qa.held_posts == [] and qa.seq_of == {}
    _back_to_rts(qa, qb)
    ibv_post_send(qa, _write(2))
    qa.pd.context.env.run()
    assert [(wc.wr_id, wc.status) for wc in ibv_poll_cq(qa.send_cq, 8)] == [(2, WcStatus.SUCCESS)]


def _back_to_rts(qa, qb):
    again = dataclasses.replace(VALID, dest_qp_num=qb.qp_num, sq_psn=ibv_query_qp(qb, 0).rq_psn)
    for cur, nxt in ((S.RESET, S.INIT), (S.INIT, S.RTR), (S.RTR, S.RTS)):
        ibv_modify_qp(qa, dataclasses.replace(again, qp_state=nxt), M.STATE | RC_REQUIRED[cur, nxt])


def test_a_reset_cleans_the_qps_completions_and_empties_its_send_queue():
    """mlx5_modify_qp to RESET cleans the QP's completions from its CQs (``mlx5_cq_clean``) and resets its queues'
    indices (``mlx5_init_qp_indices``): the unpolled completions are gone and every slot is free."""
    qa, qb = _connected()
    depth = qa.max_send_wr
    for wr_id in range(depth):
        ibv_post_send(qa, _write(wr_id))
    qa.pd.context.env.run()
    assert len(qa.send_cq.entries) == depth and qa.sq_used == depth
    ibv_modify_qp(qa, QPAttr(qp_state=S.RESET), M.STATE)
    assert not qa.send_cq.entries and qa.sq_used == 0
    _back_to_rts(qa, qb)
    for wr_id in range(depth):
        ibv_post_send(qa, _write(depth + wr_id))
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, _write(2 * depth))
    assert info.value.errno == "ENOMEM"
    qa.pd.context.env.run()
    assert [wc.wr_id for wc in ibv_poll_cq(qa.send_cq, 2 * depth)] == list(range(depth, 2 * depth))


def test_a_work_request_in_flight_when_its_qp_is_reset_completes_nothing():
    qa, qb = _connected()
    ibv_post_send(qa, _write(1))
    ibv_modify_qp(qa, QPAttr(qp_state=S.RESET), M.STATE)
    _back_to_rts(qa, qb)
    ibv_post_send(qa, _write(2))
    qa.pd.context.env.run()
    assert [wc.wr_id for wc in ibv_poll_cq(qa.send_cq, 8)] == [2] and qa.outstanding == 0 and qa.sq_used == 0

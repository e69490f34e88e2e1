"""Atomics and work-request shapes on the verbs API: mlx5's posting errnos, the responder's NAKs as error
completions, 64-bit values in data mode (atomic across QPs), unsignaled work requests, SGE lists and fences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.atomics import atomic_result
from models.nic.device import AtomicCap, DeviceAttrs
from models.nic.nic import NicParams
from models.node import Node
from models.nic.wqe import Access, Opcode, QpState, SendFlags, SendWR, Sge, WcStatus
from models.pcie.link import PcieParams
from models.verbs.qp_state import AhAttr, PathMtu, QPAttr, QpAttrMask
from models.verbs.qp_state import QpAttrMask as M
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send
from sim.core import Environment, VerbsError
from tests.properties import examples

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
FADD, CAS = Opcode.ATOMIC_FETCH_AND_ADD, Opcode.ATOMIC_CMP_AND_SWP


class Bed:
    """Two nodes a and b, a 64 KiB buffer on each, registered with ``access``; QPs made on demand."""

    def __init__(self, data=False, nic=NicParams(), access=ALL, host=HostParams(memlock_limit=1 << 22)):
        self.env = Environment(1, data=data)
        fabric = Fabric(FabricParams())
        self.nodes = [Node.create(n, host, PcieParams(), nic) for n in "ab"]
        self.pds, self.mrs = [], []
        for node in self.nodes:
            fabric.attach(node.nic.name)
            pd = ibv_alloc_pd(ibv_open_device(node, self.env, fabric))
            buf = node.host.allocate("buf", 64 * 1024)
            if data:
                node.host.fill("buf", lambda: np.zeros(64 * 1024, np.uint8))
            self.pds.append(pd)
            self.mrs.append(ibv_reg_mr(pd, buf.addr, buf.size, access))

    def pair(self, depth=8, **caps):
        qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 64), depth, **caps) for pd in self.pds]
        qps[0].connect(qps[1])
        return qps

    def word(self, node: int, offset: int = 0) -> int:
        """The little-endian 64-bit value at ``offset`` of node ``node``'s buffer."""
        return int.from_bytes(self.nodes[node].host.data["buf"][offset:offset + 8].tobytes(), "little")

    def set_word(self, node: int, offset: int, value: int) -> None:
        self.nodes[node].host.data["buf"][offset:offset + 8] = np.frombuffer(value.to_bytes(8, "little"), np.uint8)

    def atomic(self, wr_id, opcode, *, local=0, remote=0, compare_add=0, swap=0, length=8, **kw):
        la, rb = self.mrs
        return SendWR(wr_id, opcode, la.addr + local, length, la.lkey, rb.addr + remote, rb.rkey,
                      compare_add=compare_add, swap=swap, **kw)


def reconnect(qp, peer, path_mtu: PathMtu = PathMtu.MTU_4096, max_dest_rd_atomic: int = 16) -> None:
    """Take ``qp`` through RESET -> INIT -> RTR -> RTS again (perftest's masks), with these RTR attributes."""
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RESET), M.STATE)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, pkey_index=0, port_num=1, qp_access_flags=int(ALL)),
                  M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTR, path_mtu=path_mtu, dest_qp_num=peer.qp_num, rq_psn=0,
                             max_dest_rd_atomic=max_dest_rd_atomic, min_rnr_timer=12, ah_attr=AhAttr()),
                  M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER)
    ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS, timeout=14, retry_cnt=7, rnr_retry=7, sq_psn=0, max_rd_atomic=16),
                  M.STATE | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN | M.MAX_QP_RD_ATOMIC)


def _statuses(bed, qa):
    bed.env.run()
    return [wc.status for wc in ibv_poll_cq(qa.send_cq, 64)]


@pytest.mark.parametrize("make, errno, words", [
    (lambda b, q: b.atomic(0, FADD, sg_list=(Sge(b.mrs[0].addr, 8, b.mrs[0].lkey),) * 2), "ENOMEM", "max_send_sge"),
    (lambda b, q: SendWR(0, Opcode.RDMA_WRITE, b.mrs[0].addr, 65, b.mrs[0].lkey, b.mrs[1].addr, b.mrs[1].rkey,
                         send_flags=SendFlags.INLINE), "ENOMEM", "max_inline_data 64"),
    (lambda b, q: b.atomic(0, CAS, send_flags=SendFlags.INLINE), "EINVAL", "inline data only for sends and writes"),
])
def test_post_send_errno(make, errno, words):
    bed = Bed()
    qa, _ = bed.pair(max_inline_data=64)
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, make(bed, qa))
    assert info.value.errno == errno and words in str(info.value) and qa.outstanding == 0


def test_atomic_on_a_device_without_atomics_is_eopnotsupp():
    bed = Bed(nic=NicParams(device=DeviceAttrs(atomic_cap=AtomicCap.ATOMIC_NONE)))
    qa, _ = bed.pair()
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, bed.atomic(0, FADD))
    assert info.value.errno == "EOPNOTSUPP" and "IBV_ATOMIC_NONE" in str(info.value)


@pytest.mark.parametrize("caps, words", [({"max_send_sge": 31}, "max_sge"), ({"max_inline_data": 221}, "max_inline")])
def test_create_qp_caps_beyond_the_device_are_einval(caps, words):
    bed = Bed()
    with pytest.raises(VerbsError) as info:
        ibv_create_qp(bed.pds[0], ibv_create_cq(bed.pds[0].context, 4), 4, **caps)
    assert info.value.errno == "EINVAL" and words in str(info.value)


def _responder_without(bed, right: Access):
    """A connected pair whose responder QP's qp_access_flags lack ``right``."""
    qa, qb = bed.pair()
    flags = int(ALL & ~Access.LOCAL_WRITE & ~right)
    ibv_modify_qp(qb, QPAttr(qp_access_flags=flags), QpAttrMask.ACCESS_FLAGS)
    return qa, qb


@pytest.mark.parametrize("wr, mr_access, qp_lacks, status", [
    ({"opcode": FADD, "remote": 4}, ALL, None, WcStatus.REM_INV_REQ_ERR),
    ({"opcode": CAS, "remote": 65536 - 4}, ALL, None, WcStatus.REM_INV_REQ_ERR),
    ({"opcode": FADD, "remote": 65536}, ALL, None, WcStatus.REM_ACCESS_ERR),
    ({"opcode": FADD}, ALL & ~Access.REMOTE_ATOMIC, None, WcStatus.REM_ACCESS_ERR),
    ({"opcode": CAS}, ALL, Access.REMOTE_ATOMIC, WcStatus.REM_ACCESS_ERR),
    ({"opcode": Opcode.RDMA_WRITE}, ALL, Access.REMOTE_WRITE, WcStatus.REM_ACCESS_ERR),
    ({"opcode": Opcode.RDMA_READ}, ALL, Access.REMOTE_READ, WcStatus.REM_ACCESS_ERR),
    ({"opcode": FADD}, Access.REMOTE_READ, None, WcStatus.LOC_PROT_ERR),
])
def test_error_completion_table(wr, mr_access, qp_lacks, status):
    bed = Bed(access=mr_access | (Access.LOCAL_WRITE if mr_access & (Access.REMOTE_ATOMIC | Access.REMOTE_WRITE)
                                  else 0))
    if mr_access == Access.REMOTE_READ:  # the local MR lacks LOCAL_WRITE, the remote grants the atomic
        bed.mrs[1] = ibv_reg_mr(bed.pds[1], bed.mrs[1].addr, 4096, ALL)
    qa, qb = _responder_without(bed, qp_lacks) if qp_lacks else bed.pair()
    ibv_post_send(qa, bed.atomic(0, **wr))
    ibv_post_send(qa, bed.atomic(1, FADD))
    assert _statuses(bed, qa) == [status, WcStatus.WR_FLUSH_ERR]
    assert qa.state is QpState.ERR
    assert (qb.state is QpState.ERR) == (status is not WcStatus.LOC_PROT_ERR)


def test_the_same_rights_succeed():
    bed = Bed()
    qa, _ = bed.pair()
    for k, opcode in enumerate((FADD, CAS, Opcode.RDMA_WRITE, Opcode.RDMA_READ)):
        ibv_post_send(qa, bed.atomic(k, opcode, remote=8 * k))
    bed.env.run()
    wcs = ibv_poll_cq(qa.send_cq, 8)
    assert [(w.status, w.byte_len) for w in wcs] == [(WcStatus.SUCCESS, 8)] * 4


@pytest.mark.parametrize("opcode, old, compare_add, swap, new", [
    (FADD, 5, 7, 0, 12),
    (FADD, 2**64 - 1, 2, 0, 1),
    (CAS, 5, 5, 9, 9),
    (CAS, 5, 6, 9, 5),
    (CAS, 0x0102030405060708, 0x0102030405060708, 2**63, 2**63),
])
def test_data_mode_atomics_return_the_original_and_leave_the_result(opcode, old, compare_add, swap, new):
    bed = Bed(data=True)
    qa, _ = bed.pair()
    bed.set_word(1, 64, old)
    bed.set_word(0, 0, 0xDEAD)
    ibv_post_send(qa, bed.atomic(0, opcode, remote=64, compare_add=compare_add, swap=swap, length=4))
    assert _statuses(bed, qa) == [WcStatus.SUCCESS]
    assert atomic_result(opcode, old, compare_add, swap) == new
    assert (bed.word(1, 64), bed.word(0, 0)) == (new, old)  # 8 bytes land whatever the SGE's length (mlx5)
    assert bed.nodes[1].host.data["buf"][64:72].tobytes() == new.to_bytes(8, "little")


def test_fetch_and_add_from_two_qps_on_one_address_is_atomic():
    bed = Bed(data=True)
    (qa, _), (qc, _) = bed.pair(depth=64), bed.pair(depth=64)
    n = 40
    for k in range(n):  # each result lands in its own slot of the requester's buffer
        ibv_post_send(qa, bed.atomic(k, FADD, local=8 * k, compare_add=1))
        ibv_post_send(qc, bed.atomic(k, FADD, local=8 * (n + k), compare_add=1000))
    bed.env.run()
    assert [w.status for q in (qa, qc) for w in ibv_poll_cq(q.send_cq, 64)] == [WcStatus.SUCCESS] * 2 * n
    assert bed.word(1) == n * 1001
    seen = sorted(bed.word(0, 8 * k) for k in range(2 * n))
    # every add saw the sum of the adds served before it: the originals are the running sums in service order
    increments = np.diff([*seen, n * 1001])
    assert sorted(increments.tolist()) == sorted([1] * n + [1000] * n)


def test_compare_and_swap_from_two_qps_lets_one_win():
    bed = Bed(data=True)
    (qa, _), (qc, _) = bed.pair(), bed.pair()
    ibv_post_send(qa, bed.atomic(0, CAS, local=0, compare_add=0, swap=1))
    ibv_post_send(qc, bed.atomic(0, CAS, local=8, compare_add=0, swap=2))
    bed.env.run()
    winner = bed.word(1)
    assert winner in (1, 2) and sorted((bed.word(0, 0), bed.word(0, 8))) == [0, winner]


def test_unsignaled_work_requests_hold_their_slots_until_a_signaled_completion():
    bed = Bed()
    qa, _ = bed.pair(depth=4, sq_sig_all=False)
    for k in range(3):
        ibv_post_send(qa, bed.atomic(k, Opcode.RDMA_WRITE))
    bed.env.run()
    assert ibv_poll_cq(qa.send_cq, 8) == [] and qa.outstanding == 3 and qa.unsignaled == 3
    ibv_post_send(qa, bed.atomic(3, Opcode.RDMA_WRITE, send_flags=SendFlags.SIGNALED))
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, bed.atomic(4, Opcode.RDMA_WRITE))
    assert info.value.errno == "ENOMEM" and "unsignaled" in str(info.value)
    bed.env.run()
    assert [w.wr_id for w in ibv_poll_cq(qa.send_cq, 8)] == [3] and qa.outstanding == 0


def test_a_send_queue_slot_is_free_once_its_completion_is_polled():
    """mlx5 advances the send queue's tail when it polls a send completion (``mlx5_poll_one``), not when the CQE
    lands: a full queue whose completions sit unpolled in the CQ refuses the next post."""
    bed = Bed()
    qa, _ = bed.pair(depth=2)
    for k in range(2):
        ibv_post_send(qa, bed.atomic(k, Opcode.RDMA_WRITE))
    bed.env.run()
    assert qa.outstanding == 0 and len(qa.send_cq.entries) == 2
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, bed.atomic(2, Opcode.RDMA_WRITE))
    assert info.value.errno == "ENOMEM" and "2 of them completed but not yet polled" in str(info.value)
    assert [w.wr_id for w in ibv_poll_cq(qa.send_cq, 1)] == [0]
    ibv_post_send(qa, bed.atomic(2, Opcode.RDMA_WRITE))  # the polled completion's slot
    with pytest.raises(VerbsError):
        ibv_post_send(qa, bed.atomic(3, Opcode.RDMA_WRITE))
    bed.env.run()
    assert [w.wr_id for w in ibv_poll_cq(qa.send_cq, 8)] == [1, 2] and qa.sq_used == 0


def test_a_signaled_completion_frees_the_unsignaled_slots_before_it_when_polled():
    bed = Bed()
    qa, _ = bed.pair(depth=3, sq_sig_all=False)
    for k in range(2):
        ibv_post_send(qa, bed.atomic(k, Opcode.RDMA_WRITE))
    ibv_post_send(qa, bed.atomic(2, Opcode.RDMA_WRITE, send_flags=SendFlags.SIGNALED))
    bed.env.run()
    assert qa.outstanding == 0 and qa.sq_used == 3
    assert [w.wr_id for w in ibv_poll_cq(qa.send_cq, 8)] == [2] and qa.sq_used == 0


def test_an_unsignaled_error_still_completes():
    bed = Bed()
    qa, _ = bed.pair(sq_sig_all=False)
    ibv_post_send(qa, bed.atomic(0, FADD, remote=3))
    assert _statuses(bed, qa) == [WcStatus.REM_INV_REQ_ERR] and qa.outstanding == 0


def test_sge_lists_gather_and_scatter_in_order():
    bed = Bed(data=True)
    qa, _ = bed.pair(max_send_sge=3)
    la, rb = bed.mrs
    a, b = bed.nodes[0].host.data["buf"], bed.nodes[1].host.data["buf"]
    a[:300] = np.arange(300) % 251
    pieces = (Sge(la.addr + 200, 100, la.lkey), Sge(la.addr, 0, la.lkey + 1), Sge(la.addr + 50, 50, la.lkey))
    ibv_post_send(qa, SendWR(0, Opcode.RDMA_WRITE, 0, 0, 0, rb.addr, rb.rkey, sg_list=pieces))
    assert _statuses(bed, qa) == [WcStatus.SUCCESS]  # the zero-length SGE's bad key is never looked at
    assert b[:150].tolist() == [*a[200:300].tolist(), *a[50:100].tolist()]
    b[1000:1150] = 7
    back = (Sge(la.addr + 4000, 120, la.lkey), Sge(la.addr + 5000, 30, la.lkey))
    ibv_post_send(qa, SendWR(1, Opcode.RDMA_READ, 0, 0, 0, rb.addr + 1000, rb.rkey, sg_list=back))
    assert _statuses(bed, qa) == [WcStatus.SUCCESS]
    assert (a[4000:4120] == 7).all() and (a[5000:5030] == 7).all() and a[4120] == 0


def test_each_sge_costs_its_own_dma_read():
    def completion(sges):
        bed = Bed()
        qa, _ = bed.pair(max_send_sge=4)
        la, rb = bed.mrs
        each = 4096 // sges
        wr = SendWR(0, Opcode.RDMA_WRITE, 0, 0, 0, rb.addr, rb.rkey,
                    sg_list=tuple(Sge(la.addr + 8192 * k, each, la.lkey) for k in range(sges)))
        ibv_post_send(qa, wr)
        bed.env.run()
        (wc,) = ibv_poll_cq(qa.send_cq, 1)
        return wc.completed_ps - wc.posted_ps

    one, four = completion(1), completion(4)
    assert one < four  # four read requests and round trips against one


def test_a_fenced_write_waits_for_the_earlier_read():
    def landed(fence):
        bed = Bed()
        qa, _ = bed.pair()
        ibv_post_send(qa, bed.atomic(0, Opcode.RDMA_READ, length=65536 - 8192))
        ibv_post_send(qa, bed.atomic(1, Opcode.RDMA_WRITE, length=8, remote=65536 - 8,
                                     send_flags=SendFlags.FENCE if fence else 0))
        bed.env.run()
        read, write = ibv_poll_cq(qa.send_cq, 2)
        return read.completed_ps, write.completed_ps

    read, fenced = landed(True)
    _, unfenced = landed(False)
    assert unfenced < fenced and fenced > read


def test_the_responders_max_dest_rd_atomic_limits_outstanding_atomics():
    def span(dest):
        bed = Bed()
        qa, qb = bed.pair(depth=32)
        if dest is not None:
            reconnect(qb, qa, max_dest_rd_atomic=dest)
        for k in range(32):
            ibv_post_send(qa, bed.atomic(k, FADD))
        bed.env.run()
        wcs = ibv_poll_cq(qa.send_cq, 32)
        assert [w.status for w in wcs] == [WcStatus.SUCCESS] * 32
        return wcs[-1].completed_ps - wcs[0].posted_ps

    many, one, two = span(None), span(1), span(2)
    assert many < two < one and one / two == pytest.approx(2, rel=0.1)


@pytest.mark.parametrize("part", [4129, 4123])
def test_an_atomic_on_an_odp_target_faults_it_in_where_the_device_has_odp_atomics(part):
    """The target is registered before the CPU touches it (so the registration's snapshot maps nothing). A
    ConnectX-7 reports IBV_ODP_SUPPORT_ATOMIC in rc_odp_caps and takes the fault (RNR NAK, then success); a
    ConnectX-6 does not (mlx5 ``internal_fill_odp_caps`` copies ``rc_odp_caps.atomic`` from the firmware), so its
    NIC raises no fault for the atomic: the responder NAKs it, REM_ACCESS_ERR, as an access the translation
    refuses (``mlx5_ib_mr_initiator_pfault_handler`` of Linux 4.x: "ODP fault on QP of an unsupported opcode")."""
    bed = Bed(data=True, nic=NicParams(device=DeviceAttrs(vendor_part_id=part)),
              host=HostParams(memlock_limit=1 << 22, prefaulted=False))
    node = bed.nodes[1]
    odp = node.host.allocate("odp", 4096)
    bed.mrs[1] = ibv_reg_mr(bed.pds[1], odp.addr, 4096, ALL | Access.ON_DEMAND)
    node.host.fill("odp", lambda: np.zeros(4096, np.uint8))
    qa, _ = bed.pair()
    for k in range(3):
        ibv_post_send(qa, bed.atomic(k, FADD, local=8 * k, compare_add=5))
    if part == 4123:
        assert _statuses(bed, qa) == [WcStatus.REM_ACCESS_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR]
        assert bed.mrs[1].backing.faults == 0 and int.from_bytes(node.host.data["odp"][:8].tobytes(), "little") == 0
        return
    assert _statuses(bed, qa) == [WcStatus.SUCCESS] * 3
    assert qa.rnr_naks >= 1 and bed.mrs[1].backing.faults >= 1
    assert int.from_bytes(node.host.data["odp"][:8].tobytes(), "little") == 15
    assert sorted(bed.word(0, 8 * k) for k in range(3)) == [0, 5, 10]


@settings(max_examples=examples(12), deadline=None)
@given(st.lists(st.lists(st.integers(1, 2**40), min_size=1, max_size=6), min_size=2, max_size=3))
def test_fetch_and_adds_from_several_qps_are_serialized_in_each_qps_order(adds):
    """Linearizable: the originals returned are the running sums of one order of all the adds, and in that
    order each QP's adds come in the order it posted them (an RC responder executes a QP's requests in order)."""
    bed = Bed(data=True)
    slot = 0
    posted = []
    for qp_adds in adds:
        qa, _ = bed.pair(depth=8)
        for k, add in enumerate(qp_adds):
            ibv_post_send(qa, bed.atomic(k, FADD, local=8 * slot, compare_add=add))
            posted.append((slot, add))
            slot += 1
    bed.env.run()
    assert bed.word(1) == sum(sum(a) for a in adds)
    order = sorted(posted, key=lambda p: bed.word(0, 8 * p[0]))
    running = 0
    for s, add in order:
        assert bed.word(0, 8 * s) == running
        running += add
    first = 0
    for qp_adds in adds:  # each QP's slots appear in posting order within the service order
        slots = list(range(first, first + len(qp_adds)))
        served = [s for s, _ in order if s in slots]
        assert served == slots
        first += len(qp_adds)

"""Random sequences of creating, closing and using the API's objects: never a crash, closing an object closes the
objects that use it first (pyverbs' ``close_weakrefs``), a closed object refuses use, pinned pages follow the MRs, and a
QP's posted receives are held until a SEND consumes one (its receive CQ gets it) or the QP goes."""

from __future__ import annotations

from collections import deque

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from sim.api import (CQ, MR, PD, QP, SGE, SRQ, AHAttr, Access, Context, ProtocolError, QPAttr, QPCap, QPInitAttr,
                     RecvWR, SendWR, SrqAttr, SrqInitAttr, Testbed, VerbsError, WcOpcode, WcStatus)
from tests.properties import examples

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE


def target_depth(target) -> int:
    """Receives the QP's own queue or the SRQ holds at most."""
    return target.srq.depth if isinstance(target, SRQ) else target.qp.rq.depth


class ApiLifetimes(RuleBasedStateMachine):
    """One context on node a; PDs, CQs, SRQs, MRs and QPs (with a receive CQ of their own or not, on an SRQ or
    not) created and closed in any order; receives posted to them and consumed by SENDs from node b."""

    pds, cqs, srqs, mrs, qps = Bundle("pds"), Bundle("cqs"), Bundle("srqs"), Bundle("mrs"), Bundle("qps")

    def __init__(self) -> None:
        super().__init__()
        self.bed = Testbed(data=False)
        self.ctx = Context(self.bed, "a")
        self.users: dict[object, set] = {}
        """Each open PD, CQ or SRQ -> the open objects that use it."""
        self.peer_ctx = Context(self.bed, "b")
        peer_pd = PD(self.peer_ctx)
        self.peer_cq = CQ(self.peer_ctx, 256)
        self.peer_mr = MR(peer_pd, 4096, RW)
        self.peer_pd = peer_pd
        self.posted: dict[object, deque] = {}
        """Each QP or SRQ -> the MRs of the receives posted to it and not yet consumed, oldest first."""
        self.broken: set = set()
        """QPs in the error state (a SEND landed in a receive whose MR was closed)."""

    def _uses(self, *used) -> None:
        for obj in used:
            self.users.setdefault(obj, set())

    def _refused_on_closed(self, make, *parents) -> bool:
        """True (after checking the ProtocolError) when a parent is closed and ``make`` must be refused."""
        if not any(parent.closed for parent in parents):
            return False
        try:
            make()
            raise AssertionError("created an object on a closed one")
        except ProtocolError:
            return True

    @rule(target=pds)
    def alloc_pd(self):
        pd = PD(self.ctx)
        self._uses(pd)
        return pd

    @rule(target=cqs)
    def create_cq(self):
        cq = CQ(self.ctx, 64)
        self._uses(cq)
        return cq

    @rule(target=srqs, pd=pds)
    def create_srq(self, pd):
        make = lambda: SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8)))  # noqa: E731
        if self._refused_on_closed(make, pd):
            return None
        srq = make()
        self.users[pd].add(srq)
        self._uses(srq)
        self.posted[srq] = deque()
        return srq

    @rule(target=mrs, pd=pds, pages=st.integers(1, 4))
    def reg_mr(self, pd, pages):
        make = lambda: MR(pd, pages * 4096, RW)  # noqa: E731
        if self._refused_on_closed(make, pd):
            return None
        mr = make()
        self.users[pd].add(mr)
        return mr

    @rule(target=qps, pd=pds, scq=cqs, rcq=st.one_of(st.none(), cqs), srq=st.one_of(st.none(), srqs))
    def create_qp(self, pd, scq, rcq, srq):
        parents = [p for p in (pd, scq, rcq, srq) if p is not None]
        make = lambda: QP(pd, QPInitAttr(scq=scq, rcq=rcq, srq=srq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))  # noqa
        if self._refused_on_closed(make, *parents):
            return None
        qp = make()
        peer = QP(self.peer_pd, QPInitAttr(scq=self.peer_cq, cap=QPCap(max_send_wr=64)))
        for one, other, ctx in ((qp, peer, self.peer_ctx), (peer, qp, self.ctx)):
            one.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=other.qp_num, ah_attr=AHAttr(dlid=ctx.lid),
                              min_rnr_timer=1, timeout=14, retry_cnt=7, rnr_retry=7))
        qp.peer, qp.rcq, qp.srq = peer, rcq or scq, srq
        for parent in parents:
            self.users[parent].add(qp)
        self.posted[qp] = deque()
        return qp

    @rule(qp=qps, mr=mrs)
    def post_recv(self, qp, mr):
        if qp is None or mr is None:
            return
        target = qp.srq if qp.srq is not None else qp
        try:
            target.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
        except ProtocolError:
            assert qp.closed or target.closed
            return
        except VerbsError as err:
            assert err.errno == "ENOMEM" and len(self.posted[target]) == target_depth(target)
            return
        if qp in self.broken and target is qp:               # a QP in the error state flushes it at once
            (wc,) = self._poll(qp.rcq, 1)
            assert wc.status is WcStatus.WR_FLUSH_ERR
        else:
            self.posted[target].append(mr)

    @precondition(lambda self: any(isinstance(qp, QP) and not qp.closed for qp in self.posted))
    @rule(data=st.data())
    def send_to(self, data):
        open_qps = [qp for qp in self.posted if isinstance(qp, QP) and not qp.closed and qp not in self.broken]
        if not open_qps:
            return
        qp = data.draw(st.sampled_from(open_qps))
        target = qp.srq if qp.srq is not None else qp
        if not self.posted[target]:
            return                                   # without a receive the SEND would wait on RNR NAKs
        qp.peer.post_send(SendWR(num_sge=1, sg=[SGE(self.peer_mr.buf, 16, self.peer_mr.lkey)]))
        mr = self.posted[target].popleft()  # a receive into a deregistered MR, or one of another PD than the QP's
        landed = not mr.closed and mr.pd is qp.pd  # (rxe_mr.c lookup_mr: mr_pd(mr) != pd): protection error
        (peer_wc,) = self._poll(self.peer_cq, 1)
        (wc,) = self._poll(qp.rcq, 1)
        assert wc.opcode is WcOpcode.RECV and wc.qp_num == qp.qp_num
        if landed:
            assert peer_wc.status is wc.status is WcStatus.SUCCESS and wc.byte_len == 16
            assert wc.src_qp == qp.peer.qp_num
            return
        assert (peer_wc.status, wc.status) == (WcStatus.REM_OP_ERR, WcStatus.LOC_PROT_ERR)
        self.broken.add(qp)
        if target is qp:                             # the QP's own receives are flushed, an SRQ's stay
            flushed = self._poll(qp.rcq, len(self.posted[qp])) if self.posted[qp] else []
            assert all(f.status is WcStatus.WR_FLUSH_ERR for f in flushed)
            self.posted[qp].clear()

    def _poll(self, cq, n):
        wcs = []
        while len(wcs) < n:
            got = cq.poll(n - len(wcs), timeout="10ms")[1]
            assert got, "a completion did not come"
            wcs += got
        return wcs

    @rule(obj=st.one_of(pds, cqs, srqs, mrs, qps))
    def close(self, obj):
        """pyverbs' ``close``: the object and, first, every open object that uses it, transitively."""
        if obj is None:
            return
        gone, todo = set(), [obj]
        while todo:
            one = todo.pop()
            if one not in gone and not one.closed:
                gone.add(one)
                todo += self.users.get(one, ())
        obj.close()
        assert all(one.closed for one in gone) and obj.closed
        for one in gone:
            for users in self.users.values():
                users.discard(one)
            if isinstance(one, QP):
                one.peer.close()

    @invariant()
    def pinned_pages_are_the_open_mrs(self):
        open_mrs = [u for users in self.users.values() for u in users if isinstance(u, MR)]
        assert self.ctx.ctx.node.host.pinned_pages == sum(mr.length // 4096 for mr in open_mrs)

    @invariant()
    def open_queues_hold_their_posted_receives(self):
        for target, mrs in self.posted.items():
            if not target.closed:
                queue = target.srq if isinstance(target, SRQ) else target.qp.rq
                assert len(queue.posted) == len(mrs)

    def teardown(self):
        self.ctx.close()
        assert self.ctx.ctx.node.host.pinned_pages == 0
        assert all(obj.closed for obj in self.users)
        assert all(pd.pd.usecnt == 0 for pd in self.users if isinstance(pd, PD))


TestApiLifetimes = ApiLifetimes.TestCase
TestApiLifetimes.settings = settings(max_examples=examples(80), stateful_step_count=50, deadline=None)

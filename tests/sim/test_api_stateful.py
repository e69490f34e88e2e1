"""Random sequences of creating, closing and using the API's objects: never a crash, an object closes exactly when
nothing uses it (else EBUSY and it stays open), a closed object refuses use, and pinned pages follow the MRs."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from sim.api import CQ, MR, PD, QP, Access, Context, ProtocolError, QPInitAttr, Testbed, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE


class ApiLifetimes(RuleBasedStateMachine):
    """One context on node a; PDs, CQs, MRs and QPs created and closed in any order."""

    pds, cqs, mrs, qps = Bundle("pds"), Bundle("cqs"), Bundle("mrs"), Bundle("qps")

    def __init__(self) -> None:
        super().__init__()
        self.bed = Testbed(data=False)
        self.ctx = Context(self.bed, "a")
        self.users: dict[object, set] = {}
        """Each open PD or CQ -> the open objects that use it."""

    def _uses(self, *used) -> None:
        for obj in used:
            self.users.setdefault(obj, set())

    @rule(target=pds)
    def alloc_pd(self):
        pd = PD(self.ctx)
        self._uses(pd)
        return pd

    @rule(target=cqs)
    def create_cq(self):
        cq = CQ(self.ctx, 8)
        self._uses(cq)
        return cq

    @rule(target=mrs, pd=pds, pages=st.integers(1, 4))
    def reg_mr(self, pd, pages):
        if pd.closed:
            try:
                MR(pd, pages * 4096, RW)
                raise AssertionError("registered on a closed PD")
            except ProtocolError:
                return None
        mr = MR(pd, pages * 4096, RW)
        self.users[pd].add(mr)
        return mr

    @rule(target=qps, pd=pds, cq=cqs)
    def create_qp(self, pd, cq):
        if pd.closed or cq.closed:
            try:
                QP(pd, QPInitAttr(scq=cq))
                raise AssertionError("created a QP on a closed PD or CQ")
            except ProtocolError:
                return None
        qp = QP(pd, QPInitAttr(scq=cq))
        self.users[pd].add(qp)
        self.users[cq].add(qp)
        return qp

    @rule(obj=st.one_of(pds, cqs, mrs, qps))
    def close(self, obj):
        if obj is None:
            return
        busy = bool(self.users.get(obj)) and not obj.closed
        try:
            obj.close()
            assert not busy, f"{type(obj).__name__} closed while in use"
        except VerbsError as err:
            assert busy and err.errno == "EBUSY" and not obj.closed
            return
        for users in self.users.values():
            users.discard(obj)

    @invariant()
    def pinned_pages_are_the_open_mrs(self):
        open_mrs = [u for users in self.users.values() for u in users if isinstance(u, MR)]
        assert self.ctx.ctx.node.host.pinned_pages == sum(mr.length // 4096 for mr in open_mrs)

    def teardown(self):
        self.ctx.close()
        assert self.ctx.ctx.node.host.pinned_pages == 0
        assert all(obj.closed for obj in self.users)


TestApiLifetimes = ApiLifetimes.TestCase
TestApiLifetimes.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)

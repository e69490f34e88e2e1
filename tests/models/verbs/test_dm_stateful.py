"""Random sequences of ``ibv_alloc_dm``, ``ibv_reg_dm_mr``, ``ibv_dereg_mr`` and ``ibv_free_dm`` on one ConnectX-6
(32 MEMIC pages): each allocation holds ``DIV_ROUND_UP(roundup(length, 64), PAGE_SIZE)`` pages of its own
(drivers/infiniband/hw/mlx5/dm.c ``handle_alloc_dm_memic``, ``mlx5_cmd_alloc_memic``), ENOMEM comes only when no run of
free pages is long enough, and a free succeeds exactly when no MR holds the memory (``uverbs_free_dm``: EBUSY)."""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.nic.memic import PAGE_SIZE
from models.nic.nic import NicParams
from models.nic.wqe import Access
from models.presets import NIC_PRESETS
from models.verbs.device import ibv_alloc_pd
from models.verbs.dm import ibv_alloc_dm, ibv_free_dm
from models.verbs.dm_mr import ibv_reg_dm_mr
from models.verbs.mr import ibv_dereg_mr
from sim.core import VerbsError
from tests.models.verbs.test_device_query import _context
from tests.properties import examples

ZB = Access.ZERO_BASED | Access.LOCAL_WRITE


def pages_of(length: int) -> int:
    return -(-(-(-length // 64) * 64) // PAGE_SIZE)


class DeviceMemory(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.ctx = _context(NicParams(**NIC_PRESETS["connectx6"]))
        self.pd = ibv_alloc_pd(self.ctx)
        self.pages = self.ctx.node.nic.params.max_dm_size // PAGE_SIZE
        self.live = []   # allocations
        self.mrs = []

    def _longest_free_run(self) -> int:
        taken = [False] * self.pages
        for dm in self.live:
            for page in range(dm.offset // PAGE_SIZE, dm.offset // PAGE_SIZE + pages_of(dm.length)):
                taken[page] = True
        best = run = 0
        for used in taken:
            run = 0 if used else run + 1
            best = max(best, run)
        return best

    @rule(length=st.integers(1, 3 * PAGE_SIZE))
    def alloc(self, length):
        fits = self._longest_free_run() >= pages_of(length)
        try:
            self.live.append(ibv_alloc_dm(self.ctx, length))
        except VerbsError as err:
            assert err.errno == "ENOMEM" and not fits
        else:
            assert fits

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def register(self, data):
        dm = data.draw(st.sampled_from(self.live))
        self.mrs.append(ibv_reg_dm_mr(self.pd, dm, 0, dm.length, ZB))

    @precondition(lambda self: self.mrs)
    @rule(data=st.data())
    def deregister(self, data):
        mr = data.draw(st.sampled_from(self.mrs))
        self.mrs.remove(mr)
        ibv_dereg_mr(mr)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        dm = data.draw(st.sampled_from(self.live))
        held = any(mr.dm is dm for mr in self.mrs)
        try:
            ibv_free_dm(dm)
        except VerbsError as err:
            assert err.errno == "EBUSY" and held
        else:
            assert not held
            self.live.remove(dm)

    @invariant()
    def allocations_hold_their_own_pages_inside_the_bar(self):
        spans = sorted((dm.offset // PAGE_SIZE, dm.offset // PAGE_SIZE + pages_of(dm.length)) for dm in self.live)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
        assert all(0 <= start and end <= self.pages for start, end in spans)
        assert sum(self.ctx.node.nic.memic.used) == sum(end - start for start, end in spans)

    @invariant()
    def use_counts_are_the_live_mrs(self):
        assert all(dm.usecnt == sum(mr.dm is dm for mr in self.mrs) for dm in self.live)


TestDeviceMemory = DeviceMemory.TestCase
TestDeviceMemory.settings = settings(max_examples=examples(100), stateful_step_count=40, deadline=None)

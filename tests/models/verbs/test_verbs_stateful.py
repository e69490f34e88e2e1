"""Random sequences of verbs and exporter calls on one dma-buf, on kernel 6.13 or 6.18: every call succeeds as a
reference model predicts or raises the errno the kernel would, and the invariants hold after every step. A move
that lands between a deregistration's mkey revoke and its umem release zaps the freed mkey on 6.13 (an invariant
violation) and finds no MR on 6.18."""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.dmabuf import DmaBufCore, KernelConfig, MovableExporter, Placement, dma_buf_fd
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams
from models.presets import NIC_PRESETS
from models.node import Node
from models.pcie.link import PcieParams
from models.nic.wqe import Access, Opcode, SendWR, WcStatus
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from models.verbs.dmabuf import MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, ibv_reg_dmabuf_mr, mlx5dv_reg_dmabuf_mr
from sim.core import Environment, InvariantViolation, VerbsError
from tests.properties import examples

SIZE = 256 * 1024
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


CX8 = NicParams(**NIC_PRESETS["connectx8"])
"""A ConnectX-8: its data-direct function registers the pinned dma-buf MRs (``mlx5_data_direct_pci_table``)."""


class VerbsOnDmabuf(RuleBasedStateMachine):
    @initialize(kernel=st.sampled_from(["6.13", "6.18"]))
    def setup(self, kernel):
        self.kernel = KernelConfig(move_notify_enabled=True, version=kernel)
        self.env = Environment(1)
        fabric = Fabric(FabricParams())
        self.nodes, self.pds = [], []
        for name in "ab":
            node = Node.create(name, HostParams(poll_period_ps=0), PcieParams(), CX8)  # data direct for pinned
            node.kernel = DmaBufCore(self.env, self.kernel)
            fabric.attach(node.nic.name)
            self.nodes.append(node)
            self.pds.append(ibv_alloc_pd(ibv_open_device(node, self.env, fabric)))
        self.gpu = MovableExporter(self.nodes[0].kernel, SIZE, name="a.gpu0")
        self.fd = dma_buf_fd(self.gpu.dmabuf, self.nodes[0].fds)
        self.fd_open = True
        buf = self.nodes[1].host.allocate("dst", SIZE)
        self.remote = ibv_reg_mr(self.pds[1], buf.addr, SIZE, RW)
        self.live = {}  # lkey -> (mr, pinned)
        self.dead = []
        self.generation_at_pin = None

    def _settle(self):
        self.env.run(until=max(self.env.now, *(n.kernel.now_ps(c) for n in self.nodes
                                                for c in (n.nic.name, "a.gpu0", "process"))) + 1)

    @rule(pinned=st.booleans(), offset=st.sampled_from([0, 4096, SIZE - 4096, SIZE]),
          length=st.sampled_from([0, 4096, 8192, SIZE]), fd_kind=st.sampled_from(["ours", "bad", "plain"]))
    def register(self, pinned, offset, length, fd_kind):
        fd = {"ours": self.fd, "bad": 77, "plain": None}[fd_kind]
        if fd is None:
            fd = self.nodes[0].fds.open("file.txt")
        args = (self.pds[0], offset, length, 0x10_0000 + offset, fd, RW)
        if fd_kind == "ours" and not self.fd_open:
            expected = "EBADF"
        elif fd_kind == "bad":
            expected = "EBADF"
        elif fd_kind == "plain":
            expected = "EINVAL"
        elif offset + length > SIZE or length == 0:
            expected = "EINVAL"
        else:
            expected = None
        try:
            mr = (mlx5dv_reg_dmabuf_mr(*args, MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT) if pinned
                  else ibv_reg_dmabuf_mr(*args))
        except VerbsError as err:
            assert err.errno == expected, (err, expected)
            return
        finally:
            if fd_kind == "plain":
                self.nodes[0].fds.close(fd)
        assert expected is None
        self.live[mr.lkey] = (mr, pinned)
        if pinned and self.generation_at_pin is None:
            self.generation_at_pin = self.gpu.dmabuf.generation
        self._settle()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def deregister(self, data):
        lkey = data.draw(st.sampled_from(sorted(self.live)))
        mr, _ = self.live.pop(lkey)
        assert ibv_dereg_mr(mr) >= 0
        self.dead.append(mr)
        if not any(p for _, p in self.live.values()):
            self.generation_at_pin = None
        self._settle()

    @precondition(lambda self: any(not p for _, p in self.live.values()))
    @rule(data=st.data())
    def deregister_while_the_exporter_moves(self, data):
        """ibv_dereg_mr of a dynamic MR whose exporter moves the buffer between the mkey revoke and the umem
        release."""
        lkey = data.draw(st.sampled_from(sorted(k for k, (_, p) in self.live.items() if not p)))
        mr, _ = self.live.pop(lkey)
        others = [m for m, _ in self.live.values()]
        pinned = any(p for _, p in self.live.values())
        revoke, before, outcome = mr.backing.revoke_mkey, self.gpu.dmabuf.generation, []
        zaps, mapped = mr.backing.invalidations, mr.backing.umem.sgt is not None  # unmapped: the callback returns

        def revoke_then_move():
            revoke()
            try:
                self.gpu.move(Placement.SYSTEM if self.gpu.dmabuf.placement is Placement.VRAM else Placement.VRAM)
            except (VerbsError, InvariantViolation) as err:
                outcome.append(err)

        mr.backing.revoke_mkey = revoke_then_move
        assert ibv_dereg_mr(mr) >= 0  # the race never surfaces as an error of the deregistration
        self.dead.append(mr)
        assert mr.backing.invalidations == zaps and mr.backing.umem.attach not in self.gpu.dmabuf.attachments
        if pinned:
            assert [getattr(e, "errno", None) for e in outcome] == ["EBUSY"]
        elif mapped and self.kernel.behaviour.mlx5_dereg_races_invalidate:
            assert len(outcome) == 1 and isinstance(outcome[0], InvariantViolation)
            assert "already revoked" in str(outcome[0]) and self.gpu.dmabuf.generation == before
        else:
            assert outcome == [] and self.gpu.dmabuf.generation == before + 1
            assert all(not m.backing.translation_valid for m in others)
        self._settle()

    @precondition(lambda self: self.dead)
    @rule()
    def deregister_twice(self):
        try:
            ibv_dereg_mr(self.dead[-1])
            raise AssertionError("second dereg succeeded")
        except VerbsError as err:
            assert err.errno == "EINVAL"

    @precondition(lambda self: self.fd_open)
    @rule()
    def close_fd(self):
        self.nodes[0].fds.close(self.fd)
        self.fd_open = False

    @precondition(lambda self: not self.gpu.dmabuf.released)
    @rule()
    def evict(self):
        pinned = any(p for _, p in self.live.values())
        before = self.gpu.dmabuf.generation
        try:
            self.gpu.move(Placement.SYSTEM if self.gpu.dmabuf.placement is Placement.VRAM else Placement.VRAM)
        except VerbsError as err:
            assert pinned and err.errno == "EBUSY"
            return
        assert not pinned and self.gpu.dmabuf.generation == before + 1
        for mr, _ in self.live.values():
            assert not mr.backing.translation_valid
        self._settle()

    @precondition(lambda self: self.live or self.dead)
    @rule(data=st.data())
    def write_from_gpu(self, data):
        mr = data.draw(st.sampled_from([m for m, _ in self.live.values()] + self.dead))
        qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 8), 4) for pd in self.pds]
        qps[0].connect(qps[1])
        ibv_post_send(qps[0], SendWR(0, Opcode.RDMA_WRITE, mr.iova, 4096, mr.lkey, self.remote.iova,
                                     self.remote.rkey))
        self.env.run()
        (wc,) = ibv_poll_cq(qps[0].send_cq, 1)
        assert wc.status is (WcStatus.SUCCESS if mr.lkey in self.live else WcStatus.LOC_PROT_ERR)

    @invariant()
    def references_are_counted(self):
        expected = int(self.fd_open) + len(self.live)
        assert self.gpu.dmabuf.refcount == expected or (expected == 0 and self.gpu.dmabuf.released)
        assert self.gpu.release_calls == (1 if expected == 0 else 0)

    @invariant()
    def pinned_buffer_never_moved(self):
        if self.generation_at_pin is not None:
            assert self.gpu.dmabuf.generation == self.generation_at_pin

    @invariant()
    def attachments_match_live_mrs(self):
        if not self.gpu.dmabuf.released:
            assert len(self.gpu.dmabuf.attachments) == len(self.live)
            assert self.gpu.pin_count == sum(1 for _, p in self.live.values() if p)


TestVerbsOnDmabuf = VerbsOnDmabuf.TestCase
TestVerbsOnDmabuf.settings = settings(max_examples=examples(150), stateful_step_count=30, deadline=None)

"""dma-buf MRs end to end: registration checks, move_notify, re-fault, pinned mode, the broken importer."""

import pytest

from models.dmabuf import DmaBufCore, KernelConfig, MovableExporter, Placement, StaticExporter, dma_buf_fd
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import OdpParams
from models.nic.nic import NicParams
from models.node import Node
from models.pcie.link import PcieParams
from models.nic.wqe import Access, Opcode, SendWR, WcStatus
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr, ibv_rereg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from models.verbs.dmabuf import ibv_reg_dmabuf_mr
from models.ib.umem_dmabuf import ib_umem_dmabuf_release
from models.versions import DEFAULT_KERNEL
from sim.core import Environment, InvariantViolation, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 1 << 20


class Bed:
    """Node a (host memory) writes into node b, whose buffer is a dma-buf of a GPU-like exporter."""

    def __init__(self, *, dmabuf="dynamic", odp=OdpParams(), move_notify=True, exporter="movable",
                 memlock=None, kernel=DEFAULT_KERNEL, trace=False):
        self.env = Environment(1, trace=trace)
        fabric = Fabric(FabricParams())
        self.nodes, self.pds = [], []
        for name in "ab":
            limit = memlock if name == "b" else None
            node = Node.create(name, HostParams(poll_period_ps=0, memlock_limit=limit), PcieParams(),
                               NicParams(odp=odp, dmabuf=dmabuf))
            node.kernel = DmaBufCore(self.env, KernelConfig(move_notify_enabled=move_notify, version=kernel))
            fabric.attach(node.nic.name)
            self.nodes.append(node)
            self.pds.append(ibv_alloc_pd(ibv_open_device(node, self.env, fabric)))
        b = self.nodes[1]
        cls = MovableExporter if exporter == "movable" else StaticExporter
        self.gpu = cls(b.kernel, SIZE, name="b.gpu0")
        self.fd = dma_buf_fd(self.gpu.dmabuf, b.fds)
        src = self.nodes[0].host.allocate("src", SIZE)
        self.src = ibv_reg_mr(self.pds[0], src.addr, SIZE, RW)
        self.qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 64), 16) for pd in self.pds]
        self.qps[0].connect(self.qps[1])

    def reg(self, **kw):
        args = {"offset": 0, "length": SIZE, "iova": 0x10000, "fd": self.fd, "access": RW} | kw
        mr = ibv_reg_dmabuf_mr(self.pds[1], **args)
        self.env.run(until=self.env.now + mr.reg_ps)  # the registering process blocks for the call
        return mr

    def move(self):
        """The exporter evicts the buffer; the clock advances past its move_notify (the zap)."""
        fence = self.gpu.move(Placement.SYSTEM)
        self.env.run(until=self.nodes[1].kernel.now_ps("b.gpu0") + 1)
        return fence

    def write(self, dst, size=4096, at=None):
        if at is not None:
            self.env.run(until=at)
        start = self.env.now
        ibv_post_send(self.qps[0], SendWR(0, Opcode.RDMA_WRITE, self.src.addr, size, self.src.lkey, dst.iova,
                                          dst.rkey))
        self.env.run()
        (wc,) = ibv_poll_cq(self.qps[0].send_cq, 1)
        return wc.status, wc.completed_ps - start


@pytest.mark.parametrize("bed_kw, reg_kw, errno, words", [
    ({"dmabuf": None}, {}, "EOPNOTSUPP", "DMA-BUF"),
    ({}, {"iova": 0x10001}, "EINVAL", "page offsets"),
    ({}, {"access": RW | Access.ON_DEMAND}, "EINVAL", "only LOCAL_WRITE"),
    ({}, {"access": RW | Access.MW_BIND}, "EINVAL", "only LOCAL_WRITE"),
    ({}, {"access": Access.REMOTE_WRITE}, "EINVAL", "requires LOCAL_WRITE"),
    ({}, {"offset": 2**64 - 4096, "iova": 0}, "EINVAL", "overflows"),
    ({}, {"fd": 99}, "EBADF", ""),
    ({}, {"offset": 4096}, "EINVAL", "past the dma-buf"),
    ({}, {"length": 0}, "EINVAL", "length 0"),
])
def test_reg_dmabuf_mr_errno_in_kernel_order(bed_kw, reg_kw, errno, words):
    bed = Bed(**bed_kw)
    with pytest.raises(VerbsError) as info:
        bed.reg(**reg_kw)
    assert info.value.errno == errno and words in str(info.value)
    assert bed.gpu.dmabuf.refcount == 1  # only the fd's: every failed path dropped the reference it took


def test_fd_of_a_plain_file_is_einval():
    bed = Bed()
    plain = bed.nodes[1].fds.open("notes.txt")
    with pytest.raises(VerbsError) as info:
        bed.reg(fd=plain)
    assert info.value.errno == "EINVAL"


def test_registration_maps_whole_mr_pins_nothing_and_sets_addr_to_offset():
    bed = Bed(memlock=4096)
    mr = bed.reg(offset=8192, length=SIZE - 8192, iova=0x7000_2000)
    assert mr.addr == 8192 and mr.iova == 0x7000_2000 and mr.mr_type == "DMABUF_MR"
    assert mr.backing.umem.sgt is not None and mr.backing.translation_valid
    assert bed.nodes[1].host.pinned_pages == 0 and mr.backing.pinned_bytes == 0
    assert mr.reg_ps > bed.nodes[1].nic.params.umr.reg_ioctl_ps


def test_closing_the_fd_after_registration_is_legal_and_dereg_releases():
    bed = Bed()
    mr = bed.reg()
    bed.nodes[1].fds.close(bed.fd)
    assert bed.write(mr)[0] is WcStatus.SUCCESS and not bed.gpu.dmabuf.released  # the MR holds a reference
    assert ibv_dereg_mr(mr) > 0
    assert bed.gpu.dmabuf.released and bed.gpu.release_calls == 1


def test_rereg_of_a_dmabuf_mr_is_einval():
    bed = Bed()
    with pytest.raises(VerbsError) as info:
        ibv_rereg_mr(bed.reg(), 4, access=Access.LOCAL_WRITE)
    assert info.value.errno == "EINVAL" and "DMABUF_MR" in str(info.value)


def test_move_notify_zaps_then_the_next_access_refaults_after_the_fence():
    bed = Bed()
    mr = bed.reg()
    _, warm = bed.write(mr)
    fence = bed.move()
    assert not mr.backing.translation_valid and mr.backing.umem.sgt is None
    assert mr.backing.invalidations == 1
    status, cold = bed.write(mr)
    assert status is WcStatus.SUCCESS and mr.backing.faults == 1 and bed.qps[0].rnr_naks == 1
    assert mr.backing.umem.ready_ps >= fence.signaled_at_ps
    assert cold >= warm + bed.qps[1].min_rnr_timer_ps
    assert bed.write(mr)[1] == pytest.approx(warm, abs=100_000)


def test_requester_side_refault_stalls_until_the_copy_is_done():
    bed = Bed()
    mr = bed.reg(access=RW)
    # node b writes from its dma-buf into node a's host buffer: the dma-buf is the requester's source
    a_buf = bed.src
    qb = bed.qps[1]

    def write_from_gpu():
        start = bed.env.now
        ibv_post_send(qb, SendWR(1, Opcode.RDMA_WRITE, mr.iova, 4096, mr.lkey, a_buf.addr, a_buf.rkey))
        bed.env.run()
        (wc,) = ibv_poll_cq(qb.send_cq, 1)
        return wc.status, wc.completed_ps - start

    _, warm = write_from_gpu()
    fence = bed.move()
    status, cold = write_from_gpu()
    copy_left = fence.signaled_at_ps - bed.env.now
    assert status is WcStatus.SUCCESS and qb.rnr_naks == 0
    assert cold > warm + 0 and mr.backing.faults == 1
    assert cold >= copy_left


def test_broken_importer_that_ignores_move_notify_trips_the_invariant_checker():
    bed = Bed()
    mr = bed.reg()
    mr.backing.move_notify = lambda attach: None  # keeps its stale translations
    bed.move()
    with pytest.raises(InvariantViolation) as info:
        bed.write(mr)
    assert "stale mapping" in str(info.value)


def test_broken_importer_in_record_mode_keeps_running_and_lists_violations():
    bed = Bed()
    mr = bed.reg(invariants="record")
    mr.backing.move_notify = lambda attach: None
    bed.move()
    assert bed.write(mr)[0] is WcStatus.SUCCESS
    assert len(mr.backing.violations) == 1 and "stale mapping" in mr.backing.violations[0]


def test_pinned_importer_blocks_moves_and_only_warns():
    bed = Bed(dmabuf="pinned", odp=None)
    mr = bed.reg()
    assert mr.backing.mode == "dmabuf-pinned" and mr.backing.umem.pinned
    with pytest.raises(VerbsError) as info:
        bed.gpu.move(Placement.SYSTEM)
    assert info.value.errno == "EBUSY"
    assert bed.write(mr)[0] is WcStatus.SUCCESS


def test_without_config_move_notify_the_dynamic_mr_is_pinned_on_map():
    bed = Bed(move_notify=False)
    mr = bed.reg()
    assert mr.backing.umem.sgt.pinned_on_map
    with pytest.raises(VerbsError) as info:
        bed.gpu.move(Placement.SYSTEM)
    assert info.value.errno == "EBUSY"


def test_access_after_revoke_completes_in_error():
    """The revocation runs on the exporter's clock, ahead of the run's: the NIC translates the MR until the revoke
    callback has invalidated its key, and from then on every access completes in error."""
    from models.ib.umem_dmabuf import ib_umem_dmabuf_revoke

    bed = Bed(dmabuf="pinned", odp=None)
    mr = bed.reg()
    umem = mr.backing.umem
    ib_umem_dmabuf_revoke(umem)
    assert bed.env.now < umem.revoked_at_ps
    assert mr.backing.translate(umem.revoked_at_ps - 1, 0, 4096) is None
    assert mr.backing.translate(umem.revoked_at_ps, 0, 4096) is WcStatus.LOC_PROT_ERR
    assert bed.write(mr, at=umem.revoked_at_ps)[0] is WcStatus.REM_ACCESS_ERR


def test_static_exporter_never_moves_so_the_dynamic_mr_never_faults():
    bed = Bed(exporter="static")
    mr = bed.reg()
    for _ in range(3):
        assert bed.write(mr)[0] is WcStatus.SUCCESS
    assert mr.backing.faults == 0 and mr.backing.invalidations == 0


@pytest.mark.parametrize("kernel", ["5.13", "6.8", "6.13"])
def test_move_notify_between_mkey_revoke_and_umem_release_zaps_a_freed_mkey_before_6_14(kernel):
    bed = Bed(kernel=kernel)
    mr = bed.reg()
    backing = mr.backing
    backing.revoke_mkey()  # deregistration's first half: no lock taken, the umem still points at the MR
    assert backing.umem.private is backing
    with pytest.raises(InvariantViolation) as info:
        bed.gpu.move(Placement.SYSTEM)  # the exporter's move_notify arrives before the umem's release
    assert "already revoked" in str(info.value) and "UMR QP enters the error state" in str(info.value)
    assert backing.umem.sgt is None and bed.gpu.dmabuf.resv.holder is None  # the kernel unmapped anyway
    ib_umem_dmabuf_release(backing.umem)  # the second half completes: deregistration itself reports no error
    assert not bed.gpu.dmabuf.attachments


def test_the_freed_mkey_zap_in_record_mode_lets_the_move_complete_and_lists_it():
    bed = Bed(kernel="6.13")
    mr = bed.reg(invariants="record")
    mr.backing.revoke_mkey()
    bed.move()
    assert bed.gpu.dmabuf.placement is Placement.SYSTEM and mr.backing.invalidations == 0
    assert len(mr.backing.violations) == 1 and "cc668a11e6ac" in mr.backing.violations[0]


@pytest.mark.parametrize("kernel", ["5.12", "6.14", "6.18", "7.1"])
def test_from_6_14_move_notify_after_the_mkey_revoke_finds_no_mr_and_returns(kernel):
    bed = Bed(kernel=kernel)
    mr = bed.reg()
    backing = mr.backing
    sgt = backing.umem.sgt
    backing.revoke_mkey()  # under the lock, which clears the umem's MR
    assert backing.umem.private is None
    bed.move()
    assert backing.invalidations == 0 and backing.violations == []
    assert backing.umem.sgt is sgt  # the callback returned before unmapping: the release unmaps
    ib_umem_dmabuf_release(backing.umem)
    assert backing.umem.sgt is None and not bed.gpu.dmabuf.attachments


@pytest.mark.parametrize("kernel, revoke", [("6.13", "mlx5r_umr_revoke_mr"), ("6.14", "mlx5_umr_revoke_mr_with_lock")])
def test_dereg_revokes_the_mkey_then_releases_the_umem(kernel, revoke):
    bed = Bed(kernel=kernel, trace=True)
    mr = bed.reg()
    ibv_dereg_mr(mr)
    names = [e.name for e in bed.env.trace.events if e.component == "b.nic"]
    assert revoke in names and names.index(revoke) < names.index("dma_buf_detach")
    assert not bed.gpu.dmabuf.attachments and mr.backing.mkey_revoked_at_ps is not None

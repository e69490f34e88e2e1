"""The public API's NIC device memory (DM): the same errno as the free functions, and ``close()`` blocking until the
exported dma-buf's importers have unmapped it, as ibv_free_dm does."""

from __future__ import annotations

import pytest

from models.dmabuf.gpu_import import GpuDmabufImport
from models.dmabuf.revoke import UNMAP_BOUND_PS
from models.verbs.dm import ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm
from models.verbs.dm_mr import ibv_reg_dm_mr
from sim.api import (DM, DMMR, MR, PD, SGE, Access, AllocDmAttr, Context, Opcode, RecvWR, SendWR, Testbed,
                     VerbsError, WcStatus)
from sim.core import InvariantViolation
from tests.sim.api.test_api import RW, rc_pair

NEW = {"kernel": {"version": "7.0"}, "rdma_core": "62"}
"""A node whose kernel and rdma-core export device memory as a dma-buf."""
MOVE_NOTIFY = {"kernel": {"version": "7.0", "dmabuf_move_notify": True}, "rdma_core": "62"}
"""And whose GPU importer handles move_notify (so it maps without pinning)."""


def errno_of(call, *args, **kwargs) -> str:
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno


@pytest.mark.parametrize("node, length, errno", [
    (NEW, 1 << 20, "EINVAL"),                                     # above max_dm_size
    ({"nic": {"preset": "efa"}}, 4096, "EOPNOTSUPP"),             # no device memory
])
def test_alloc_errors_match_ibv_alloc_dm(node, length, errno):
    bed = Testbed({"a": node, "b": {}})
    ctx = Context(bed, "a")
    assert errno_of(DM, ctx, AllocDmAttr(length)) == errno_of(ibv_alloc_dm, ctx.ctx, length) == errno


def test_allocations_share_the_device_memory():
    ctx = Context(Testbed({"a": NEW, "b": {}}), "a")
    limit = ctx.ctx.node.nic.params.max_dm_size
    first = DM(ctx, AllocDmAttr(limit))
    assert errno_of(DM, ctx, AllocDmAttr(4096)) == "ENOMEM"
    first.close()
    assert DM(ctx, AllocDmAttr(4096)).length == 4096


@pytest.mark.parametrize("node, errno", [({}, "EOPNOTSUPP"),                        # rdma-core before v62
                                         ({"rdma_core": "62"}, "EPROTONOSUPPORT")])  # kernel before 7.0
def test_export_errors_match_ibv_dm_export_dmabuf_fd(node, errno):
    ctx = Context(Testbed({"a": node, "b": {}}), "a")
    dm = DM(ctx, AllocDmAttr(4096))
    assert errno_of(dm.export_dmabuf_fd) == errno_of(ibv_dm_export_dmabuf_fd, ibv_alloc_dm(ctx.ctx, 4096)) == errno


def test_close_revokes_under_the_importer():
    bed = Testbed({"a": MOVE_NOTIFY, "b": {}})
    ctx = Context(bed, "a")
    dm = DM(ctx, AllocDmAttr(64 * 1024))
    gpu = GpuDmabufImport("gpu0", ctx.ctx.node.fds, dm.export_dmabuf_fd())
    gpu.access()
    dm.close()
    assert dm.closed and gpu.invalidations == 1 and gpu.sgt is None
    assert errno_of(gpu.access) == "ENODEV"


def test_close_waits_for_an_importer_that_keeps_its_mapping():
    bed = Testbed({"a": MOVE_NOTIFY, "b": {}})
    ctx = Context(bed, "a")
    dm = DM(ctx, AllocDmAttr(64 * 1024))
    gpu = GpuDmabufImport("gpu0", ctx.ctx.node.fds, dm.export_dmabuf_fd(), broken=True)
    gpu.access()
    start = bed.now_ps
    with pytest.raises(InvariantViolation, match="gpu0 .*still mapped"):
        dm.close()
    assert bed.now_ps - start >= UNMAP_BOUND_PS                   # it blocked through the bound
    assert dm.closed                                              # freed all the same
    bed.run("1us")                                                # and the violation is not raised again later
    ctx.close()


# --- device memory MRs (rdma-core tests/test_device.py: DeviceMemoryAPITest, DeviceMemoryTest) ---

ZB_RW = Access.ZERO_BASED | Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def test_create_dm_mr_over_sizes_and_factors():
    """``DeviceMemoryAPITest.test_create_dm_mr``: DMMRs of 0.1, 0.5 and all of DMs of 4 bytes, a quarter and half
    of ``max_dm_size``, each size cut to the 4-byte alignment (a DMMR of 0 bytes included)."""
    ctx = Context(Testbed(), "a")
    max_dm_size = ctx.query_device_ex().max_dm_size
    for dm_size in (4, max_dm_size // 4, max_dm_size // 2):
        dm_size -= dm_size % 4
        for factor in (0.1, 0.5, 1):
            dmmr_size = int(dm_size * factor)
            dmmr_size -= dmmr_size % 4
            with DM(ctx, AllocDmAttr(length=dm_size)) as dm:
                assert DMMR(PD(ctx), dmmr_size, ZB_RW, dm, 0).length == dmmr_size


@pytest.mark.parametrize("offset, length", [(3, 4), (4, 3), (104, 4), (0, 104)])
def test_dm_bad_access(offset, length):
    """``DeviceMemoryAPITest.test_dm_bad_access``: an unaligned offset or length (mlx5_access_dm: EINVAL) or a range
    past the 100 bytes (EFAULT) fails both copies, through the DMMR as through the DM."""
    ctx = Context(Testbed(), "a")
    dm = DM(ctx, AllocDmAttr(length=100))
    dmmr = DMMR(PD(ctx), 100, Access.ZERO_BASED | Access.LOCAL_WRITE, dm, 0)
    errno = "EFAULT" if offset + length > 100 else "EINVAL"
    assert errno_of(dmmr.read, length, offset) == errno_of(dm.copy_from_dm, offset, length) == errno
    assert errno_of(dmmr.write, "s" * length, length, offset) == errno


def test_dm_bad_registration():
    """``DeviceMemoryAPITest.test_dm_bad_registration``: a DMMR 4 bytes longer than its DM (the DM_MR_REG handler's
    bounds: EINVAL), as the free function answers."""
    ctx = Context(Testbed(), "a")
    dm = DM(ctx, AllocDmAttr(length=100))
    assert errno_of(DMMR, PD(ctx), 104, ZB_RW, dm, 0) == errno_of(ibv_reg_dm_mr, PD(ctx).pd, dm.dm, 0, 104, ZB_RW) \
        == "EINVAL"


def test_closing_the_dm_closes_its_dmmr_first_and_the_verb_refuses_while_it_lives():
    """pyverbs' ``DM.close`` closes the DMMRs using it first; ``ibv_free_dm`` itself answers EBUSY while one is
    registered (``uverbs_free_dm``)."""
    ctx = Context(Testbed(), "a")
    dm = DM(ctx, AllocDmAttr(length=64))
    dmmr = DMMR(PD(ctx), 64, ZB_RW, dm, 0)
    assert errno_of(ibv_free_dm, dm.dm) == "EBUSY"
    dm.close()
    assert dmmr.closed and dm.closed and dm.dm.usecnt == 0


def dm_pair(bed: Testbed, size: int):
    """RC QPs on a and b (test_api's rc_pair); a's PD, a DMMR of ``size`` bytes of a's device memory, a host MR of as
    many on b holding a pattern and another to read into."""
    (actx, apd, _, _, _), (_, bpd, bcq, _, bqp) = rc_pair(bed)
    dm = DM(actx, AllocDmAttr(size))
    dmmr = DMMR(apd, size, ZB_RW, dm, 0)
    src = MR(bpd, size, RW)
    src.write(bytes(range(256)) * (size // 256), size)
    return apd, dm, dmmr, src, MR(bpd, size, RW), bqp, bcq


def rdma(qp, cq, opcode, local: MR, remote: MR, size: int) -> WcStatus:
    wr = SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[SGE(local.buf, size, local.lkey)])
    wr.set_wr_rdma(remote.rkey, remote.buf)
    qp.post_send(wr)
    return cq.poll(1, "1ms")[1][0].status


def test_dm_remote_traffic_round_trips_the_bytes():
    """``DeviceMemoryTest.test_dm_remote_traffic``: a WRITE lands in the zero-based DMMR (its ``buf`` 0 is the
    address), ``copy_from_dm`` finds the bytes, and a READ brings them back into another host MR."""
    size = 4096
    _, dm, dmmr, src, back, qp, cq = dm_pair(Testbed(data=True), size)
    assert dmmr.buf == 0
    assert rdma(qp, cq, Opcode.RDMA_WRITE, src, dmmr, size) == WcStatus.SUCCESS
    assert dm.copy_from_dm(0, size) == src.read(size, 0)
    assert rdma(qp, cq, Opcode.RDMA_READ, back, dmmr, size) == WcStatus.SUCCESS
    assert back.read(size, 0) == src.read(size, 0)


@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE, Opcode.RDMA_READ])
def test_dm_payload_stays_off_the_host_pcie_link(opcode):
    """The NIC reaches its MEMIC on the chip: a WRITE into a's DMMR or a READ out of it claims a's MEMIC port and
    none of a's PCIe link, whose busy time a host MR of the same size does raise."""
    size = 64 * 1024

    def busy(use_dm: bool) -> tuple[int, int]:
        apd, _, dmmr, src, back, qp, cq = dm_pair(Testbed(), size)
        target, node = dmmr if use_dm else MR(apd, size, RW), apd.context.ctx.node
        link, before = node.pcie, node.pcie.up.busy_ps + node.pcie.down.busy_ps
        assert rdma(qp, cq, opcode, src if opcode is Opcode.RDMA_WRITE else back, target, size) == WcStatus.SUCCESS
        return link.up.busy_ps + link.down.busy_ps - before, node.nic.memic.port.busy_ps

    (dm_link, dm_memic), (host_link, host_memic) = busy(True), busy(False)
    assert dm_link == 0 and dm_memic > 0
    assert host_link > 0 and host_memic == 0


def test_dm_send_traffic_lands_in_the_receivers_dmmr():
    """``DeviceMemoryTest.test_dm_traffic``: SEND from a DMMR into a receive posted on a DMMR, the bytes copied in
    with ``copy_to_dm`` arriving in the other NIC's device memory."""
    bed = Testbed(data=True)
    (actx, apd, acq, _, aqp), (bctx, bpd, bcq, _, bqp) = rc_pair(bed)
    dms = [DM(ctx, AllocDmAttr(256)) for ctx in (actx, bctx)]
    mrs = [DMMR(pd, 256, ZB_RW, dm, 0) for pd, dm in zip((apd, bpd), dms)]
    dms[0].copy_to_dm(0, bytes(range(256)), 256)
    aqp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(mrs[0].buf, 256, mrs[0].lkey)]))
    bqp.post_recv(RecvWR(wr_id=8, num_sge=1, sg=[SGE(mrs[1].buf, 256, mrs[1].lkey)]))
    aqp.post_send(SendWR(wr_id=1, opcode=Opcode.SEND, num_sge=1, sg=[SGE(mrs[0].buf, 256, mrs[0].lkey)]))
    assert acq.poll(1, "1ms")[1][0].status == WcStatus.SUCCESS
    assert bcq.poll(1, "1ms")[1][0].status == WcStatus.SUCCESS
    assert dms[1].copy_from_dm(0, 256) == bytes(range(256))

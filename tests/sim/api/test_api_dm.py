"""The public API's NIC device memory (DM): the same errno as the free functions, and ``close()`` blocking until the
exported dma-buf's importers have unmapped it, as ibv_free_dm does."""

from __future__ import annotations

import pytest

from models.dmabuf.gpu_import import GpuDmabufImport
from models.dmabuf.revoke import UNMAP_BOUND_PS
from models.verbs.dm import ibv_alloc_dm, ibv_dm_export_dmabuf_fd
from sim.api import DM, AllocDmAttr, Context, Testbed, VerbsError
from sim.core import InvariantViolation

NEW = {"kernel": {"version": "7.0"}, "rdma_core": "62"}
"""A node whose kernel and rdma-core export device memory as a dma-buf."""
MOVE_NOTIFY = {"kernel": {"version": "7.0", "dmabuf_move_notify": True}, "rdma_core": "62"}
"""And whose GPU importer handles move_notify (so it maps without pinning)."""


def errno_of(call, *args) -> str:
    with pytest.raises(VerbsError) as info:
        call(*args)
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

"""NIC device memory exported as a dma-buf (ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm) and the GPU as its
importer: the errno table, who may attach, and the revocation when the memory is freed."""

import pytest

from models.dmabuf import DmaBufAttachOps, dma_buf_attach, dma_buf_dynamic_attach, dma_buf_get
from models.dmabuf.gpu_import import GpuDmabufImport
from models.dmabuf.revoke import dma_buf_attach_revocable
from models.ib.umem_dmabuf import ib_umem_dmabuf_get_pinned
from models.presets import NIC_PRESETS
from models.verbs.dm import ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm
from models.versions import MOVE_NOTIFY_ALWAYS_BUILT, Version
from sim.engine.build import build
from sim.core import PS_PER_US, InvariantViolation, VerbsError
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict

KiB = 1024


def context(kernel="7.0", rdma_core="62", nic="connectx7", move_notify=True):
    always = Version.parse(kernel) >= MOVE_NOTIFY_ALWAYS_BUILT
    spec = {"version": kernel} | ({} if always else {"dmabuf_move_notify": move_notify})
    nodes = [{"name": "a", "kernel": spec, "rdma_core": rdma_core, "nic": {"preset": nic}},
             {"name": "b", "nic": {"preset": nic}}]
    return build(Scenario.model_validate(scenario_dict(nodes=nodes)), seed=1).contexts["a"]


def errno_of(call, *args):
    with pytest.raises(VerbsError) as err:
        call(*args)
    return err.value.errno, err.value.call


@pytest.mark.parametrize("settings, length, expected", [
    ({"nic": "efa"}, 4 * KiB, ("EOPNOTSUPP", "ibv_alloc_dm")),
    ({}, NIC_PRESETS["connectx7"]["max_dm_size"] + 1, ("EINVAL", "ibv_alloc_dm")),
    ({"rdma_core": "61"}, 4 * KiB, ("EOPNOTSUPP", "ibv_dm_export_dmabuf_fd")),
    ({"kernel": "6.19"}, 4 * KiB, ("EPROTONOSUPPORT", "ibv_dm_export_dmabuf_fd")),
])
def test_allocation_and_export_errnos(settings, length, expected):
    ctx = context(**settings)
    if expected[1] == "ibv_alloc_dm":
        assert errno_of(ibv_alloc_dm, ctx, length) == expected
        return
    assert errno_of(ibv_dm_export_dmabuf_fd, ibv_alloc_dm(ctx, length)) == expected


def test_device_memory_is_a_pool_and_freed_memory_cannot_be_exported():
    ctx = context()
    limit = ctx.node.nic.params.max_dm_size
    first = ibv_alloc_dm(ctx, limit * 3 // 4)
    assert errno_of(ibv_alloc_dm, ctx, limit // 2) == ("ENOMEM", "ibv_alloc_dm")
    ibv_free_dm(first)
    ibv_alloc_dm(ctx, limit // 2)
    assert errno_of(ibv_dm_export_dmabuf_fd, first) == ("EINVAL", "ibv_dm_export_dmabuf_fd")
    assert errno_of(ibv_free_dm, first) == ("EINVAL", "ibv_free_dm")


def test_only_peer_to_peer_dynamic_importers_attach_and_no_pinned_one_pins():
    ctx = context(kernel="7.1")
    node = ctx.node
    fd = ibv_dm_export_dmabuf_fd(ibv_alloc_dm(ctx, 64 * KiB))
    buf = dma_buf_get(node.fds, fd)
    assert errno_of(dma_buf_attach, buf, "gpu0") == ("EOPNOTSUPP", "dma_buf_attach")
    no_p2p = DmaBufAttachOps(move_notify=lambda a: None, allow_peer2peer=False)
    assert errno_of(dma_buf_dynamic_attach, buf, "gpu0", no_p2p) == ("EOPNOTSUPP", "dma_buf_dynamic_attach")
    pinned = (ib_umem_dmabuf_get_pinned, "efa0", 0, 64 * KiB, node.fds, fd, True, node.kernel.config.behaviour)
    assert errno_of(*pinned) == ("EOPNOTSUPP", "uverbs_dmabuf_pin")
    gpu = GpuDmabufImport("gpu0", node.fds, fd)
    assert dma_buf_attach_revocable(gpu.attach)


def test_freeing_the_memory_revokes_it_under_the_gpu_which_lets_go_and_then_fails_its_accesses():
    ctx = context()
    node = ctx.node
    dm = ibv_alloc_dm(ctx, 64 * KiB)
    gpu = GpuDmabufImport("gpu0", node.fds, ibv_dm_export_dmabuf_fd(dm))
    assert gpu.access().nbytes == 64 * KiB
    (revocation,) = ibv_free_dm(dm)
    assert revocation.done and gpu.invalidations == 1 and gpu.sgt is None
    assert errno_of(gpu.access) == ("ENODEV", "dma_buf_map_attachment")
    gpu.release()
    assert gpu.attach.detached


def test_without_move_notify_before_71_the_map_pins_and_the_export_refuses_the_pin():
    ctx = context(move_notify=False)
    gpu = GpuDmabufImport("gpu0", ctx.node.fds, ibv_dm_export_dmabuf_fd(ibv_alloc_dm(ctx, 64 * KiB)))
    assert errno_of(gpu.access) == ("EOPNOTSUPP", "uverbs_dmabuf_pin")


def test_a_gpu_importer_that_keeps_its_mapping_keeps_the_revocation_waiting_and_breaks_the_contract():
    ctx = context()
    node = ctx.node
    dm = ibv_alloc_dm(ctx, 64 * KiB)
    exporter_fd = ibv_dm_export_dmabuf_fd(dm, invariants="raise")
    gpu = GpuDmabufImport("gpu0", node.fds, exporter_fd, broken=True)
    gpu.access()
    (revocation,) = ibv_free_dm(dm)
    assert revocation.waited_for == ["gpu0"] and not revocation.done
    env = node.kernel.env
    env.process(dm.exports[0].wait_unmapped(revocation, 10 * PS_PER_US))
    with pytest.raises(InvariantViolation, match="gpu0 .*still mapped"):
        env.run()
    assert not node.kernel.warnings                # uverbs waits without a WARN; the simulator names the importer

"""The revocation contract (7.1): dma_buf_attach_revocable, VFIO's revocation and its bounds, pinned revocable umems."""

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, DmaFence, DmaResvUsage, FdTable, KernelConfig, MovableExporter,
                           dma_buf_attach, dma_buf_dynamic_attach, dma_buf_fd, dma_buf_map_attachment_unlocked,
                           dma_buf_unmap_attachment, dma_buf_unmap_attachment_unlocked, dma_resv_add_fence)
from models.dmabuf.revoke import BROKEN_IMPORTER, UNMAP_BOUND_PS, VfioExporter, dma_buf_attach_revocable
from models.ib.umem_dmabuf import (ib_umem_dmabuf_attach_pinned_ops, ib_umem_dmabuf_get_pinned,
                                   ib_umem_dmabuf_get_pinned_revocable_and_lock, ib_umem_dmabuf_map_pages,
                                   ib_umem_dmabuf_release, ib_umem_dmabuf_set_revoke_locked)
from models.versions import KernelBehaviour, Version
from sim.core import PS_PER_US, Environment, InvariantViolation, ProtocolError, VerbsError

SIZE = 2 << 20


def core(version="7.1"):
    return DmaBufCore(Environment(), KernelConfig(move_notify_enabled=True, version=version))


def unmapping(attach):
    """An importer's invalidate op that unmaps at once (mlx5's)."""
    for sgt in list(attach.mappings):
        dma_buf_unmap_attachment(attach, sgt)


DYNAMIC = DmaBufAttachOps(move_notify=unmapping, allow_peer2peer=True)


def pinned_umem(kernel_core, exporter, revocable):
    table = FdTable("app")
    fd = dma_buf_fd(exporter.dmabuf, table)
    behaviour = kernel_core.config.behaviour
    if revocable:
        return ib_umem_dmabuf_get_pinned_revocable_and_lock("irdma0", 0, SIZE, table, fd, True, behaviour)
    return ib_umem_dmabuf_get_pinned("efa0", 0, SIZE, table, fd, True, behaviour)


@pytest.mark.parametrize("version, importer, errno, call", [
    ("7.0", "static", "EOPNOTSUPP", "dma_buf_attach"),
    ("7.1", "static", "EOPNOTSUPP", "dma_buf_attach"),
    ("7.0", "dynamic-no-p2p", "EOPNOTSUPP", "dma_buf_dynamic_attach"),
    ("7.0", "dynamic", None, None),
    ("7.1", "dynamic", None, None),
    ("7.0", "pinned", "EOPNOTSUPP", "vfio_pci_dma_buf_pin"),        # the pin op refuses get_pinned's pin
    ("7.1", "pinned", "EOPNOTSUPP", "dma_buf_dynamic_attach"),      # not revocable: attach refuses
    ("7.1", "pinned-revocable", None, None),
])
def test_vfio_admits_exactly_the_importers_it_can_revoke(version, importer, errno, call):
    kernel = core(version)
    vfio = VfioExporter(kernel, SIZE)
    try:
        if importer == "static":
            dma_buf_attach(vfio.dmabuf, "nic0")
        elif importer.startswith("dynamic"):
            dma_buf_dynamic_attach(vfio.dmabuf, "nic0", DmaBufAttachOps(unmapping, importer == "dynamic"))
        else:
            pinned_umem(kernel, vfio, importer == "pinned-revocable")
    except VerbsError as err:
        assert (err.errno, err.call) == (errno, call), err
        return
    assert errno is None, f"{importer} on {version} was admitted"


def test_dma_buf_attach_revocable_is_a_71_call_true_for_importers_with_the_op():
    with pytest.raises(ProtocolError, match="added in 7.1"):
        dma_buf_attach_revocable(dma_buf_attach(MovableExporter(core("7.0"), SIZE).dmabuf, "nic0"))
    kernel = core("7.1")
    buf = MovableExporter(kernel, SIZE).dmabuf
    assert not dma_buf_attach_revocable(dma_buf_attach(buf, "gpu1"))
    assert dma_buf_attach_revocable(dma_buf_dynamic_attach(buf, "nic0", DYNAMIC))
    pinned_ops = ib_umem_dmabuf_attach_pinned_ops(kernel.config.behaviour)
    assert not dma_buf_attach_revocable(dma_buf_dynamic_attach(buf, "efa0", pinned_ops))


def revoke(vfio, bound=UNMAP_BOUND_PS, until=None):
    env = vfio.core.env
    process = env.process(vfio.revoke(bound))
    env.run(until=until)
    return process


def test_an_importer_that_unmaps_in_its_callback_ends_the_revocation_once_the_fences_signal():
    kernel = core()
    vfio = VfioExporter(kernel, SIZE)
    attach = dma_buf_dynamic_attach(vfio.dmabuf, "nic0", DYNAMIC)
    dma_buf_map_attachment_unlocked(attach)
    vfio.dmabuf.resv.lock("gpu-job")
    dma_resv_add_fence(vfio.dmabuf.resv, DmaFence("job", 1, 50 * PS_PER_US), DmaResvUsage.BOOKKEEP, holder="gpu-job")
    vfio.dmabuf.resv.unlock("gpu-job")
    revocation = revoke(vfio).value
    assert revocation.done and revocation.fences_done_ps == 50 * PS_PER_US == revocation.unmapped_ps
    assert not attach.mappings and not kernel.warnings
    with pytest.raises(VerbsError) as err:
        dma_buf_map_attachment_unlocked(attach)
    assert err.value.errno == "ENODEV"
    with pytest.raises(VerbsError) as err:
        dma_buf_dynamic_attach(vfio.dmabuf, "nic1", DYNAMIC)
    assert err.value.errno == "ENODEV"


def test_an_importer_that_unmaps_later_within_the_bound_is_waited_for_without_a_warning():
    kernel = core()
    vfio = VfioExporter(kernel, SIZE)
    env = kernel.env

    def later(attach):
        def unmap():
            yield env.timeout(50 * PS_PER_US)
            for sgt in list(attach.mappings):
                dma_buf_unmap_attachment_unlocked(attach, sgt)
        env.process(unmap())

    attach = dma_buf_dynamic_attach(vfio.dmabuf, "gpu1", DmaBufAttachOps(later, True))
    dma_buf_map_attachment_unlocked(attach)
    revocation = revoke(vfio).value
    assert revocation.waited_for == ["gpu1"] and revocation.done and not revocation.warned
    assert revocation.unmapped_ps >= 50 * PS_PER_US > revocation.fences_done_ps
    assert not kernel.warnings


@pytest.mark.parametrize("invariants", ["raise", "record"])
def test_a_revocable_importer_still_mapped_at_the_bound_is_named_by_the_warn_and_the_invariant(invariants):
    kernel = core()
    vfio = VfioExporter(kernel, SIZE, invariants=invariants)
    attach = dma_buf_dynamic_attach(vfio.dmabuf, "nic7", DmaBufAttachOps(lambda a: None, True))
    dma_buf_map_attachment_unlocked(attach)
    if invariants == "raise":
        with pytest.raises(InvariantViolation, match="nic7.*bounded time"):
            revoke(vfio, bound=5 * PS_PER_US)
        return
    process = revoke(vfio, bound=5 * PS_PER_US, until=10**9)
    revocation = vfio.revocations[-1]
    assert process.is_alive and not revocation.done              # the exporter waits on, without bound
    assert revocation.warned == revocation.broken_promises == ["nic7"]
    assert len(kernel.warnings) == 1 and BROKEN_IMPORTER in kernel.warnings[0] and "nic7" in kernel.warnings[0]
    assert len(vfio.violations) == 1
    dma_buf_unmap_attachment_unlocked(attach, attach.mappings[0])  # user space finally lets go
    kernel.env.run()
    assert revocation.done and not process.is_alive


def test_before_71_the_revocation_does_not_wait_and_says_who_still_maps():
    kernel = core("7.0")
    vfio = VfioExporter(kernel, SIZE)
    attach = dma_buf_dynamic_attach(vfio.dmabuf, "nic7", DmaBufAttachOps(lambda a: None, True))
    dma_buf_map_attachment_unlocked(attach)
    revocation = revoke(vfio).value
    assert revocation.left_mapped == ["nic7"] and not revocation.warned and not kernel.warnings


def test_a_pinned_revocable_umem_returns_locked_and_runs_its_revoke_callback_once_before_the_unmap():
    kernel = core()
    vfio = VfioExporter(kernel, SIZE)
    umem = pinned_umem(kernel, vfio, revocable=True)
    assert umem.resv.holder == "irdma0" and umem.pinned and umem.sgt is not None
    calls = []
    ib_umem_dmabuf_set_revoke_locked(umem, lambda: calls.append(umem.sgt is not None))
    umem.resv.unlock("irdma0")
    with pytest.raises(ProtocolError, match="dma_resv_assert_held"):
        ib_umem_dmabuf_set_revoke_locked(umem, lambda: None)
    assert revoke(vfio).value.done
    assert calls == [True] and umem.revoked and not umem.pinned and umem.sgt is None
    with pytest.raises(VerbsError):
        umem.resv.lock("irdma0")
        try:
            ib_umem_dmabuf_map_pages(umem)
        finally:
            umem.resv.unlock("irdma0")
    ib_umem_dmabuf_release(umem)
    assert calls == [True]                                         # at most once: not again at release


def test_the_release_of_a_pinned_revocable_umem_never_revoked_runs_the_callback():
    kernel = core()
    umem = pinned_umem(kernel, MovableExporter(kernel, SIZE), revocable=True)
    calls = []
    ib_umem_dmabuf_set_revoke_locked(umem, lambda: calls.append("revoke"))
    umem.resv.unlock("irdma0")
    ib_umem_dmabuf_release(umem)
    assert calls == ["revoke"] and umem.attach.detached


def test_the_pinned_revocable_interface_is_a_71_call():
    kernel = core("7.0")
    with pytest.raises(ProtocolError, match="added in 7.1"):
        pinned_umem(kernel, MovableExporter(kernel, SIZE), revocable=True)
    assert not KernelBehaviour(Version.parse("7.0")).has_pinned_revocable_umem
    assert KernelBehaviour(Version.parse("7.1")).has_pinned_revocable_umem
    assert not KernelBehaviour(Version.parse("7.0")).has_attach_revocable
    assert KernelBehaviour(Version.parse("7.1")).has_attach_revocable

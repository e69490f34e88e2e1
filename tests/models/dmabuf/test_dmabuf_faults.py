"""The fault-injecting exporter: each scripted fault, and the importer failures the model then names."""

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, KernelConfig, MovableExporter, Placement, StaticExporter,
                           check_dma, dma_buf_dynamic_attach, dma_buf_map_attachment_unlocked,
                           dma_buf_unmap_attachment)
from models.dmabuf.faults import FaultInjector
from sim.core import PS_PER_US, DeadlockError, Environment, InvariantViolation, ProtocolError, UnboundedWait, VerbsError

SIZE = 2 << 20


def setup(unmap_on_notify=True, exporter=MovableExporter):
    kernel = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=True, version="7.1"))
    gpu = exporter(kernel, SIZE, name="gpu0")
    notified = []

    def notify(attach):
        notified.append(kernel.now_ps("gpu0"))
        if unmap_on_notify:
            for sgt in list(attach.mappings):
                dma_buf_unmap_attachment(attach, sgt)

    attach = dma_buf_dynamic_attach(gpu.dmabuf, "nic0", DmaBufAttachOps(notify, True))
    return kernel, gpu, attach, FaultInjector(gpu.dmabuf), notified


def map_cost(kernel, attach):
    start = kernel.now_ps("nic0")
    dma_buf_map_attachment_unlocked(attach)
    return kernel.now_ps("nic0") - start


def test_delay_map_adds_exactly_the_delay_to_the_next_maps_only():
    kernel, _, attach, injector, _ = setup()
    plain = map_cost(kernel, attach)
    injector.delay_map(30 * PS_PER_US, count=2)
    assert [map_cost(kernel, attach) - plain for _ in range(3)] == [30 * PS_PER_US, 30 * PS_PER_US, 0]


def test_block_map_is_an_unbounded_wait_naming_the_importer_and_the_lock_it_holds():
    kernel, _, attach, injector, _ = setup()
    injector.block_map()
    with pytest.raises(UnboundedWait, match=r"nic0 waits forever in dma_buf_map_attachment .*holding dmabuf1\.resv"):
        dma_buf_map_attachment_unlocked(attach)


def test_fail_map_after_invalidate_fails_only_maps_after_the_next_invalidation():
    kernel, _, attach, injector, notified = setup()
    injector.fail_map_after_invalidate("EIO", count=1)
    dma_buf_map_attachment_unlocked(attach)                       # no invalidation yet: maps
    injector.invalidate_and_hold(0)
    with pytest.raises(VerbsError) as err:
        dma_buf_map_attachment_unlocked(attach)
    assert err.value.errno == "EIO" and len(notified) == 1
    dma_buf_map_attachment_unlocked(attach)                       # count used up


def test_invalidate_and_hold_makes_a_remap_wait_until_the_exporter_wakes():
    kernel, gpu, attach, injector, notified = setup()
    dma_buf_map_attachment_unlocked(attach)
    until = injector.invalidate_and_hold(200 * PS_PER_US)
    assert until == kernel.now_ps("gpu0") + 200 * PS_PER_US       # the hold starts once the invalidation is done
    assert notified and not attach.mappings and gpu.dmabuf.resv.holder == "gpu0"
    dma_buf_map_attachment_unlocked(attach)                       # the importer's re-map takes the lock when free
    assert kernel.now_ps("nic0") > until
    assert gpu.dmabuf.resv.holder is None


def test_a_lock_held_forever_is_a_deadlock_naming_the_holder_and_why():
    kernel, gpu, attach, injector, _ = setup()
    injector.invalidate_and_hold(None)
    with pytest.raises(DeadlockError, match="held by gpu0, which invalidated its importers and sleeps holding it"):
        dma_buf_map_attachment_unlocked(attach)
    with pytest.raises(DeadlockError, match="never wakes"):
        gpu.dmabuf.resv.lock("nic0")


def test_hold_lock_then_wake_frees_the_lock_at_the_holds_end():
    kernel, gpu, attach, injector, notified = setup()
    until = injector.hold_lock(50 * PS_PER_US)
    injector.wake()
    assert gpu.dmabuf.resv.holder is None and gpu.dmabuf.resv.free_at_ps == until and not notified


def test_a_move_injected_under_an_importer_that_keeps_its_mapping_is_a_stale_access():
    kernel, _, attach, injector, notified = setup(unmap_on_notify=False)
    sgt = dma_buf_map_attachment_unlocked(attach)
    injector.move(Placement.SYSTEM)
    assert notified
    with pytest.raises(InvariantViolation, match="stale mapping"):
        check_dma(sgt)


def test_move_and_errno_names_are_checked():
    _, _, _, injector, _ = setup(exporter=StaticExporter)
    with pytest.raises(ProtocolError, match="never moves"):
        injector.move(Placement.SYSTEM)
    with pytest.raises(ValueError, match="unknown errno"):
        injector.fail_map_after_invalidate("EWHATEVER")

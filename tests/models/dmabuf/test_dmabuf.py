"""dma-buf core: every errno, every locking rule, pin-on-map, move/move_notify, fences, stale mappings, trace."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, DmaBufCosts, DmaBufOps, DmaDataDirection, DmaFence,
                           DmaResv, DmaResvUsage, FdTable, KernelConfig, MovableExporter, Placement,
                           StaticExporter, check_dma, dma_buf_attach, dma_buf_attachment_is_dynamic,
                           dma_buf_detach, dma_buf_dynamic_attach, dma_buf_export, dma_buf_fd, dma_buf_get,
                           dma_buf_is_dynamic, dma_buf_map_attachment, dma_buf_map_attachment_unlocked,
                           dma_buf_move_notify, dma_buf_pin, dma_buf_put, dma_buf_unmap_attachment,
                           dma_buf_unmap_attachment_unlocked, dma_buf_unpin, dma_resv_add_fence,
                           dma_resv_wait_timeout)
from sim.core import PS_PER_US, DeadlockError, Environment, InvariantViolation, ProtocolError, VerbsError

MiB = 1 << 20
NIC = "mlx5_0"


def make_core(move_notify: bool = True, *, trace: bool = False, costs: DmaBufCosts = DmaBufCosts()) -> DmaBufCore:
    return DmaBufCore(Environment(trace=trace), KernelConfig(move_notify_enabled=move_notify), costs)


class Importer:
    """A dynamic importer that records notifications; ``unmap`` makes it drop its mappings like mlx5."""

    def __init__(self, unmap: bool = False, p2p: bool = True) -> None:
        self.notified: list = []
        self.unmap = unmap
        self.ops = DmaBufAttachOps(move_notify=self.move_notify, allow_peer2peer=p2p)

    def move_notify(self, attach) -> None:
        self.notified.append(attach)
        if self.unmap:
            for sgt in list(attach.mappings):
                dma_buf_unmap_attachment(attach, sgt)


@contextmanager
def held(resv: DmaResv, who: str):
    resv.lock(who)
    try:
        yield
    finally:
        if resv.holder == who:
            resv.unlock(who)


def nop(*args) -> None:
    return None


def raising(errno: str):
    def op(*args):
        raise VerbsError(errno, f"injected {errno}")
    return op


def custom_buffer(core: DmaBufCore, **ops):
    """Export a 1 MiB buffer whose ops default to trivial ones; returns (dmabuf, calls log)."""
    log: list[str] = []

    def rec(name, ret=None):
        def op(*args):
            log.append(name)
            return ret
        return op
    base = dict(map_dma_buf=rec("map", ((0, MiB),)), unmap_dma_buf=rec("unmap"), release=rec("release"))
    base.update(ops)
    return dma_buf_export(core, DmaBufOps(**base), MiB, priv=object(), exp_name="exp"), log


# ------------------------------------------------------------------------------------------------ export
@pytest.mark.parametrize("ops, priv, rule", [
    (None, object(), "map_dma_buf, unmap_dma_buf and release"),
    (DmaBufOps(map_dma_buf=None, unmap_dma_buf=nop, release=nop), object(), "map_dma_buf"),
    (DmaBufOps(map_dma_buf=nop, unmap_dma_buf=None, release=nop), object(), "unmap_dma_buf"),
    (DmaBufOps(map_dma_buf=nop, unmap_dma_buf=nop, release=None), object(), "release"),
    (DmaBufOps(map_dma_buf=nop, unmap_dma_buf=nop, release=nop), None, "priv"),
    (DmaBufOps(map_dma_buf=nop, unmap_dma_buf=nop, release=nop, pin=nop), object(), "pin and unpin come as a pair"),
    (DmaBufOps(map_dma_buf=nop, unmap_dma_buf=nop, release=nop, unpin=nop), object(), "pin and unpin come as a pair"),
])
def test_export_rejects_incomplete_ops_with_einval_and_a_warning(ops, priv, rule):
    core = make_core()
    with pytest.raises(VerbsError) as err:
        dma_buf_export(core, ops, MiB, priv=priv, exp_name="exp")
    assert (err.value.errno, err.value.call) == ("EINVAL", "dma_buf_export")
    assert rule in str(err.value)
    assert len(core.warnings) == 1 and "WARN_ON" in core.warnings[0]


def test_export_makes_one_reference_and_dynamic_follows_pin():
    core = make_core()
    movable, static = MovableExporter(core, MiB), StaticExporter(core, MiB)
    assert (movable.dmabuf.refcount, movable.dmabuf.ino, static.dmabuf.ino) == (1, 1, 2)
    assert dma_buf_is_dynamic(movable.dmabuf) and not dma_buf_is_dynamic(static.dmabuf)
    assert movable.dmabuf.resv.name == "dmabuf1.resv" and movable.dmabuf.placement is Placement.VRAM


# ------------------------------------------------------------------------------------------------ fds
@pytest.mark.parametrize("which, errno", [("unknown", "EBADF"), ("negative", "EBADF"), ("stdin", "EINVAL"),
                                          ("plain", "EINVAL")])
def test_dma_buf_get_errnos(which, errno):
    table = FdTable("app")
    fd = {"unknown": 77, "negative": -1, "stdin": 0, "plain": table.open("data.bin")}[which]
    with pytest.raises(VerbsError) as err:
        dma_buf_get(table, fd)
    assert (err.value.errno, err.value.call) == (errno, "dma_buf_get")
    assert str(fd) in err.value.rule


def test_close_unknown_fd_is_ebadf_and_full_table_is_emfile():
    core, table = make_core(), FdTable("app", max_fds=4)
    with pytest.raises(VerbsError) as err:
        table.close(9)
    assert err.value.errno == "EBADF"
    assert dma_buf_fd(MovableExporter(core, MiB).dmabuf, table) == 3
    with pytest.raises(VerbsError) as err:
        dma_buf_fd(MovableExporter(core, MiB).dmabuf, table)
    assert err.value.errno == "EMFILE" and "RLIMIT_NOFILE" in err.value.rule


def test_references_fd_get_close_put_release_once():
    core, table = make_core(), FdTable("app")
    gpu = MovableExporter(core, MiB)
    fd = dma_buf_fd(gpu.dmabuf, table)
    assert fd == 3 and gpu.dmabuf.refcount == 1          # the fd took over the export reference
    buf = dma_buf_get(table, fd, caller=NIC)
    assert buf is gpu.dmabuf and buf.refcount == 2
    table.close(fd)                                       # closing the fd after registration is legal
    assert buf.refcount == 1 and not buf.released and gpu.release_calls == 0
    dma_buf_put(buf, caller=NIC)
    assert buf.released and gpu.release_calls == 1
    with pytest.raises(ProtocolError, match="use after release"):
        dma_buf_put(buf)
    assert gpu.release_calls == 1
    assert table.open("x") == 3                            # lowest free fd is reused


def test_two_fds_sharing_one_reference_leave_a_dangling_fd():
    core, table = make_core(), FdTable("app")
    gpu = MovableExporter(core, MiB)
    first, second = dma_buf_fd(gpu.dmabuf, table), dma_buf_fd(gpu.dmabuf, table)
    table.close(first)
    assert gpu.release_calls == 1
    with pytest.raises(ProtocolError, match="use after release"):
        dma_buf_get(table, second)
    with pytest.raises(ProtocolError, match="use after release"):
        dma_buf_fd(gpu.dmabuf, table)


# ------------------------------------------------------------------------------------------------ attach
def test_attach_argument_errnos():
    core = make_core()
    buf = MovableExporter(core, MiB).dmabuf
    cases = [(lambda: dma_buf_dynamic_attach(None, NIC, None), "required"),
             (lambda: dma_buf_dynamic_attach(buf, "", None), "required"),
             (lambda: dma_buf_dynamic_attach(buf, NIC, DmaBufAttachOps(move_notify=None)), "move_notify")]
    for attach, rule in cases:
        with pytest.raises(VerbsError) as err:
            attach()
        assert (err.value.errno, err.value.call) == ("EINVAL", "dma_buf_dynamic_attach") and rule in err.value.rule
    assert any("move_notify" in w and "WARN_ON" in w for w in core.warnings)
    assert buf.attachments == []


@pytest.mark.parametrize("placement, importer, ok", [
    (Placement.VRAM, None, True), (Placement.VRAM, Importer(p2p=False), False),
    (Placement.VRAM, Importer(p2p=True), True), (Placement.SYSTEM, None, True),
])
def test_static_exporter_attach_refusal_propagates_its_errno(placement, importer, ok):
    """nv_dma_buf_attach refuses only a dynamic importer without peer2peer (a static one maps BAR1 PFNs)."""
    core = make_core()
    nv = StaticExporter(core, MiB, placement=placement)
    ops = importer.ops if importer else None
    if ok:
        attach = dma_buf_dynamic_attach(nv.dmabuf, NIC, ops)
        assert attach.peer2peer is bool(importer) and nv.dmabuf.attachments == [attach]
        return
    with pytest.raises(VerbsError) as err:
        dma_buf_dynamic_attach(nv.dmabuf, NIC, ops)
    assert (err.value.errno, err.value.call) == ("ENOTSUPP", "dma_buf_dynamic_attach")
    assert "refused" in err.value.rule and "struct page" in err.value.rule and nv.dmabuf.attachments == []


def test_attachment_kinds():
    core = make_core()
    buf = MovableExporter(core, MiB).dmabuf
    static, dynamic = dma_buf_attach(buf, "ahci"), dma_buf_dynamic_attach(buf, NIC, Importer(p2p=False).ops)
    assert not dma_buf_attachment_is_dynamic(static) and not static.peer2peer
    assert dma_buf_attachment_is_dynamic(dynamic) and not dynamic.peer2peer


# ------------------------------------------------------------------------------------------------ locking
def _setup(core):
    """A movable buffer with a fd in table 'app', a dynamic attachment of NIC and one mapping."""
    gpu, table = MovableExporter(core, MiB), FdTable(NIC)
    fd = dma_buf_fd(gpu.dmabuf, table)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops)
    sgt = dma_buf_map_attachment_unlocked(attach)
    return gpu, table, fd, attach, sgt


MUST_NOT_HOLD = {
    "dma_buf_attach": lambda g, t, fd, a, s: dma_buf_attach(g.dmabuf, NIC),
    "dma_buf_dynamic_attach": lambda g, t, fd, a, s: dma_buf_dynamic_attach(g.dmabuf, NIC, Importer().ops),
    "dma_buf_detach": lambda g, t, fd, a, s: dma_buf_detach(g.dmabuf, a),
    "dma_buf_map_attachment_unlocked": lambda g, t, fd, a, s: dma_buf_map_attachment_unlocked(a),
    "dma_buf_unmap_attachment_unlocked": lambda g, t, fd, a, s: dma_buf_unmap_attachment_unlocked(a, s),
}
LOCK_FREE = {
    "dma_buf_get": lambda g, t, fd, a, s: dma_buf_get(t, fd),
    "dma_buf_fd": lambda g, t, fd, a, s: dma_buf_fd(g.dmabuf, t),
    "dma_buf_put": lambda g, t, fd, a, s: dma_buf_put(g.dmabuf, caller=NIC),
}
"""File calls: fget, fd_install and fput never touch the reservation lock."""


@pytest.mark.parametrize("call", sorted(MUST_NOT_HOLD))
def test_calls_that_take_the_lock_self_deadlock_when_the_caller_holds_it(call):
    core = make_core()
    gpu, table, fd, attach, sgt = _setup(core)
    state = (gpu.dmabuf.refcount, list(gpu.dmabuf.attachments), list(attach.mappings), dict(table.files))
    with held(gpu.dmabuf.resv, NIC):
        with pytest.raises(DeadlockError) as err:
            MUST_NOT_HOLD[call](gpu, table, fd, attach, sgt)
    assert call in str(err.value).split(":")[0] and "self-deadlock" in str(err.value)
    assert "dmabuf1.resv" in str(err.value) and NIC in str(err.value) and "must not hold" in str(err.value)
    assert state == (gpu.dmabuf.refcount, gpu.dmabuf.attachments, attach.mappings, table.files)


@pytest.mark.parametrize("call", ["dma_buf_attach", "dma_buf_dynamic_attach", "dma_buf_detach",
                                  "dma_buf_map_attachment_unlocked", "dma_buf_unmap_attachment_unlocked"])
def test_calls_that_take_the_lock_cannot_wait_for_another_holder(call):
    core = make_core()
    gpu, table, fd, attach, sgt = _setup(core)
    with held(gpu.dmabuf.resv, "gpu0"):
        with pytest.raises(DeadlockError, match="would wait forever.*held by gpu0"):
            MUST_NOT_HOLD[call](gpu, table, fd, attach, sgt)
    assert gpu.dmabuf.resv.holder is None and len(attach.mappings) == 1


@pytest.mark.parametrize("call", sorted(LOCK_FREE))
def test_file_calls_do_not_care_who_holds_the_lock(call):
    core = make_core()
    gpu, table, fd, attach, sgt = _setup(core)
    refcount = gpu.dmabuf.refcount
    with held(gpu.dmabuf.resv, NIC):
        LOCK_FREE[call](gpu, table, fd, attach, sgt)
    assert gpu.dmabuf.refcount == refcount + {"dma_buf_get": 1, "dma_buf_fd": 0, "dma_buf_put": -1}[call]
    assert fd in table.files and gpu.dmabuf.resv.holder is None


def test_last_put_under_the_lock_releases_without_deadlock():
    core = make_core()
    gpu = MovableExporter(core, MiB)
    with held(gpu.dmabuf.resv, "gpu0"):
        dma_buf_put(gpu.dmabuf, caller="gpu0")  # fput defers the release; the lock never matters
    assert gpu.dmabuf.released and gpu.release_calls == 1


MUST_HOLD = {
    "dma_buf_pin": (NIC, lambda g, a, s: dma_buf_pin(a)),
    "dma_buf_unpin": (NIC, lambda g, a, s: dma_buf_unpin(a)),
    "dma_buf_map_attachment": (NIC, lambda g, a, s: dma_buf_map_attachment(a)),
    "dma_buf_unmap_attachment": (NIC, lambda g, a, s: dma_buf_unmap_attachment(a, s)),
    "dma_buf_move_notify": ("gpu0", lambda g, a, s: dma_buf_move_notify(g.dmabuf)),
}


@pytest.mark.parametrize("holder", [None, "other"])
@pytest.mark.parametrize("call", sorted(MUST_HOLD))
def test_calls_under_the_lock_fail_lockdep_without_it(call, holder):
    core = make_core()
    gpu, _, _, attach, sgt = _setup(core)
    owner, run = MUST_HOLD[call]
    if holder:
        gpu.dmabuf.resv.lock(holder)
    with pytest.raises(ProtocolError) as err:
        run(gpu, attach, sgt)
    message = str(err.value)
    assert message.startswith(call) and "dma_resv_assert_held" in message and f"not {owner}" in message
    assert "locking convention" in message and (holder or "nobody") in message
    assert len(attach.mappings) == 1 and attach.pin_count == 0 and gpu.pin_count == 0


def test_resv_lock_rules():
    resv = DmaResv("dmabuf9.resv")
    resv.lock("a")
    assert resv.is_held_by("a") and not resv.is_held_by("b")
    with pytest.raises(DeadlockError, match=r"dmabuf9\.resv: a locks it again.*self-deadlock"):
        resv.lock("a")
    with pytest.raises(DeadlockError, match="b would wait forever: held by a"):
        resv.lock("b")
    with pytest.raises(ProtocolError, match="unlocked by b but held by a"):
        resv.unlock("b")
    resv.unlock("a")
    with pytest.raises(ProtocolError, match="held by nobody"):
        resv.unlock("a")


# ------------------------------------------------------------------------------------------------ fences
def test_add_fence_needs_the_lock_and_replaces_same_context():
    resv = DmaResv("r")
    with pytest.raises(ProtocolError, match="dma_resv_add_fence.*dma_resv_assert_held"):
        dma_resv_add_fence(resv, DmaFence("copy", 1, 10), DmaResvUsage.KERNEL, holder="gpu0")
    with held(resv, "gpu0"):
        dma_resv_add_fence(resv, DmaFence("copy", 1, 10), DmaResvUsage.KERNEL, holder="gpu0")
        dma_resv_add_fence(resv, DmaFence("copy", 2, 30), DmaResvUsage.KERNEL, holder="gpu0")
        dma_resv_add_fence(resv, DmaFence("copy", 3, 50), DmaResvUsage.READ, holder="gpu0")
    assert [(f.seqno, u) for f, u in resv.fences] == [(2, DmaResvUsage.KERNEL), (3, DmaResvUsage.READ)]


@pytest.mark.parametrize("usage, now, done", [
    (DmaResvUsage.KERNEL, 0, 10), (DmaResvUsage.WRITE, 0, 20), (DmaResvUsage.READ, 0, 30),
    (DmaResvUsage.BOOKKEEP, 0, 40), (DmaResvUsage.BOOKKEEP, 100, 100),
])
def test_wait_covers_the_usage_and_every_stronger_one(usage, now, done):
    resv = DmaResv("r")
    with held(resv, "x"):
        for i, u in enumerate(DmaResvUsage):
            dma_resv_add_fence(resv, DmaFence(f"c{i}", 1, 10 * (i + 1)), u, holder="x")
    assert dma_resv_wait_timeout(resv, usage, now_ps=now) == done


def test_wait_timeout_is_etimedout():
    resv = DmaResv("r")
    with held(resv, "x"):
        dma_resv_add_fence(resv, DmaFence("c", 1, 1000), DmaResvUsage.KERNEL, holder="x")
    assert dma_resv_wait_timeout(resv, DmaResvUsage.KERNEL, now_ps=0, timeout_ps=1000) == 1000
    with pytest.raises(VerbsError) as err:
        dma_resv_wait_timeout(resv, DmaResvUsage.KERNEL, now_ps=0, timeout_ps=999)
    assert (err.value.errno, err.value.call) == ("ETIMEDOUT", "dma_resv_wait_timeout")


# ------------------------------------------------------------------------------------------------ pin / map
def test_static_importer_pin_only_warns_and_the_core_passes_an_extra_unpin_to_the_exporter():
    core = make_core()
    gpu = MovableExporter(core, MiB)
    attach = dma_buf_attach(gpu.dmabuf, "ahci")
    with held(gpu.dmabuf.resv, "ahci"):
        dma_buf_pin(attach)
        assert gpu.pin_count == 1 and attach.pin_count == 1
        dma_buf_unpin(attach)
        dma_buf_unpin(attach)
    assert gpu.pin_count == 0 and attach.pin_count == -1  # no guard in the core
    assert sum("WARN_ON(!attach->importer_ops)" in w for w in core.warnings) == 3
    assert core.warnings[-1] == "ttm_bo_unpin: WARN_ON_ONCE: dmabuf1 is not pinned"  # the exporter's guard


def test_an_extra_unpin_drops_another_importers_pin_and_the_buffer_moves_under_it():
    core = make_core()
    gpu, other = MovableExporter(core, MiB), Importer()
    mine, theirs = (dma_buf_dynamic_attach(gpu.dmabuf, dev, imp.ops) for dev, imp in ((NIC, Importer()),
                                                                                   ("mlx5_1", other)))
    with held(gpu.dmabuf.resv, "mlx5_1"):
        dma_buf_pin(theirs)
        sgt = dma_buf_map_attachment(theirs)
    with held(gpu.dmabuf.resv, NIC):
        dma_buf_pin(mine)
        dma_buf_unpin(mine)
        dma_buf_unpin(mine)
    gpu.move(Placement.SYSTEM)  # theirs still counts its pin, the exporter no longer does
    assert theirs.pin_count == 1 and gpu.pin_count == 0 and other.notified == [theirs]
    with pytest.raises(InvariantViolation, match="stale mapping"):
        check_dma(sgt)


@pytest.mark.parametrize("exporter, dynamic, move_notify, pinned", [
    ("movable", False, True, True), ("movable", False, False, True),
    ("movable", True, True, False), ("movable", True, False, True),
    ("static", False, True, False), ("static", True, False, False),
])
def test_pin_on_map(exporter, dynamic, move_notify, pinned):
    core = make_core(move_notify)
    cls = MovableExporter if exporter == "movable" else StaticExporter
    gpu = cls(core, MiB, placement=Placement.SYSTEM)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops if dynamic else None)
    sgt = dma_buf_map_attachment_unlocked(attach)
    assert sgt.pinned_on_map is pinned and attach.pinned is pinned
    assert getattr(gpu, "pin_count", 0) == int(pinned)
    dma_buf_unmap_attachment_unlocked(attach, sgt)
    assert getattr(gpu, "pin_count", 0) == 0 and attach.mappings == [] and sgt.unmapped


@pytest.mark.parametrize("pin_errno, warned", [("ENOMEM", False), ("EBUSY", True)])
def test_exporter_pin_errors_propagate_from_pin_and_map(pin_errno, warned):
    core = make_core()
    buf, log = custom_buffer(core, pin=raising(pin_errno), unpin=nop)
    attach = dma_buf_attach(buf, "ahci")
    with held(buf.resv, "ahci"):
        with pytest.raises(VerbsError) as err:
            dma_buf_pin(attach)
        assert err.value.errno == pin_errno and attach.pin_count == 0
        with pytest.raises(VerbsError) as err:
            dma_buf_map_attachment(attach)
    assert err.value.errno == pin_errno and attach.mappings == [] and "map" not in log
    assert any("WARN_ON_ONCE" in w and "-EBUSY" in w for w in core.warnings) is warned


def test_failed_map_is_enomem_and_drops_the_pin_it_took():
    core = make_core()
    pins = []
    buf, log = custom_buffer(core, map_dma_buf=lambda *a: None, pin=lambda a: pins.append(1),
                             unpin=lambda a: pins.pop())
    attach = dma_buf_attach(buf, "ahci")
    with pytest.raises(VerbsError) as err:
        dma_buf_map_attachment_unlocked(attach)
    assert (err.value.errno, err.value.call) == ("ENOMEM", "dma_buf_map_attachment")
    assert pins == [] and attach.mappings == [] and buf.resv.holder is None


def test_static_importer_map_waits_kernel_fences_dynamic_does_not():
    core = make_core()
    gpu = MovableExporter(core, MiB, placement=Placement.SYSTEM)
    with held(gpu.dmabuf.resv, "gpu0"):
        dma_resv_add_fence(gpu.dmabuf.resv, DmaFence("clear", 1, 50 * PS_PER_US), DmaResvUsage.KERNEL,
                           holder="gpu0")
        dma_resv_add_fence(gpu.dmabuf.resv, DmaFence("render", 1, 900 * PS_PER_US), DmaResvUsage.READ,
                           holder="gpu0")
    dynamic = dma_buf_map_attachment_unlocked(dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops))
    assert core.now_ps(NIC) < 50 * PS_PER_US and dynamic.ready_at_ps == 50 * PS_PER_US
    with pytest.raises(InvariantViolation, match="KERNEL fences"):
        check_dma(dynamic, now_ps=core.now_ps(NIC))
    check_dma(dynamic, now_ps=50 * PS_PER_US)
    static = dma_buf_map_attachment_unlocked(dma_buf_attach(gpu.dmabuf, "ahci"))
    assert core.now_ps("ahci") == 50 * PS_PER_US == static.ready_at_ps
    check_dma(static, now_ps=core.now_ps("ahci"))
    # the static importer waited with the lock held: whoever locks next continues no earlier than that
    gpu.dmabuf.resv.lock(NIC)
    assert core.now_ps(NIC) == 50 * PS_PER_US
    gpu.dmabuf.resv.unlock(NIC)


# ------------------------------------------------------------------------------------------------ unmap / detach
def test_unmap_misuse_is_a_protocol_error():
    core = make_core()
    gpu, _, _, attach, sgt = _setup(core)
    other = dma_buf_dynamic_attach(gpu.dmabuf, "mlx5_1", Importer().ops)
    cases = [(lambda: dma_buf_unmap_attachment_unlocked(other, sgt), "mapped for mlx5_0"),
             (lambda: dma_buf_unmap_attachment_unlocked(attach, sgt, DmaDataDirection.TO_DEVICE),
              "unmapped TO_DEVICE but mapped BIDIRECTIONAL")]
    for call, rule in cases:
        with pytest.raises(ProtocolError, match=rule):
            call()
    dma_buf_unmap_attachment_unlocked(attach, sgt)
    with pytest.raises(ProtocolError, match="double unmap"):
        dma_buf_unmap_attachment_unlocked(attach, sgt)
    with pytest.raises(InvariantViolation, match="unmapped"):
        check_dma(sgt)


def test_detach_rules():
    core = make_core()
    gpu, _, _, attach, sgt = _setup(core)
    foreign = MovableExporter(core, MiB, name="gpu1").dmabuf
    with pytest.raises(ProtocolError, match="WARN_ON: the attachment belongs to dmabuf1, not dmabuf2"):
        dma_buf_detach(foreign, attach)
    dma_buf_detach(gpu.dmabuf, attach := dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops))
    assert attach.detached and gpu.dmabuf.attachments == [sgt.attach]
    for call in (lambda: dma_buf_detach(gpu.dmabuf, attach), lambda: dma_buf_map_attachment_unlocked(attach)):
        with pytest.raises(ProtocolError, match="use after free.*detached"):
            call()


def test_detach_calls_exporter_detach_unlocked():
    core = make_core()
    seen = []
    buf, _ = custom_buffer(core, detach=lambda d, a: seen.append(d.resv.holder))
    dma_buf_detach(buf, dma_buf_attach(buf, "ahci"))
    assert seen == [None]


def test_release_with_attachments_warns_and_later_use_is_a_protocol_error():
    core = make_core()
    gpu = MovableExporter(core, MiB)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops)
    dma_buf_put(gpu.dmabuf)
    assert gpu.release_calls == 1 and "WARN_ON(!list_empty(&dmabuf->attachments))" in core.warnings[-1]
    for call in (lambda: dma_buf_map_attachment_unlocked(attach), lambda: dma_buf_attach(gpu.dmabuf, NIC),
                 lambda: gpu.move(Placement.SYSTEM)):
        with pytest.raises(ProtocolError, match="use after release"):
            call()


# ------------------------------------------------------------------------------------------------ move
def test_move_notifies_dynamic_importers_only_and_makes_their_mappings_stale():
    core = make_core()
    gpu = MovableExporter(core, 64 * MiB)
    dyn, keep = Importer(), Importer()
    dynamic = dma_buf_dynamic_attach(gpu.dmabuf, NIC, dyn.ops)
    dma_buf_attach(gpu.dmabuf, "ahci")                     # static, not mapped: not pinned, not notified
    sgt = dma_buf_map_attachment_unlocked(dynamic)
    check_dma(sgt)
    gpu.move(Placement.SYSTEM)
    assert dyn.notified == [dynamic] and keep.notified == []
    assert gpu.dmabuf.placement is Placement.SYSTEM and gpu.dmabuf.generation == 1
    with pytest.raises(InvariantViolation, match="stale mapping: made for placement generation 0 .VRAM."):
        check_dma(sgt)
    fresh = dma_buf_map_attachment_unlocked(dynamic)
    check_dma(fresh)
    assert fresh.placement is Placement.SYSTEM and fresh.segments != sgt.segments


def test_importer_unmapping_in_move_notify_runs_in_the_exporter_context():
    core = make_core()
    gpu, mlx5 = MovableExporter(core, MiB), Importer(unmap=True)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, mlx5.ops)
    sgt = dma_buf_map_attachment_unlocked(attach)
    gpu.move(Placement.SYSTEM)
    assert sgt.unmapped and attach.mappings == [] and gpu.dmabuf.resv.holder is None


def test_detach_from_move_notify_self_deadlocks():
    core = make_core()
    gpu = MovableExporter(core, MiB)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, DmaBufAttachOps(
        move_notify=lambda a: dma_buf_detach(a.dmabuf, a)))
    with pytest.raises(DeadlockError, match="dma_buf_detach: self-deadlock: gpu0 holds dmabuf1.resv"):
        gpu.move(Placement.SYSTEM)
    assert not attach.detached and gpu.dmabuf.resv.holder is None and gpu.dmabuf.generation == 0


@pytest.mark.parametrize("dynamic, move_notify", [(False, True), (True, False)])
def test_pinned_buffers_never_move(dynamic, move_notify):
    core = make_core(move_notify)
    gpu, imp = MovableExporter(core, MiB), Importer()
    sgt = dma_buf_map_attachment_unlocked(dma_buf_dynamic_attach(gpu.dmabuf, NIC, imp.ops if dynamic else None))
    with pytest.raises(VerbsError) as err:
        gpu.move(Placement.SYSTEM)
    assert err.value.errno == "EBUSY" and "pinned" in err.value.rule
    assert gpu.dmabuf.generation == 0 and imp.notified == [] and gpu.dmabuf.resv.holder is None
    check_dma(sgt)


def test_move_while_an_importer_holds_the_lock_deadlocks():
    core = make_core()
    gpu = MovableExporter(core, MiB)
    with held(gpu.dmabuf.resv, NIC):
        with pytest.raises(DeadlockError, match="gpu0 would wait forever: held by mlx5_0"):
            gpu.move(Placement.SYSTEM)
        assert gpu.dmabuf.resv.holder == NIC and gpu.dmabuf.generation == 0


@pytest.mark.parametrize("mapped, pinned", [(True, 0), (False, 1)])
def test_detach_with_live_mappings_or_pins_completes_and_the_leak_is_an_invariant_violation(mapped, pinned):
    core = make_core()
    gpu, _, _, attach, sgt = _setup(core)
    if not mapped:
        dma_buf_unmap_attachment_unlocked(attach, sgt)
        with held(gpu.dmabuf.resv, NIC):
            dma_buf_pin(attach)
    with pytest.raises(InvariantViolation, match=f"with {int(mapped)} mapping.*{pinned} pin.*leaks them"):
        dma_buf_detach(gpu.dmabuf, attach)
    assert attach.detached and gpu.dmabuf.attachments == [] and gpu.pin_count == pinned  # the leaked pin stays
    if mapped:
        check_dma(sgt)  # the leaked mapping still reaches the buffer


def test_move_notify_calls_a_pinned_importer_without_a_warning_of_its_own():
    core = make_core()
    gpu, imp = MovableExporter(core, MiB), Importer()
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, imp.ops)
    with held(gpu.dmabuf.resv, NIC):
        dma_buf_pin(attach)
    with held(gpu.dmabuf.resv, "gpu0"):
        dma_buf_move_notify(gpu.dmabuf)
    assert imp.notified == [attach] and core.warnings == []


def test_the_exporter_attach_op_runs_before_the_lock_is_taken():
    core = make_core()
    gpu = StaticExporter(core, MiB, placement=Placement.VRAM)
    with held(gpu.dmabuf.resv, NIC):
        with pytest.raises(VerbsError, match="ENOTSUPP"):  # refused by nv_dma_buf_attach, not a deadlock
            dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer(p2p=False).ops)
        with pytest.raises(DeadlockError, match="self-deadlock"):
            dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer(p2p=True).ops)


def test_move_fence_times_copy_after_notify_and_after_previous_fences():
    costs = DmaBufCosts()
    core = make_core(costs=costs)
    gpu = MovableExporter(core, 256 * MiB)
    dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops)
    start = core.now_ps("gpu0")
    assert start == costs.export_ps
    first = gpu.move(Placement.SYSTEM)
    copy = gpu.copy.copy_ps(256 * MiB, Placement.VRAM, Placement.SYSTEM)
    assert first.signaled_at_ps == start + costs.move_notify_ps + copy
    assert core.now_ps("gpu0") == start + costs.move_notify_ps      # the CPU does not wait for the copy
    second = gpu.move(Placement.VRAM)
    back = gpu.copy.copy_ps(256 * MiB, Placement.SYSTEM, Placement.VRAM)
    assert second.signaled_at_ps == first.signaled_at_ps + back       # queued behind the first copy
    assert dma_resv_wait_timeout(gpu.dmabuf.resv, DmaResvUsage.KERNEL, now_ps=0) == second.signaled_at_ps
    assert copy > 256 * MiB / 56e9 * 1e12                             # 55.4 GB/s plus setup


# ------------------------------------------------------------------------------------------------ trace / costs
def test_calls_are_traced_as_slices_with_their_cost_and_events_as_instants():
    costs = DmaBufCosts(map_ps=3 * PS_PER_US, map_page_ps=1000)
    core = make_core(trace=True, costs=costs)
    gpu = MovableExporter(core, MiB)
    sgt = dma_buf_map_attachment_unlocked(dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops))
    gpu.move(Placement.SYSTEM)
    events = core.env.trace.events
    by_name = {e.name: e for e in events}
    assert by_name["dma_buf_export"].dur_ps == costs.export_ps and by_name["dma_buf_export"].component == "gpu0"
    mapped = by_name["dma_buf_map_attachment"]
    assert (mapped.component, mapped.dur_ps) == (NIC, 3 * PS_PER_US + 256 * 1000)
    assert mapped.time_ps == costs.attach_ps and core.now_ps(NIC) == costs.attach_ps + mapped.dur_ps
    assert by_name["MappingInvalidated"].dur_ps is None and by_name["MappingInvalidated"].args["dev"] == NIC
    assert by_name["BufferMoved"].args["dst"] == "SYSTEM" and sgt.nbytes == MiB
    move = by_name["MovableExporter.move"]
    waited_for_lock = mapped.time_ps + mapped.dur_ps - move.time_ps  # the map held the lock until then
    assert waited_for_lock > 0 and move.dur_ps == waited_for_lock + costs.move_notify_ps


def test_context_clocks_run_ahead_of_env_now_independently_and_follow_it():
    core = make_core(trace=True)
    gpu = MovableExporter(core, MiB)
    assert core.now_ps("gpu0") == DmaBufCosts().export_ps and core.now_ps(NIC) == 0
    core.env.run(until=5 * PS_PER_US)
    attach = dma_buf_dynamic_attach(gpu.dmabuf, NIC, Importer().ops)
    assert attach.dmabuf is gpu.dmabuf
    assert core.now_ps(NIC) == 5 * PS_PER_US + DmaBufCosts().attach_ps
    assert core.now_ps("gpu0") == 5 * PS_PER_US                      # idle contexts catch up with env.now
    assert [e.time_ps for e in core.env.trace.events if e.name == "dma_buf_dynamic_attach"] == [5 * PS_PER_US]


@pytest.mark.parametrize("enabled", [False, True])
def test_move_notify_reaches_dynamic_importers_whatever_config_dmabuf_move_notify_says(enabled):
    """drivers/dma-buf/dma-buf.c ``dma_buf_move_notify`` has no IS_ENABLED(CONFIG_DMABUF_MOVE_NOTIFY) check; the
    option (Kconfig: "Don't pin buffers if the dynamic DMA-buf interface is available on both the exporter as
    well as the importer") only decides whether a dynamic importer's map pins (``dma_buf_pin_on_map``)."""
    core = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=enabled))
    gpu = MovableExporter(core, 1 << 20, name="amdgpu")
    told = []
    attach = dma_buf_dynamic_attach(gpu.dmabuf, "nic", DmaBufAttachOps(move_notify=told.append))
    gpu.move(Placement.SYSTEM)
    assert told == [attach]
    gpu.dmabuf.resv.lock("nic")
    sgt = dma_buf_map_attachment(attach)
    gpu.dmabuf.resv.unlock("nic")
    assert sgt.pinned_on_map is (not enabled)

"""Random legal and illegal dma-buf call sequences checked against a small reference model.

Every example starts from the scenario the project is about (a movable VRAM buffer with an fd and a dynamically
attached, mapped importer; in a quarter of them a VFIO-exported BAR instead), on kernel 6.14 (maps at attach), 6.18
or 7.1 (optional invalidate_mappings, CONFIG_DMABUF_MOVE_NOTIFY always built), with the option on or off where it is
one, then makes random calls with and without the reservation lock held (``dma_buf_attach_revocable`` among them, a
call that exists from 7.1, VFIO exports that refuse importers and are revoked, and NVIDIA exports of the PCIe
mapping type that admit only the peer in the GPU's IOMMU group; a fault injector fails a map after an invalidation). Each call must succeed exactly
when the reference model says so, or raise the typed error (and errno) the model predicts; a detach that leaks
mappings or pins completes and then raises InvariantViolation. After every step: refcounts and release counts, lock
holders, attachment and mapping lists, the fd table, exporter pin counts (TTM's: an unpin of an unpinned buffer
WARNs and does nothing) and the WARN log match the model; a buffer the exporter counts pinned never moved; a live
mapping to a stale placement exists only for a notified dynamic importer, an importer without the callback, a
mapping leaked by detach, or after an unpin too many let the buffer move, and ``check_dma`` flags exactly those.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.dmabuf import (DmaBufAttachOps, DmaBufCore, DmaBufOps, FdTable, KernelConfig, MovableExporter,
                           Placement, StaticExporter, check_dma, dma_buf_attach, dma_buf_detach,
                           dma_buf_dynamic_attach, dma_buf_export, dma_buf_fd, dma_buf_get,
                           dma_buf_map_attachment, dma_buf_map_attachment_unlocked, dma_buf_move_notify,
                           dma_buf_pin, dma_buf_put, dma_buf_unmap_attachment, dma_buf_unmap_attachment_unlocked,
                           dma_buf_unpin)
from models.dmabuf.exporters import MappingType
from models.dmabuf.faults import FaultInjector
from models.dmabuf.revoke import VfioExporter, dma_buf_attach_revocable
from sim.core import DeadlockError, Environment, InvariantViolation, ProtocolError, SimError, VerbsError
from tests.properties import examples

DEVS = ("nic0", "nic1")
APP = "app"
MAX_FDS = 8
PROTO, DEADLOCK, LEAK = (ProtocolError, None), (DeadlockError, None), (InvariantViolation, None)
PICK = st.integers(0, 7)
"""Index of the buffer, attachment or mapping a rule acts on (modulo how many exist)."""
FD = st.integers(-1, MAX_FDS)
"""fds are small, so random numbers hit open dma-buf fds, stdio (plain files) and closed fds alike."""
RARELY = st.sampled_from([False, False, False, True])
"""Hold the lock around calls that must not hold it, or drop a last reference, only sometimes."""
KINDS = st.sampled_from(["static", "dynamic", "dynamic", "dynamic-no-p2p", "no-move-notify"])


def errno(name: str) -> tuple[type, str]:
    return (VerbsError, name)


@dataclass(eq=False)
class RefMap:
    real: object
    gen: int
    pinned_on_map: bool
    notified_at_map: int
    unmapped: bool = False
    cached: bool = False
    """Mapped at attach (6.14): maps return it, unmaps leave it, detach unmaps it."""


@dataclass(eq=False)
class RefAttach:
    buf: RefBuf
    dev: str
    dynamic: bool
    unmap_on_notify: bool
    has_op: bool = True
    real: object = None
    pin_count: int = 0
    notified: int = 0
    seen: list = field(default_factory=list)
    maps: list[RefMap] = field(default_factory=list)
    detached: bool = False

    def move_notify(self, attach) -> None:
        """The importer's callback: record, and drop every mapping when it behaves like mlx5."""
        self.seen.append(attach)
        if self.unmap_on_notify:
            for sgt in list(attach.mappings):
                dma_buf_unmap_attachment(attach, sgt)

    def cached(self) -> RefMap | None:
        return next((m for m in self.maps if m.cached and not m.unmapped), None)

    def live_maps(self) -> list[RefMap]:
        return [m for m in self.maps if not m.unmapped]

    def pinned(self) -> bool:
        return self.pin_count > 0 or any(m.pinned_on_map for m in self.live_maps())


@dataclass(eq=False)
class RefBuf:
    exporter: MovableExporter | StaticExporter | VfioExporter
    movable: bool
    pin_op: bool
    """The exporter has a pin op (the core then treats it as dynamic)."""
    vfio: bool = False
    pcie: bool = False
    """An NVIDIA export of the PCIe mapping type on a coherent platform: only DEVS[0] shares the GPU's IOMMU
    group."""
    revoked: bool = False
    invalidations: int = 0
    injector: FaultInjector | None = None
    fail: tuple[int, str] | None = None
    """An armed ``fail_map_after_invalidate``: the invalidation count when it was armed and its errno."""
    refcount: int = 1
    released: bool = False
    holder: str | None = None
    gen: int = 0
    atts: list[RefAttach] = field(default_factory=list)
    exp_pins: int = 0
    """The exporter's pin count (TTM's ``pin_count``)."""
    stolen: bool = False
    """An unpin found the exporter unpinned, or dropped a pin another attachment counts on."""

    @property
    def real(self):
        return self.exporter.dmabuf

    def live_atts(self) -> list[RefAttach]:
        return [a for a in self.atts if not a.detached]

    def held_pins(self) -> int:
        """Pins the attachments believe they hold."""
        return sum(a.pin_count + sum(m.pinned_on_map for m in a.live_maps()) for a in self.atts)


class DmaBufMachine(RuleBasedStateMachine):
    @initialize(move_notify=st.booleans(), kind=st.sampled_from(["dynamic", "dynamic-no-p2p", "static"]),
                unmap_on_notify=RARELY, version=st.sampled_from(["6.14", "6.18", "7.1"]),
                first=st.sampled_from(["movable", "movable", "movable", "vfio"]))
    def setup(self, move_notify, kind, unmap_on_notify, version, first):
        self.config = KernelConfig(move_notify_enabled=move_notify or version == "7.1", version=version)
        self.behaviour = self.config.behaviour
        self.core = DmaBufCore(Environment(), self.config)
        self.table = FdTable(APP, max_fds=MAX_FDS)
        self.files: dict[int, RefBuf | str] = {0: "plain", 1: "plain", 2: "plain"}
        self.bufs: list[RefBuf] = []
        self.atts: list[RefAttach] = []
        self.warns = 0
        self.pinned_gen: dict[int, int] = {}
        self.export(first, Placement.VRAM, "", with_fd=True, hold=False)
        self.attach(0, DEVS[0], kind, unmap_on_notify, hold=False, map_now=True)

    # ---------------------------------------------------------------------------------------- helpers
    def run(self, expected, call):
        """Run ``call``; check it succeeded iff ``expected`` is None, else raised exactly that error."""
        try:
            result = call()
        except SimError as err:
            assert not isinstance(err, InvariantViolation) or expected == LEAK, err
            if expected == LEAK:
                assert isinstance(err, InvariantViolation) and "leaks them" in str(err), err
                return True, None
            assert expected is not None, f"unexpected {err!r}"
            assert type(err) is expected[0], f"expected {expected}, got {err!r}"
            assert expected[1] is None or err.errno == expected[1], f"expected {expected}, got {err!r}"
            return False, None
        assert expected is None, f"expected {expected}, call succeeded"
        return True, result

    @contextmanager
    def holding(self, buf: RefBuf, who: str, hold: bool):
        """Hold ``buf``'s lock as ``who`` around a call when asked and the lock is free."""
        took = hold and buf.holder is None
        if took:
            buf.real.resv.lock(who)
            buf.holder = who
        try:
            yield
        finally:
            if took:
                buf.real.resv.unlock(who)
                buf.holder = None

    def _put(self, buf: RefBuf, caller: str):
        """Expected outcome of dma_buf_put by ``caller``: the lock plays no part (fput defers the release)."""
        return PROTO if buf.released else None

    def _unpin(self, buf: RefBuf) -> None:
        """The exporter's unpin (TTM): WARN and nothing when unpinned."""
        if not buf.movable:
            return
        if buf.exp_pins == 0:
            self.warns += 1
            buf.stolen = True
        else:
            buf.exp_pins -= 1

    def _apply_put(self, buf: RefBuf) -> None:
        buf.refcount -= 1
        if buf.refcount == 0:
            buf.released = True
            self.warns += bool(buf.live_atts())

    def _attached(self, att: RefAttach) -> bool:
        return not (att.buf.released or att.detached)

    def _notify_all(self, buf: RefBuf) -> None:
        buf.invalidations += 1
        for att in buf.live_atts():
            if not att.dynamic or not att.has_op:
                continue
            att.notified += 1
            if att.unmap_on_notify:
                for m in att.live_maps():
                    if m.cached:  # an unmap of the sg table cached at attach does nothing
                        continue
                    m.unmapped = True
                    if m.pinned_on_map:
                        self._unpin(buf)

    # ---------------------------------------------------------------------------------------- buffers / fds
    @rule(kind=st.sampled_from(["movable", "static", "static-pcie", "vfio", "invalid"]),
          placement=st.sampled_from(Placement),
          missing=st.sampled_from(["map_dma_buf", "unmap_dma_buf", "release", "pin", "unpin", "priv"]),
          with_fd=st.booleans(), hold=RARELY)
    def export(self, kind, placement, missing, with_fd, hold):
        """Export a buffer (or fail to, with incomplete ops); optionally hand its reference to an fd."""
        if kind == "invalid":
            ops = dict(map_dma_buf=print, unmap_dma_buf=print, release=print)
            if missing in ops:
                ops[missing] = None
            elif missing != "priv":
                ops[missing] = print
            self.run(errno("EINVAL"), lambda: dma_buf_export(self.core, DmaBufOps(**ops), 4096,
                                                             priv=None if missing == "priv" else self,
                                                             exp_name="bad"))
            self.warns += 1
            return
        name = f"gpu{len(self.bufs)}"
        if kind == "vfio":
            buf = RefBuf(VfioExporter(self.core, 1 << 20, name=name), False,
                         pin_op=not self.behaviour.has_attach_revocable, vfio=True)
        elif kind == "static-pcie":
            buf = RefBuf(StaticExporter(self.core, 1 << 20, name=name, placement=placement, coherent=True,
                                        mapping_type=MappingType.FORCE_PCIE,
                                        direct_pci_topology=lambda dev: dev == DEVS[0]), False, pin_op=False,
                         pcie=True)
        else:
            cls = MovableExporter if kind == "movable" else StaticExporter
            buf = RefBuf(cls(self.core, 1 << 20, name=name, placement=placement), kind == "movable",
                         pin_op=kind == "movable")
        self.bufs.append(buf)
        if not with_fd:
            return
        with self.holding(buf, APP, hold):
            expected = errno("EMFILE") if len(self.files) == MAX_FDS else None
            ok, fd = self.run(expected, lambda: dma_buf_fd(buf.real, self.table))
        if ok:
            self.files[fd] = buf

    @rule(fd=FD, dev=st.sampled_from(DEVS), hold=RARELY)
    def get(self, fd, dev, hold):
        file = self.files.get(fd)
        if not isinstance(file, RefBuf):
            self.run(errno("EBADF") if file is None else errno("EINVAL"), lambda: dma_buf_get(self.table, fd))
            return
        with self.holding(file, dev, hold):
            expected = PROTO if file.released else None
            ok, got = self.run(expected, lambda: dma_buf_get(self.table, fd, caller=dev))
        if ok:
            assert got is file.real
            file.refcount += 1

    @rule(fd=FD, release=RARELY)
    def close(self, fd, release):
        file = self.files.get(fd)
        if isinstance(file, RefBuf) and file.refcount == 1 and not release:
            return                  # let buffers live long enough to be attached, mapped and moved
        expected = errno("EBADF") if file is None else None if file == "plain" else self._put(file, APP)
        ok, _ = self.run(expected, lambda: self.table.close(fd))
        if ok:
            del self.files[fd]
            if isinstance(file, RefBuf):
                self._apply_put(file)

    @rule(i=PICK, dev=st.sampled_from(DEVS), hold=RARELY, release=RARELY)
    def put(self, i, dev, hold, release):
        buf = self.bufs[i % len(self.bufs)]
        if buf.refcount == 1 and not release:
            return
        with self.holding(buf, dev, hold):
            ok, _ = self.run(self._put(buf, dev), lambda: dma_buf_put(buf.real, caller=dev))
        if ok:
            self._apply_put(buf)

    @rule(i=PICK, who=st.sampled_from(DEVS + (APP, "gpu0")), right_owner=st.sampled_from([True, True, False]))
    def lock_or_unlock(self, i, who, right_owner):
        """Lock a free lock as ``who`` (and again: self-deadlock); unlock a held one as its owner or,
        illegally, as ``who``."""
        buf = self.bufs[i % len(self.bufs)]
        if buf.holder is None:
            self.run(None, lambda: buf.real.resv.lock(who))
            buf.holder = who
            self.run(DEADLOCK, lambda: buf.real.resv.lock(who))
            return
        who = buf.holder if right_owner else who
        ok, _ = self.run(None if buf.holder == who else PROTO, lambda: buf.real.resv.unlock(who))
        if ok:
            buf.holder = None

    # ---------------------------------------------------------------------------------------- importers
    @rule(i=PICK, dev=st.sampled_from(DEVS), kind=KINDS, unmap_on_notify=st.booleans(), hold=RARELY,
          map_now=st.booleans())
    def attach(self, i, dev, kind, unmap_on_notify, hold, map_now):
        """Attach (static, dynamic, dynamic without peer2peer, or ops lacking move_notify); optionally map
        right away with the unlocked variant, as an RDMA driver does at registration."""
        buf = self.bufs[i % len(self.bufs)]
        att = RefAttach(buf, dev, kind != "static", unmap_on_notify, has_op=kind != "no-move-notify")
        ops = (None if kind == "static" else
               DmaBufAttachOps(None if kind == "no-move-notify" else att.move_notify, kind == "dynamic"))
        bad_ops = kind == "no-move-notify" and not self.behaviour.invalidate_optional
        with self.holding(buf, dev, hold):
            refused = (buf.pcie and dev != DEVS[0]) or (
                not buf.movable and not buf.vfio and not buf.pcie and buf.real.placement is Placement.VRAM
                and kind in ("dynamic-no-p2p", "no-move-notify"))
            vfio = ("EOPNOTSUPP" if kind != "dynamic" else "ENODEV" if buf.revoked else None) if buf.vfio else None
            expected = (errno("EINVAL") if bad_ops else PROTO if buf.released else errno(vfio) if vfio
                        else errno("ENOTSUPP") if refused
                        else DEADLOCK if buf.holder is not None else None)  # the exporter's op runs unlocked
            call = (lambda: dma_buf_attach(buf.real, dev)) if ops is None else (
                lambda: dma_buf_dynamic_attach(buf.real, dev, ops))
            ok, att.real = self.run(expected, call)
        self.warns += bad_ops
        if not ok:
            return
        assert att.real.peer2peer is (kind == "dynamic")
        buf.atts.append(att)
        self.atts.append(att)
        if self.behaviour.maps_at_attach and att.dynamic != buf.pin_op:
            buf.exp_pins += buf.movable
            att.maps.append(RefMap(att.real.sgt, buf.gen, buf.movable, att.notified, cached=True))
        if map_now:
            self.map(len(self.atts) - 1, hold=False, unlocked=True)

    @precondition(lambda self: self.atts)
    @rule(i=PICK, hold=st.booleans(), unpin=st.booleans())
    def pin_or_unpin(self, i, hold, unpin):
        att = self.atts[i % len(self.atts)]
        buf = att.buf
        with self.holding(buf, att.dev, hold):
            if not self._attached(att):
                expected = PROTO
            else:
                self.warns += not att.dynamic
                expected = None if buf.holder == att.dev else PROTO
                if expected is None and buf.vfio and buf.pin_op and not unpin:
                    expected = errno("EOPNOTSUPP")              # VFIO's pin op before 7.1
            call = dma_buf_unpin if unpin else dma_buf_pin
            ok, _ = self.run(expected, lambda: call(att.real))
        if not ok:
            return
        att.pin_count += -1 if unpin else 1  # the core counts nothing: an unpin too many goes negative
        if unpin:
            buf.stolen |= att.pin_count < 0
            self._unpin(buf)
        else:
            buf.exp_pins += buf.movable

    @precondition(lambda self: self.atts)
    @rule(i=PICK, hold=st.booleans(), unlocked=st.booleans())
    def map(self, i, hold, unlocked):
        att = self.atts[i % len(self.atts)]
        buf = att.buf
        with self.holding(buf, att.dev, hold):
            expected = (PROTO if not self._attached(att)
                        else (DEADLOCK if buf.holder is not None else None) if unlocked
                        else None if buf.holder == att.dev else PROTO)
            if expected is None and buf.vfio:              # pin on map reaches VFIO's pin op; a revoked BAR
                pins = buf.pin_op and (not att.dynamic or not self.config.move_notify_enabled)
                expected = errno("EOPNOTSUPP") if pins else errno("ENODEV") if buf.revoked else None
            injected = (buf.fail is not None and buf.invalidations > buf.fail[0]
                        and expected in (None, errno("ENODEV")))  # the call reaches the (wrapped) map op
            if injected:
                expected = errno(buf.fail[1])
                buf.fail = None
            call = dma_buf_map_attachment_unlocked if unlocked else dma_buf_map_attachment
            ok, sgt = self.run(expected, lambda: call(att.real))
        if not ok:
            return
        cached = att.cached()
        if cached is not None:
            assert sgt is cached.real
            return
        pinned = buf.movable and (not att.dynamic or not self.config.move_notify_enabled)
        assert sgt.pinned_on_map is pinned and sgt.generation == buf.gen
        buf.exp_pins += pinned
        att.maps.append(RefMap(sgt, buf.gen, pinned, att.notified))

    @precondition(lambda self: any(a.maps for a in self.atts))
    @rule(i=PICK, j=PICK, hold=st.booleans(), unlocked=st.booleans())
    def unmap(self, i, j, hold, unlocked):
        """Unmap one of an attachment's mappings, live or already unmapped."""
        mapped = [a for a in self.atts if a.maps]
        att = mapped[i % len(mapped)]
        m, buf = att.maps[j % len(att.maps)], att.buf
        with self.holding(buf, att.dev, hold):
            expected = (PROTO if not self._attached(att)
                        else DEADLOCK if unlocked and buf.holder is not None    # locks before looking at sgt
                        else PROTO if m.unmapped or not unlocked and buf.holder != att.dev else None)
            call = dma_buf_unmap_attachment_unlocked if unlocked else dma_buf_unmap_attachment
            ok, _ = self.run(expected, lambda: call(att.real, m.real))
        if ok and not m.cached:
            m.unmapped = True
            if m.pinned_on_map:
                self._unpin(buf)

    @precondition(lambda self: self.atts)
    @rule(i=PICK, hold=RARELY)
    def detach(self, i, hold):
        att = self.atts[i % len(self.atts)]
        buf = att.buf
        with self.holding(buf, att.dev, hold):
            cached = att.cached() if self._attached(att) else None
            leaked = [m for m in att.live_maps() if m is not cached]
            expected = (PROTO if not self._attached(att) else DEADLOCK if buf.holder is not None
                        else LEAK if leaked or att.pin_count > 0 else None)
            ok, _ = self.run(expected, lambda: dma_buf_detach(buf.real, att.real))
        if ok:
            att.detached = True
            if cached is not None:
                cached.unmapped = True
                if cached.pinned_on_map:
                    self._unpin(buf)

    @precondition(lambda self: self.atts)
    @rule(i=PICK, hold=RARELY)
    def revocable(self, i, hold):
        """``dma_buf_attach_revocable`` (7.1): true exactly for importers with the callback; a call the kernels
        before 7.1 do not have; the lock plays no part."""
        att = self.atts[i % len(self.atts)]
        with self.holding(att.buf, att.dev, hold):
            expected = None if self.behaviour.has_attach_revocable else PROTO
            ok, revocable = self.run(expected, lambda: dma_buf_attach_revocable(att.real))
        if ok:
            assert revocable is (att.dynamic and att.has_op)

    # ---------------------------------------------------------------------------------------- exporter
    @precondition(lambda self: not self.behaviour.maps_at_attach)
    @rule(i=PICK, name=st.sampled_from(["ENOMEM", "EIO"]), invalidate=st.booleans())
    def inject_map_failure(self, i, name, invalidate):
        """``FaultInjector.fail_map_after_invalidate``: after the buffer's next invalidation, its next map through
        the exporter fails with ``name``; an injector for a released buffer is refused. ``invalidate``: the
        exporter invalidates right after (a bare move_notify under its lock)."""
        buf = self.bufs[i % len(self.bufs)]
        if buf.injector is None:
            ok, buf.injector = self.run(PROTO if buf.released else None, lambda: FaultInjector(buf.real))
            if not ok:
                return
        if buf.fail is None:  # one armed failure at a time (the injector queues them in order)
            buf.injector.fail_map_after_invalidate(name)
            buf.fail = (buf.invalidations, name)
        if invalidate:
            self.move(i, Placement.VRAM, notify_only=True, hold=False)

    @precondition(lambda self: any(b.vfio for b in self.bufs))
    @rule(i=PICK, hold=RARELY)
    def revoke(self, i, hold):
        """VFIO revokes a BAR (the locked part: invalidate, fences): once, and never while the lock is held."""
        buf = [b for b in self.bufs if b.vfio][i % sum(b.vfio for b in self.bufs)]
        with self.holding(buf, buf.exporter.name, hold):
            expected = PROTO if buf.revoked or buf.released else DEADLOCK if buf.holder is not None else None
            ok, revocation = self.run(expected, buf.exporter.start_revocation)
        if ok:
            buf.revoked = True
            self._notify_all(buf)
            assert revocation.left_mapped or revocation.waited_for == sorted(
                {a.dev for a in buf.live_atts() if a.live_maps()})

    @rule(i=PICK, dst=st.sampled_from(Placement), notify_only=RARELY, hold=RARELY)
    def move(self, i, dst, notify_only, hold):
        """``MovableExporter.move`` (which locks itself), or a bare ``dma_buf_move_notify`` under the lock."""
        buf = self.bufs[i % len(self.bufs)]
        ctx = buf.exporter.name
        if notify_only:
            with self.holding(buf, ctx, not hold):      # usually legal: the exporter holds the lock
                expected = PROTO if buf.released else None if buf.holder == ctx else PROTO
                ok, _ = self.run(expected, lambda: dma_buf_move_notify(buf.real, caller=ctx))
            if ok:
                self._notify_all(buf)
            return
        if not buf.movable:
            return
        with self.holding(buf, ctx, hold):
            expected = (PROTO if buf.released else DEADLOCK if buf.holder is not None
                        else errno("EBUSY") if buf.exp_pins else None)
            ok, fence = self.run(expected, lambda: buf.exporter.move(dst))
        if ok:
            self._notify_all(buf)
            buf.gen += 1
            assert buf.real.placement is dst and fence.signaled_at_ps > self.core.now_ps(ctx)

    # ---------------------------------------------------------------------------------------- invariants
    @invariant()
    def matches_reference(self):
        assert len(self.core.warnings) == self.warns
        assert self.table.files.keys() == self.files.keys()
        for fd, file in self.files.items():
            assert self.table.files[fd] is file.real if isinstance(file, RefBuf) else not hasattr(
                self.table.files[fd], "ino")
        for buf in self.bufs:
            real = buf.real
            assert real.refcount == buf.refcount >= 0
            assert real.released is buf.released and buf.exporter.release_calls == int(buf.released)
            assert real.resv.holder == buf.holder and real.generation == buf.gen
            assert real.attachments == [a.real for a in buf.live_atts()]
            for att in buf.atts:
                assert (att.real.pin_count, len(att.seen), att.real.detached) == (att.pin_count, att.notified,
                                                                                  att.detached)
                assert att.real.mappings == [m.real for m in att.live_maps()]

    @invariant()
    def pinned_buffers_never_move(self):
        for i, buf in enumerate(self.bufs):
            if not buf.movable:
                continue
            assert buf.exporter.pin_count == buf.exp_pins
            assert buf.stolen or buf.exp_pins == buf.held_pins()
            if buf.exporter.pin_count:
                assert self.pinned_gen.setdefault(i, buf.real.generation) == buf.real.generation
            else:
                self.pinned_gen.pop(i, None)

    @invariant()
    def stale_mappings_only_for_notified_importers(self):
        for att in self.atts:
            if att.buf.released:
                continue
            for m in att.live_maps():
                if m.gen == att.buf.gen:
                    check_dma(m.real)
                    continue
                leaked = att.detached  # left mapped at detach: nobody notifies it any more
                assert (att.dynamic and (att.notified > m.notified_at_map or not att.has_op)) or att.buf.stolen \
                    or leaked
                try:
                    check_dma(m.real)
                except InvariantViolation as err:
                    assert "stale mapping" in str(err)
                else:
                    raise AssertionError("check_dma missed a stale mapping")


DmaBufMachine.TestCase.settings = settings(max_examples=examples(400), stateful_step_count=50, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
TestDmaBufStateful = DmaBufMachine.TestCase

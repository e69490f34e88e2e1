"""dma-buf memory regions as the NIC drivers implement them, and ``ibv_reg_dmabuf_mr``.

* ``dynamic`` (mlx5): the whole MR is mapped at registration; ``move_notify`` zaps all of the MR's
  translations and unmaps before it returns; the next NIC access faults, and the handler re-maps the whole MR
  under the lock after the exporter's fence and rewrites the MTT with a UMR.
* ``pinned`` (EFA, irdma, bnxt_re...): pinned and mapped at registration; ``move_notify`` only warns (from 7.1
  there is none); after a revoke every access completes in error. A driver that imports revocably (irdma from
  7.1, ``NicParams.dmabuf_revocable``) installs a revoke callback that invalidates the key in hardware: the key
  stays allocated until deregistration, and every later access completes in error.

Deregistration (:meth:`DmabufBacking.release`) revokes the mkey (:meth:`DmabufBacking.revoke_mkey`), then
releases the umem. From 6.14 a dynamic MR's revoke holds the reservation lock and clears the umem's MR, so an
exporter's ``move_notify`` between the two halves finds no MR and returns; from 5.13 to 6.13 it zaps the freed
mkey, and the UMR QP takes an error completion (:attr:`~models.versions.KernelBehaviour.mlx5_dereg_races_invalidate`).

Every NIC access through a mapping is checked with :func:`~models.dmabuf.check_dma`: DMA through a mapping
made before the buffer moved is an :class:`~sim.core.InvariantViolation`. ``ignore_move_notify`` builds the
deliberately broken importer that keeps its stale translations, to show why the protocol exists.
"""

from __future__ import annotations

from sim.core import InvariantViolation, VerbsError, format_duration, format_size

from models.ib.mkey_page import mlx5_umem_dmabuf_default_pgsz
from models.dmabuf import DmaBufAttachment, DmaBufAttachOps, FdTable, Placement, check_dma
from models.nic.nic import UmrParams
from models.nic.translation import DMABUF_MODE, DmabufImporter, Fault, MrBacking
from models.nic.wqe import WcStatus
from models.versions import KernelBehaviour
from models.ib.umem_dmabuf import (IbUmemDmabuf, ib_umem_dmabuf_get, ib_umem_dmabuf_get_pinned,
                                   ib_umem_dmabuf_get_pinned_revocable_and_lock, ib_umem_dmabuf_map_pages,
                                   ib_umem_dmabuf_release, ib_umem_dmabuf_set_revoke_locked,
                                   ib_umem_dmabuf_unmap_pages)


class DmabufBacking(MrBacking):
    """The NIC side of one dma-buf MR (see the module docstring)."""

    def __init__(self, umem: IbUmemDmabuf, umr: UmrParams, mode: DmabufImporter, *, invariants: str = "raise",
                 broken: bool = False) -> None:
        self.umem = umem
        self.broken = broken
        """Ignore move_notify (the deliberately broken importer)."""
        self.umr = umr
        self.mode = DMABUF_MODE[mode]
        self.invariants = invariants
        self.translation_valid = umem.sgt is not None
        self.faults = 0
        self.invalidations = 0
        self.zapped_at_ps = 0
        """When the last move_notify finished zapping (on the exporter's timeline)."""
        self.zapped_placement = None
        """Where the zapped translations pointed (the NIC reaches it until ``zapped_at_ps``)."""
        self.violations: list[str] = []
        self.key_invalidated_at_ps: int | None = None
        """When a revocation invalidated the key in hardware (the revocable pinned importer); None: it was not."""
        self.mkey_revoked_at_ps: int | None = None
        """When deregistration revoked the mkey (the hardware no longer knows it); None: not deregistered."""
        umem.private = self

    @property
    def pinned_bytes(self) -> int:
        """The MR's bytes the exporter cannot move: pinned by the importer, pinned on map because
        CONFIG_DMABUF_MOVE_NOTIFY is off, or exported by a static exporter that never moves memory."""
        umem = self.umem
        static = umem.attach.dmabuf.ops.pin is None  # a static exporter (NVIDIA) never moves its memory
        pinned = umem.pinned or static or (umem.sgt is not None and umem.sgt.pinned_on_map)
        return umem.length if pinned and not umem.revoked else 0

    @property
    def bar1_bytes(self) -> int:
        """BAR1 bytes the exported buffer's mapping holds while this MR has it mapped (shared with any other
        attachment of the same dma-buf)."""
        return self.umem.attach.dmabuf.priv.bar1_bytes if self.umem.sgt is not None else 0

    @property
    def pages(self) -> int:
        """Translation entries of the MR, which a re-map's UMR rewrites (mlx5 dma-buf mkeys are fixed at
        PAGE_SIZE: :func:`~models.ib.mkey_page.mlx5_umem_dmabuf_default_pgsz`)."""
        return -(-self.umem.length // mlx5_umem_dmabuf_default_pgsz())

    def move_notify(self, attach: DmaBufAttachment) -> None:
        """mlx5_ib_dmabuf_invalidate_cb: runs in the exporter's task with the lock held; nothing when unmapped or
        when deregistration already cleared the MR (``!mr``).

        :raises InvariantViolation: (``invariants="raise"``) the MR's mkey was revoked by a deregistration that left
            the MR set (5.13 to 6.13): the zap, done as the kernel does it, was posted on a freed mkey.
        """
        umem = self.umem
        if umem.sgt is None or umem.private is None:
            return
        if self.broken:
            umem.attach.dmabuf.core.warn(umem.dev, "move_notify ignored: this importer is deliberately broken "
                                         "and keeps its translations to the old pages")
            return
        core = umem.attach.dmabuf.core
        if self.mkey_revoked_at_ps is not None:
            ib_umem_dmabuf_unmap_pages(umem)  # the kernel ignores the failed UMR and unmaps
            self._violated(f"mlx5_ib_dmabuf_invalidate_cb: UMR XLT ZAP posted on an mkey ibv_dereg_mr already revoked "
                           f"(kernel {core.config.version} revokes without the reservation lock and leaves "
                           "umem_dmabuf->private set; fixed in 6.14, cc668a11e6ac): the UMR completes in error "
                           "and the device's UMR QP enters the error state")
            return
        ctx = core.context(None, umem.dev)
        self.zapped_placement = umem.sgt.placement
        self.update_mr_pas(ctx, "ZAP")
        self.translation_valid = False  # the NIC can no longer reach the old pages
        self.zapped_at_ps = core.now_ps(ctx)  # until then its accesses still reach them
        ib_umem_dmabuf_unmap_pages(umem)
        self.invalidations += 1

    def update_mr_pas(self, ctx: str, flags: str) -> None:
        """``mlx5r_umr_update_mr_pas``: UMRs that write every one of the MR's translation entries, the buffer's
        addresses or, with ``ZAP``, zeros (``MLX5_IB_UPD_XLT_ZAP``); the NIC's work, traced on its track."""
        core = self.umem.attach.dmabuf.core
        with core.call(ctx, "mlx5r_umr_update_mr_pas", entries=self.pages, **({"flags": flags} if flags else {})):
            core.spend(ctx, self.umr.fixed_ps + self.umr.entry_ps * self.pages)

    def _violated(self, message: str) -> None:
        """What the simulated hardware did was unsafe: raise, or keep ``message`` in :attr:`violations`.

        :raises InvariantViolation: ``invariants="raise"``.
        """
        if self.invariants == "raise":
            raise InvariantViolation(message)
        self.violations.append(message)

    def revoke_key(self) -> None:
        """irdma_umem_dmabuf_revoke: invalidate the key in hardware (``irdma_hwdereg_mr``) without freeing it, so no
        new MR gets it before ``ibv_dereg_mr``; runs in the revoking task, with the lock held."""
        core = self.umem.attach.dmabuf.core
        ctx = core.context(None, self.umem.dev)
        core.spend(ctx, self.umr.fixed_ps)
        self.translation_valid = False
        self.key_invalidated_at_ps = core.now_ps(ctx)
        core.instant(ctx, "KeyInvalidated", dev=self.umem.dev, dmabuf=self.umem.attach.dmabuf.name)

    def epoch(self) -> tuple:
        umem = self.umem
        dmabuf = umem.attach.dmabuf
        return (self.invalidations, self.translation_valid, umem.revoked, umem.private is None, umem.ready_ps,
                self.mkey_revoked_at_ps is not None, dmabuf.generation, dmabuf.released)

    def reached_placement(self, now_ps: int):
        """Where the NIC's accesses land now: the mapping's placement, or until a zap completes the old one."""
        umem = self.umem
        if umem.sgt is not None:
            return umem.sgt.placement
        if self.zapped_placement is not None and now_ps < self.zapped_at_ps:
            return self.zapped_placement
        return umem.attach.dmabuf.placement

    def target(self, now_ps: int) -> str:
        return self.vram if self.reached_placement(now_ps) is Placement.VRAM else "mem0"

    def reached_bytes(self, mr):
        umem = self.umem
        generation = umem.sgt.generation if umem.sgt is not None else umem.attach.dmabuf.generation
        return umem.attach.dmabuf.priv.storage[generation], umem.offset

    def translate(self, now_ps: int, offset: int, length: int):
        umem = self.umem
        if umem.revoked and now_ps < umem.revoked_at_ps:
            return None  # the revocation is still under way on the exporter's timeline: the key still translates
        if umem.revoked or umem.private is None or self.mkey_revoked_at_ps is not None:
            return self._refused("its key was revoked" if self.mkey_revoked_at_ps is not None else
                                 "its umem was revoked" if umem.revoked else "the MR was deregistered")
        if not self.translation_valid:
            if now_ps < self.zapped_at_ps:
                # the zap is still in progress on the exporter's timeline: the NIC reaches the old pages,
                # which hold the data until the exporter copies them after move_notify returns
                return None
            if self.mode != "dmabuf":
                return self._refused("its translation is gone and a pinned importer does not fault")
            return self._page_fault()
        if now_ps < umem.ready_ps:  # a fault handler is still waiting for the exporter's fence
            return Fault(umem.ready_ps, 0)
        if umem.sgt is not None:
            try:
                check_dma(umem.sgt, now_ps)
            except InvariantViolation as violation:
                umem.attach.dmabuf.core.env.trace.instant(f"{umem.dev}.hw", "StaleAccess", at_ps=now_ps,
                                                          dmabuf=umem.attach.dmabuf.name)
                self._violated(f"{violation} (at {format_duration(now_ps)}, offset {format_size(offset)} of the MR, "
                               f"{format_size(length)})")
        return None

    def _refused(self, reason: str) -> WcStatus:
        """A NIC access the MR can no longer translate: it completes in error."""
        self.umem.attach.dmabuf.core.instant(self.umem.dev, "AccessRefused", reason=reason)
        return WcStatus.LOC_PROT_ERR

    def _page_fault(self):
        """A NIC access found the translation zapped: re-map, or complete the access in error."""
        core = self.umem.attach.dmabuf.core
        core.instant(self.umem.dev, "PageFaulted", reason="translation zapped by move_notify")
        try:
            self.remap()
        except VerbsError as exc:
            core.instant(self.umem.dev, "PageFaultFailed", errno=exc.errno)
            return WcStatus.LOC_PROT_ERR
        self.faults += 1
        return Fault(self.umem.ready_ps, self.pages)

    def remap(self) -> None:
        """pagefault_dmabuf_mr: lock, map the whole MR after the exporter's fences, rewrite the MTT, unlock.

        :raises VerbsError: the map failed (revoked umem, exporter map error).
        """
        umem = self.umem
        core = umem.attach.dmabuf.core
        dev = umem.dev
        with core.call(dev, "pagefault_dmabuf_mr", pages=self.pages):
            umem.resv.lock(dev)
            try:
                ib_umem_dmabuf_map_pages(umem)
                self.update_mr_pas(dev, "")
            finally:
                umem.resv.unlock(dev)
        self.translation_valid = True
        umem.ready_ps = core.now_ps(dev)
        core.instant(dev, "MappingRestored", pages=self.pages, ready_ps=umem.ready_ps)

    def revoke_mkey(self) -> None:
        """The first half of deregistration: a UMR revokes the mkey, which the hardware then no longer knows.

        From 6.14 (cc668a11e6ac: ``mlx5_revoke_mr``, named ``mlx5_umr_revoke_mr_with_lock`` later) a dynamic MR is
        revoked under the reservation lock, which then clears ``umem_dmabuf->private``; from 5.13 to 6.13
        (``mlx5r_umr_revoke_mr`` alone) neither, so the umem still points at the MR until it is released. A pinned
        umem never gets ``move_notify`` and is revoked unlocked. 5.12's ``mlx5_ib_fence_dmabuf_mr`` revoked under
        the lock too, and cleared ``private`` as 6.14 does.
        """
        umem = self.umem
        core, dev = umem.attach.dmabuf.core, umem.dev
        clears = not core.config.behaviour.mlx5_dereg_races_invalidate
        locked = clears and not umem.pinned
        with core.call(dev, "mlx5_umr_revoke_mr_with_lock" if clears else "mlx5r_umr_revoke_mr"):
            if locked:
                umem.resv.lock(dev)
            core.spend(dev, self.umr.fixed_ps)
            self.translation_valid = False
            self.mkey_revoked_at_ps = core.now_ps(dev)
            if clears:
                umem.private = None
            if locked:
                umem.resv.unlock(dev)

    def release(self, now_ps: int) -> int:
        """Deregistration: :meth:`revoke_mkey`, then release the umem (unmap, detach, put); return the time (ps)."""
        umem = self.umem
        core = umem.attach.dmabuf.core
        start = core.now_ps(umem.dev)
        self.revoke_mkey()
        ib_umem_dmabuf_release(umem)
        return core.now_ps(umem.dev) - start


def register_dmabuf(nic, mode: DmabufImporter, umr: UmrParams, fdtable: FdTable, offset: int, length: int, fd: int,
                    writable: bool, kernel: KernelBehaviour, invariants: str = "raise") -> tuple[DmabufBacking, int]:
    """The driver's ``reg_user_mr_dmabuf``: attach (and for ``pinned`` pin+map), or map the whole MR.

    Returns the backing and the driver's time in ps.
    """
    dev = nic.name
    if mode == "pinned" and nic.params.dmabuf_revocable and kernel.has_pinned_revocable_umem:
        umem = ib_umem_dmabuf_get_pinned_revocable_and_lock(dev, offset, length, fdtable, fd, writable, kernel)
        core = umem.attach.dmabuf.core
        backing = DmabufBacking(umem, umr, mode, invariants=invariants)
        ib_umem_dmabuf_set_revoke_locked(umem, backing.revoke_key)
        umem.resv.unlock(dev)
    elif mode == "pinned":
        umem = ib_umem_dmabuf_get_pinned(dev, offset, length, fdtable, fd, writable, kernel)
        core = umem.attach.dmabuf.core
        backing = DmabufBacking(umem, umr, mode, invariants=invariants)
    else:
        holder: list[DmabufBacking] = []
        ops = DmaBufAttachOps(move_notify=lambda attach: holder[0].move_notify(attach), allow_peer2peer=True,
                              name="mlx5_ib_dmabuf_invalidate_cb")
        umem = ib_umem_dmabuf_get(dev, offset, length, fdtable, fd, writable, ops, kernel)
        backing = DmabufBacking(umem, umr, mode, invariants=invariants, broken=nic.params.ignore_move_notify)
        holder.append(backing)
        core = umem.attach.dmabuf.core
        try:
            backing.remap()  # mlx5_ib_init_dmabuf_mr: map the whole MR and enable the mkey
        except VerbsError:
            ib_umem_dmabuf_release(umem)
            raise
    return backing, core.now_ps(dev)

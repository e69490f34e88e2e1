"""Implicit ODP: one MR over the whole address space (``ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)``),
its pages faulted in through child MRs created on demand, as mlx5 does (drivers/infiniband/hw/mlx5/odp.c:
``mlx5_ib_alloc_implicit_mr``, ``pagefault_implicit_mr``, ``implicit_get_child_mr``,
``destroy_unused_implicit_child_mr``; read at torvalds/linux of the 6.x series).

The parent is a KSM mkey with one entry per ``MLX5_IMR_MTT_SIZE`` (1 GiB) of address space; the first fault in
such a span creates its child, an MTT mkey of ``MLX5_IMR_MTT_ENTRIES`` pages that a UMR writes zapped and
enabled, and the parent's KSM entries are rewritten by one more UMR once the fault's children exist. Inside a
child, faults map pages as an explicit ODP MR's do. When an invalidation leaves a child with no page mapped,
mlx5 destroys it, so the next fault there creates it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from models.ib.mr_backing import OdpBacking
from models.nic.nic import NicParams, OdpParams, UmrParams
from models.nic.translation import Fault, MrBacking
from models.nic.wqe import WcStatus

MLX5_IMR_MTT_SHIFT = 30
"""``MLX5_IMR_MTT_BITS + PAGE_SHIFT``: each child MR spans 2**30 bytes of address space."""
MLX5_IMR_MTT_SIZE = 1 << MLX5_IMR_MTT_SHIFT
"""Bytes of address space per child MR (1 GiB)."""
MLX5_IMR_KSM_ENTRIES = 1 << (47 - MLX5_IMR_MTT_SHIFT)
"""``mlx5_imr_ksm_entries``: the parent's KSM entries, one per child span of the user address space
(``TASK_SIZE`` 2**47 on x86-64 with 4-level page tables)."""
SIZE_MAX = 2**64 - 1
"""``SIZE_MAX``/``U64_MAX``: the length that, with address 0, asks for an implicit MR."""


def odp_supports_implicit(nic: NicParams) -> bool:
    """Whether the device reports ``IBV_ODP_SUPPORT_IMPLICIT``: ODP with the implicit capability, which mlx5 gives
    only with ``umr_extended_translation_offset`` (``internal_fill_odp_caps``)."""
    return nic.odp is not None and nic.odp.implicit and nic.umr_extended_translation_offset


def is_implicit_request(addr: int, length: int) -> bool:
    """``create_user_odp_mr``'s test: address 0 and length ``U64_MAX`` ask for an implicit MR."""
    return addr == 0 and length == SIZE_MAX


def parent_create_ps(umr: UmrParams) -> int:
    """``mlx5_ib_alloc_implicit_mr``: one UMR writes the parent's ``MLX5_IMR_KSM_ENTRIES`` KSM entries zapped
    and enabled (its mkey comes from the MR cache)."""
    return umr.fixed_ps + MLX5_IMR_KSM_ENTRIES * umr.entry_ps


def child_create_ps(umr: UmrParams, page_size: int) -> int:
    """Creating one child: its mkey comes from the MR cache, then one UMR writes its
    ``MLX5_IMR_MTT_SIZE / page_size`` MTT entries zapped and enabled."""
    return umr.fixed_ps + (MLX5_IMR_MTT_SIZE // page_size) * umr.entry_ps


def ksm_update_ps(umr: UmrParams, children: int) -> int:
    """The UMR that points ``children`` new KSM entries of the parent at their children."""
    return umr.fixed_ps + children * umr.entry_ps


Tracer = Callable[..., None]
"""``trace(name, at_ps, **args)``: records an instant on the NIC's track (a no-op when tracing is off)."""


class ImplicitOdpBacking(MrBacking):
    """The backing of an implicit ODP MR (iova 0, so an access's offset is its virtual address)."""

    mode = "odp"
    decides = OdpBacking.decides

    def __init__(self, page_size: int, params: OdpParams, umr: UmrParams, host, trace: Tracer) -> None:
        self.page_size = page_size
        self.params = params
        self.umr = umr
        self.host = host
        """The process's :class:`~models.host.HostMemory`."""
        self.trace = trace
        self.children: dict[int, OdpBacking] = {}
        """Child MRs by index (virtual address >> ``MLX5_IMR_MTT_SHIFT``)."""
        self.children_created = 0
        self.faults = 0
        self.invalidations = 0

    def _pieces(self, va: int, length: int) -> Iterator[tuple[int, int, int]]:
        """``(child index, offset in the child, bytes)`` of each child span ``[va, va+length)`` touches."""
        end = va + max(length, 1)
        while va < end:
            idx = va >> MLX5_IMR_MTT_SHIFT
            stop = min(end, (idx + 1) << MLX5_IMR_MTT_SHIFT)
            yield idx, va - (idx << MLX5_IMR_MTT_SHIFT), stop - va
            va = stop

    def _child(self, idx: int) -> OdpBacking:
        return OdpBacking(idx << MLX5_IMR_MTT_SHIFT, MLX5_IMR_MTT_SIZE, self.page_size, self.params, self.host)

    def lookup(self, now_ps: int, offset: int, length: int):
        """The children's tables alone, as :meth:`OdpBacking.lookup` answers: None, a :class:`Fault` that only waits
        for a handler already running, or False (a child or a page is missing)."""
        hits = [self.children[idx].lookup(now_ps, off, n) if idx in self.children else False
                for idx, off, n in self._pieces(offset, length)]
        if False in hits:
            return False
        waits = [hit.ready_ps for hit in hits if hit is not None]
        return Fault(max(waits), 0) if waits else None

    def translate(self, now_ps: int, offset: int, length: int):
        hit = self.lookup(now_ps, offset, length)
        if hit is not False:
            return hit
        if not self.host.is_mapped(offset, length):
            return WcStatus.LOC_PROT_ERR
        self.faults += 1
        return self._fault_in(now_ps, list(self._pieces(offset, length)), self.params.fault_granularity)

    def epoch(self) -> tuple:
        return (self.invalidations,)

    def present(self, now_ps: int, offset: int, length: int) -> bool:
        """Whether every page of the range is in a child's table, its fault handling done by ``now_ps``."""
        return all(idx in self.children and self.children[idx].present(now_ps, off, n)
                   for idx, off, n in self._pieces(offset, length))

    def _fault_in(self, now_ps: int, pieces: list[tuple[int, int, int]], grain: int) -> Fault:
        """``pagefault_implicit_mr``: create the missing children, fault their pages in, update the parent's
        KSM; every page of the fault is valid once all of it is done."""
        new = [idx for idx, _, _ in pieces if idx not in self.children]
        for idx in new:
            self.children[idx] = self._child(idx)
        claimed = [(self.children[idx], *self.children[idx].claim(off, n, grain)) for idx, off, n in pieces]
        missing = sum(count for _, _, count in claimed)
        build = len(new) * child_create_ps(self.umr, self.page_size) + (ksm_update_ps(self.umr, len(new))
                                                                         if new else 0)
        ready = now_ps + build + self.params.fault_cost_ps(missing)
        for child, span, _ in claimed:
            child.settle(span, ready)
        for idx in new:
            self.trace("ImplicitChildCreated", now_ps, child=idx, iova=idx << MLX5_IMR_MTT_SHIFT,
                       length=MLX5_IMR_MTT_SIZE, ready_ps=ready)
        self.children_created += len(new)
        return Fault(ready, missing)

    def prefetch(self, start_ps: int, offset: int, length: int, *, fault: bool) -> int | None:
        """As :meth:`OdpBacking.prefetch`, through the children (created as a fault would)."""
        reachable = self.host.is_mapped(offset, length) if fault else self.host.is_present(offset, length)
        if not reachable:
            return None if fault else self.params.fault_cost_ps(0)
        return self._fault_in(start_ps, list(self._pieces(offset, length)), 0).ready_ps - start_ps

    def invalidate(self, offset: int, length: int) -> int:
        """The kernel moved these pages: zap them in every child they touch; a child left with no page mapped
        is destroyed. Returns the notifiers' cost (ps)."""
        cost = 0
        for idx, off, n in self._pieces(offset, length):
            child = self.children.get(idx)
            if child is None:
                continue
            cost += child.invalidate(off, n)
            if not child.mapped.any():
                del self.children[idx]
        self.invalidations += 1
        return cost

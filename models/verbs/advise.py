"""``ibv_advise_mr``: prefetch ranges of ODP MRs into the NIC's translation table before the NIC touches them.

Follows rdma-core's man page ibv_advise_mr(3) and the kernel's path (torvalds/linux, 6.x series):
``UVERBS_HANDLER(UVERBS_METHOD_ADVISE_MR)`` in drivers/infiniband/core/uverbs_std_types_mr.c (no ``advise_mr``
op: EOPNOTSUPP; flags beyond ``IB_UVERBS_ADVISE_MR_FLAG_FLUSH``: EINVAL from ``uverbs_get_flags32``; the SGE
list attribute has ``UVERBS_ATTR_MIN_SIZE`` of one SGE, so an empty list is EINVAL), then mlx5's
``mlx5_ib_advise_mr`` (unknown advice: EOPNOTSUPP) and ``mlx5_ib_advise_mr_prefetch`` in
drivers/infiniband/hw/mlx5/odp.c: ``get_prefetchable_mr`` (lkey not among the device's ODP mkeys, which is
every non-ODP MR: ENOENT; MR of another PD: EPERM; PREFETCH_WRITE on an MR without write rights: EPERM).

With ``IBV_ADVISE_MR_FLAG_FLUSH`` the call runs ``pagefault_mr`` on each SGE in turn before it returns
(``mlx5_ib_prefetch_sg_list``): a range outside the MR's pages or the process's mappings fails with EFAULT,
the SGEs before it staying prefetched. Without it every lkey is checked, the work is queued and the call
returns; the work then runs in the background, skipping ranges it cannot map, and an access that comes before
it is done waits for it. ``PREFETCH`` and ``PREFETCH_WRITE`` fault pages in; ``PREFETCH_NO_FAULT``
(``MLX5_PF_FLAGS_SNAPSHOT``) maps only pages the CPU already has. mlx5 maps ``PREFETCH``'s pages read-only
(``MLX5_PF_FLAGS_DOWNGRADE``); the model maps them as ``PREFETCH_WRITE`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from models.ib.implicit_odp import MLX5_IMR_KSM_ENTRIES, MLX5_IMR_MTT_SIZE, ImplicitOdpBacking
from models.ib.mr_checks import PAGE_SIZE
from models.nic.wqe import Access, Sge
from models.verbs.device import ProtectionDomain
from models.verbs.mr import MemoryRegion
from sim.core import PS_PER_US, VerbsError


class AdviseMrAdvice(enum.IntEnum):
    """``enum ibv_advise_mr_advice``."""

    PREFETCH = 0
    PREFETCH_WRITE = 1
    PREFETCH_NO_FAULT = 2


IBV_ADVISE_MR_FLAG_FLUSH = 1 << 0
"""``enum ibv_advise_mr_flags``: return once the translations are in the NIC."""
ADVISE_MR_IOCTL_PS = 2 * PS_PER_US
"""The uverbs ioctl of ``ibv_advise_mr`` itself (argument copy, lkey lookups, queueing the work); an
unvalidated default, no public measurement."""
WRITABLE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC | Access.MW_BIND
"""``ib_access_writable``: the rights that make an MR's memory writable."""


def ibv_advise_mr(pd: ProtectionDomain, advice: int, flags: int, sg_list: Sequence[Sge]) -> int:
    """Advise the kernel about the ranges of ``sg_list`` (each an ODP MR's lkey and a range in its iova space);
    return the time the call takes (ps): the ioctl, plus with ``IBV_ADVISE_MR_FLAG_FLUSH`` the fault path of
    every SGE. Each prefetched page is valid in the NIC from when its SGE's fault path ends.

    :raises VerbsError: ``EOPNOTSUPP`` for a device without ODP or an unknown advice, ``EINVAL`` for unknown
        flags or an empty list, ``ENOENT`` for an lkey that is not an ODP MR's, ``EPERM`` for an MR of another
        PD or PREFETCH_WRITE without write rights, ``EFAULT`` (FLUSH only) for a range it cannot map.
    """
    call = "ibv_advise_mr"
    if pd.context.node.nic.params.odp is None:
        raise VerbsError("EOPNOTSUPP", "the device has no advise_mr (mlx5 sets it only with ODP support)", call=call)
    if flags & ~IBV_ADVISE_MR_FLAG_FLUSH:
        raise VerbsError("EINVAL", f"flags {flags:#x}: only IBV_ADVISE_MR_FLAG_FLUSH is defined (uverbs_get_flags32)",
                         call=call)
    if not sg_list:
        raise VerbsError("EINVAL", "the SGE list is empty (UVERBS_ATTR_MIN_SIZE of one ib_uverbs_sge)", call=call)
    if advice not in tuple(AdviseMrAdvice):
        raise VerbsError("EOPNOTSUPP", f"advice {advice} is not PREFETCH, PREFETCH_WRITE or PREFETCH_NO_FAULT "
                         "(mlx5_ib_advise_mr)", call=call)
    advice = AdviseMrAdvice(advice)
    env = pd.context.env
    start = env.now + ADVISE_MR_IOCTL_PS
    sync = bool(flags & IBV_ADVISE_MR_FLAG_FLUSH)
    mrs = [] if sync else [get_prefetchable_mr(pd, advice, sge.lkey, call) for sge in sg_list]
    at = start
    for i, sge in enumerate(sg_list):
        mr = get_prefetchable_mr(pd, advice, sge.lkey, call) if sync else mrs[i]
        cost = _pagefault_mr(mr, sge, at, fault=advice is not AdviseMrAdvice.PREFETCH_NO_FAULT)
        if cost is None and sync:
            raise VerbsError("EFAULT", f"sg_list[{i}] 0x{sge.addr:x}+{sge.length} is outside MR 0x{mr.lkey:x}'s "
                             "pages or the process's mappings (pagefault_mr)", call=call)
        if cost is not None:
            if env.trace.enabled:
                env.trace.slice(pd.context.node.nic.name, "pagefault_mr", at, at + cost, lkey=mr.lkey,
                                length=sge.length, advice=advice.name)
            at += cost
    took = (at if sync else start) - env.now
    if env.trace.enabled:
        env.trace.slice(pd.context.node.nic.name, call, env.now, env.now + took, advice=advice.name,
                        flush=sync, num_sge=len(sg_list))
    return took


def get_prefetchable_mr(pd: ProtectionDomain, advice: AdviseMrAdvice, lkey: int, call: str) -> MemoryRegion:
    """``get_prefetchable_mr``: the ODP MR ``lkey`` names, if ``pd`` may prefetch it with ``advice``.

    :raises VerbsError: ``ENOENT``, ``EPERM`` or ``EOPNOTSUPP`` (a dma-buf MR: not modelled), as
        :func:`ibv_advise_mr` says.
    """
    mr = pd.context.node.nic.lookup(lkey)
    mode = None if mr is None or mr.backing is None else mr.backing.mode
    if mode == "dmabuf":
        raise VerbsError("EOPNOTSUPP", f"lkey 0x{lkey:x} is a dma-buf MR: prefetching it is not modelled", call=call)
    if mode != "odp":
        raise VerbsError("ENOENT", f"lkey 0x{lkey:x} is not an ODP MR's (not among the device's odp_mkeys)",
                         call=call)
    if mr.pd is not pd:
        raise VerbsError("EPERM", f"MR 0x{lkey:x} belongs to another protection domain", call=call)
    if advice is AdviseMrAdvice.PREFETCH_WRITE and not mr.access & WRITABLE:
        raise VerbsError("EPERM", f"PREFETCH_WRITE on MR 0x{lkey:x}, which has no write rights "
                         "(ib_access_writable)", call=call)
    return mr


def _pagefault_mr(mr: MemoryRegion, sge: Sge, start_ps: int, *, fault: bool) -> int | None:
    """``pagefault_mr`` for one SGE from ``start_ps``: its time (ps), or None when the range starts below the
    MR's iova or runs past its umem (an explicit MR's ends with its last page, ``ib_umem_end``; an implicit one's
    ``MLX5_IMR_KSM_ENTRIES`` children end at 2**47) or the backing cannot map it."""
    if isinstance(mr.backing, ImplicitOdpBacking):
        lo, hi = 0, MLX5_IMR_KSM_ENTRIES * MLX5_IMR_MTT_SIZE
    else:
        lo, hi = mr.iova, -(-(mr.iova + mr.length) // PAGE_SIZE) * PAGE_SIZE
    if sge.addr < lo or sge.addr >= hi or hi - sge.addr < sge.length:
        return None
    return mr.backing.prefetch(start_ps, sge.addr - mr.iova, sge.length, fault=fault)

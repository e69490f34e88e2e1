"""Memory regions on host memory: ``ibv_reg_mr`` (pinned or ODP, explicit or implicit), ``ibv_rereg_mr``,
``ibv_dereg_mr``, their argument checks, and the NIC's records every registration makes (``reg_create``).

Registration is an immediate call that returns its simulated cost. Failures raise :class:`~sim.core.VerbsError`
with the errno rdma-core returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from models.ib.implicit_odp import (MLX5_IMR_KSM_ENTRIES, SIZE_MAX, ImplicitOdpBacking, is_implicit_request,
                                    parent_create_ps)
from models.ib.mkey_page import ib_umem_num_dma_blocks, mkey_page_size, page_segments
from models.ib.mr_backing import OdpBacking
from models.ib.mr_checks import (EFA_VENDOR_ID, PAGE_SIZE, U64, check_max_mr_size, efa_alloc_mr,
                                ib_check_mr_access)
from models.ib.umem_odp import create_user_odp_mr, mlx5_ib_init_odp_mr
from models.nic.nic import UmrParams
from models.nic.translation import MrBacking
from models.nic.wqe import Access
from models.node import Node
from models.verbs.device import ProtectionDomain
from sim.core import PS_PER_US, VerbsError


REG_MR_FIXED_PS = 35 * PS_PER_US
"""uverbs ioctl + mkey creation per ibv_reg_mr; torchcomms measures register+deregister of 8 KB at 54.5 us,
split about 2:1 between the two like the calibrated pin/unpin costs."""
DEREG_MR_FIXED_PS = 19 * PS_PER_US
"""uverbs ioctl + mkey destruction per ibv_dereg_mr (the rest of the 54.5 us above)."""


@dataclass(eq=False)
class MemoryRegion:
    """``struct ibv_mr``: the registered range, its keys and rights; checked on every access."""

    pd: ProtectionDomain
    addr: int
    length: int
    access: Access
    lkey: int
    rkey: int
    reg_ps: int
    valid: bool = True
    """The NIC's key works (false after deregistration or a NIC reset)."""
    registered: bool = True
    """The kernel object exists (until ibv_dereg_mr)."""
    backing: MrBacking | None = None
    """How pages reach the NIC; None for pinned host memory (always translatable)."""
    iova: int | None = None
    """Address the keys are used with; defaults to ``addr`` (for a dma-buf MR ``addr`` is the offset)."""
    mr_type: str = "MR"
    """rdma-core's ``IBV_MR_TYPE_MR`` or ``IBV_MR_TYPE_DMABUF_MR`` (``"DMABUF_MR"``)."""
    page_size: int = PAGE_SIZE
    """Bytes one of its translation entries covers (:func:`~models.ib.mkey_page.mkey_page_size`)."""
    dmah: object = None
    """The DMA handle it was registered with (:class:`~models.verbs.dmah.DmaHandle`, ``ibv_reg_mr_ex``), or None."""
    dm: object = None
    """The device memory it registers (:class:`~models.verbs.dm.DeviceMemoryAllocation`, ``ibv_reg_dm_mr``), or
    None."""
    dm_offset: int = 0
    """Where it starts in ``dm`` (bytes)."""

    def __post_init__(self) -> None:
        self._bits = int(self.access)
        if self.iova is None:
            self.iova = self.addr
        self.pd.usecnt += 1  # ib_uverbs_reg_mr and friends: atomic_inc(&pd->usecnt)

    @property
    def mtt_entries(self) -> int:
        """Translation entries the NIC holds for the MR (``ib_umem_num_dma_blocks``); an implicit ODP MR's parent
        holds its KSM entries (its children's are their own); a DM MR none (a MEMIC mkey has no translation)."""
        if self.dm is not None:
            return 0
        if isinstance(self.backing, ImplicitOdpBacking):
            return MLX5_IMR_KSM_ENTRIES
        return ib_umem_num_dma_blocks(self.iova, self.length, self.page_size)

    def change_access(self, access: Access) -> None:
        """Grant ``access`` from now on (``ibv_rereg_mr`` with ``IBV_REREG_MR_CHANGE_ACCESS``)."""
        self.access = access
        self._bits = int(access)

    def allows(self, addr: int, length: int, needed: int) -> bool:
        """True when ``[addr, addr+length)`` (in the MR's iova space) lies inside the MR and the ``needed``
        access bits are granted."""
        return (self.valid and self.iova <= addr and addr + length <= self.iova + self.length
                and (self._bits & needed) == needed)


def ibv_reg_mr(pd: ProtectionDomain, addr: int, length: int, access: Access, iova: int | None = None,
               *, call: str = "ibv_reg_mr") -> MemoryRegion:
    """Register host memory: check like rdma-core and ``ib_umem_get``, pin the pages, create the keys. Mappings
    are whole pages (:meth:`~models.host.HostMemory.mapped_length`): any part of a mapped page registers. With
    ``iova`` (``ibv_reg_mr_iova``) the keys are used with that address for the memory at ``addr``.

    With ``ON_DEMAND`` nothing is pinned and no page is looked at: the NIC faults pages in on first touch (ODP,
    :mod:`models.ib.umem_odp`); address 0 with length ``SIZE_MAX`` registers an implicit ODP MR over the whole
    address space (:mod:`models.ib.implicit_odp`).

    :raises VerbsError: ``EINVAL`` for length 0, overflow or REMOTE_WRITE/REMOTE_ATOMIC without
        LOCAL_WRITE or access bits outside IB_ACCESS_SUPPORTED, or an ``iova`` whose offset in its page is not
        ``addr``'s (``ib_uverbs_reg_mr``); ``EOPNOTSUPP`` for ON_DEMAND on a device without
        ODP or FLUSH rights on a device without flush; ``EFAULT`` for a range beyond the process's mappings;
        ``ENOMEM`` past RLIMIT_MEMLOCK; for ON_DEMAND, ``EOVERFLOW`` for overflow and ``EINVAL`` for an implicit
        MR on a device without implicit ODP.
    """
    access = Access(access)
    nic = pd.context.node.nic
    check_iova_page_offset(addr, addr if iova is None else iova, call)
    access = check_reg_args(pd.context.node, addr, length, access, call, iova)
    check_max_mr_size(nic.params.max_mr_size, length, call)
    if isinstance(backing := _odp_backing(pd, addr, length, access), ImplicitOdpBacking):
        return _reg_implicit_mr(pd, access, backing, call)
    page = host_page_size(pd.context.node, addr, length) if backing is None else \
        mkey_page_size(nic.params, addr, (), is_dmabuf=False, odp_page=backing.page_size)

    pinned = []

    def umem() -> tuple[int, MrBacking | None]:
        if backing is None:
            pinned.append(pd.context.node.host.pin(addr, length, call=call))
            entries = ib_umem_num_dma_blocks(addr, length, page)
            return REG_MR_FIXED_PS + pinned[0] + umem_map_ps(nic.params.umr, entries), None
        return REG_MR_FIXED_PS + mlx5_ib_init_odp_mr(pd.context.node, backing, length, pd.context.env.now), backing

    mr = reg_create(pd, addr, length, access, umem, call, page=page, iova=iova)
    cost = mr.reg_ps - REG_MR_FIXED_PS
    if backing is None:
        host = pd.context.node.host
        trace_registration(mr, call, ("pin_user_pages", pinned[0], {"pages": host.pages_spanned(addr, length)}),
                           mr.mtt_entries)
    else:
        mapped = int(backing.mapped.sum())
        trace_registration(mr, call, ("mlx5_ib_init_odp_mr", cost, {"pages": mapped}) if cost else None, mapped)
    return mr


def check_iova_page_offset(addr: int, iova: int, call: str) -> None:
    """``ib_uverbs_reg_mr`` and the ``REG_MR`` ioctl: the iova must sit at the same offset in its page as the
    address it stands for (``(start & ~PAGE_MASK) != (hca_va & ~PAGE_MASK)`` -> EINVAL).

    :raises VerbsError: ``EINVAL``.
    """
    if addr % PAGE_SIZE != iova % PAGE_SIZE:
        raise VerbsError("EINVAL", f"iova 0x{iova:x} and address 0x{addr:x} have different page offsets", call=call)


def umem_map_ps(umr: UmrParams, entries: int, *, release: bool = False) -> int:
    """What registering pinned host memory costs beyond pinning (``release``: deregistering, beyond unpinning):
    the per-entry cost of ``umr`` times the MR's ``entries`` translation entries."""
    return entries * (umr.pinned_release_entry_ps if release else umr.pinned_entry_ps)


def host_page_size(node: Node, addr: int, length: int) -> int:
    """The translation page of pinned host memory ``[addr, addr+length)``: :func:`mkey_page_size` over the
    pages of the host's backing (4 KiB, THP or hugetlbfs)."""
    segments = page_segments(addr, length, node.host.params.mtt_page_size)
    return mkey_page_size(node.nic.params, addr, segments, is_dmabuf=False)


def _odp_backing(pd: ProtectionDomain, addr: int, length: int, access: Access) -> MrBacking | None:
    """The backing of an ON_DEMAND registration (explicit or implicit), None for a pinned one."""
    if not access & Access.ON_DEMAND:
        return None
    node = pd.context.node
    page, odp = node.host.params.page_size, node.nic.params.odp
    if is_implicit_request(addr, length):
        env, track = pd.context.env, node.nic.name
        trace = (lambda name, at_ps, **args: env.trace.instant(track, name, at_ps=at_ps, **args)) \
            if env.trace.enabled else (lambda name, at_ps, **args: None)
        return ImplicitOdpBacking(page, odp, node.nic.params.umr, node.host, trace)
    return OdpBacking(addr, length, page, odp, node.host)


def _reg_implicit_mr(pd: ProtectionDomain, access: Access, backing: ImplicitOdpBacking, call: str) -> MemoryRegion:
    """``mlx5_ib_alloc_implicit_mr``: the parent KSM mkey, written zapped by one UMR; its children hold their
    own translation entries as faults create them, so the NIC's table is not charged here."""
    umr = pd.context.node.nic.params.umr
    mr = reg_create(pd, 0, SIZE_MAX, access, lambda: (REG_MR_FIXED_PS + parent_create_ps(umr), backing), call)
    trace_registration(mr, call, None, MLX5_IMR_KSM_ENTRIES)
    return mr


def reg_create(pd: ProtectionDomain, addr: int, length: int, access: Access,
               umem: Callable[[], tuple[int, MrBacking | None]], call: str, *, page: int | None = None,
               iova: int | None = None, key: Callable[[], int] | None = None, mr_type: str = "MR") -> MemoryRegion:
    """mlx5's ``reg_create`` (drivers/infiniband/hw/mlx5/mr.c) and the NIC's records of every registration: the
    MR's translation entries reserved in the NIC's table (``ib_umem_num_dma_blocks`` of ``page``-sized blocks from
    ``iova``, default ``addr``; ``page`` None: none charged, as for an implicit ODP parent), then ``umem()`` (pin the
    pages, map the dma-buf, get the peer pages: it returns the registration's time in ps and the MR's backing), whose
    failure gives the entries back; then the mkey recorded in the NIC's key table: a fresh key, or ``key()`` for one
    ``umem()`` made.

    :raises VerbsError: ``ENOMEM`` when the NIC's translation table would overflow; what ``umem()`` raises.
    """
    nic = pd.context.node.nic
    start = addr if iova is None else iova
    entries = 0 if page is None else nic.reserve_translations(ib_umem_num_dma_blocks(start, length, page), call=call)
    try:
        reg_ps, backing = umem()
    except BaseException:
        nic.release_translations(entries)
        raise
    key = nic.new_key() if key is None else key()
    mr = MemoryRegion(pd, addr, length, Access(access), key, key, reg_ps, backing=backing, iova=iova,
                      mr_type=mr_type, page_size=PAGE_SIZE if page is None else page)
    nic.mrs[key] = mr
    return mr


def trace_registration(mr: MemoryRegion, call: str, pinning: tuple[str, int, dict] | None, entries: int) -> None:
    """Trace a registration that took ``mr.reg_ps`` from now: the verb as a slice on the NIC's track, its
    pinning step ``(name, ps, args)`` first (none for ODP), and ``MkeyCreated`` with ``entries`` translation
    entries written when it returns (the fixed ioctl and mkey cost is not split further)."""
    env = mr.pd.context.env
    if not env.trace.enabled:
        return
    nic, start = mr.pd.context.node.nic.name, env.now
    env.trace.slice(nic, call, start, start + mr.reg_ps, length=mr.length, access=mr.access.name or "0")
    if pinning is not None:
        name, cost, args = pinning
        env.trace.slice(nic, name, start, start + cost, **args)
    env.trace.instant(nic, "MkeyCreated", at_ps=start + mr.reg_ps, lkey=mr.lkey, mtt_entries=entries)


def ibv_dereg_mr(mr: MemoryRegion) -> int:
    """Invalidate the keys, then unpin; return the simulated cost (ps).

    :raises VerbsError: ``EINVAL`` when the MR was already deregistered.
    """
    if not mr.registered:
        raise VerbsError("EINVAL", "MR already deregistered", call="ibv_dereg_mr")
    node = mr.pd.context.node
    mr.valid = mr.registered = False
    mr.pd.usecnt -= 1
    if mr.dmah is not None:
        mr.dmah.usecnt -= 1
    node.nic.mrs.pop(mr.lkey, None)  # gone already after a NIC reset
    if mr.dm is not None:  # nothing pinned or mapped: the ioctl and the mkey
        mr.dm.usecnt -= 1
        return DEREG_MR_FIXED_PS
    if not isinstance(mr.backing, ImplicitOdpBacking):
        node.nic.release_translations(mr.mtt_entries)
    if mr.backing is not None:
        return DEREG_MR_FIXED_PS + mr.backing.release(mr.pd.context.env.now)
    unmap = umem_map_ps(node.nic.params.umr, mr.mtt_entries, release=True)
    return DEREG_MR_FIXED_PS + node.host.unpin(mr.addr, mr.length) + unmap


REREG_CHANGE_TRANSLATION, REREG_CHANGE_PD, REREG_CHANGE_ACCESS = 1, 2, 4
"""``enum ibv_rereg_mr_flags``."""


def ibv_rereg_mr(mr: MemoryRegion, flags: int, pd: ProtectionDomain | None = None, addr: int = 0,
                 length: int = 0, access: Access = Access(0)) -> int:
    """Modify a host MR in place (new range and/or access rights; keys are kept); return the cost (ps).

    :raises VerbsError: ``EINVAL`` for a dma-buf MR (rdma-core refuses anything but IBV_MR_TYPE_MR), unknown
        flags, a DM MR (``ib_uverbs_rereg_mr``: ``mr->dm``), or any check :func:`ibv_reg_mr` would fail;
        ``ENOMEM``/``EFAULT`` when re-pinning fails.
    """
    call = "ibv_rereg_mr"
    if mr.mr_type != "MR":
        raise VerbsError("EINVAL", f"only IBV_MR_TYPE_MR can be re-registered, not {mr.mr_type} "
                         "(IBV_REREG_MR_ERR_INPUT)", call=call)
    if mr.dmah is not None and mr.dmah.ph is not None:
        raise VerbsError("EOPNOTSUPP", "an MR registered with a DMA handle's processing hint cannot be "
                         "re-registered (mlx5_ib_rereg_user_mr)", call=call)
    if not flags or flags & ~(REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS):
        raise VerbsError("EINVAL", f"flags {flags:#x}: need a combination of CHANGE_TRANSLATION, CHANGE_PD, "
                         "CHANGE_ACCESS", call=call)
    if mr.dm is not None:
        raise VerbsError("EINVAL", "a device-memory MR cannot be re-registered (ib_uverbs_rereg_mr: mr->dm)",
                         call=call)
    if mr.backing is not None:
        raise VerbsError("EOPNOTSUPP", "re-registering an ODP MR in place is not modelled", call=call)
    new_access = Access(access) if flags & REREG_CHANGE_ACCESS else mr.access
    new_addr, new_length = (addr, length) if flags & REREG_CHANGE_TRANSLATION else (mr.addr, mr.length)
    new_pd = pd if flags & REREG_CHANGE_PD else mr.pd
    if new_pd is None or new_pd.context is not mr.pd.context:
        raise VerbsError("EINVAL", "CHANGE_PD needs a PD of the same device", call=call)
    new_access = check_reg_args(mr.pd.context.node, new_addr, new_length, new_access, call)
    host, nic = mr.pd.context.node.host, mr.pd.context.node.nic
    cost = 0
    if flags & REREG_CHANGE_TRANSLATION:
        cost += host.unpin(mr.addr, mr.length)
        try:
            cost += host.pin(new_addr, new_length, call=call)
        except VerbsError:
            host.pin(mr.addr, mr.length, call=call)
            raise
        nic.release_translations(mr.mtt_entries)
        cost += umem_map_ps(nic.params.umr, mr.mtt_entries, release=True)
        mr.addr, mr.iova, mr.length = new_addr, new_addr, new_length
        mr.page_size = host_page_size(mr.pd.context.node, new_addr, new_length)
        nic.translations += mr.mtt_entries  # the same limit as before: the model checks it at registration only
        cost += umem_map_ps(nic.params.umr, mr.mtt_entries)
    mr.pd.usecnt -= 1
    new_pd.usecnt += 1
    mr.pd = new_pd
    mr.change_access(new_access)
    return REG_MR_FIXED_PS + cost


def check_reg_args(node: Node, addr: int, length: int, access: Access, call: str, iova: int | None = None) -> Access:
    """The argument checks of registering host or peer memory on ``node``'s NIC, in the kernel's order:
    uverbs' :func:`ib_check_mr_access`, EFA's :func:`~models.ib.mr_checks.efa_alloc_mr`, then :func:`ib_umem_get`'s,
    or for an ON_DEMAND range mlx5's :func:`~models.ib.umem_odp.create_user_odp_mr`'s (not pinned, so it needs
    no mlock rights). Returns the rights the MR keeps (EFA drops the optional bits such as RELAXED_ORDERING)."""
    ib_check_mr_access(node.nic.params, access, call)
    if node.nic.params.device.vendor_id == EFA_VENDOR_ID:  # efa_reg_mr: efa_alloc_mr before ib_umem_get
        access = efa_alloc_mr(node.nic.params, access, call)
    if access & Access.ON_DEMAND:
        create_user_odp_mr(node, addr, length, addr if iova is None else iova, call)
    else:
        ib_umem_get(node.host, addr, length, call)
    return access


def ib_umem_get(host, addr: int, length: int, call: str) -> None:
    """The argument checks of ``ib_umem_get`` (drivers/infiniband/core/umem.c, read at torvalds/linux 0446cad9ca38, a
    5.x tree; later trees were not compared), before it charges RLIMIT_MEMLOCK and pins
    (:meth:`~models.host.Host.pin`): ``addr + length`` wraps past 2**64 or its page alignment does -> EINVAL (so
    ``addr + length == 2**64`` is refused); ``can_do_mlock()`` false (RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK) ->
    EPERM; no pages -> EINVAL.

    :raises VerbsError: as above.
    """
    end = addr + length
    if addr < 0 or length < 0 or end % U64 < addr or end > U64 - PAGE_SIZE:
        raise VerbsError("EINVAL", f"addr 0x{addr:x} + length {length} overflows (ib_umem_get)", call=call)
    if host.params.memlock_limit == 0:
        raise VerbsError("EPERM", "RLIMIT_MEMLOCK is 0 and the process lacks CAP_IPC_LOCK (can_do_mlock)", call=call)
    if length == 0:
        raise VerbsError("EINVAL", "length 0 pins no pages (ib_umem_get: npages == 0)", call=call)

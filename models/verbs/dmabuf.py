"""``ibv_reg_dmabuf_mr`` and ``mlx5dv_reg_dmabuf_mr``: register a dma-buf range, with the kernel's order of checks
and errno values, one function per layer.

Order: rdma-core (the verb exists in the library; ``mlx5dv_*`` needs an mlx5 context) -> the uverbs
``REG_DMABUF_MR`` handler (:func:`ib_uverbs_reg_dmabuf_mr`: no driver op EOPNOTSUPP, page offsets EINVAL, access
bits EINVAL, ``ib_check_mr_access``) -> the driver's ``reg_user_mr_dmabuf`` (:func:`mlx5_ib_reg_user_mr_dmabuf`,
:func:`efa_reg_user_mr_dmabuf`) -> ``ib_umem_dmabuf_get`` (overflow, fd, range, length 0, the exporter's attach
errno) -> the first map's errno. dma-buf MRs are not charged to RLIMIT_MEMLOCK. rdma-core sets ``mr.addr`` to the
offset.
"""

from __future__ import annotations

from models.ib.dmabuf_mr import register_dmabuf
from models.ib.mkey_page import EXPORTER_RUN, mkey_page_size, page_segments
from models.ib.mr_checks import MELLANOX_VENDOR_ID, efa_alloc_mr, ib_check_mr_access, mlx5r_umr_can_load_pas
from models.nic.translation import DmabufImporter
from models.nic.wqe import Access
from models.verbs.device import ProtectionDomain
from models.verbs.mr import MemoryRegion, reg_create
from models.versions import RDMA_CORE_DMABUF, RDMA_CORE_MLX5DV_DMABUF, Version
from sim.core import VerbsError

PAGE_MASK = 4096 - 1

MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT = 1
"""``MLX5_IB_UAPI_REG_DMABUF_ACCESS_DATA_DIRECT``: the mlx5 access flag selecting the pinned data-direct path."""
REG_DMABUF_MR_ACCESS = int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
                           | Access.RELAXED_ORDERING)
"""The access bits ``UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS`` accepts (``uverbs_get_flags32``), as a plain int."""


def ibv_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                      *, invariants: str = "raise") -> MemoryRegion:
    """Register ``[offset, offset+length)`` of the dma-buf behind ``fd`` in the process's fd table, the way the
    device's driver does it (mlx5: dynamic; EFA: pinned).

    ``invariants="record"`` keeps DMA-safety violations in ``mr.backing.violations`` instead of raising.

    :raises VerbsError: see the module docstring for the order of checks.
    """
    call = "ibv_reg_dmabuf_mr"
    _check_rdma_core(pd, RDMA_CORE_DMABUF, call)
    return ib_uverbs_reg_dmabuf_mr(pd, offset, length, iova, fd, access, None, invariants, call)


def mlx5dv_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                         mlx5_access: int, *, invariants: str = "raise") -> MemoryRegion:
    """The mlx5 direct verb (rdma-core v54+: libmlx5.map's MLX5_1.25; providers/mlx5/verbs.c at v64.0):
    ``mlx5_access`` 0 registers as :func:`ibv_reg_dmabuf_mr` does on mlx5; DATA_DIRECT pins the buffer through
    the data-direct device.

    :raises VerbsError: ``EOPNOTSUPP`` on a device the mlx5 provider does not drive (``mlx5_get_dv_ops`` is
        NULL), before any kernel check; otherwise as :func:`ib_uverbs_reg_dmabuf_mr` and
        :func:`mlx5_ib_reg_user_mr_dmabuf`.
    """
    call = "mlx5dv_reg_dmabuf_mr"
    _check_rdma_core(pd, RDMA_CORE_MLX5DV_DMABUF, call)
    mlx5_get_dv_ops(pd.context.node, "reg_dmabuf_mr", call)
    return ib_uverbs_reg_dmabuf_mr(pd, offset, length, iova, fd, access, mlx5_access, invariants, call)


def mlx5_get_dv_ops(node, op: str, call: str) -> None:
    """``mlx5_get_dv_ops``: the mlx5 direct verbs exist only on a device the mlx5 provider drives; on any other the
    ``mlx5dv_*`` call finds no ``op`` and answers EOPNOTSUPP before any kernel check.

    :raises VerbsError: ``EOPNOTSUPP``.
    """
    if node.nic.params.device.vendor_id != MELLANOX_VENDOR_ID:
        raise VerbsError("EOPNOTSUPP", f"not an mlx5 device: mlx5_get_dv_ops finds no {op}", call=call)


def _check_rdma_core(pd: ProtectionDomain, first: Version, call: str) -> None:
    node = pd.context.node
    if Version.parse(node.rdma_core) < first:
        raise VerbsError("EOPNOTSUPP", f"rdma-core v{node.rdma_core} has no {call}", call=call)


def reg_user_mr_dmabuf(pd: ProtectionDomain):
    """The device's ``ops.reg_user_mr_dmabuf``, or None: mlx5 from 5.12, EFA from 5.16 (the patch
    "RDMA/efa: Add support for dmabuf memory regions"), none before 5.12 (no ``REG_DMABUF_MR`` method)."""
    nic, behaviour = pd.context.node.nic, pd.context.node.kernel.config.behaviour
    if not behaviour.has_dmabuf_mr or nic.params.dmabuf is None:
        return None
    if nic.params.dmabuf == "pinned":
        return efa_reg_user_mr_dmabuf if behaviour.has_pinned_dmabuf else None
    return mlx5_ib_reg_user_mr_dmabuf


def ib_uverbs_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                            mlx5_access: int | None, invariants: str, call: str) -> MemoryRegion:
    """The ``REG_DMABUF_MR`` ioctl: ``uverbs_set_attr`` (drivers/infiniband/core/uverbs_ioctl.c) refuses a mandatory
    attribute the kernel does not know with EPROTONOSUPPORT (rdma-core marks every attribute mandatory,
    libibverbs/cmd_ioctl.h at v64.0, and ``mlx5dv_reg_dmabuf_mr`` always sends the mlx5 access attribute, which
    kernels before 6.12 lack); then ``UVERBS_HANDLER(UVERBS_METHOD_REG_DMABUF_MR)``
    (drivers/infiniband/core/uverbs_std_types_mr.c: the 5.12 patch "RDMA/uverbs: Add uverbs command for dma-buf
    based MR registration" and the 2025 mainline copy make the same checks in the same order): no driver op ->
    EOPNOTSUPP (before any fd or size check: a pinned importer before 5.16 fails here); offset and iova page
    offsets differ -> EINVAL; access bits outside :data:`REG_DMABUF_MR_ACCESS` -> EINVAL
    (``uverbs_get_flags32``); :func:`ib_check_mr_access`; then the driver's op.

    ``mlx5_access`` is the mlx5 driver attribute (None: absent, as ``ibv_reg_dmabuf_mr`` sends it).
    """
    node = pd.context.node
    behaviour = node.kernel.config.behaviour
    if not behaviour.has_dmabuf_mr:
        raise VerbsError("EOPNOTSUPP", f"kernel {node.kernel.config.version} has no UVERBS_METHOD_REG_DMABUF_MR "
                         "(dma-buf MRs arrived in 5.12)", call=call)
    if mlx5_access is not None and not behaviour.has_mlx5_dmabuf_access_attr:
        raise VerbsError("EPROTONOSUPPORT", f"kernel {node.kernel.config.version} does not know the mandatory "
                         "attribute MLX5_IB_ATTR_REG_DMABUF_MR_ACCESS_FLAGS (uverbs_set_attr; it arrived in 6.12)",
                         call=call)
    driver = reg_user_mr_dmabuf(pd)
    if driver is None:
        if node.nic.params.dmabuf == "pinned":
            raise VerbsError("EOPNOTSUPP", f"kernel {node.kernel.config.version}: the driver has no "
                             "reg_user_mr_dmabuf (pinned dma-buf importers arrived in 5.16)", call=call)
        raise VerbsError("EOPNOTSUPP", "the device has no reg_user_mr_dmabuf (rdma-core: 'OFED stack does not "
                         "support DMA-BUF')", call=call)
    if offset & PAGE_MASK != iova & PAGE_MASK:
        raise VerbsError("EINVAL", f"offset 0x{offset:x} and iova 0x{iova:x} have different page offsets", call=call)
    if int(access) & ~REG_DMABUF_MR_ACCESS:
        raise VerbsError("EINVAL", f"access {Access(access)!r}: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, "
                         "REMOTE_ATOMIC and RELAXED_ORDERING are allowed for dma-buf MRs", call=call)
    ib_check_mr_access(node.nic.params, access, call)
    return driver(pd, offset, length, iova, fd, Access(access), mlx5_access or 0, invariants, call)


def mlx5_ib_reg_user_mr_dmabuf(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                               mlx5_access: int, invariants: str, call: str) -> MemoryRegion:
    """``mlx5_ib_reg_user_mr_dmabuf`` (drivers/infiniband/hw/mlx5/mr.c, read in the mainline tree of 2026):
    ``CONFIG_INFINIBAND_ON_DEMAND_PAGING`` off -> EOPNOTSUPP (the kernel's configuration, not the device's ODP
    capability); unknown mlx5 access bits -> EINVAL (``uverbs_get_flags32``); :func:`mlx5r_umr_can_load_pas`
    -> EINVAL; DATA_DIRECT goes to :func:`reg_user_mr_dmabuf_by_data_direct`, anything else is a dynamic MTT
    mkey."""
    nic = pd.context.node.nic
    if not pd.context.node.kernel.config.on_demand_paging:
        raise VerbsError("EOPNOTSUPP", "the kernel is built without CONFIG_INFINIBAND_ON_DEMAND_PAGING", call=call)
    if mlx5_access & ~MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT:
        raise VerbsError("EINVAL", f"unknown mlx5_access bits {mlx5_access:#x}", call=call)
    mlx5r_umr_can_load_pas(nic, length, call)
    if mlx5_access & MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT:
        return reg_user_mr_dmabuf_by_data_direct(pd, offset, length, iova, fd, access, invariants, call)
    return _register(pd, offset, length, iova, fd, access, "dynamic", invariants, call)


def reg_user_mr_dmabuf_by_data_direct(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int,
                                      access: Access, invariants: str, call: str) -> MemoryRegion:
    """``reg_user_mr_dmabuf_by_data_direct`` (drivers/infiniband/hw/mlx5/mr.c, mainline 2026): an iova that is not
    page aligned (KSM mode) or ON_DEMAND -> EOPNOTSUPP; no data-direct device bound -> EINVAL; RELAXED_ORDERING is
    masked off unless the device has a relaxed-ordering data-direct mkey; then a pinned KSM registration."""
    nic = pd.context.node.nic
    if iova & PAGE_MASK or access & Access.ON_DEMAND:
        raise VerbsError("EOPNOTSUPP", f"data-direct needs a page-aligned iova and no ON_DEMAND, got iova 0x{iova:x}",
                         call=call)
    if not nic.params.data_direct:
        raise VerbsError("EINVAL", "no data-direct device is bound to this mlx5 device", call=call)
    if not nic.params.data_direct_mkey_ro:
        access &= ~Access.RELAXED_ORDERING
    return _register(pd, offset, length, iova, fd, access, "pinned", invariants, call)


def efa_reg_user_mr_dmabuf(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                           mlx5_access: int, invariants: str, call: str) -> MemoryRegion:
    """``efa_reg_user_mr_dmabuf`` (drivers/infiniband/hw/efa/efa_verbs.c, v5.16 onwards): :func:`efa_alloc_mr`, then
    ``ib_umem_dmabuf_get_pinned``; the device has no ``max_mr_size`` check in the kernel."""
    kept = efa_alloc_mr(pd.context.node.nic.params, access, call)
    return _register(pd, offset, length, iova, fd, kept, "pinned", invariants, call)


def _register(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
              mode: DmabufImporter, invariants: str, call: str) -> MemoryRegion:
    node = pd.context.node
    nic = node.nic
    page = mkey_page_size(nic.params, iova, page_segments(offset, length, EXPORTER_RUN), is_dmabuf=True)

    def umem():
        start = node.kernel.now_ps(nic.name)
        with node.kernel.call(nic.name, call, offset=offset, length=length, fd=fd, mode=mode):
            node.kernel.spend(nic.name, nic.params.umr.reg_ioctl_ps)
            backing, done = register_dmabuf(nic, mode, nic.params.umr, node.fds, offset, length, fd,
                                            bool(access & Access.LOCAL_WRITE), node.kernel.config.behaviour,
                                            invariants)
        return done - start, backing

    return reg_create(pd, offset, length, access, umem, call, page=page, iova=iova, mr_type="DMABUF_MR")


def mlx5dv_get_data_direct_sysfs_path(ctx, buf_len: int) -> str:
    """The sysfs path (``kobject_get_path``, without ``/sys``) of the data-direct PCI function bound to ``ctx``'s
    mlx5 device: ``UVERBS_HANDLER(MLX5_IB_METHOD_GET_DATA_DIRECT_SYSFS_PATH)`` (drivers/infiniband/hw/mlx5/
    std_types.c, ec7ad6530909, 6.12). The function sits below the NIC's root port, numbered by the model (bus 1,
    function 1: the model keeps no real PCI addresses).

    :raises VerbsError: ``EOPNOTSUPP`` on a device the mlx5 provider does not drive (no dv op);
        ``EPROTONOSUPPORT`` from a kernel before 6.12 (no such ioctl method); ``ENODEV`` without a data-direct
        device; ``ENOSPC`` when the path and its NUL do not fit ``buf_len`` bytes.
    """
    call = "mlx5dv_get_data_direct_sysfs_path"
    node = ctx.node
    mlx5_get_dv_ops(node, "get_data_direct_sysfs_path", call)
    if not node.kernel.config.behaviour.has_mlx5_dmabuf_access_attr:
        raise VerbsError("EPROTONOSUPPORT", f"kernel {node.kernel.config.version} has no "
                         "MLX5_IB_METHOD_GET_DATA_DIRECT_SYSFS_PATH (6.12)", call=call)
    if not node.nic.params.data_direct:
        raise VerbsError("ENODEV", "no data-direct device is bound to this mlx5 device", call=call)
    path = "/devices/pci0000:00/0000:00:01.0/0000:01:00.1"
    if len(path) + 1 > buf_len:
        raise VerbsError("ENOSPC", f"the path needs {len(path) + 1} bytes, the buffer has {buf_len}", call=call)
    return path

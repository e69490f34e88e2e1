"""DMA handles (``ibv_alloc_dmah``, ``ibv_dealloc_dmah``): PCIe TLP Processing Hints for the DMA of the MRs
registered with one (``ibv_reg_mr_ex``), a processing hint (``ph``) and optionally a steering tag naming the CPU
whose cache the NIC's writes should reach.

The checks are rdma-core's (providers/mlx5/verbs.c ``mlx5_alloc_dmah``), the kernel's
(drivers/infiniband/core/uverbs_std_types_dmah.c, with the stable fix that bounds ``cpu_id`` by ``nr_cpu_ids``,
323c98a4ff06) and mlx5's (drivers/infiniband/hw/mlx5/dmah.c, drivers/net/ethernet/mellanox/mlx5/core/lib/st.c), in
that order. Only mlx5 has the device ops. What the hints change in the host's caches is not modelled: the handle
is kept on the MR, and the data path's timing does not read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.ib.mr_checks import MELLANOX_VENDOR_ID
from models.verbs.cq import NUM_COMP_VECTORS
from models.verbs.device import Context
from models.versions import RDMA_CORE_REG_MR_EX, Version
from sim.core import VerbsError

DMAH_INIT_ATTR_MASK_CPU_ID, DMAH_INIT_ATTR_MASK_PH, DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE = 1, 2, 4
"""``enum ibv_dmah_init_attr_mask``."""
TPH_MEM_TYPE_VM, TPH_MEM_TYPE_PM = 0, 1
"""``enum ibv_tph_mem_type``: volatile or persistent memory."""
NR_CPU_IDS = NUM_COMP_VECTORS
"""The host's CPUs (``nr_cpu_ids``), all in the process's affinity mask: the 32-core host the completion vectors
stand for (an assumption, as there)."""


@dataclass(eq=False)
class DmaHandle:
    """``struct ibv_dmah``: ``ph`` (None: absent), the CPU and memory type of its steering tag (None: no tag)."""

    context: Context
    ph: int | None
    cpu_id: int | None
    mem_type: int | None
    usecnt: int = 0
    """MRs registered with it (``atomic_inc(&dmah->usecnt)`` in the REG_MR handler)."""
    freed: bool = False


def ibv_alloc_dmah(ctx: Context, comp_mask: int, cpu_id: int = 0, ph: int = 0,
                   tph_mem_type: int = TPH_MEM_TYPE_VM) -> DmaHandle:
    """Allocate a DMA handle with the fields ``comp_mask`` names.

    :raises VerbsError: ``EOPNOTSUPP`` for an rdma-core before v59, a provider without the op (rdma-core's dummy
        op: every device but mlx5), a mask bit mlx5 does not know, a memory type outside the enum (the ioctl's enum
        check) or a steering tag where PCIe TPH does not work; ``EPROTONOSUPPORT`` from a kernel before 6.17 (no
        such ioctl method: ``ib_uverbs_cmd_verbs``); ``EINVAL`` without ``ph``, with one of cpu_id and the memory
        type alone, a ``ph`` beyond two bits or a ``cpu_id`` not below ``nr_cpu_ids``.
    """
    call = "ibv_alloc_dmah"
    node = ctx.node
    if Version.parse(node.rdma_core) < RDMA_CORE_REG_MR_EX:
        raise VerbsError("EOPNOTSUPP", f"rdma-core v{node.rdma_core} has no {call} (v59)", call=call)
    if node.nic.params.device.vendor_id != MELLANOX_VENDOR_ID:
        raise VerbsError("EOPNOTSUPP", "the provider has no alloc_dmah (only mlx5 offers DMA handles)", call=call)
    mlx5_alloc_dmah(comp_mask, call)
    if not node.kernel.config.behaviour.has_reg_mr_ioctl:
        raise VerbsError("EPROTONOSUPPORT", f"kernel {node.kernel.config.version} has no UVERBS_METHOD_DMAH_ALLOC "
                         "(DMA handles arrived in 6.17)", call=call)
    handle = uverbs_dmah_alloc(ctx, comp_mask, cpu_id, ph, tph_mem_type, call)
    mlx5_ib_alloc_dmah(handle, call)
    return handle


def mlx5_alloc_dmah(comp_mask: int, call: str) -> None:
    """rdma-core's mlx5 provider: only the known mask bits; ``ph`` is a must; a steering tag needs both the CPU
    and the memory type."""
    known = DMAH_INIT_ATTR_MASK_CPU_ID | DMAH_INIT_ATTR_MASK_PH | DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE
    if comp_mask & ~known:
        raise VerbsError("EOPNOTSUPP", f"comp_mask {comp_mask:#x} has bits mlx5 does not support", call=call)
    if not comp_mask & DMAH_INIT_ATTR_MASK_PH:
        raise VerbsError("EINVAL", "a DMA handle needs its processing hint (IBV_DMAH_INIT_ATTR_MASK_PH)", call=call)
    tag = comp_mask & (DMAH_INIT_ATTR_MASK_CPU_ID | DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE)
    if tag and tag != DMAH_INIT_ATTR_MASK_CPU_ID | DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE:
        raise VerbsError("EINVAL", "a steering tag needs both cpu_id and tph_mem_type", call=call)


def uverbs_dmah_alloc(ctx: Context, comp_mask: int, cpu_id: int, ph: int, mem_type: int,
                      call: str) -> DmaHandle:
    """``UVERBS_HANDLER(UVERBS_METHOD_DMAH_ALLOC)``: a memory type outside the enum is refused by the ioctl's
    attribute check (``uverbs_process_attr``: an enum id beyond the enum -> EOPNOTSUPP); ``cpu_id`` not below ``nr_cpu_ids`` -> EINVAL (outside the process's affinity -> EPERM, not
    reached: every CPU is allowed here); ``ph & 0xFC`` -> EINVAL (PCIe 6.2: two bits)."""
    if comp_mask & DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE and mem_type not in (TPH_MEM_TYPE_VM, TPH_MEM_TYPE_PM):
        raise VerbsError("EOPNOTSUPP", f"tph_mem_type {mem_type} is not one of enum ibv_tph_mem_type", call=call)
    if comp_mask & DMAH_INIT_ATTR_MASK_CPU_ID and not 0 <= cpu_id < NR_CPU_IDS:
        raise VerbsError("EINVAL", f"cpu_id {cpu_id} is not below nr_cpu_ids ({NR_CPU_IDS})", call=call)
    if ph & 0xFC:
        raise VerbsError("EINVAL", f"ph {ph}: a processing hint has two bits (0..3)", call=call)
    tagged = comp_mask & DMAH_INIT_ATTR_MASK_CPU_ID
    return DmaHandle(ctx, ph, cpu_id if tagged else None, mem_type if tagged else None)


def mlx5_ib_alloc_dmah(handle: DmaHandle, call: str) -> None:
    """mlx5: a steering tag takes an index of the device's ST table (``mlx5_st_alloc_index``), which exists only
    where PCIe TPH works (``mlx5_st_create``) -> EOPNOTSUPP otherwise."""
    if handle.cpu_id is not None and not handle.context.node.nic.params.pcie_tph:
        raise VerbsError("EOPNOTSUPP", "the device has no PCIe TPH steering-tag table (mlx5_st_alloc_index: the "
                         "mkey_pcie_tph capability, the device's TPH capability or the OS's support is missing)",
                         call=call)


def ibv_dealloc_dmah(handle: DmaHandle) -> None:
    """Free a DMA handle.

    :raises VerbsError: ``EBUSY`` while MRs use it (``uverbs_free_dmah``), ``EINVAL`` when already freed.
    """
    call = "ibv_dealloc_dmah"
    if handle.freed:
        raise VerbsError("EINVAL", "the DMA handle was already freed", call=call)
    if handle.usecnt:
        raise VerbsError("EBUSY", f"{handle.usecnt} MR(s) still use the DMA handle (uverbs_free_dmah)", call=call)
    handle.freed = True

"""Legacy peer-memory registration of GPU memory (MLNX_OFED PeerDirect, nvidia-peermem).

``ibv_reg_mr`` on a GPU virtual address: the peer-memory client claims the range and the GPU driver pins its
64 KiB pages (nvidia_p2p_get_pages) for the MR's lifetime; nothing is charged to RLIMIT_MEMLOCK. The MR's
translation entries are those pages (:func:`~models.ib.mkey_page.mkey_page_size`): a sixteenth of a dma-buf
MR's on mlx5. When the GPU
driver reclaims the memory (cudaFree, process exit) its free callback invalidates the MR: later accesses
complete in error, there is no re-fault.
"""

from __future__ import annotations

from models.dmabuf.gpu_export import GpuAllocation
from models.ib.mkey_page import ib_umem_num_dma_blocks, mkey_page_size, page_segments
from models.ib.mr_backing import PeerMemBacking, PeerMemParams
from models.nic.wqe import Access
from models.verbs.device import ProtectionDomain
from models.verbs.mr import REG_MR_FIXED_PS, MemoryRegion, check_reg_args, reg_create, trace_registration
from sim.core import VerbsError


def ibv_reg_mr_peermem(pd: ProtectionDomain, alloc: GpuAllocation, offset: int, length: int, access: Access,
                       params: PeerMemParams = PeerMemParams()) -> MemoryRegion:
    """Register ``[alloc.addr + offset, +length)`` through the peer-memory client.

    :raises VerbsError: as :func:`~models.verbs.mr.ibv_reg_mr`; ``EFAULT`` for a range outside the allocation;
        ``EFAULT`` too when its GPU pages do not fit in what is left of the GPU's BAR1 (``nvidia_p2p_get_pages``
        fails in the client's probe, :mod:`models.gpu.bar1`).
    """
    call = "ibv_reg_mr"
    addr = alloc.addr + offset
    access = check_reg_args(pd.context.node, addr, length, Access(access), call)
    if offset < 0 or offset + length > alloc.size:
        raise VerbsError("EFAULT", "range outside the GPU allocation: nvidia_p2p_get_pages fails", call=call)
    nic = pd.context.node.nic
    page = mkey_page_size(nic.params, addr, page_segments(addr, length, params.gpu_page_size), is_dmabuf=False)
    gpu_pages = ib_umem_num_dma_blocks(addr, length, params.gpu_page_size)
    cost = REG_MR_FIXED_PS + params.get_pages_ps + gpu_pages * params.page_ps
    key = 0

    def umem():
        nonlocal key
        key = nic.new_key()  # before the pages are got: the peer client names its pin by the MR's key
        return cost, PeerMemBacking(length, alloc, f"{nic.name}:mr{key}", gpu_pages * params.gpu_page_size)

    mr = reg_create(pd, addr, length, access, umem, call, page=page, key=lambda: key)
    trace_registration(mr, call, ("nvidia_p2p_get_pages", cost - REG_MR_FIXED_PS, {"gpu_pages": gpu_pages}),
                       mr.mtt_entries)
    return mr


def peermem_reclaim(mr: MemoryRegion, now_ps: int) -> str:
    """The GPU driver's free callback for ``mr``'s pages: invalidate the MR and drop the pin. Returns the
    event-log outcome."""
    mr.backing.reclaim(now_ps)
    mr.pd.context.env.trace.instant(mr.pd.context.node.nic.name, "PeerMemoryReclaimed", mr=mr.lkey)
    return "MR invalidated (later accesses fail)"

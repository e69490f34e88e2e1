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


PEER_MEMORY_CLIENTS = {"nvidia": "nvidia-peermem"}
"""The peer-memory clients the model has, by the driver profile of the GPU whose memory they claim. ROCm's
peer-direct client for AMD GPUs (amdp2p) is not modelled."""


def no_peer_memory_client(vendor: str) -> str | None:
    """Why no peer-memory client claims the memory of a GPU with driver profile ``vendor`` (so that ``ib_umem_get``
    falls back to ``get_user_pages``, which cannot pin device memory: EFAULT); None when one does."""
    if vendor in PEER_MEMORY_CLIENTS:
        return None
    return (f"no peer-memory client claims {vendor} GPU memory: nvidia-peermem's acquire (nvidia_p2p_get_pages) "
            "answers for NVIDIA GPUs only (ROCm's amdp2p is not modelled), and get_user_pages cannot pin device "
            "memory: register it through dma-buf, or put it on an NVIDIA GPU")


def ibv_reg_mr_peermem(pd: ProtectionDomain, alloc: GpuAllocation, offset: int, length: int, access: Access,
                       params: PeerMemParams = PeerMemParams()) -> MemoryRegion:
    """Register ``[alloc.addr + offset, +length)`` through the peer-memory client.

    :raises VerbsError: as :func:`~models.verbs.mr.ibv_reg_mr`; ``EFAULT`` for memory of a GPU no peer-memory client
        claims (:func:`no_peer_memory_client`) and for a range outside the allocation;
        ``EFAULT`` too when its GPU pages do not fit in what is left of the GPU's BAR1 (``nvidia_p2p_get_pages``
        fails in the client's probe, :mod:`models.gpu.bar1`).
    """
    call = "ibv_reg_mr"
    addr = alloc.addr + offset
    access = check_reg_args(pd.context.node, addr, length, Access(access), call)
    unclaimed = no_peer_memory_client(alloc.vendor)
    if unclaimed:
        raise VerbsError("EFAULT", unclaimed, call=call)
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
    pinning = cost - REG_MR_FIXED_PS
    trace_registration(mr, call, ("nv_mem_get_pages", pinning, {"bytes": length}), mr.mtt_entries)
    env = pd.context.env
    env.trace.slice(nic.name, "nvidia_p2p_get_pages", env.now, env.now + pinning, gpu_pages=gpu_pages)
    return mr


def peermem_reclaim(mr: MemoryRegion, now_ps: int) -> str:
    """The GPU driver's free callback for ``mr``'s pages: invalidate the MR and drop the pin. Returns the
    event-log outcome."""
    mr.backing.reclaim(now_ps)
    mr.pd.context.env.trace.instant(mr.pd.context.node.nic.name, "PeerMemoryReclaimed", mr=mr.lkey)
    return "MR invalidated (later accesses fail)"

"""Data mode: the bytes behind a memory region, as the NIC's translation reaches them.

Host memory keeps one array per buffer (``HostMemory.data``); a GPU allocation keeps its bytes in
``GpuAllocation.data``, and an exported dma-buf in its exporter's ``storage``, one array per placement
generation. The NIC reaches an MR's bytes through its current translation: a dma-buf MR through the mapping
it holds, so an importer that ignored ``move_notify`` still reads and writes the old generation's array
(whatever the memory's new owner put there) — stale bytes, not the buffer's.
"""

from __future__ import annotations

import numpy as np

from models.ib.dmabuf_mr import DmabufBacking
from models.ib.mr_backing import PeerMemBacking
from models.verbs.verbs import MemoryRegion


def mr_bytes(mr: MemoryRegion, addr: int, length: int) -> np.ndarray:
    """A writable view of ``[addr, addr+length)`` (in the MR's iova space) as the NIC reaches it now."""
    offset = addr - mr.iova
    backing = mr.backing
    if isinstance(backing, DmabufBacking):
        umem = backing.umem
        generation = umem.sgt.generation if umem.sgt is not None else umem.attach.dmabuf.generation
        array, base = umem.attach.dmabuf.priv.storage[generation], umem.offset
    elif isinstance(backing, PeerMemBacking):
        array, base = backing.allocation.data, mr.addr - backing.allocation.addr
    else:
        host = mr.pd.context.node.host
        buf = next(b for b in host.buffers.values() if b.addr <= mr.addr < b.addr + b.size)
        array, base = host.data[buf.name], mr.addr - buf.addr
    return array[base + offset: base + offset + length]

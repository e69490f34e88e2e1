"""The NIC's own memory (mlx5 MEMIC, what ``ibv_alloc_dm`` hands out): its allocator and what an access to it costs.

Allocation follows drivers/infiniband/hw/mlx5/dm.c: ``handle_alloc_dm_memic`` rounds the length up to
``MLX5_MEMIC_BASE_SIZE`` (64 bytes) and ``mlx5_cmd_alloc_memic`` takes whole pages of the MEMIC BAR for it, the
first run of free pages that fits (``bitmap_find_next_zero_area`` over ``memic_alloc_pages``), ENOMEM when no run
does. The BAR's size (``memic_bar_size``) is taken as the device's ``max_dm_size`` (``max_memic_size``): no device's
two capabilities were read side by side.

The NIC reaches this memory on the chip, without crossing PCIe: a DMA read or write of a DM MR claims the MEMIC port
below instead of the host link. Its cost is an unvalidated default (no published measurement of MEMIC access was
found): :data:`MEMIC_LATENCY_PS` per access and :data:`MEMIC_BYTES_PER_S`, above every preset's port rate.
"""

from __future__ import annotations

from sim.core import PS_PER_NS, PS_PER_S, FifoServer
from sim.core.steps import Claim

PAGE_SIZE = 4096
"""The kernel's ``PAGE_SIZE`` (x86-64): the unit ``mlx5_cmd_alloc_memic`` allocates BAR pages in (bytes)."""
MLX5_MEMIC_BASE_SIZE = 64
"""``MLX5_MEMIC_BASE_SIZE`` (1 << ``MLX5_MEMIC_BASE_ALIGN``): the granule an allocation is rounded up to (bytes)."""
MLX5_MEMIC_BASE_ALIGN = 6
"""``MLX5_MEMIC_BASE_ALIGN``: the device counts alignment from 64 bytes (``log_align_req`` minus this)."""
LOG_MAX_MEMIC_ADDR_ALIGNMENT = 6
"""The ``log_max_memic_addr_alignment`` capability: an assumption (no device's value was read), 64 * 2**6 = one
4 KiB page, where every allocation starts anyway."""
MEMIC_TARGET = "memic"
"""The memory target (:func:`models.nic.stages.memory_target`) of an access through a DM MR."""
MEMIC_LATENCY_PS = 50 * PS_PER_NS
"""Fixed delay of one on-chip MEMIC access: an unvalidated default."""
MEMIC_BYTES_PER_S = 200 * 10**9
"""MEMIC bandwidth: an unvalidated default (above the 100 GB/s of an 800 Gb/s port, so the wire stays the limit)."""


class Memic:
    """One NIC's MEMIC: the page bitmap of ``mlx5_dm`` and the port its accesses claim."""

    def __init__(self, name: str, size: int) -> None:
        self.used = [False] * -(-size // PAGE_SIZE)
        """``memic_alloc_pages``: which BAR pages are allocated."""
        self.port = FifoServer(f"{name}.memic")
        """Serves the data path's reads and writes of the memory, one at a time."""

    def alloc(self, length: int) -> int | None:
        """Take the first run of free pages that holds ``length`` bytes (already rounded to 64); its byte offset in
        the BAR, or None when no run fits (``mlx5_cmd_alloc_memic``: ENOMEM)."""
        pages, run = -(-length // PAGE_SIZE), 0
        for index, used in enumerate(self.used):
            run = 0 if used else run + 1
            if run == pages:
                first = index - pages + 1
                self.used[first:index + 1] = [True] * pages
                return first * PAGE_SIZE
        return None

    def free(self, offset: int, length: int) -> None:
        """``mlx5_cmd_dealloc_memic``: give the pages of an allocation back."""
        first = offset // PAGE_SIZE
        self.used[first:first - (-length // PAGE_SIZE)] = [False] * -(-length // PAGE_SIZE)


def memic_size(length: int) -> int:
    """The bytes ``handle_alloc_dm_memic`` allocates for ``length``: rounded up to ``MLX5_MEMIC_BASE_SIZE``."""
    return -(-length // MLX5_MEMIC_BASE_SIZE) * MLX5_MEMIC_BASE_SIZE


def memic_access(memic: Memic, nbytes: int) -> list[Claim]:
    """The NIC reads or writes ``nbytes`` of its MEMIC: one claim of the MEMIC port, its first and last 64 bytes
    the head and tail, then :data:`MEMIC_LATENCY_PS`."""
    unit = MLX5_MEMIC_BASE_SIZE * PS_PER_S // MEMIC_BYTES_PER_S
    return [Claim(memic.port, max(1, nbytes) * PS_PER_S // MEMIC_BYTES_PER_S, unit, unit, MEMIC_LATENCY_PS)]

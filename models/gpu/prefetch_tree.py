"""UVM's prefetch tree (NVIDIA's open GPU kernel modules, kernel-open/nvidia-uvm/uvm_perf_prefetch.c): which chunks
of a VA block a fault batch migrates besides the faulted ones, all blocks of a batch at once."""

from __future__ import annotations

import functools

import numpy as np


def tree_regions(occupied: np.ndarray, wanted: np.ndarray, first_level: int, threshold_pct: int,
                 chunk_pages: int) -> np.ndarray:
    """Chunks of every tree region (``first_level`` chunks .. whole block) that holds a wanted chunk and
    whose occupied share exceeds ``threshold_pct``.

    uvm_perf_prefetch.c: ``init_bitmap_tree_from_region`` marks the pages resident on the target or faulted in
    this batch, ``grow_fault_granularity`` fills each big page holding a fault, and ``compute_prefetch_region``
    walks from each faulted page to the root keeping the largest region with ``count * 100 > pages * threshold``;
    the union of those regions is what this returns. ``uvm_perf_prefetch_min_faults`` (default 1) never holds the
    prefetch back: ``uvm_perf_prefetch_prenotify_fault_migrations`` counts the batch's own faults before
    ``uvm_perf_prefetch_get_hint_va_block`` compares.

    :param occupied: (blocks, chunks) int, pages of each chunk resident on the target or faulted.
    :param wanted: (blocks, chunks) bool, chunks holding a fault.
    :param first_level: size of the smallest region, in chunks.
    :param chunk_pages: pages per chunk.
    """
    member, sizes = tree(wanted.shape[1], first_level)
    count = occupied @ member  # exact: small integers in float64
    kept = ((wanted @ member) > 0) & (count * 100 > threshold_pct * chunk_pages * sizes)
    return (kept @ member.T) > 0


@functools.lru_cache(maxsize=8)
def tree(n: int, first_level: int) -> tuple[np.ndarray, np.ndarray]:
    """The regions of :func:`tree_regions`' tree over ``n`` chunks: an (n, regions) 0/1 matrix of the chunks each
    holds (float64, so that one matrix product counts every region of every block), and each region's size."""
    levels = [first_level << k for k in range(n.bit_length()) if first_level << k <= n]
    starts = np.concatenate([np.arange(0, n, size) for size in levels])
    sizes = np.repeat(levels, [n // size for size in levels])
    chunk = np.arange(n)[:, None]
    member = ((chunk >= starts) & (chunk < starts + sizes)).astype(np.float64)
    return member, sizes

"""Which GPU faults land in one batch: the issue order of a kernel's accesses cut into fault batches.

NVIDIA's UVM driver (open-gpu-kernel-modules, kernel-open/nvidia-uvm/uvm_gpu_replayable_faults.c) services the
replayable fault buffer batch by batch: ``fetch_fault_buffer_entries`` takes up to ``uvm_perf_fault_batch_count``
(256) entries in arrival order, ``service_fault_batch`` services them VA block by VA block, and under the default
replay policy (``UVM_PERF_FAULT_REPLAY_POLICY_BATCH_FLUSH``, ``uvm_parent_gpu_service_replayable_faults``)
``fault_buffer_flush_locked`` then discards the entries not fetched and replays: every warp still stalled faults
again, and the warps the batch released run on through resident pages before they fault anew. The order in which
faults arrive is the GPU's, not the driver's: the model takes the warps that have waited longest first (ties in
launch order). Launch order at every replay instead (the lowest stalled lanes first) puts the reads that complete
half-resident blocks 1.4-1.8x above the H200's (calib/gpu_um/README.md).

Both generators yield one kernel's batches as ``(passed, faulted)``: the pages accessed up to the batch (for LRU
stamps) and the batch's distinct faulting pages (sorted; empty when nothing is left to fault). They read
``on_gpu`` again after the caller has serviced a batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def stream_batches(on_gpu: np.ndarray, pages: np.ndarray, batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of a kernel with one access per thread, every thread in flight at once (``pages`` in the order the
    faults arrive): each batch is the next ``batch`` distinct pages not yet resident."""
    pos, window = 0, 4 * batch
    while pos < pages.size:
        end = min(pages.size, pos + window)
        span = pages[pos:end]
        miss = np.flatnonzero(~on_gpu[span])
        if miss.size == 0:
            yield span, miss
            pos, window = end, window * 2
            continue
        unique, first = np.unique(span[miss], return_index=True)
        if unique.size < batch and end < pages.size:
            window *= 2
            continue
        if unique.size > batch:
            order = np.argsort(first, kind="stable")
            end = pos + int(miss[first[order[batch]]])
            unique = np.sort(unique[order[:batch]])
        yield pages[pos:end], unique
        window = max(4 * batch, 2 * (end - pos))
        pos = end


def lane_batches(on_gpu: np.ndarray, pages: np.ndarray, lanes: int,
                 batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of a grid-stride kernel: access ``i`` is lane ``i % lanes``'s ``i // lanes``-th, each lane in order.

    A lane runs through resident pages and stalls at its first page not resident; the others run on. Stalled lanes
    queue oldest first (ties in launch order); a batch takes the queue's pending pages, front first, until ``batch``
    distinct pages; after it every lane whose access was serviced, or whose page the batch prefetched, runs on and
    queues again at the back.
    """
    rows = -(-pages.size // lanes)
    grid = np.full(rows * lanes, -1, dtype=np.int64)
    grid[:pages.size] = pages
    grid = grid.reshape(rows, lanes)
    cursor = np.zeros(lanes, dtype=np.int64)
    queue, moving = np.empty(0, dtype=np.int64), np.arange(lanes)
    steps = np.arange(rows)[:, None]
    while True:
        stop, passed = _run_on(grid, on_gpu, cursor, moving, steps)
        stalled = stop < rows
        cursor[moving] = stop
        queue = np.concatenate([queue, moving[stalled]])
        if queue.size == 0:
            yield passed, np.empty(0, dtype=np.int64)
            return
        pending = grid[cursor[queue], queue]
        unique, first = np.unique(pending, return_index=True)
        chosen = np.sort(unique[np.argsort(first, kind="stable")[:batch]])
        yield passed, chosen
        served = chosen[np.minimum(np.searchsorted(chosen, pending), chosen.size - 1)] == pending
        cursor[queue[served]] += 1  # their access is done even if a later block of the batch evicted its page
        resumed = served | on_gpu[pending]
        moving, queue = np.sort(queue[resumed]), queue[~resumed]


def _run_on(grid: np.ndarray, on_gpu: np.ndarray, cursor: np.ndarray, moving: np.ndarray,
            steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of the ``moving`` lanes stalls (its first access from its ``cursor`` on whose page is not
    resident; the grid's row count where there is none) and the pages they pass on the way (in no particular
    order). Rows are looked at from the lanes' earliest, 16 first, then twice as many each time for the lanes that
    have not stalled: most stall within the first rows."""
    rows = grid.shape[0]
    low = min(int(cursor[moving].min()) if moving.size else rows, rows - 1)
    stop, passed = np.full(moving.size, rows, dtype=np.int64), []
    todo, width = np.arange(moving.size), 16
    while todo.size and low < rows:
        high = min(rows, low + width)
        whole = high == rows and not passed  # every lane and row in one look
        lanes = moving if whole else moving[todo]
        sub = grid[low:high, lanes]
        ahead = (steps[low:high] >= cursor[lanes]) & (sub >= 0)
        miss = ahead & ~on_gpu[np.maximum(sub, 0)]
        stalled = miss.any(axis=0)
        at = np.where(stalled, low + miss.argmax(axis=0), high)
        passed.append(sub[ahead & (steps[low:high] < at)])
        if whole:
            return at, passed[0]
        stop[todo[stalled]] = at[stalled]
        todo = todo[~stalled]
        low, width = high, 2 * width
    return stop, np.concatenate(passed) if passed else np.empty(0, dtype=np.int64)

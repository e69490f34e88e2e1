"""Access patterns for managed memory and the metrics of running them.

A pattern is a numpy int64 array of 4 KiB page indices in the order the GPU (or CPU) issues them.
:func:`run_pattern` feeds one to a :class:`~models.gpu.managed.ManagedMemory` and returns one flat dict
(a pandas row): faults, batches, bytes each way, thrashing, effective throughput and the time breakdown.

>>> from models.gpu.managed import ManagedMemory
>>> mm = ManagedMemory(64 << 20)
>>> row = run_pattern(mm, sequential(mm.n_pages), label="seq")
>>> row["faults"], row["batches"], row["bytes_to_gpu"] == 64 << 20
(16384, 64, True)
"""

from __future__ import annotations

import numpy as np

from sim.core import PS_PER_S

from models.gpu.managed import ManagedMemory


def sequential(n_pages: int, *, start: int = 0, repetitions: int = 1) -> np.ndarray:
    """Pages ``start .. start + n_pages - 1`` in order, ``repetitions`` times (a grid-stride sweep)."""
    return np.tile(np.arange(start, start + n_pages, dtype=np.int64), repetitions)


def strided(n_pages: int, stride_pages: int, *, start: int = 0, repetitions: int = 1) -> np.ndarray:
    """Every ``stride_pages``-th page of ``[start, start + n_pages)``, ``repetitions`` times."""
    return np.tile(np.arange(start, start + n_pages, stride_pages, dtype=np.int64), repetitions)


def random_access(n_pages: int, count: int, *, rng: np.random.Generator, start: int = 0) -> np.ndarray:
    """``count`` pages drawn uniformly from ``[start, start + n_pages)``."""
    return start + rng.integers(0, n_pages, size=count, dtype=np.int64)


def growing_working_set(n_pages: int, steps: int, *, passes: int = 1) -> np.ndarray:
    """A job whose working set grows: step ``i`` (1..steps) sweeps the first ``i / steps`` of the pages
    ``passes`` times. Past the GPU capacity every sweep evicts what the next one needs (thrashing)."""
    return np.concatenate([sequential(n_pages * i // steps, repetitions=passes) for i in range(1, steps + 1)])


def block_heads(n_blocks: int, pages_per_block: int, *, block_pages: int = 512) -> np.ndarray:
    """The first ``pages_per_block`` pages of each of ``n_blocks`` VA blocks (one access per page)."""
    i = np.arange(n_blocks * pages_per_block, dtype=np.int64)
    return (i // pages_per_block) * block_pages + i % pages_per_block


def concurrent_warps(pattern: np.ndarray, *, rng: np.random.Generator, warp: int = 32) -> np.ndarray:
    """The issue order of a kernel whose thread blocks all run at once (one access per thread).

    Groups of ``warp`` consecutive accesses (one warp instruction) stay together; the groups arrive in
    random order, as warps of concurrently resident thread blocks do at the fault buffer.
    """
    groups = -(-pattern.size // warp)
    order = rng.permutation(groups)
    padded = np.full(groups * warp, -1, dtype=np.int64)
    padded[:pattern.size] = pattern
    shuffled = padded.reshape(groups, warp)[order].ravel()
    return shuffled[shuffled >= 0]


def run_pattern(mm: ManagedMemory, pattern: np.ndarray, *, on: str = "gpu", bytes_per_access: int = 4096,
                label: str = "") -> dict:
    """Run ``pattern`` on ``mm`` from the GPU (``on="gpu"``) or the CPU; return one metrics row.

    Row keys: the :class:`~models.gpu.managed.UvmStats` counters and ``*_us`` times, ``bytes_to_gpu`` /
    ``bytes_to_host``, ``footprint_bytes`` (distinct pages touched), ``effective_GBps`` (footprint over
    total time, GB = 1e9 B), ``thrashed_pages`` (pages migrated into the GPU more than once, whole run so
    far), ``oversubscription`` (footprint / GPU capacity) and the time shares ``fault_share``,
    ``migrate_share`` (fault-path copies and evictions), ``compute_share``.
    """
    stats = mm.gpu_access(pattern, bytes_per_access=bytes_per_access) if on == "gpu" else mm.cpu_access(pattern)
    row = {"label": label, "on": on, **stats.as_dict(mm.params.page_size)}
    footprint = int(np.unique(pattern).size) * mm.params.page_size
    total = stats.total_ps
    row.update(footprint_bytes=footprint,
               effective_GBps=footprint / total * PS_PER_S / 1e9 if total else float("inf"),
               thrashed_pages=mm.thrashed_pages(),
               oversubscription=footprint / (mm.capacity_pages * mm.params.page_size),
               fault_share=(stats.fault_ps + stats.cpu_fault_ps) / total if total else 0.0,
               migrate_share=(stats.migrate_ps + stats.evict_ps) / total if total else 0.0,
               compute_share=stats.compute_ps / total if total else 0.0)
    return row

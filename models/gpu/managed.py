"""Unified (managed) memory: per-4 KiB-page residency, fault batches, tree prefetch, LRU eviction.

State lives in numpy arrays, never in per-page objects: ``on_gpu`` (bool, one byte per 4 KiB page),
``to_gpu_count`` (uint16 migrations into the GPU per page, for thrashing), and per 2 MiB VA block the
resident page count and an LRU stamp. 141 GB of managed memory costs ~100 MB of state.

GPU accesses (an array of page indices, in the order the GPU issues them) are processed batch by batch,
following NVIDIA's UVM driver (open-gpu-kernel-modules, kernel-open/nvidia-uvm). Which faults share a batch
(up to ``fault_batch``, 256, distinct pages) is :mod:`models.gpu.fault_batches`' rule: one access per thread, or a
grid-stride loop whose lanes stall independently. A batch is serviced VA block by VA block: the faulted pages are
rounded out to migration chunks (64 KiB, the GPU big page, or whole 2 MiB blocks), the prefetcher adds the
largest region of the tree 64 KiB .. 2 MiB around each fault whose resident-or-faulted share exceeds 51 %
(uvm_perf_prefetch.c), room is made by evicting least recently used VA blocks to the host, and the pages
migrate. CPU accesses fault GPU-resident pages back one fault at a time with the same chunk and tree rule.

Time of one batch = ``batch_ps`` + the blocks serviced (``va_block_ps`` each, one after another) and their copies
(``fault_migrate_Bps``) run as a pipeline: each block's copy starts once the block is serviced and the previous
copy is done, and the replay waits for the last copy (:func:`last_service_waited`); + eviction. A GPU access call
with faults adds ``fault_latency_ps`` once; resident accesses cost ``bytes / hbm_Bps``. The H200 constants are
fitted to measurements on our H200 (models/data/h200_managed_memory.json, fit in calib/gpu_um/fit_um.py);
eviction costs are assumptions (oversubscription was not measured: it can hang a shared GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import numpy as np

from sim.core import PS_PER_NS, PS_PER_S, PS_PER_US, InvariantViolation, ProtocolError, transfer_ps

from models.gpu.device_memory import GpuOutOfMemory
from models.gpu.fault_batches import lane_batches, stream_batches
from models.gpu.prefetch_tree import tree_regions

KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True, slots=True)
class UvmParams:
    """Unified-memory geometry and costs (sizes in bytes, times in integer ps, rates in B/s).

    Defaults are the H200 fit (:func:`models.gpu.um_calibration.fit`, calib/gpu_um/fit_um.py) to
    models/data/h200_managed_memory.json; the geometry follows the UVM driver (kernel-open/nvidia-uvm).
    """

    page_size: int = 4 * KiB
    """Residency granularity (the host base page)."""
    va_block: int = 2 * MiB
    """UVM VA block: unit of fault servicing, LRU and eviction (``UVM_VA_BLOCK_SIZE``)."""
    chunk: int = 64 * KiB
    """Migration unit of one fault (GPU big page; measured: one touch per 64 KiB migrates everything, one
    per 2 MiB leaves the rest on the host). ``va_block`` moves whole blocks."""
    fault_batch: int = 256
    """Distinct faulting pages serviced together (``uvm_perf_fault_batch_count``)."""
    sweep_lanes: int = 132 * 8
    """Lanes of a grid-stride sweep (``gpu_access(..., lanes=)``): the thread blocks of 256 threads reading 16 B each
    that the GPU holds at once, one 4 KiB page each per loop (H200: 132 SMs x 8; calib/gpu_um/measure_um.py's
    ``read_all``)."""
    prefetch_threshold_pct: int = 51
    """A tree region is prefetched when more than this % of it is resident or faulted."""
    prefetch: bool = True
    """Enable the tree prefetcher."""
    fault_latency_ps: int = 54_774 * PS_PER_NS
    """Once per GPU access call that faults: launch, fault raised, UVM woken."""
    batch_ps: int = 84_083 * PS_PER_NS
    """Fixed cost of one fault batch (fetch, sort, replay)."""
    va_block_ps: int = 16_745 * PS_PER_NS
    """Per VA block serviced in a batch (block lock, page tables, host unmap and DMA mapping)."""
    fault_migrate_Bps: float = 18.15e9
    """Host -> GPU copy rate on the fault path (a block's copy runs while the batch's next block is serviced)."""
    cpu_fault_ps: int = 26_080 * PS_PER_NS
    """One CPU fault on a GPU-resident page (fixed part)."""
    cpu_migrate_Bps: float = 10.66e9
    """GPU -> host copy rate on the CPU-fault path."""
    cpu_touch_ps: int = 12_079
    """One CPU access to a host-resident page one page on from the CPU's previous access: a TLB miss and a
    cache-line fill (fitted to one-byte-per-4-KiB reads of host-resident managed memory)."""
    cpu_touch_doubling_ps: int = 4_043
    """What each doubling of a CPU access's distance from the CPU's previous access adds to :attr:`cpu_touch_ps`
    (the distance in pages, at most :data:`CPU_FARTHEST_PAGES`): the farther it lands, the more of its page walk
    misses the caches. Fitted with :attr:`cpu_touch_ps` to reads of one byte per 4 KiB and per 64 KiB; the reads of
    one byte per 2 MiB check it."""
    prefetch_call_ps: int = 30_581 * PS_PER_NS
    """Fixed cost of one cudaMemPrefetchAsync (set by the 4 KiB and 64 KiB prefetches of h200_um_edges.json)."""
    prefetch_to_gpu_Bps: float = 47.09e9
    """Explicit prefetch rate host -> GPU."""
    prefetch_to_host_Bps: float = 12.92e9
    """Explicit prefetch rate GPU -> host (host pages are allocated on the way)."""
    evict_block_ps: int = 16_745 * PS_PER_NS
    """Per VA block evicted: assumed equal to ``va_block_ps`` (oversubscription not measured)."""
    evict_Bps: float = 12.92e9
    """GPU -> host rate of eviction: assumed equal to ``prefetch_to_host_Bps`` (not measured)."""


CPU_FARTHEST_PAGES = 512
"""The farthest apart the CPU accesses measured were (one byte per 2 MiB): an access farther from the CPU's previous
one is charged as if this far (:attr:`UvmParams.cpu_touch_doubling_ps` is not extrapolated)."""


UVM_PRESETS: dict[str, UvmParams] = {"h200": UvmParams()}
"""H100 and MI300X presets reuse the H200 fit (same PCIe Gen5 x16 link; driver behaviour not measured)."""


@dataclass(slots=True)
class UvmStats:
    """Counters of one call (or, summed, of a run): pages are 4 KiB, times integer ps."""

    accesses: int = 0
    faults: int = 0
    """Distinct faulting pages on the GPU (summed over batches)."""
    batches: int = 0
    blocks_serviced: int = 0
    """VA blocks serviced, summed over batches."""
    blocks_waited: int = 0
    """Of ``blocks_serviced``, those whose servicing the batch waited on (the rest overlapped copies)."""
    pages_to_gpu: int = 0
    """Pages migrated host -> GPU by faults (including those the prefetcher added)."""
    pages_waited: int = 0
    """Of ``pages_to_gpu``, those whose copy the batch waited on (the rest overlapped servicing)."""
    pages_prefetched: int = 0
    """Of ``pages_to_gpu``, those the tree prefetcher added beyond the faulted chunks."""
    pages_evicted: int = 0
    blocks_evicted: int = 0
    cpu_faults: int = 0
    cpu_touch_doublings: float = 0.0
    """Of the CPU's accesses that found their page on the host: the doublings of each one's distance from the
    CPU's previous access, summed (what :attr:`UvmParams.cpu_touch_doubling_ps` is charged for)."""
    pages_to_host: int = 0
    """Pages migrated GPU -> host by CPU faults."""
    pages_explicit_to_gpu: int = 0
    pages_explicit_to_host: int = 0
    fault_ps: int = 0
    """Fault servicing: latency, batches, the VA blocks waited on."""
    migrate_ps: int = 0
    """Copies of the fault path that no servicing hid (``pages_waited``)."""
    evict_ps: int = 0
    cpu_fault_ps: int = 0
    cpu_touch_ps: int = 0
    """CPU accesses that found their page on the host."""
    prefetch_ps: int = 0
    compute_ps: int = 0

    @property
    def total_ps(self) -> int:
        """All time, serialised (faults stall the accessing warps)."""
        return (self.fault_ps + self.migrate_ps + self.evict_ps + self.cpu_fault_ps + self.cpu_touch_ps
                + self.prefetch_ps + self.compute_ps)

    def add(self, other: UvmStats) -> None:
        """Accumulate ``other`` into this record."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self, page_size: int = 4 * KiB) -> dict:
        """Counters plus bytes each way and times in µs: one flat row for pandas."""
        row = asdict(self)
        row.update(bytes_to_gpu=(self.pages_to_gpu + self.pages_explicit_to_gpu) * page_size,
                   bytes_to_host=(self.pages_to_host + self.pages_evicted + self.pages_explicit_to_host)
                   * page_size, total_ps=self.total_ps)
        row.update({k[:-3] + "_us": v / PS_PER_US for k, v in list(row.items()) if k.endswith("_ps")})
        return row


def last_service_waited(service_ps: int, copy_s: np.ndarray) -> int:
    """Index of the last VA block of a fault batch whose servicing the batch waits on.

    ``service_fault_batch`` services a batch's blocks one after another on the CPU; each block's copy is pushed
    to the copy engine and runs while the next block is serviced (``service_fault_batch_block`` only adds the
    block's tracker to the batch's), and the replay waits for them all (``push_replay_on_gpu`` acquires the
    batch tracker; uvm_gpu_replayable_faults.c). A batch of blocks serviced in ``service_ps`` each and copied in
    ``copy_s[i]`` seconds one copy after another ends ``max_k ((k + 1) * service + sum(copy[k:]))`` after it
    starts: the blocks up to ``k`` are waited on for their servicing, the copies from ``k`` on for their bytes.
    """
    waited = np.arange(1, copy_s.size + 1) * service_ps + np.cumsum(copy_s[::-1] * PS_PER_S)[::-1]
    return int(np.argmax(waited))


class ManagedMemory:
    """One cudaMallocManaged range on one GPU, resident on the host until touched by the GPU.

    :param nbytes: size of the range (rounded up to whole VA blocks).
    :param params: geometry and costs; default the H200 fit.
    :param gpu_capacity: bytes of GPU memory this range may occupy (oversubscribed when below ``nbytes``);
        default unlimited.
    :param hbm_Bps: rate of accesses that hit GPU-resident pages (bytes per second).
    :param name: trace track.
    :param trace: a trace recorder (``env.trace``); None: off.
    :param grow: asked for ``n`` more bytes of GPU memory when a fault batch would not fit (before the range
        evicts its own pages); returns the bytes granted (whole VA blocks, possibly 0) and the time it took
        (ps: making room may mean evicting another owner's memory). None: ``gpu_capacity`` is fixed.
    """

    def __init__(self, nbytes: int, params: UvmParams | None = None, *, gpu_capacity: int | None = None,
                 hbm_Bps: float = 4.8e12, name: str = "gpu0.uvm", trace=None,
                 grow: Callable[[int], tuple[int, int]] | None = None) -> None:
        self.params = p = params or UvmParams()
        if p.va_block % p.chunk or p.chunk % p.page_size or (p.va_block // p.chunk) & (p.va_block // p.chunk - 1):
            raise ValueError(f"{name}: the VA block must hold a power of two of chunks, each a multiple of the page "
                             "size (the prefetch tree halves the block down to a chunk)")
        self.ppb, self.ppc = p.va_block // p.page_size, p.chunk // p.page_size
        self.n_blocks = -(-nbytes // p.va_block)
        self.n_pages = self.n_blocks * self.ppb
        self.on_gpu = np.zeros(self.n_pages, dtype=bool)
        self.to_gpu_count = np.zeros(self.n_pages, dtype=np.uint16)
        self.block_resident = np.zeros(self.n_blocks, dtype=np.int32)
        self.block_last_use = np.zeros(self.n_blocks, dtype=np.int64)
        self.capacity_pages = self.n_pages if gpu_capacity is None else gpu_capacity // p.page_size
        self.resident_pages = 0
        self.hbm_Bps, self.name, self.trace, self.grow = hbm_Bps, name, trace, grow
        self.totals = UvmStats()
        self._stamp = 0
        self._cpu_last: int | None = None
        """The page of the CPU's latest access (None before its first)."""

    # -- inspection ---------------------------------------------------------------------------------------
    def state_nbytes(self) -> int:
        """Bytes of numpy state (residency, counters, per-block arrays)."""
        return sum(a.nbytes for a in (self.on_gpu, self.to_gpu_count, self.block_resident, self.block_last_use))

    def thrashed_pages(self) -> int:
        """Pages migrated into the GPU more than once."""
        return int(np.count_nonzero(self.to_gpu_count > 1))

    def resident_bytes(self) -> int:
        """Bytes resident on the GPU now."""
        return self.resident_pages * self.params.page_size

    def check(self) -> None:
        """Verify the residency bookkeeping.

        :raises InvariantViolation: per-block counts disagree with the page array, or capacity exceeded.
        """
        per_block = np.count_nonzero(self.on_gpu.reshape(self.n_blocks, self.ppb), axis=1)
        if not np.array_equal(per_block, self.block_resident) or per_block.sum() != self.resident_pages:
            raise InvariantViolation(f"{self.name}: resident page counts disagree with the residency array")
        if self.resident_pages > self.capacity_pages:
            raise InvariantViolation(f"{self.name}: {self.resident_pages} pages resident, capacity "
                                     f"{self.capacity_pages}")

    # -- helpers ------------------------------------------------------------------------------------------
    def _check_pages(self, pages: np.ndarray, call: str) -> np.ndarray:
        pages = np.asarray(pages, dtype=np.int64)
        if pages.size and (pages.min() < 0 or pages.max() >= self.n_pages):
            raise ProtocolError(f"{self.name}.{call}: page index outside the managed range [0, {self.n_pages})")
        return pages

    def _use(self, pages: np.ndarray) -> None:
        self._stamp += 1
        self.block_last_use[pages // self.ppb] = self._stamp

    def _set_blocks(self, blocks: np.ndarray, new: np.ndarray) -> None:
        """Set the residency of whole ``blocks`` to ``new`` (k, ppb) and keep the counters in step."""
        view = self.on_gpu.reshape(self.n_blocks, self.ppb)
        arriving = new & ~view[blocks]
        counts = np.count_nonzero(new, axis=1).astype(np.int32)
        self.resident_pages += int(counts.sum() - self.block_resident[blocks].sum())
        self.block_resident[blocks] = counts
        view[blocks] = new
        self.to_gpu_count.reshape(self.n_blocks, self.ppb)[blocks] += arriving

    def _make_room(self, pages_needed: int, keep: np.ndarray, stats: UvmStats) -> None:
        """Evict least recently used VA blocks (never those in ``keep``) until ``pages_needed`` fit."""
        short = pages_needed - (self.capacity_pages - self.resident_pages)
        if short <= 0:
            return
        candidates = np.flatnonzero(self.block_resident > 0)
        candidates = candidates[~np.isin(candidates, keep)]
        order = candidates[np.argsort(self.block_last_use[candidates], kind="stable")]
        enough = np.searchsorted(np.cumsum(self.block_resident[order]), short) + 1
        if enough > order.size:
            raise GpuOutOfMemory(pages_needed * self.params.page_size, (self.capacity_pages - self.resident_pages)
                                 * self.params.page_size, 0, call=f"{self.name}: fault batch")
        victims = order[:enough]
        pages = int(self.block_resident[victims].sum())
        self._set_blocks(victims, np.zeros((victims.size, self.ppb), dtype=bool))
        p = self.params
        stats.blocks_evicted += victims.size
        stats.pages_evicted += pages
        stats.evict_ps += victims.size * p.evict_block_ps + transfer_ps(pages * p.page_size, p.evict_Bps)
        if self.trace is not None and self.trace.enabled:
            self.trace.instant(self.name, "BlocksEvicted", blocks=victims.size, pages=pages)

    def _ask_for_memory(self, pages_needed: int, stats: UvmStats) -> None:
        """Before evicting its own pages, ask :attr:`grow` for the GPU memory ``pages_needed`` lack (in whole
        VA blocks, never beyond the range's size); its time counts as eviction time."""
        short = min(pages_needed - (self.capacity_pages - self.resident_pages), self.n_pages - self.capacity_pages)
        if self.grow is None or short <= 0:
            return
        granted, spent = self.grow(-(-short // self.ppb) * self.params.va_block)
        self.capacity_pages += granted // self.params.page_size
        stats.evict_ps += spent

    def _wanted(self, blocks: np.ndarray, pages: np.ndarray) -> np.ndarray:
        """(k, chunks) mask of the migration chunks holding ``pages`` (which lie in ``blocks``, sorted)."""
        rows = np.searchsorted(blocks, pages // self.ppb)
        chunks = np.zeros((blocks.size, self.ppb // self.ppc), dtype=bool)
        chunks[rows, (pages % self.ppb) // self.ppc] = True
        return chunks

    def _expand(self, present: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """(k, ppb) pages that should end up on the target: the wanted chunks plus the tree prefetch.

        ``present`` (k, ppb) marks pages already on the target."""
        p = self.params
        if p.prefetch:
            k, n = wanted.shape
            occupied = np.where(wanted, self.ppc, np.count_nonzero(present.reshape(k, n, self.ppc), axis=2))
            first = max(1, (64 * KiB // p.page_size) // self.ppc)
            wanted = wanted | tree_regions(occupied, wanted, min(first, n), p.prefetch_threshold_pct, self.ppc)
        return np.repeat(wanted, self.ppc, axis=1)

    # -- GPU faults ---------------------------------------------------------------------------------------
    def _service_batch(self, faulted: np.ndarray, stats: UvmStats) -> None:
        p = self.params
        of_block = faulted // self.ppb  # sorted, as the batch's pages are
        first = np.ones(of_block.size, dtype=bool)
        np.not_equal(of_block[1:], of_block[:-1], out=first[1:])
        blocks = of_block[first]
        resident = self.on_gpu.reshape(self.n_blocks, self.ppb)[blocks]
        wanted = self._wanted(blocks, faulted)
        faulted_pages = np.repeat(wanted, self.ppc, axis=1) & ~resident
        migrate = self._expand(resident, wanted) & ~resident
        n_migrate, n_faulted = int(np.count_nonzero(migrate)), int(np.count_nonzero(faulted_pages))
        self._ask_for_memory(n_migrate, stats)
        room = self.capacity_pages - int(self.block_resident[blocks].sum())  # evicting every other block
        if n_migrate > room:
            migrate, n_migrate = faulted_pages, n_faulted  # no room to prefetch
        if n_migrate <= room:
            self._make_room(n_migrate, blocks, stats)
            self._set_blocks(blocks, resident | migrate)
        else:  # one VA block at a time, evicting earlier blocks of this batch if need be
            view = self.on_gpu.reshape(self.n_blocks, self.ppb)
            for i in range(blocks.size):
                one = blocks[i:i + 1]
                self._make_room(int(np.count_nonzero(migrate[i])), one, stats)
                self._set_blocks(one, view[one] | migrate[i:i + 1])
        per_block = np.count_nonzero(migrate, axis=1)
        last = last_service_waited(p.va_block_ps, per_block * (p.page_size / p.fault_migrate_Bps))
        copied = int(per_block[last:].sum())
        stats.batches += 1
        stats.faults += faulted.size
        stats.blocks_serviced += blocks.size
        stats.blocks_waited += last + 1
        stats.pages_to_gpu += n_migrate
        stats.pages_waited += copied
        stats.pages_prefetched += n_migrate - n_faulted
        stats.fault_ps += p.batch_ps + (last + 1) * p.va_block_ps
        stats.migrate_ps += transfer_ps(copied * p.page_size, p.fault_migrate_Bps)
        if self.trace is not None and self.trace.enabled:
            self.trace.instant(self.name, "FaultBatchServiced", faults=faulted.size, blocks=blocks.size,
                               pages_migrated=n_migrate)

    def gpu_access(self, pages, *, bytes_per_access: int = 4 * KiB, lanes: int | None = None) -> UvmStats:
        """The GPU accesses ``pages`` (4 KiB page indices, in issue order); returns this call's counters.

        :param bytes_per_access: bytes each access reads or writes (its HBM time once resident).
        :param lanes: None: one access per thread, all in flight at once
            (:func:`~models.gpu.fault_batches.stream_batches`); an int: a grid-stride loop of that many lanes, each
            in order, a stalled lane holding up only itself (:func:`~models.gpu.fault_batches.lane_batches`).
        :raises ProtocolError: a page index outside the range, or ``lanes`` below 1.
        :raises GpuOutOfMemory: one batch needs more pages than the GPU capacity can ever hold.
        """
        pages = self._check_pages(pages, "gpu_access")
        if lanes is not None and lanes < 1:
            raise ProtocolError(f"{self.name}.gpu_access: lanes must be at least 1, got {lanes}")
        batch = self.params.fault_batch
        stats = UvmStats(accesses=pages.size)
        stats.compute_ps = transfer_ps(pages.size * bytes_per_access, self.hbm_Bps)
        batches = (stream_batches(self.on_gpu, pages, batch) if lanes is None
                   else lane_batches(self.on_gpu, pages, lanes, batch))
        for passed, faulted in batches:
            self._use(passed)
            if faulted.size:
                self._service_batch(faulted, stats)
        if stats.batches:
            stats.fault_ps += self.params.fault_latency_ps
        self.totals.add(stats)
        return stats

    # -- CPU faults ---------------------------------------------------------------------------------------
    def cpu_access(self, pages) -> UvmStats:
        """The CPU accesses ``pages`` in order; GPU-resident ones fault back to the host one fault at a time, the
        others cost a touch each, more the farther each lands from the previous access (:meth:`_doublings`).

        A fault moves pages of its own VA block only, so the faults of different blocks do not interact: they are
        taken in rounds, each round faulting every block at its next access (in order) to a GPU-resident page.

        :raises ProtocolError: a page index outside the range.
        """
        pages = self._check_pages(pages, "cpu_access")
        p = self.params
        stats = UvmStats(accesses=pages.size)
        of_block = pages // self.ppb
        order = np.argsort(of_block, kind="stable")
        ordered, of_block = pages[order], of_block[order]  # each block's accesses together, in their order
        begins = np.flatnonzero(np.r_[True, of_block[1:] != of_block[:-1]])
        ends = np.r_[begins[1:], pages.size]
        cursor, live = begins.copy(), np.arange(begins.size)  # per block: its next access to look at
        touched = np.ones(pages.size, dtype=bool)  # per access: it found its page on the host
        every = np.arange(pages.size)
        while live.size:
            resident = np.where(self.on_gpu[ordered], every, pages.size)
            first = np.minimum.accumulate(resident[::-1])[::-1][cursor[live]]  # the next GPU-resident access
            faulting = first < ends[live]
            live, first = live[faulting], first[faulting]
            if not live.size:
                break
            cursor[live] = first  # looked at again next round, the page then on the host
            touched[order[first]] = False
            page, block = ordered[first], of_block[first]  # blocks ascending, one page each
            on_host = ~self.on_gpu.reshape(self.n_blocks, self.ppb)[block]
            moved = self._expand(on_host, self._wanted(block, page)) & ~on_host
            self._set_blocks(block, ~(on_host | moved))
            pages_moved, faults = np.unique(np.count_nonzero(moved, axis=1), return_counts=True)  # per fault
            stats.cpu_faults += block.size
            stats.pages_to_host += int(pages_moved @ faults)
            stats.cpu_fault_ps += sum(int(k) * (p.cpu_fault_ps + transfer_ps(int(n) * p.page_size, p.cpu_migrate_Bps))
                                      for n, k in zip(pages_moved, faults))
        doublings = self._doublings(pages)[touched]
        stats.cpu_touch_doublings = float(doublings.sum())
        stats.cpu_touch_ps = int(np.rint(p.cpu_touch_ps + p.cpu_touch_doubling_ps * doublings).astype(np.int64).sum())
        if pages.size:
            self._cpu_last = int(pages[-1])
        self.totals.add(stats)
        return stats

    def _doublings(self, pages: np.ndarray) -> np.ndarray:
        """Per access of ``pages`` (in order): the doublings of its distance in pages from the CPU's previous access
        (at most :data:`CPU_FARTHEST_PAGES`; the CPU's first access to the range is that far). A touch costs
        :attr:`UvmParams.cpu_touch_ps` plus :attr:`UvmParams.cpu_touch_doubling_ps` per doubling."""
        if not pages.size:
            return np.zeros(0)
        before = pages[0] - CPU_FARTHEST_PAGES if self._cpu_last is None else self._cpu_last
        return np.log2(np.clip(np.abs(np.diff(pages, prepend=before)), 1, CPU_FARTHEST_PAGES))

    # -- explicit prefetch --------------------------------------------------------------------------------
    def prefetch(self, first_page: int, n_pages: int, *, to: str = "gpu") -> UvmStats:
        """cudaMemPrefetchAsync of pages ``[first_page, first_page + n_pages)`` to ``"gpu"`` or ``"host"``.

        Prefetching more than the GPU capacity evicts least recently used blocks, earlier parts of the
        same range included, so the range's tail ends up resident.

        :raises ProtocolError: range outside the allocation or unknown target.
        """
        if to not in ("gpu", "host") or first_page < 0 or n_pages < 0 or first_page + n_pages > self.n_pages:
            raise ProtocolError(f"{self.name}.prefetch: bad range [{first_page}, +{n_pages}) or target {to!r}")
        p = self.params
        stats = UvmStats()
        lo, hi = first_page, first_page + n_pages
        step = min(4096, max(1, self.capacity_pages // self.ppb) if to == "gpu" else self.n_blocks)  # <= 8 GiB
        for b0 in range(lo // self.ppb, -(-hi // self.ppb), step):
            blocks = np.arange(b0, min(b0 + step, -(-hi // self.ppb)))
            index = blocks[:, None] * self.ppb + np.arange(self.ppb)
            in_range = (index >= lo) & (index < hi)
            current = self.on_gpu.reshape(self.n_blocks, self.ppb)[blocks]
            if to == "gpu":
                moved = in_range & ~current
                self._stamp += 1
                self.block_last_use[blocks] = self._stamp
                self._make_room(int(moved.sum()), blocks, stats)
                self._set_blocks(blocks, current | moved)
                stats.pages_explicit_to_gpu += int(moved.sum())
            else:
                moved = in_range & current
                self._set_blocks(blocks, current & ~moved)
                stats.pages_explicit_to_host += int(moved.sum())
        rate = p.prefetch_to_gpu_Bps if to == "gpu" else p.prefetch_to_host_Bps
        moved_pages = stats.pages_explicit_to_gpu + stats.pages_explicit_to_host
        stats.prefetch_ps = p.prefetch_call_ps + transfer_ps(moved_pages * p.page_size, rate)
        self.totals.add(stats)
        return stats

    def set_gpu_capacity(self, nbytes: int) -> UvmStats:
        """Change the GPU memory available to this range (memory pressure); evicts LRU blocks to fit."""
        self.capacity_pages = nbytes // self.params.page_size
        stats = UvmStats()
        self._make_room(0, np.empty(0, dtype=np.int64), stats)
        self.totals.add(stats)
        return stats

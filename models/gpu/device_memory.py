"""Device memory (VRAM): a cudaMalloc-like allocator over a free list of extents, with eviction hooks.

Every allocation is rounded up to the granularity (2 MiB, the GPU's huge page) and placed in one
contiguous extent, first-fit or best-fit. An allocation fails with :class:`GpuOutOfMemory` when no free
extent is long enough, even when the free bytes add up to enough: fragmentation is visible.

Pinned allocations never move. A movable allocation becomes evictable once an owner (the dma-buf exporter)
registers a callback with :meth:`DeviceMemory.register_evictable`; :meth:`DeviceMemory.malloc_or_evict`
(memory pressure) then evicts evictable allocations, least recently used first, until a contiguous run
exists. The callback moves the data out (``move_notify``, copy to system memory...) and returns what that
cost in ps; the allocator then frees the extent. An allocation with a pin count (``dma_buf_pin``) is never
offered.

>>> mem = DeviceMemory(8 * MiB)
>>> a, b, c = (mem.malloc(2 * MiB) for _ in range(3))
>>> mem.free(b)
>>> try:
...     mem.malloc(4 * MiB)
... except GpuOutOfMemory as error:
...     print(error)
gpu0.malloc: ENOMEM: no contiguous 4MiB free (largest free extent 2MiB, 4MiB free in all: fragmented)
>>> mem.register_evictable(c, lambda alloc: 5_000_000)
>>> big, cost_ps = mem.malloc_or_evict(4 * MiB)
>>> c.resident, cost_ps
(False, 5000000)
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

from sim.core import InvariantViolation, ProtocolError, SimError, format_size

MiB = 1 << 20

EvictCallback = Callable[["Allocation"], int]
"""Moves an allocation's data out of VRAM and returns the time that took (ps)."""


class GpuOutOfMemory(SimError):
    """No contiguous free run for an allocation (cudaMalloc's ``cudaErrorMemoryAllocation``, errno ENOMEM)."""

    errno = "ENOMEM"

    def __init__(self, requested: int, total_free: int, largest_free: int, *, call: str) -> None:
        self.requested, self.total_free, self.largest_free = requested, total_free, largest_free
        why = ": fragmented" if total_free >= requested else ""
        super().__init__(f"{call}: ENOMEM: no contiguous {format_size(requested)} free (largest free extent "
                         f"{format_size(largest_free)}, {format_size(total_free)} free in all{why})")


@dataclass(eq=False, slots=True)
class Allocation:
    """One allocation: ``size`` rounded bytes at ``offset`` in VRAM (None while evicted)."""

    id: int
    size: int
    requested: int
    offset: int | None
    pinned: bool = False
    """Allocated pinned: never evicted, never registered as evictable."""
    tag: str = ""
    pin_count: int = 0
    """Temporary pins (``dma_buf_pin``); evictable only at zero."""
    last_use: int = 0
    """LRU stamp: the allocator's use counter when last allocated, touched or readmitted."""
    evict_callback: EvictCallback | None = None
    freed: bool = False

    @property
    def resident(self) -> bool:
        """In VRAM now."""
        return self.offset is not None

    @property
    def evictable(self) -> bool:
        """Registered, resident, not pinned in any way: may be offered to the eviction policy."""
        return (self.evict_callback is not None and self.resident and not self.pinned and not self.freed
                and self.pin_count == 0)


class EvictionPolicy(Protocol):
    """Orders eviction candidates (all evictable, resident allocations) from first to last victim."""

    def order(self, candidates: list[Allocation]) -> Iterable[Allocation]:
        """Candidates in the order they should be evicted."""


class LruEviction:
    """Least recently used first (ties: oldest allocation first)."""

    def order(self, candidates: list[Allocation]) -> Iterable[Allocation]:  # noqa: D102 - see protocol
        return sorted(candidates, key=lambda a: (a.last_use, a.id))


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """A snapshot of the allocator (bytes; fragmentation = 1 - largest free extent / free bytes)."""

    capacity: int
    used: int
    free: int
    largest_free: int
    free_extents: int
    allocations: int
    evicted_now: int
    evictions: int
    evicted_bytes: int
    failed_allocations: int
    fragmentation: float

    def as_dict(self) -> dict:
        """The snapshot as a flat dict (one pandas row)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PressureResult:
    """What :meth:`DeviceMemory.apply_pressure` did: the competing allocations, its victims, its cost (ps)."""

    allocations: tuple[Allocation, ...]
    evicted: tuple[Allocation, ...]
    cost_ps: int


class DeviceMemory:
    """VRAM of one GPU.

    :param capacity: bytes the allocator may hand out (rounded down to the granularity).
    :param granularity: allocation unit in bytes (2 MiB).
    :param fit: ``"first"`` (lowest address that fits) or ``"best"`` (smallest extent that fits).
    :param policy: eviction order; default :class:`LruEviction`.
    :param name: used in error messages and as the trace track.
    :param trace: a trace recorder (``env.trace``) for ``BufferEvicted`` / ``AllocationFailed``; None: off.
    """

    def __init__(self, capacity: int, *, granularity: int = 2 * MiB, fit: str = "first",
                 policy: EvictionPolicy | None = None, name: str = "gpu0", trace=None) -> None:
        if fit not in ("first", "best"):
            raise ValueError(f"{name}: fit must be 'first' or 'best', got {fit!r}")
        self.granularity = granularity
        self.capacity = capacity // granularity * granularity
        self.fit, self.policy, self.name, self.trace = fit, policy or LruEviction(), name, trace
        self._starts: list[int] = [0] if self.capacity else []
        self._ends: list[int] = [self.capacity] if self.capacity else []
        self.live: dict[int, Allocation] = {}
        """Every allocation not yet freed (resident or evicted), by id."""
        self.used = 0
        self._next_id = 0
        self._clock = 0
        self.evictions = self.evicted_bytes = self.failed_allocations = 0
        self.on_release: Callable[[int], None] | None = None
        """Told the bytes each time VRAM goes back (a free, an eviction, a vacate): the driver clears them
        (:mod:`models.gpu.scrub`)."""

    @classmethod
    def from_params(cls, params, **kwargs) -> DeviceMemory:
        """Build from a :class:`models.gpu.presets.GpuParams`."""
        return cls(params.hbm_bytes, granularity=params.alloc_granularity, name=params.name, **kwargs)

    # -- free list ----------------------------------------------------------------------------------------
    def _find(self, size: int) -> int | None:
        lengths = (e - s for s, e in zip(self._starts, self._ends))
        fits = [(n, i) for i, n in enumerate(lengths) if n >= size]
        if not fits:
            return None
        return fits[0][1] if self.fit == "first" else min(fits)[1]

    def _take(self, size: int) -> int | None:
        i = self._find(size)
        if i is None:
            return None
        start = self._starts[i]
        if self._ends[i] - start == size:
            del self._starts[i], self._ends[i]
        else:
            self._starts[i] = start + size
        return start

    def _give_back(self, start: int, size: int) -> None:
        end = start + size
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self._ends[i - 1] == start:
            i -= 1
            start = self._starts[i]
            del self._starts[i], self._ends[i]
        if i < len(self._starts) and self._starts[i] == end:
            end = self._ends[i]
            del self._starts[i], self._ends[i]
        self._starts.insert(i, start)
        self._ends.insert(i, end)

    @property
    def free_extents(self) -> list[tuple[int, int]]:
        """Free (start, end) byte ranges in address order."""
        return list(zip(self._starts, self._ends))

    def largest_free(self) -> int:
        """Length of the longest free extent (bytes)."""
        return max((e - s for s, e in zip(self._starts, self._ends)), default=0)

    # -- allocation ---------------------------------------------------------------------------------------
    def _round(self, size: int) -> int:
        if size <= 0:
            raise ProtocolError(f"{self.name}.malloc: size must be positive, got {size}")
        return -(-size // self.granularity) * self.granularity

    def _stamp(self, alloc: Allocation) -> None:
        self._clock += 1
        alloc.last_use = self._clock

    def _fail(self, rounded: int, call: str) -> GpuOutOfMemory:
        self.failed_allocations += 1
        if self.trace is not None and self.trace.enabled:
            self.trace.instant(self.name, "AllocationFailed", bytes=rounded, largest_free=self.largest_free())
        return GpuOutOfMemory(rounded, self.capacity - self.used, self.largest_free(), call=call)

    def malloc(self, size: int, *, pinned: bool = False, tag: str = "") -> Allocation:
        """Allocate ``size`` bytes (rounded up to the granularity) without evicting anything.

        :raises GpuOutOfMemory: no contiguous free run of the rounded size.
        :raises ProtocolError: size not positive.
        """
        rounded = self._round(size)
        start = self._take(rounded)
        if start is None:
            raise self._fail(rounded, f"{self.name}.malloc")
        alloc = Allocation(self._next_id, rounded, size, start, pinned, tag)
        self._next_id += 1
        self.used += rounded
        self.live[alloc.id] = alloc
        self._stamp(alloc)
        return alloc

    def free(self, alloc: Allocation) -> None:
        """Free ``alloc`` (resident or evicted).

        :raises ProtocolError: double free or an allocation of another allocator.
        """
        if alloc.freed or self.live.get(alloc.id) is not alloc:
            raise ProtocolError(f"{self.name}.free: allocation {alloc.id} is not live here (double free?)")
        if alloc.resident:
            self._release(alloc)
        alloc.freed, alloc.evict_callback = True, None
        del self.live[alloc.id]

    def touch(self, alloc: Allocation) -> None:
        """Record a use of ``alloc`` (moves it to the most recently used end of the LRU order)."""
        self._stamp(alloc)

    # -- eviction hooks -----------------------------------------------------------------------------------
    def register_evictable(self, alloc: Allocation, evict_callback: EvictCallback) -> None:
        """Let memory pressure evict ``alloc`` by calling ``evict_callback(alloc)`` (returns its cost in ps).

        :raises ProtocolError: ``alloc`` is pinned or freed: pinned memory is never offered.
        """
        if alloc.pinned or alloc.freed:
            state = "pinned" if alloc.pinned else "freed"
            raise ProtocolError(f"{self.name}.register_evictable: allocation {alloc.id} is {state}; "
                                "only live movable allocations can be evicted")
        alloc.evict_callback = evict_callback

    def unregister_evictable(self, alloc: Allocation) -> None:
        """Stop offering ``alloc`` for eviction."""
        alloc.evict_callback = None

    def pin(self, alloc: Allocation) -> None:
        """Take a temporary pin (``dma_buf_pin``): not evictable until every pin is dropped."""
        if not alloc.resident:
            raise ProtocolError(f"{self.name}.pin: allocation {alloc.id} is not resident; readmit it first")
        alloc.pin_count += 1

    def unpin(self, alloc: Allocation) -> None:
        """Drop one temporary pin.

        :raises ProtocolError: not pinned.
        """
        if alloc.pin_count == 0:
            raise ProtocolError(f"{self.name}.unpin: allocation {alloc.id} is not pinned")
        alloc.pin_count -= 1

    def vacate(self, alloc: Allocation) -> None:
        """Its owner moved ``alloc``'s contents out of VRAM (amdgpu pinning a buffer into system memory): the VRAM
        goes back, the allocation stays live and not resident.

        :raises ProtocolError: ``alloc`` is not resident or is pinned in VRAM.
        """
        if not alloc.resident or alloc.freed or alloc.pin_count:
            raise ProtocolError(f"{self.name}.vacate: allocation {alloc.id} is not resident and unpinned")
        self._release(alloc)

    def _release(self, alloc: Allocation) -> None:
        self._give_back(alloc.offset, alloc.size)
        self.used -= alloc.size
        alloc.offset = None
        if self.on_release is not None:
            self.on_release(alloc.size)

    def _evict(self, alloc: Allocation) -> int:
        cost = alloc.evict_callback(alloc)
        if type(cost) is not int or cost < 0:
            raise ProtocolError(f"{self.name}: evict callback of allocation {alloc.id} returned {cost!r}, "
                                "expected a non-negative int of ps")
        if alloc.pinned or alloc.pin_count:
            raise InvariantViolation(f"{self.name}: allocation {alloc.id} was evicted while pinned")
        self._release(alloc)
        self.evictions += 1
        self.evicted_bytes += alloc.size
        if self.trace is not None and self.trace.enabled:
            self.trace.instant(self.name, "BufferEvicted", alloc=alloc.id, tag=alloc.tag, bytes=alloc.size,
                               cost_ps=cost)
        return cost

    def _could_fit(self, rounded: int, victims: list[Allocation]) -> bool:
        """Would a run of ``rounded`` bytes exist once every allocation in ``victims`` is gone?"""
        extents = sorted(self.free_extents + [(a.offset, a.offset + a.size) for a in victims])
        best = run_start = run_end = 0
        for start, end in extents:
            if start != run_end:
                run_start = start
            run_end = end
            best = max(best, run_end - run_start)
        return best >= rounded

    def make_room(self, size: int, *, call: str = "") -> tuple[list[Allocation], int]:
        """Evict (policy order) until a contiguous run of ``size`` rounded bytes is free.

        Nothing is evicted when even evicting every candidate would not make room.
        Returns the victims and the summed callback cost (ps).

        :raises GpuOutOfMemory: no set of evictable allocations makes room.
        """
        rounded = self._round(size)
        victims: list[Allocation] = []
        cost = 0
        if self.largest_free() >= rounded:
            return victims, cost
        candidates = [a for a in self.live.values() if a.evictable]
        if not self._could_fit(rounded, candidates):
            raise self._fail(rounded, call or f"{self.name}.make_room")
        for alloc in self.policy.order(candidates):
            cost += self._evict(alloc)
            victims.append(alloc)
            if self.largest_free() >= rounded:
                return victims, cost
        raise InvariantViolation(f"{self.name}: eviction freed every candidate but no {rounded}-byte run exists")

    def malloc_or_evict(self, size: int, *, pinned: bool = False, tag: str = "") -> tuple[Allocation, int]:
        """:meth:`malloc`, evicting evictable allocations first when needed; returns (allocation, cost ps).

        :raises GpuOutOfMemory: no contiguous run even after evicting every evictable allocation.
        """
        _, cost = self.make_room(size, call=f"{self.name}.malloc")
        return self.malloc(size, pinned=pinned, tag=tag), cost

    def readmit(self, alloc: Allocation) -> int:
        """Give an evicted allocation VRAM again (possibly elsewhere), evicting others if needed; returns ps.

        :raises ProtocolError: ``alloc`` is resident or freed.
        :raises GpuOutOfMemory: no room even after eviction.
        """
        if alloc.freed or alloc.resident:
            raise ProtocolError(f"{self.name}.readmit: allocation {alloc.id} is "
                                f"{'freed' if alloc.freed else 'already resident'}")
        _, cost = self.make_room(alloc.size, call=f"{self.name}.readmit")
        alloc.offset = self._take(alloc.size)
        self.used += alloc.size
        self._stamp(alloc)
        return cost

    def apply_pressure(self, nbytes: int, *, chunk: int | None = None, tag: str = "pressure") -> PressureResult:
        """A competing job allocates ``nbytes`` (pinned, in ``chunk``-byte allocations), evicting as needed.

        :raises GpuOutOfMemory: some chunk cannot be placed even after eviction (earlier chunks stay).
        """
        chunk = chunk or nbytes
        allocs: list[Allocation] = []
        victims: list[Allocation] = []
        cost = 0
        for offset in range(0, nbytes, chunk):
            size = min(chunk, nbytes - offset)
            evicted, spent = self.make_room(size, call=f"{self.name}.apply_pressure")
            victims.extend(evicted)
            cost += spent
            allocs.append(self.malloc(size, pinned=True, tag=tag))
        return PressureResult(tuple(allocs), tuple(victims), cost)

    # -- inspection ---------------------------------------------------------------------------------------
    def stats(self) -> MemoryStats:
        """Current :class:`MemoryStats`."""
        free = self.capacity - self.used
        largest = self.largest_free()
        resident = sum(1 for a in self.live.values() if a.resident)
        return MemoryStats(self.capacity, self.used, free, largest, len(self._starts), resident,
                           len(self.live) - resident, self.evictions, self.evicted_bytes,
                           self.failed_allocations, 1.0 - largest / free if free else 0.0)

    def check(self) -> None:
        """Verify the allocator's invariants.

        :raises InvariantViolation: overlapping extents, bytes lost or double-counted, capacity exceeded.
        """
        spans = sorted([(a.offset, a.offset + a.size, f"alloc {a.id}") for a in self.live.values() if a.resident]
                       + [(s, e, "free") for s, e in self.free_extents])
        position = 0
        for start, end, what in spans:
            if start != position:
                problem = "overlaps" if start < position else "leaves a hole before"
                raise InvariantViolation(f"{self.name}: {what} at {start:#x} {problem} byte {position:#x}")
            position = end
        if position != self.capacity:
            raise InvariantViolation(f"{self.name}: extents cover {position} of {self.capacity} bytes")
        used = sum(a.size for a in self.live.values() if a.resident)
        if used != self.used or used > self.capacity:
            raise InvariantViolation(f"{self.name}: used {self.used} but resident allocations hold {used}")

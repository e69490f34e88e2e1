"""The VRAM allocator: invariants under random call sequences, fragmentation, eviction hooks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core import ProtocolError, VerbsError

from models.gpu.device_memory import DeviceMemory, GpuOutOfMemory, LruEviction
from models.gpu.presets import gpu_params
from tests.properties import examples

MiB = 1 << 20
CAP = 64 * MiB

ops = st.lists(st.one_of(
    st.tuples(st.just("malloc"), st.integers(1, 24 * MiB), st.booleans()),
    st.tuples(st.just("free"), st.integers(0, 1000), st.booleans()),
), max_size=60)


@settings(max_examples=examples(150), deadline=None)
@given(ops=ops, fit=st.sampled_from(["first", "best"]))
def test_random_sequences_keep_invariants(ops, fit):
    mem = DeviceMemory(CAP, fit=fit)
    live = []
    for op, value, pinned in ops:
        if op == "malloc":
            largest_before = mem.largest_free()
            rounded = -(-value // (2 * MiB)) * (2 * MiB)
            try:
                alloc = mem.malloc(value, pinned=pinned)
            except GpuOutOfMemory as error:
                # fails only when no contiguous run exists, even if the free bytes would suffice
                assert largest_before < rounded
                assert error.largest_free == largest_before and error.total_free == CAP - mem.used
            else:
                assert largest_before >= rounded and alloc.size == rounded and alloc.offset % (2 * MiB) == 0
                live.append(alloc)
        elif live:
            mem.free(live.pop(value % len(live)))
        mem.check()  # no overlap, no hole, bytes conserved
        assert mem.used <= CAP and mem.stats().free == CAP - mem.used
    for alloc in live:
        mem.free(alloc)
    assert mem.free_extents == [(0, CAP)] and mem.used == 0  # free restores the whole capacity


def test_fragmentation_is_visible():
    mem = DeviceMemory(8 * MiB)
    a, b, c, d = (mem.malloc(2 * MiB) for _ in range(4))
    mem.free(a)
    mem.free(c)
    stats = mem.stats()
    assert stats.free == 4 * MiB and stats.largest_free == 2 * MiB and stats.fragmentation == 0.5
    with pytest.raises(GpuOutOfMemory, match="fragmented") as info:
        mem.malloc(4 * MiB)
    assert info.value.errno == "ENOMEM" and mem.stats().failed_allocations == 1
    mem.free(b)  # a, b, c coalesce
    assert mem.malloc(6 * MiB).offset == 0


def test_best_fit_picks_the_smallest_hole():
    for fit, expected in (("first", 0), ("best", 6 * MiB)):
        mem = DeviceMemory(16 * MiB, fit=fit)
        allocs = [mem.malloc(s) for s in (4 * MiB, 2 * MiB, 2 * MiB, 2 * MiB)]
        mem.free(allocs[0])
        mem.free(allocs[2])  # holes: [0, 4) MiB, [6, 8) MiB and the tail [10, 16) MiB
        assert mem.malloc(2 * MiB).offset == expected


def test_eviction_offers_only_unpinned_and_goes_lru():
    mem = DeviceMemory(10 * MiB)
    calls = []
    allocs = [mem.malloc(2 * MiB, tag=f"b{i}") for i in range(5)]
    for alloc in allocs:
        mem.register_evictable(alloc, lambda a: calls.append(a.tag) or 1000)
    mem.pin(allocs[0])  # dma_buf_pin: never offered while pinned
    mem.touch(allocs[1])  # b1 becomes the most recently used
    victims, cost = mem.make_room(4 * MiB)
    assert calls == ["b2", "b3"] and cost == 2000 and [v.tag for v in victims] == ["b2", "b3"]
    assert all(not v.resident for v in victims) and allocs[0].resident
    mem.check()


def test_pressure_evicts_then_fails_without_evicting_when_hopeless():
    mem = DeviceMemory(8 * MiB)
    pinned = mem.malloc(2 * MiB, pinned=True)
    movable = mem.malloc(4 * MiB)
    mem.register_evictable(movable, lambda a: 7)
    with pytest.raises(ProtocolError, match="pinned"):
        mem.register_evictable(pinned, lambda a: 0)
    with pytest.raises(GpuOutOfMemory):
        mem.apply_pressure(8 * MiB)  # even evicting everything evictable leaves the pinned 2 MiB
    assert movable.resident and mem.evictions == 0
    result = mem.apply_pressure(6 * MiB, chunk=2 * MiB)
    assert [v.id for v in result.evicted] == [movable.id] and result.cost_ps == 7
    assert len(result.allocations) == 3 and all(a.pinned for a in result.allocations)
    assert mem.stats().used == 8 * MiB and mem.stats().evicted_now == 1
    with pytest.raises(GpuOutOfMemory):
        mem.readmit(movable)
    assert [a.offset // MiB for a in result.allocations] == [6, 2, 4]  # the first chunk fit without evicting
    mem.free(result.allocations[1])
    mem.free(result.allocations[2])
    assert mem.readmit(movable) == 0 and movable.offset == 2 * MiB
    mem.check()


def test_protocol_errors():
    mem = DeviceMemory(8 * MiB)
    alloc = mem.malloc(1)
    with pytest.raises(ProtocolError):
        mem.unpin(alloc)
    mem.free(alloc)
    with pytest.raises(ProtocolError, match="double free"):
        mem.free(alloc)
    with pytest.raises(ProtocolError):
        mem.malloc(0)
    bad = mem.malloc(2 * MiB)
    mem.register_evictable(bad, lambda a: -1)
    with pytest.raises(ProtocolError, match="non-negative"):
        mem.make_room(8 * MiB)
    assert isinstance(GpuOutOfMemory(1, 0, 0, call="x"), Exception)
    assert not isinstance(GpuOutOfMemory(1, 0, 0, call="x"), VerbsError)


def test_lru_policy_orders_by_last_use():
    mem = DeviceMemory(8 * MiB)
    a, b = mem.malloc(2 * MiB), mem.malloc(2 * MiB)
    mem.touch(a)
    assert list(LruEviction().order([a, b])) == [b, a]


def test_from_preset():
    mem = DeviceMemory.from_params(gpu_params("h200"))
    assert mem.capacity == 143770 * MiB and mem.name == "h200"  # rounded down to 2 MiB


@settings(max_examples=examples(100), deadline=None)
@given(n=st.integers(2, 12), pinned=st.sets(st.integers(0, 11)), temp_pinned=st.sets(st.integers(0, 11)),
       registered=st.sets(st.integers(0, 11)), touches=st.lists(st.integers(0, 11), max_size=20),
       need=st.integers(1, 24))
def test_eviction_never_takes_pinned_and_follows_lru(n, pinned, temp_pinned, registered, touches, need):
    mem = DeviceMemory(24 * MiB)
    allocs = [mem.malloc(2 * MiB, pinned=i in pinned) for i in range(n)]
    for i in registered & set(range(n)) - pinned:
        mem.register_evictable(allocs[i], lambda a: 1)
    for i in temp_pinned & set(range(n)):
        mem.pin(allocs[i])
    for i in touches:
        if i < n:
            mem.touch(allocs[i])
    candidates = [a for a in allocs if a.evictable]
    try:
        victims, cost = mem.make_room(need * MiB)
    except GpuOutOfMemory:
        assert mem.evictions == 0  # nothing evicted when no choice of victims makes room
        return
    assert cost == len(victims)
    assert all(not v.pinned and v.pin_count == 0 and v in candidates for v in victims)
    kept = [a for a in candidates if a.resident]
    assert all(v.last_use < k.last_use for v in victims for k in kept)  # least recently used went first
    mem.check()

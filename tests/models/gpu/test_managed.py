"""Unified memory: fault batching, the prefetch tree, eviction, CPU faults, explicit prefetch, footprint."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core import ProtocolError, transfer_ps

from models.gpu.device_memory import GpuOutOfMemory
from models.gpu.managed import UVM_PRESETS, ManagedMemory
from models.gpu.workloads import (block_heads, concurrent_warps, growing_working_set, random_access, run_pattern,
                                  sequential, strided)
from tests.properties import examples

MiB = 1 << 20
H200 = UVM_PRESETS["h200"]
BLOCK = 512  # 4 KiB pages per 2 MiB VA block
CHUNK = 16  # 4 KiB pages per 64 KiB chunk


def test_1000_faults_make_4_batches():
    mm = ManagedMemory(64 * MiB)
    stats = mm.gpu_access(strided(1000 * CHUNK, CHUNK))  # 1000 faults, one per 64 KiB chunk
    assert (stats.faults, stats.batches) == (1000, 4)
    assert stats.pages_to_gpu == 1000 * CHUNK and stats.pages_prefetched == 0  # last block 25 % faulted
    p = H200
    # each block's 2 MiB copy outlasts the next block's servicing: a batch waits for its first block, then copies
    assert stats.blocks_serviced == 32 and stats.blocks_waited == 4 and stats.pages_waited == stats.pages_to_gpu
    assert stats.fault_ps == p.fault_latency_ps + 4 * (p.batch_ps + p.va_block_ps)
    assert stats.migrate_ps == pytest.approx(transfer_ps(stats.pages_to_gpu * 4096, p.fault_migrate_Bps), abs=4)
    again = mm.gpu_access(strided(1000 * CHUNK, CHUNK))
    assert again.faults == again.batches == again.fault_ps == 0  # all resident now
    mm.check()


def test_duplicates_coalesce_within_a_batch():
    mm = ManagedMemory(4 * MiB)
    stats = mm.gpu_access(np.array([5, 5, 5, 7, 5]))
    assert (stats.faults, stats.batches, stats.accesses) == (2, 1, 5)


@pytest.mark.parametrize("faulted_chunks, whole_block", [(16, False), (17, True)])
def test_prefetch_threshold_at_the_2mib_level(faulted_chunks, whole_block):
    """16 of 32 chunks (50 %) stay as faulted; 17 (53 % > 51 %) pull in the whole 2 MiB block."""
    mm = ManagedMemory(2 * MiB)
    stats = mm.gpu_access(strided(faulted_chunks * CHUNK, CHUNK))
    assert stats.pages_to_gpu == (BLOCK if whole_block else faulted_chunks * CHUNK)
    assert stats.pages_prefetched == (BLOCK - faulted_chunks * CHUNK if whole_block else 0)


@pytest.mark.parametrize("touched, migrated", [(8, 8), (9, 16)])
def test_prefetch_threshold_at_the_64kib_leaf(touched, migrated):
    """With 4 KiB migration units: 9 of 16 pages (56 %) of a 64 KiB region fetch the region, 8 (50 %) do not."""
    mm = ManagedMemory(2 * MiB, replace(H200, chunk=4096))
    assert mm.gpu_access(np.arange(touched)).pages_to_gpu == migrated


def test_a_va_block_of_chunks_the_tree_cannot_halve_is_refused():
    """The prefetch tree halves a VA block down to one chunk (uvm_perf_prefetch.c's bitmap tree): 6 chunks of
    64 KiB cannot be halved so."""
    with pytest.raises(ValueError, match="power of two"):
        ManagedMemory(4 * MiB, replace(H200, va_block=6 * 64 * 1024))


def test_prefetch_tree_grows_for_a_sequential_cpu_reader():
    """CPU faults on a GPU-resident block: chunks 0, 1, 2, 4, 8, 16 fault, the tree fetches the rest."""
    mm = ManagedMemory(2 * MiB)
    mm.prefetch(0, BLOCK)
    stats = mm.cpu_access(sequential(BLOCK))
    assert stats.cpu_faults == 6 and stats.pages_to_host == BLOCK and mm.resident_pages == 0
    mm.check()


def test_prefetch_off_and_whole_block_migration():
    off = ManagedMemory(2 * MiB, replace(H200, prefetch=False))
    assert off.gpu_access(strided(BLOCK, CHUNK)).pages_to_gpu == BLOCK  # every chunk faulted anyway
    assert off.gpu_access(np.arange(BLOCK, dtype=np.int64)).faults == 0
    off2 = ManagedMemory(2 * MiB, replace(H200, prefetch=False))
    assert off2.gpu_access(strided(17 * CHUNK, CHUNK)).pages_to_gpu == 17 * CHUNK
    whole = ManagedMemory(4 * MiB, replace(H200, chunk=2 * MiB))
    assert whole.gpu_access(np.array([3])).pages_to_gpu == BLOCK


def test_lru_eviction_of_blocks_under_oversubscription():
    mm = ManagedMemory(8 * MiB, gpu_capacity=6 * MiB)  # 4 blocks, room for 3
    for block in (0, 1, 2):
        mm.gpu_access(sequential(BLOCK, start=block * BLOCK))
    mm.gpu_access(np.array([0]))  # block 0 is used again: block 1 is now least recently used
    stats = mm.gpu_access(sequential(BLOCK, start=3 * BLOCK))
    assert stats.blocks_evicted == 1 and stats.pages_evicted == BLOCK
    assert list(mm.block_resident) == [BLOCK, 0, BLOCK, BLOCK]
    assert stats.evict_ps == H200.evict_block_ps + transfer_ps(2 * MiB, H200.evict_Bps)
    mm.check()


def test_thrashing_is_visible():
    fits = ManagedMemory(64 * MiB, gpu_capacity=64 * MiB)
    row = run_pattern(fits, sequential(fits.n_pages, repetitions=3))
    assert row["thrashed_pages"] == 0 and row["pages_evicted"] == 0
    over = ManagedMemory(64 * MiB, gpu_capacity=32 * MiB)
    row = run_pattern(over, sequential(over.n_pages, repetitions=3))
    assert row["thrashed_pages"] == over.n_pages  # every page migrated more than once
    assert row["bytes_to_gpu"] == 3 * 64 * MiB and row["pages_evicted"] > 0
    assert row["oversubscription"] == 2.0 and row["migrate_share"] > 0.5


def test_a_batch_wider_than_the_gpu_is_serviced_block_by_block():
    mm = ManagedMemory(32 * MiB, gpu_capacity=8 * MiB)
    mm.prefetch(0, 4 * BLOCK)  # the GPU is full
    stats = mm.gpu_access(strided(mm.n_pages, 2 * CHUNK))  # every other chunk: 12 MiB needed at once
    assert (stats.batches, stats.blocks_serviced, stats.pages_to_gpu) == (1, 12, 12 * BLOCK // 2)
    assert mm.resident_bytes() == 8 * MiB and stats.blocks_evicted == 4 + 4  # then its own first blocks
    mm.check()


def test_batch_larger_than_capacity_is_an_error():
    mm = ManagedMemory(8 * MiB, gpu_capacity=64 << 10)
    with pytest.raises(GpuOutOfMemory):
        mm.gpu_access(strided(4 * CHUNK, CHUNK))


def test_explicit_prefetch_and_cost():
    mm = ManagedMemory(64 * MiB)
    stats = mm.prefetch(10, 1000)
    assert stats.pages_explicit_to_gpu == 1000 and mm.resident_pages == 1000
    assert stats.prefetch_ps == H200.prefetch_call_ps + transfer_ps(1000 * 4096, H200.prefetch_to_gpu_Bps)
    assert mm.gpu_access(np.arange(10, 1010)).faults == 0
    back = mm.prefetch(0, mm.n_pages, to="host")
    assert back.pages_explicit_to_host == 1000 and mm.resident_pages == 0
    with pytest.raises(ProtocolError):
        mm.prefetch(0, mm.n_pages + 1)
    with pytest.raises(ProtocolError):
        mm.prefetch(0, 1, to="disk")


def test_prefetching_more_than_fits_keeps_the_tail():
    mm = ManagedMemory(16 * MiB, gpu_capacity=4 * MiB)
    stats = mm.prefetch(0, mm.n_pages)
    assert list(mm.block_resident) == [0] * 6 + [BLOCK] * 2
    assert stats.pages_explicit_to_gpu == mm.n_pages and stats.pages_evicted == 6 * BLOCK
    mm.check()


def test_memory_pressure_shrinks_residency():
    mm = ManagedMemory(16 * MiB)
    mm.prefetch(0, mm.n_pages)
    stats = mm.set_gpu_capacity(5 * MiB)
    assert stats.blocks_evicted == 6 and mm.resident_bytes() == 4 * MiB
    mm.check()


def test_cpu_access_pulls_pages_back():
    mm = ManagedMemory(4 * MiB)
    mm.gpu_access(sequential(mm.n_pages))
    stats = mm.cpu_access(np.array([0, 1, 2]))
    assert stats.cpu_faults == 1 and stats.pages_to_host == CHUNK
    assert stats.cpu_fault_ps == H200.cpu_fault_ps + transfer_ps(CHUNK * 4096, H200.cpu_migrate_Bps)
    assert mm.gpu_access(np.array([0])).faults == 1  # and the GPU faults it again
    with pytest.raises(ProtocolError):
        mm.cpu_access(np.array([mm.n_pages]))


@pytest.mark.parametrize("seed", range(3))
def test_cpu_accesses_in_one_call_fault_as_they_do_one_at_a_time(seed):
    """The CPU's faults happen one at a time in access order: interleaved over six blocks, one call gives the
    counters and the residency that the same accesses give one call each."""
    rng = np.random.default_rng(seed)
    pattern = np.concatenate([rng.integers(0, 4 * BLOCK, 300), strided(6 * BLOCK, 37)])  # blocks 6, 7 stay
    together, apart = ManagedMemory(16 * MiB), ManagedMemory(16 * MiB)
    touched = rng.permutation(together.n_pages)[: 5 * BLOCK]
    for mm in (together, apart):
        mm.gpu_access(touched)
    one = together.cpu_access(pattern)
    each = [apart.cpu_access(pattern[i:i + 1]) for i in range(pattern.size)]
    for name in ("cpu_faults", "pages_to_host", "cpu_fault_ps", "cpu_touch_ps"):
        assert getattr(one, name) == sum(getattr(s, name) for s in each)
    assert one.cpu_faults > 50 and np.array_equal(together.on_gpu, apart.on_gpu) and together.on_gpu.any()
    together.check()


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**16), capacity_blocks=st.integers(1, 8), cpu=st.booleans())
def test_bookkeeping_holds_for_random_traffic(seed, capacity_blocks, cpu):
    rng = np.random.default_rng(seed)
    mm = ManagedMemory(16 * MiB, gpu_capacity=capacity_blocks * 2 * MiB)
    total = 0
    for _ in range(3):
        stats = mm.gpu_access(random_access(mm.n_pages, int(rng.integers(1, 300)), rng=rng))
        total += stats.pages_to_gpu
        if cpu:
            mm.cpu_access(random_access(mm.n_pages, 50, rng=rng))
        mm.check()  # counts agree with the page array; capacity never exceeded
        assert stats.faults <= stats.batches * 256 and stats.pages_prefetched <= stats.pages_to_gpu
    assert int(mm.to_gpu_count.sum()) == mm.totals.pages_to_gpu + mm.totals.pages_explicit_to_gpu == total


def test_residency_state_for_141_gb_fits_well_under_1_gib():
    mm = ManagedMemory(141 * 10**9)
    assert mm.n_pages == 67_235 * 512  # 141 GB in whole 2 MiB blocks, 4 KiB pages
    assert mm.on_gpu.nbytes == mm.n_pages and mm.to_gpu_count.nbytes == 2 * mm.n_pages
    assert mm.state_nbytes() < 110 * 10**6 < (1 << 30)


def test_workload_rows_become_a_dataframe():
    mm = ManagedMemory(32 * MiB, gpu_capacity=16 * MiB)
    rng = np.random.default_rng(1)
    patterns = {"seq": sequential(mm.n_pages), "strided": strided(mm.n_pages, 64),
                "random": random_access(mm.n_pages, 5000, rng=rng),
                "grow": growing_working_set(mm.n_pages, 4, passes=2),
                "warps": concurrent_warps(block_heads(16, 100), rng=rng)}
    frame = pd.DataFrame([run_pattern(mm, p, label=k) for k, p in patterns.items()])
    assert list(frame["label"]) == list(patterns)
    for column in ("faults", "batches", "bytes_to_gpu", "bytes_to_host", "effective_GBps", "fault_us",
                   "migrate_us", "compute_us", "total_us", "thrashed_pages"):
        assert column in frame
    assert (frame["total_us"] >= frame["fault_us"] + frame["migrate_us"]).all()
    assert np.isclose(frame[["fault_share", "migrate_share", "compute_share"]].sum(axis=1), 1.0).all()
    assert sorted(concurrent_warps(np.arange(100), rng=rng)) == list(range(100))
    assert block_heads(2, 3).tolist() == [0, 1, 2, 512, 513, 514]
    assert growing_working_set(8, 2).tolist() == [0, 1, 2, 3] + list(range(8))


def test_a_cpu_touch_costs_more_the_farther_it_lands_from_the_previous_one():
    """Reads of a host-resident range one page apart, 16 apart and 512 apart (one per 2 MiB): each doubling of the
    distance adds one step to the touch (calib/gpu_um/README.md); past the farthest distance measured the cost
    stops growing."""
    step, per_touch = H200.cpu_touch_doubling_ps, []
    for stride in (1, 16, 512, 4096):
        mm = ManagedMemory(64 * MiB)
        pages = strided(mm.n_pages, stride)
        first = H200.cpu_touch_ps + 9 * step  # the range's first access (see the next test)
        per_touch.append((mm.cpu_access(pages).cpu_touch_ps - first) / (pages.size - 1))
    assert per_touch[:3] == [H200.cpu_touch_ps, H200.cpu_touch_ps + 4 * step, H200.cpu_touch_ps + 9 * step]
    assert per_touch[3] == per_touch[2]


def test_the_cpus_next_access_continues_from_its_last_one_across_calls():
    """The distance is the CPU's, not one call's: page 1 right after page 0 is one page on; the range's first access
    lands as far as the farthest distance measured."""
    mm = ManagedMemory(4 * MiB)
    first, then = mm.cpu_access(np.array([0])), mm.cpu_access(np.array([1]))
    assert then.cpu_touch_ps == H200.cpu_touch_ps
    assert first.cpu_touch_ps == H200.cpu_touch_ps + 9 * H200.cpu_touch_doubling_ps

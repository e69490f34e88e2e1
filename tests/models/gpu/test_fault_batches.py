"""Which faults share a batch (models/gpu/fault_batches.py) and what a batch waits for (models/gpu/managed.py).

Sources: kernel-open/nvidia-uvm/uvm_gpu_replayable_faults.c of NVIDIA's open GPU kernel modules:
``fetch_fault_buffer_entries`` (at most ``uvm_perf_fault_batch_count`` = 256 entries a batch),
``fault_buffer_flush_locked`` under ``UVM_PERF_FAULT_REPLAY_POLICY_BATCH_FLUSH`` (the rest discarded, then a replay),
``service_fault_batch_block`` (a block's copy only joins the batch tracker) and ``push_replay_on_gpu`` (the replay
acquires that tracker).
"""

from __future__ import annotations

import numpy as np
import pytest

from models.gpu.fault_batches import lane_batches, stream_batches
from models.gpu.managed import UVM_PRESETS, ManagedMemory, last_service_waited

MiB = 1 << 20
BLOCK = 512  # 4 KiB pages per 2 MiB VA block
LANES = 1056  # thread blocks of measure_um.py's read_all on an H200: one 4 KiB page each per loop


def _half_resident(blocks: int) -> np.ndarray:
    on_gpu = np.zeros(blocks * BLOCK, dtype=bool)
    on_gpu.reshape(blocks, BLOCK)[:, :BLOCK // 2] = True
    return on_gpu


def test_lanes_run_past_resident_pages_so_one_batch_spans_many_blocks():
    """Lane j reads pages j, j + 1056, ...; with the first half of every block resident, lanes 0..255 each stall at
    the first loop k where (j + 32 k) mod 512 >= 256, i.e. k = ceil((256 - j) / 32): eight blocks in the first
    batch, where a single in-order stream faults only block 0's second half."""
    on_gpu = _half_resident(32)
    pages = np.arange(on_gpu.size, dtype=np.int64)
    _, first = next(lane_batches(on_gpu, pages, LANES, 256))
    j = np.arange(256)
    expected = np.sort(j + LANES * -(-(256 - j) // 32))
    assert np.array_equal(first, expected)
    assert np.unique(first // BLOCK).size == 8
    _, streamed = next(stream_batches(on_gpu, pages, 256))
    assert np.array_equal(streamed, np.arange(256, 512))


def test_stalled_lanes_go_before_the_lanes_a_batch_released():
    """After a replay the warps still stalled fault again before the released ones, which first run on: the second
    batch is lanes 256..511, stalled on block 0's second half since the start."""
    on_gpu = _half_resident(32)
    batches = lane_batches(on_gpu, np.arange(on_gpu.size, dtype=np.int64), LANES, 256)
    _, first = next(batches)
    on_gpu[first] = True
    _, second = next(batches)
    assert np.array_equal(second, np.arange(256, 512))


def test_lanes_of_an_empty_range_end_and_pass_every_page():
    on_gpu = np.ones(4 * BLOCK, dtype=bool)
    passed, faulted = next(lane_batches(on_gpu, np.arange(on_gpu.size, dtype=np.int64), LANES, 256))
    assert faulted.size == 0 and np.array_equal(np.sort(passed), np.arange(on_gpu.size))


def test_a_grid_stride_read_touches_every_page_once_resident():
    mm = ManagedMemory(64 * MiB)
    stats = mm.gpu_access(np.arange(mm.n_pages), lanes=LANES)
    assert mm.on_gpu.all() and stats.pages_to_gpu == mm.n_pages and stats.faults <= 256 * stats.batches
    mm.check()


def _lane_by_lane(on_gpu: np.ndarray, pages: np.ndarray, lanes: int, batch: int, prefetch: int) -> list:
    """lane_batches' rule followed one lane at a time in plain Python: each moving lane (in launch order) runs
    through resident pages and queues at its first one not resident; a batch takes the queue's distinct pending
    pages front first; the serviced lanes move one access on; every lane whose page is now resident runs again.
    Servicing a batch makes each of its pages and the ``prefetch`` pages after it resident."""
    seqs = [pages[lane::lanes].tolist() for lane in range(lanes)]
    cursor, queue, moving, out = [0] * lanes, [], list(range(lanes)), []
    while True:
        passed = []
        for lane in moving:
            seq = seqs[lane]
            while cursor[lane] < len(seq) and on_gpu[seq[cursor[lane]]]:
                passed.append(seq[cursor[lane]])
                cursor[lane] += 1
            if cursor[lane] < len(seq):
                queue.append(lane)
        pending = [seqs[lane][cursor[lane]] for lane in queue]
        chosen = sorted(list(dict.fromkeys(pending))[:batch])
        out.append((sorted(passed), chosen))
        if not queue:
            return out
        for page in chosen:
            on_gpu[page:page + prefetch + 1] = True
        served = [page in chosen for page in pending]
        for lane, done in zip(queue, served):
            cursor[lane] += done
        resumed = [done or bool(on_gpu[page]) for done, page in zip(served, pending)]
        moving = sorted(lane for lane, go in zip(queue, resumed) if go)
        queue = [lane for lane, go in zip(queue, resumed) if not go]


@pytest.mark.parametrize("seed", range(4))
def test_lanes_follow_the_rule_lane_by_lane_through_long_resident_stretches(seed):
    """Resident stretches of up to 300 pages, 7 lanes: each lane runs past many rows before it stalls."""
    rng = np.random.default_rng(seed)
    start = rng.random(3000) < 0.5
    stretches = np.repeat(rng.random(30) < 0.6, 100)
    pages = np.concatenate([np.arange(3000), rng.integers(0, 3000, 200)])
    expected = _lane_by_lane((start & stretches).copy(), pages, 7, 16, prefetch=40)
    on_gpu = start & stretches
    got = []
    for passed, faulted in lane_batches(on_gpu, pages, 7, 16):
        got.append((sorted(passed.tolist()), faulted.tolist()))
        for page in faulted:
            on_gpu[page:page + 41] = True
    assert len(got) == len(expected) > 20 and got == expected


def test_lanes_below_one_are_refused():
    with pytest.raises(Exception, match="lanes must be at least 1"):
        ManagedMemory(2 * MiB).gpu_access(np.arange(4), lanes=0)


@pytest.mark.parametrize("service_ps, copies, last", [
    (10, [0.0, 0.0, 0.0], 2),            # nothing to copy: every block's servicing is waited on
    (10, [1.0, 1.0, 1.0], 0),            # copies longer than servicing: the first block, then every copy
    (10, [0.0, 0.0, 1e-12], 2),          # only the last block copies: all servicing, then its copy
    (10, [0.0, 30e-12, 0.0], 1),         # the second block's 30 ps copy outlasts the third's servicing
])
def test_a_batch_waits_for_the_slower_of_servicing_and_copies(service_ps, copies, last):
    """Blocks are serviced one after another and their copies run behind them, one copy at a time: the batch ends
    max_k ((k + 1) service + copies from k on) after it starts."""
    copy_s = np.array(copies)
    assert last_service_waited(service_ps, copy_s) == last
    span = [(k + 1) * service_ps + copy_s[k:].sum() * 1e12 for k in range(copy_s.size)]
    assert span[last] == pytest.approx(max(span))


def test_copies_of_a_many_block_batch_hide_the_servicing():
    """A batch of 8 whole blocks: each 2 MiB copy (~115 us) outlasts a block's servicing (~17 us), so the batch waits
    for the first block's servicing and every copy."""
    p = UVM_PRESETS["h200"]
    mm = ManagedMemory(16 * MiB)
    stats = mm.gpu_access(np.arange(0, mm.n_pages, 16))  # one touch per 64 KiB: 256 faults, 8 blocks, one batch
    assert (stats.batches, stats.blocks_serviced, stats.blocks_waited) == (1, 8, 1)
    assert stats.pages_waited == stats.pages_to_gpu == mm.n_pages
    assert stats.fault_ps == p.fault_latency_ps + p.batch_ps + p.va_block_ps

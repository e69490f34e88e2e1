"""NIC translation caches and the large-MR cliff (LMCache PR #4432)."""

import numpy as np
import pytest

from models.nic.datapath import EndTimes, stage_steps
from sim.core.interpreter import Operation, compile_steps
from sim.core.steps import Rebase, Wake
from models.nic.mtt_cache import (MTT_PRESETS, MttAccess, MttCache, MttParams, stream_Bps, translation_depth)
from models.presets import NIC_PRESETS
from sim.core import Environment, FifoServer, PS_PER_S, transfer_ps

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
BASE = 9.27e9
"""The rate with sliced MRs in PR #4432 (GB/s x 1e9)."""


def test_presets_cover_the_nic_presets():
    assert {"connectx5", "connectx6", "connectx7", "efa"} <= set(MTT_PRESETS) <= set(NIC_PRESETS)
    for kwargs in MTT_PRESETS.values():
        MttParams(**kwargs)


@pytest.mark.parametrize("mr_size, page, expected", [
    (3.5 * GiB, 4 * KiB, 9.27), (4 * GiB, 4 * KiB, 9.27), (4 * GiB + 4 * KiB, 4 * KiB, 6.0),
    (5.9 * GiB, 4 * KiB, 6.0), (24 * GiB, 4 * KiB, 6.0), (24 * GiB, 2 * MiB, 9.27), (1024 * GiB, 2 * MiB, 9.27),
])
def test_cliff_is_a_step_above_4GiB_of_4KiB_pages(mr_size, page, expected):
    assert stream_Bps(MttParams(), int(mr_size), page, base_Bps=BASE, write=True) / 1e9 == pytest.approx(expected,
                                                                                                        rel=0.01)


def test_only_the_nic_written_mr_matters():
    assert stream_Bps(MttParams(), 24 * GiB, 4 * KiB, base_Bps=BASE, write=False) == BASE
    assert stream_Bps(MttParams(**MTT_PRESETS["efa"]), 24 * GiB, 4 * KiB, base_Bps=BASE, write=True) == BASE


def test_translation_depth_counts_pages():
    p = MttParams()
    assert translation_depth(p, 2**20 * 4096, 4096) == 1
    assert translation_depth(p, 2**20 * 4096 + 1, 4096) == 2
    assert translation_depth(MttParams(direct_entries=None), 1 << 50, 4096) == 1


def test_cache_misses_once_per_line_then_hits():
    cache = MttCache(MttParams(mtt_entries=64, mtt_line_entries=8))
    first = cache.access(0x100, 1 * GiB, 4 * KiB, 0, 64 * KiB, write=True)
    assert first == MttAccess(True, 2, 0)  # 16 pages = 2 lines, and the MR context
    assert cache.access(0x100, 1 * GiB, 4 * KiB, 4 * KiB, 4 * KiB, write=False) == MttAccess(False, 0, 0)
    # another MR's pages are other entries
    assert cache.access(0x200, 1 * GiB, 4 * KiB, 0, 4 * KiB, write=False).mtt_misses == 1


def test_random_accesses_past_the_cache_reach_miss():
    p = MttParams(mtt_entries=1024, mtt_line_entries=8)  # 4 MiB of 4 KiB pages
    cache = MttCache(p)
    rng = np.random.default_rng(5)
    offsets = rng.integers(0, (64 * MiB) // 4096, 20_000) * 4096
    misses = [cache.access(1, 64 * MiB, 4096, int(o), 64, write=False).mtt_misses for o in offsets]
    lines = (64 * MiB) // 4096 // 8
    assert np.mean(misses[10_000:]) == pytest.approx(1 - 128 / lines, abs=0.02)
    small = MttCache(p)
    inside = [small.access(1, 2 * MiB, 4096, int(o) % (2 * MiB), 64, write=False).mtt_misses for o in offsets]
    assert sum(inside) == 2 * MiB // 4096 // 8  # cold misses only


def test_deep_mr_write_stage_caps_a_pipelined_stream():
    """The walker stage in series with a link at BASE: the event engine reproduces the closed form."""
    n, messages = 1 * MiB, 60
    for mr_size, page in ((24 * GiB, 4 * KiB), (3 * GiB, 4 * KiB), (24 * GiB, 2 * MiB)):
        env, done = Environment(1), []
        cache, link = MttCache(MttParams()), FifoServer("link")

        for i in range(messages):
            access = cache.access(1, mr_size, page, i * n, n, write=True)
            stages = cache.walk_stage(access) + [(link, transfer_ps(n, BASE), 0, 0, 0, False)]
            env.step_runner.start(Operation(compile_steps((*stage_steps(stages), Rebase(True), Wake())), i,
                                            EndTimes(done)))
        env.run()
        rate = (messages - 1) * n * PS_PER_S / (max(done) - min(done))
        assert rate == pytest.approx(stream_Bps(MttParams(), mr_size, page, base_Bps=BASE, write=True), rel=0.01)


def test_params_are_validated():
    with pytest.raises(ValueError):
        MttParams(mtt_entries=100, mtt_line_entries=8)


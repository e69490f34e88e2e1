"""NIC translation caches, their reach and the large-MR cliff (LMCache PR #4432)."""

import numpy as np
import pytest

from models.nic.stages import EndTimes
from sim.core.interpreter import Operation, compile_steps
from sim.core.steps import Claim, Rebase, Wake
from models.nic.mtt_cache import (MTT_PRESETS, MttAccess, MttCache, MttParams, deep_lookup_ps, stream_Bps,
                                   translation_depth)
from models.nic.mtt_calibration import (LINK, base_Bps, cliff_ratios, load_points, ratio_tolerance, simulate_Bps,
                                       tolerance)
from models.pcie.link import PcieParams
from models.pcie.presets import PCIE_PRESETS
from models.presets import NIC_PCIE, NIC_PRESETS
from sim.core import Environment, FifoServer, PS_PER_S, transfer_ps

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
BASE = 9.27e9
"""The rate with sliced MRs in PR #4432 (GB/s x 1e9)."""


def test_presets_cover_the_nic_presets():
    assert {"connectx5", "connectx6", "connectx7", "efa"} <= set(MTT_PRESETS) <= set(NIC_PRESETS)
    for kwargs in MTT_PRESETS.values():
        MttParams(**kwargs)


def test_the_testbed_link_is_the_connectx5_presets():
    assert LINK == PcieParams(**PCIE_PRESETS[NIC_PCIE["connectx5"]])


def test_the_model_reproduces_both_sides_of_the_published_cliff_within_their_spread():
    points = load_points()
    base = base_Bps(points)
    assert {p.sliced for p in points} == {True, False}
    for point in points:
        sim = simulate_Bps(MttParams(), point, base)
        assert sim == pytest.approx(point.measured_Bps, rel=tolerance(points, point.sliced)), point


def test_the_deep_rate_is_one_entry_read_per_page_on_the_link():
    """Past the reach the rate is a page per (64 B read round trip + lookup): it follows the link's latency."""
    p, slow = MttParams(), PcieParams(gen=3, read_latency_ps=1_000_000)
    expected = 4096 * PS_PER_S / (slow.read_request_ps(64) + 1_000_000 + slow.read_return_ps(64) + p.lookup_ps)
    assert stream_Bps(p, 24 * GiB, 4 * KiB, base_Bps=BASE, write=True, link=slow) == pytest.approx(expected)
    assert deep_lookup_ps(p, slow) > deep_lookup_ps(p, LINK)


@pytest.mark.parametrize("mr_size, page, deep", [
    (3.5 * GiB, 4 * KiB, False), (4 * GiB, 4 * KiB, False), (4 * GiB + 4 * KiB, 4 * KiB, True),
    (5.9 * GiB, 4 * KiB, True), (24 * GiB, 4 * KiB, True), (24 * GiB, 2 * MiB, False), (1024 * GiB, 2 * MiB, False),
])
def test_cliff_is_a_step_above_4GiB_of_4KiB_pages(mr_size, page, deep):
    rate = stream_Bps(MttParams(), int(mr_size), page, base_Bps=BASE, write=True, link=LINK)
    assert rate == (4096 * PS_PER_S / deep_lookup_ps(MttParams(), LINK) if deep else BASE)


def test_only_the_nic_written_mr_matters():
    assert stream_Bps(MttParams(), 24 * GiB, 4 * KiB, base_Bps=BASE, write=False, link=LINK) == BASE
    assert stream_Bps(MttParams(**MTT_PRESETS["efa"]), 24 * GiB, 4 * KiB, base_Bps=BASE, write=True,
                      link=LINK) == BASE


def test_translation_depth_counts_pages():
    p = MttParams()
    assert translation_depth(p, 2**20 * 4096, 4096) == 1
    assert translation_depth(p, 2**20 * 4096 + 1, 4096) == 2
    assert translation_depth(MttParams(direct_entries=None), 1 << 50, 4096) == 1


def test_writes_beyond_the_reach_bypass_the_cache_and_reads_use_it():
    cache = MttCache(MttParams(mtt_entries=64, mtt_line_entries=8))
    assert cache.access(1, 24 * GiB, 4 * KiB, 0, 64 * KiB, write=True) == MttAccess(True, 0, 16)
    assert cache.access(1, 24 * GiB, 4 * KiB, 0, 64 * KiB, write=False) == MttAccess(False, 2, 0)
    assert cache.access(1, 24 * GiB, 4 * KiB, 0, 64 * KiB, write=True) == MttAccess(False, 0, 16)


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
            stages = cache.walk_stage(access, LINK) + [Claim(link, transfer_ps(n, BASE))]
            env.step_runner.start(Operation(compile_steps((*stages, Rebase(True), Wake())), i,
                                            EndTimes(done)))
        env.run()
        rate = (messages - 1) * n * PS_PER_S / (max(done) - min(done))
        assert rate == pytest.approx(stream_Bps(MttParams(), mr_size, page, base_Bps=BASE, write=True, link=LINK),
                                     rel=0.01)


def test_params_are_validated():
    with pytest.raises(ValueError):
        MttParams(mtt_entries=100, mtt_line_entries=8)



def test_the_cliffs_depth_as_a_ratio_is_within_both_sides_spread():
    points = load_points()
    ratios = cliff_ratios(points)
    assert len(ratios) == sum(not p.sliced for p in points)
    for c in ratios:
        before = [q.measured_Bps for q in points if q.sliced and q.read_bytes == c.point.read_bytes]
        assert c.measured == pytest.approx(c.point.measured_Bps / np.mean(before))
        assert c.simulated(MttParams()) == pytest.approx(c.measured, rel=ratio_tolerance(points))
    assert ratio_tolerance(points) == pytest.approx(tolerance(points, True) + tolerance(points, False))

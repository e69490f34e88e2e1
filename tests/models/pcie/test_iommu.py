"""IOMMU: exact LRU IO-TLB, miss latency, page-walker stage, and the pcie-bench window-sweep anchors."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.pcie.iommu import IOMMU_PRESETS, Iommu, IommuParams, LruCache, random_addresses, stream_Bps
from sim.core import PS_PER_NS
from tests.properties import examples

DATA = json.loads((Path(__file__).parents[3] / "models/data/pciebench_iommu_window_sweep.json").read_text())
MiB = 1 << 20


def _reference_lru(capacity, keys):
    cache, hits = [], []
    for k in keys:
        hits.append(k in cache)
        if k in cache:
            cache.remove(k)
        cache.append(k)
        del cache[:-capacity]
    return hits


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 8), st.lists(st.lists(st.integers(0, 12), max_size=40), min_size=1, max_size=4))
def test_lru_matches_a_reference_over_batches(capacity, batches):
    lru = LruCache(capacity)
    got = [bool(h) for batch in batches for h in lru.lookup(batch)]
    assert got == _reference_lru(capacity, [k for batch in batches for k in batch])
    assert len(lru) <= capacity


def test_translate_misses_once_per_page_within_reach():
    iommu = Iommu(IommuParams())
    latency, hit = iommu.translate(np.arange(0, 64 * 4096, 64))
    assert (~hit).sum() == 64 and latency.sum() == 64 * 226 * PS_PER_NS
    assert iommu.translate(np.arange(0, 64 * 4096, 512))[1].all()  # all 64 pages still cached
    assert not iommu.translate([64 * 4096])[1][0]
    assert not iommu.translate([0])[1][0]  # page 0 was the least recently used: evicted


def test_uniform_random_miss_rate_is_one_minus_reach_over_window():
    p = IommuParams()
    for pages in (128, 1024):
        addrs = random_addresses(pages * 4096, 64, 40_000, np.random.default_rng(3))
        hits = Iommu(p).translate(addrs)[1][20_000:]
        assert 1 - hits.mean() == pytest.approx(1 - 64 / pages, abs=0.02)


def test_stage_charges_the_walker_per_missed_page():
    iommu = Iommu(IommuParams())
    (stage,) = iommu.stages(4096 * 10 + 100, 3 * 4096)  # touches 4 pages
    assert stage.server is iommu.walker and stage.service_ps == 4 * 51_100
    assert stage.head_ps + stage.latency_ps == 226 * PS_PER_NS
    assert iommu.stages(4096 * 11, 4096) == []  # now cached


def _sweep(config, size):
    rows = [r for r in DATA["rows"] if r["config"] == config and r["bytes"] == size]
    inside = next(r["bw_Gbps"] for r in rows if r["window"] == 256 * 1024)
    return rows, inside * 1e9 / 8


def _sim_Gbps(params, size, window, base_Bps):
    addrs = random_addresses(window, size, 40_000, np.random.default_rng(7))
    lat = DATA["base_latency_ns"][str(size)] * PS_PER_NS
    return stream_Bps(params, addrs, size, base_Bps=base_Bps, base_latency_ps=lat) * 8 / 1e9


def test_64B_reads_lose_most_throughput_past_the_reach_with_4KiB_pages():
    rows, base = _sweep("iommu-nosp", 64)
    p = IommuParams(**IOMMU_PRESETS["vtd"])
    at = {r["window"]: r["bw_Gbps"] for r in rows}
    assert _sim_Gbps(p, 64, 256 * 1024, base) == pytest.approx(at[256 * 1024], rel=0.02)  # 28.2
    far = _sim_Gbps(p, 64, 64 * MiB, base)
    assert far == pytest.approx(at[64 * MiB], rel=0.05) and far < 0.4 * base * 8 / 1e9  # 10.05: most is lost
    for r in rows:
        assert _sim_Gbps(p, 64, r["window"], base) == pytest.approx(r["bw_Gbps"], rel=0.15)


def test_no_drop_with_2MiB_pages():
    rows, base = _sweep("iommu", 64)
    p = IommuParams(**IOMMU_PRESETS["vtd_superpages"])
    for r in rows:
        assert _sim_Gbps(p, 64, r["window"], base) == pytest.approx(r["bw_Gbps"], rel=0.05)


@pytest.mark.parametrize("size", [128, 256])
def test_larger_reads_are_predicted_within_15_percent(size):
    rows, base = _sweep("iommu-nosp", size)
    for r in rows:
        assert _sim_Gbps(IommuParams(), size, r["window"], base) == pytest.approx(r["bw_Gbps"], rel=0.15)


def test_posted_writes_are_only_walker_bound():
    addrs = random_addresses(64 * MiB, 512, 20_000, np.random.default_rng(1))
    assert stream_Bps(IommuParams(), addrs, 512, base_Bps=6e9) == 6e9  # 512 B / 51 ns = 10 GB/s > base
    assert stream_Bps(IommuParams(), addrs, 64, base_Bps=6e9) == pytest.approx(64 / 51.1e-9 / (1 - 64 / 16384),
                                                                              rel=0.01)


def test_params_are_validated():
    with pytest.raises(ValueError):
        IommuParams(page_size=3000)
    with pytest.raises(ValueError):
        LruCache(0)

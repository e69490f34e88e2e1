"""Binned latency aggregates (sim/inspect/binned.py): what the figures draw for runs of too many operations to draw
one by one, checked against the same quantities computed from every operation."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.inspect.binned
import sim.inspect.compare
from sim.inspect.binned import BUCKETS, PER_OCTAVE, LatencyBands, bucket_of, bucket_us, cdf_curves
from sim.store.operations import OperationTable
from tests.properties import examples


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=50))
def test_each_latency_lies_in_its_bucket(latencies):
    latency = np.array(latencies, dtype=np.int64)
    bucket = bucket_of(latency)
    assert bucket.min() >= 0 and bucket.max() < BUCKETS
    upper, lower = bucket_us(bucket) * 1e6, bucket_us(bucket - 1) * 1e6
    assert np.all(latency <= upper * (1 + 1e-12))
    assert np.all((latency > lower * (1 - 1e-12)) | (latency <= 1))


def _table(rng, n: int, variants=("a", "b")) -> tuple[OperationTable, pd.DataFrame]:
    latency = np.concatenate([rng.integers(10**6, 10**7, n - n // 50), rng.integers(10**8, 10**10, n // 50)])
    rng.shuffle(latency)
    posted = np.sort(rng.integers(0, 10**10, n))
    frame = pd.DataFrame({"variant": rng.choice(variants, n), "workload": "w", "kind": "write_bw", "bytes": 4096,
                          "posted_ps": posted, "completed_ps": posted + latency, "latency_ps": latency,
                          "ok": rng.random(n) > 0.05})
    return OperationTable.of(frame), frame


def test_a_binned_cdf_is_exact_at_every_point_and_ends_at_the_maximum(monkeypatch):
    monkeypatch.setattr(sim.inspect.binned, "EXACT_MAX", 1000)
    table, frame = _table(np.random.default_rng(1), 20_000)
    curves = cdf_curves([table])
    assert list(curves.groupby("variant", sort=False).groups) == list(frame["variant"].unique())
    for variant, curve in curves.groupby("variant"):
        ok = np.sort(frame.loc[frame["ok"] & (frame["variant"] == variant), "latency_ps"].to_numpy())
        assert len(curve) < 64 * PER_OCTAVE < len(ok)
        at_most = np.searchsorted(ok, curve["latency_us"].to_numpy() * 1e6, side="right") / len(ok)
        np.testing.assert_allclose(curve["cdf"], at_most, rtol=0, atol=1e-12)
        assert curve["latency_us"].iloc[-1] == ok[-1] / 1e6 and curve["cdf"].iloc[-1] == 1.0


def test_a_small_group_keeps_every_operation():
    table, frame = _table(np.random.default_rng(2), 3000, variants=("a",))
    curve = cdf_curves([table])
    ok = np.sort(frame.loc[frame["ok"], "latency_ps"].to_numpy())
    np.testing.assert_array_equal(curve["latency_us"], ok / 1e6)
    np.testing.assert_array_equal(curve["cdf"], np.arange(1, len(ok) + 1) / len(ok))


def test_bands_count_each_operation_once_and_hold_each_bins_exact_maximum():
    _, frame = _table(np.random.default_rng(3), 30_000, variants=("a",))
    start, end = int(frame["posted_ps"].min()), int(frame["completed_ps"].max())
    bands = LatencyBands(start, end, bins=50)
    for lo in range(0, len(frame), 7000):  # a row group at a time
        part = frame.iloc[lo:lo + 7000]
        bands.add(part["posted_ps"].to_numpy(), part["latency_ps"].to_numpy())
    got = bands.frame()
    width = got["posted_ms"].iloc[1] * 1e9
    which = ((frame["posted_ps"] - start) // width).astype(int)
    exact = frame.groupby(which)["latency_ps"]
    assert got["ops"].sum() == len(frame) and (got.loc[exact.size().index, "ops"] == exact.size()).all()
    np.testing.assert_array_equal(got.loc[exact.max().index, "max_us"], exact.max() / 1e6)
    median = exact.median()  # each bin's median lies in the bucket reported, at most one bucket below its edge
    p50 = got.loc[median.index, "p50_us"] * 1e6
    assert (p50 >= exact.quantile(0.5, interpolation="lower") * (1 - 1e-12)).all()
    assert (p50 <= exact.quantile(0.5, interpolation="higher") * 2 ** (1 / PER_OCTAVE) * (1 + 1e-12)).all()


def test_many_operations_are_drawn_as_bands_whose_bins_cover_the_run(monkeypatch):
    from tests.conftest import ROOT
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario

    scenario, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    scenario = scenario.model_copy(update={"workload": [scenario.workload[0].model_copy(
        update={"sizes": [4096], "iterations": 3000})]})
    result = run_scenario(scenario)
    each = sim.inspect.compare.post_latencies(result)
    monkeypatch.setattr(sim.inspect.compare, "EXACT_MAX", 1000)
    bands = sim.inspect.compare.post_latencies(result)
    assert len(each) == 3000 and "latency_us" in each and "latency_us" not in bands
    assert bands["ops"].sum() == 3000 and bands["max_us"].max() == each["latency_us"].max()
    first, last = sim.inspect.compare.bandwidth_span(result)  # the bins span the bandwidth timeline's time axis
    width = bands["posted_ms"].iloc[1]
    assert bands["posted_ms"].iloc[0] == 0 and bands["posted_ms"].iloc[-1] <= (last - first) / 1e9 < \
        bands["posted_ms"].iloc[-1] + width


def test_each_message_size_has_its_own_distribution():
    table, frame = _table(np.random.default_rng(4), 3000, variants=("a",))
    frame = frame.assign(bytes=np.where(np.arange(len(frame)) % 3 == 0, 8 << 20, 2))
    curves = cdf_curves([OperationTable.of(frame)])
    assert sorted(curves["bytes"].unique()) == [2, 8 << 20]
    for size, curve in curves.groupby("bytes"):
        ok = np.sort(frame.loc[frame["ok"] & (frame["bytes"] == size), "latency_ps"].to_numpy())
        np.testing.assert_array_equal(curve["latency_us"], ok / 1e6)  # only that size's operations
        assert curve["cdf"].iloc[-1] == 1.0

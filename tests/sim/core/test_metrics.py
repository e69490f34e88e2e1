import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.metrics import OpColumns, bandwidth_of, bandwidth_summary, latency_summary
from tests.properties import examples


def test_latency_percentiles_follow_perftest_indexing():
    lat = np.arange(1, 1001, dtype=np.int64) * 1_000_000  # 1..1000 us, shuffled
    np.random.default_rng(0).shuffle(lat)
    s = latency_summary(lat)
    assert s["t_min_us"] == 1 and s["t_max_us"] == 1000
    assert s["t_typical_us"] == 501  # element n // 2 of the sorted samples
    assert s["p99_us"] == 991 and s["p99_9_us"] == 1000
    assert s["t_avg_us"] == pytest.approx(500.5)


def test_bandwidth_average_and_peak():
    # 4 ops of 1000 B: posted at 0,0,10,10 ns, completed at 10,10,20,20 ns -> 4000 B in 20 ns
    posted = np.array([0, 0, 10_000, 10_000])
    done = np.array([10_000, 10_000, 20_000, 20_000])
    s = bandwidth_summary(1000, posted, done, window=2)
    assert s["bw_avg_Gbps"] == pytest.approx(4000 * 8 / 20e-9 / 1e9)
    assert s["bw_peak_Gbps"] == pytest.approx(2000 * 8 / 10e-9 / 1e9)
    assert s["msg_rate_Mpps"] == pytest.approx(4 / 0.02)


def test_peak_is_never_below_average():
    rng = np.random.default_rng(1)
    posted = np.sort(rng.integers(0, 10**9, 500))
    done = np.maximum.accumulate(posted + rng.integers(10**5, 10**7, 500))
    s = bandwidth_summary(4096, posted, done, window=16)
    assert s["bw_peak_Gbps"] >= s["bw_avg_Gbps"]


def test_failed_operations_carry_no_bytes():
    posted = np.array([0, 0, 10_000, 10_000])
    done = np.array([10_000, 10_000, 20_000, 20_000])
    half = bandwidth_summary(1000, posted, done, window=2, ok=np.array([True, True, False, False]))
    full = bandwidth_summary(1000, posted, done, window=2)
    assert half["bw_avg_Gbps"] == pytest.approx(full["bw_avg_Gbps"] / 2)
    assert half["msg_rate_Mpps"] == full["msg_rate_Mpps"]


def test_nothing_succeeded_measures_nothing():
    posted, done = np.array([0, 10_000]), np.array([10_000, 20_000])
    none = bandwidth_summary(1000, posted, done, window=2, ok=np.zeros(2, bool))
    assert set(none) == set(bandwidth_summary(1000, posted, done, window=2)) and np.isnan(list(none.values())).all()
    empty = latency_summary(np.array([], dtype=np.int64))
    assert set(empty) == set(latency_summary(posted)) and np.isnan(list(empty.values())).all()


def test_peak_of_large_messages_over_long_runs_is_exact():
    """The peak of a run of many large messages (bytes x operations x ps per s far beyond 64-bit integers) is
    found: 1 MiB WRITEs whose first 2,048 complete every 100 ns after a 1 us start, the rest every 10 us, peak over
    the first 2,048 (a window of 2 doubled), which beats the average and every shorter run."""
    n, half, size = 4096, 2048, 1 << 20
    posted = np.zeros(n, np.int64)
    gaps = np.where(np.arange(n) < half, 100_000, 10_000_000)
    done = 1_000_000 + np.cumsum(gaps) - gaps[0]
    s = bandwidth_summary(size, posted, done, window=2)
    peak_Bps = half * size * 10**12 / int(done[half - 1])  # Python integers: exact
    assert s["bw_peak_Gbps"] == pytest.approx(peak_Bps * 8 / 1e9, rel=1e-12)
    assert s["bw_peak_Gbps"] > 2 * s["bw_avg_Gbps"]


def _peak_by_definition(size: int, posted: np.ndarray, done: np.ndarray, ok: np.ndarray, window: int) -> float:
    """bw_peak (B/s) as :func:`bandwidth_of` defines it, run by run in Python floats: the average, and every run of
    ``window``, 2 x ``window``, ... consecutive operations shorter than the test, from its first post to the latest
    completion up to its last operation (at least 1 ps), carrying its successful operations' bytes."""
    done_by, delivered = np.maximum.accumulate(done), np.concatenate(([0], np.cumsum(ok)))
    best = size * int(ok.sum()) * 10**12 / (int(done.max()) - int(posted.min()))
    w = max(1, window)
    while w < len(posted):
        for i in range(len(posted) - w + 1):
            span = max(int(done_by[i + w - 1]) - int(posted[i]), 1)
            best = max(best, float(size * 10**12) * float(delivered[i + w] - delivered[i]) / span)
        w *= 2
    return best


@settings(max_examples=examples(60), deadline=None)
@given(st.data(), st.integers(2, 200), st.integers(1, 9), st.integers(1, 40), st.sampled_from([4096, 1 << 20, 1000]),
       st.booleans())
def test_peak_is_the_best_run_by_its_definition(data, n, window, chunk, size, failures):
    """Whatever the chunks it reads, with failed operations or none (where the shortest span of a window decides
    alone), :func:`bandwidth_of`'s peak is the definition's to the last bit."""
    gaps = np.array(data.draw(st.lists(st.integers(0, 10**7), min_size=n, max_size=n)), np.int64)
    latency = np.array(data.draw(st.lists(st.integers(1, 10**8), min_size=n, max_size=n)), np.int64)
    ok = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool) if failures else np.ones(n, bool)
    posted = np.cumsum(gaps)
    done = posted + latency
    if not ok.any():
        return
    peak = bandwidth_of(size, OpColumns(posted, done, ok), window, chunk=chunk)["bw_peak_Gbps"]
    assert peak == _peak_by_definition(size, posted, done, ok, window) * 8 / 1e9

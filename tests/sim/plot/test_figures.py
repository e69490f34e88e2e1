"""``sim.plot.figures`` tells the truth: coinciding curves stay told apart and say so, failed events are marked
with their outcome, and the operations a stall held show on the latency-against-post-time panel."""

from __future__ import annotations

from functools import cache

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sim.inspect.compare import bandwidth_timeline, event_times, post_latencies
from sim.plot import figures
from tests.conftest import run_shipped_variants


@cache
def pressure():
    return run_shipped_variants("pin_vs_dmabuf.yaml")[0]


def test_a_curve_equal_to_an_earlier_one_is_labelled_so_and_different_ones_are_not():
    a, b = np.array([1.0, 2.0]), np.array([1.0, 2.5])
    assert figures.labelled([("x", a), ("y", b), ("z", a.copy()), ("w", b.copy())]) == [
        "x", "y", "z (identical to x)", "w (identical to y)"]
    assert figures.labelled([("x", a), ("y", np.array([1.0, 2.0, 3.0]))]) == ["x", "y"]


def test_no_two_curves_share_both_line_style_and_marker():
    styles = {(figures.curve_style(i, 100)["ls"], figures.curve_style(i, 100)["marker"]) for i in range(12)}
    assert len(styles) == 12


@pytest.fixture
def drawn(monkeypatch):
    figs = []
    monkeypatch.setattr(figures, "save", lambda fig, *a: (figs.append(fig), [])[1])
    yield figs
    plt.close("all")


def _bw_over_time(drawn, tmp_path):
    runs = list(pressure().values())
    figures.bw_over_time(pd.concat([bandwidth_timeline(r) for r in runs]), pd.concat([event_times(r) for r in runs]),
                         tmp_path, "t", pd.concat([post_latencies(r) for r in runs]))
    return drawn[0]


def test_bandwidth_over_time_tells_coinciding_variants_apart(drawn, tmp_path):
    top = _bw_over_time(drawn, tmp_path).axes[0]
    lines = [line for line in top.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    labels = [line.get_label() for line in lines]
    assert labels == ["peermem", "dmabuf", "dmabuf-pinned (identical to peermem)",
                      "dmabuf-no-move-notify (identical to peermem)"]
    assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 4


def test_each_failed_allocation_is_marked_with_its_variant_and_outcome(drawn, tmp_path):
    top = _bw_over_time(drawn, tmp_path).axes[0]
    notes = [t.get_text() for t in top.texts if "failed" in t.get_text()]
    failed = {v for v, r in pressure().items() if r.counters["failed_allocations"]}
    assert failed == {"peermem", "dmabuf-pinned"}  # without move_notify amdgpu pinned the buffer in GTT: it fits
    assert sorted(n.split(":")[0] for n in notes) == sorted(failed)
    assert all("no evictable memory" in n for n in notes)
    crosses = [line for line in top.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == len(failed) and all(line.get_xdata()[0] == pytest.approx(20.0) for line in crosses)
    evicted = [t.get_text() for t in top.texts if "evicted" in t.get_text()]
    assert evicted == ["dmabuf: gpu-memory-pressure evicted 1 buffer(s): move_notify, copy, re-fault"]


def test_the_legend_covers_no_event_and_no_outcome(drawn, tmp_path):
    fig = _bw_over_time(drawn, tmp_path)
    fig.canvas.draw()
    top = fig.axes[0]
    legend = top.get_legend().get_window_extent()
    names = [t for t in top.texts if t.get_text() in {"registration", "gpu-memory-pressure", "gpu-memory-release"}]
    assert len(names) == 3
    assert not [t.get_text() for t in top.texts if legend.overlaps(t.get_window_extent())]


def test_the_latency_panel_shows_the_operations_the_eviction_stalled(drawn, tmp_path):
    bottom = _bw_over_time(drawn, tmp_path).axes[1]
    assert bottom.get_ylabel() == "latency (µs)" and bottom.get_yscale() == "log"
    points = {c.get_label(): c.get_offsets() for c in bottom.collections}
    dmabuf = np.asarray(points["dmabuf"])
    slow = dmabuf[dmabuf[:, 1] > 10 * np.median(dmabuf[:, 1])]
    assert 1 <= len(slow) <= 16 and np.all((slow[:, 0] > 19) & (slow[:, 0] < 23))  # posted around the eviction
    pinned = np.asarray(points["dmabuf-pinned (identical to peermem)"])
    assert pinned[:, 1].max() < 2 * np.median(pinned[:, 1])


def test_a_flat_bandwidth_curve_keeps_a_margin_below_the_top_edge(drawn, tmp_path):
    summary = pd.DataFrame({"workload": "w", "kind": "write_bw", "bytes": [65536, 1048576],
                            "bw_avg_Gbps": [396.0, 397.5], "bw_peak_Gbps": [396.0, 397.5]})
    figures.bw_vs_size(summary, tmp_path, "t")
    low, high = drawn[0].axes[0].get_ylim()
    assert low == 0 and high >= 397.5 * 1.04


def test_the_memory_panel_of_a_testbed_without_gpus_says_so(drawn, tmp_path):
    timeline = pd.DataFrame({"variant": "base", "time_ms": [0.0, 1.0], "bw_Gbps": [390.0, 397.0]})
    events = pd.DataFrame({"variant": [], "time_ms": [], "kind": [], "gpu_used": [], "outcome": []})
    figures.gpu_memory(timeline, events, tmp_path, "t")
    bottom = drawn[0].axes[1]
    assert [text.get_text() for text in bottom.texts] == [figures.NO_GPU] and not bottom.get_lines()


def test_log_axes_label_their_ticks_in_plain_text(drawn, tmp_path):
    """The latency panel's log axis labels its ticks without mathtext (no '$'), powers of ten beyond 0.001 ..
    100,000 with superscript digits, the values between as numbers."""
    fig = _bw_over_time(drawn, tmp_path)
    fig.canvas.draw()
    bottom = fig.axes[1]
    labels = [tick.get_text() for tick in bottom.get_yticklabels() if tick.get_text()]
    assert labels and not any("$" in label for label in labels)
    assert [figures._plain_log(v) for v in (1e-9, 1e-3, 0.02, 300.0, 1e5, 1e6, 2e-9)] == [
        "10⁻⁹", "0.001", "0.02", "300", "100000", "10⁶", "2e-09"]

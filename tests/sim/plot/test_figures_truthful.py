"""Figures that do not mislead: a latency distribution per message size, the sizes a timeline runs through named,
bandwidth against the line rate, a log axis when one variant would flatten the others, rates in Gb/s, ticks
between decades, sweep axes in words, and outcomes that no event label runs into."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.core.units import format_size
from sim.engine.run import run_scenario
from sim.inspect.binned import cdf_curves
from sim.inspect.compare import bandwidth_timeline, event_times, post_latencies, size_spans
from sim.plot import figures
from sim.inspect.tables import axis_words
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.plot.test_figures import drawn, pressure  # noqa: F401 (drawn: the fixture)

SIZES = ["2B", "64B", "4KiB", "64KiB", "1MiB"]


@pytest.fixture(scope="module")
def sizes_run():
    """One write_bw stream through five sizes, back to back, at 400 Gb/s."""
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": SIZES, "iterations": 200, "tx_depth": 16}]
    return run_scenario(Scenario.model_validate(scenario_dict(workload=work, fabric={"rate": "400Gb/s"})))


def test_the_latency_cdf_draws_one_distribution_per_message_size(drawn, sizes_run, tmp_path):
    figures.latency_cdf(cdf_curves([sizes_run.table]), tmp_path, "t")
    left = drawn[0].axes[0]
    assert len(left.get_lines()) == len(SIZES)  # one curve per size, none pooling 2 B with 1 MiB
    assert [t.get_text() for t in left.get_legend().get_texts()] == SIZES
    ops = sizes_run.operations
    for line, size in zip(left.get_lines(), SIZES):  # each curve ends at its own size's slowest operation
        mine = ops[ops["ok"] & (ops["bytes"] == int(pd.Series([size]).map(_bytes).iloc[0]))]
        assert line.get_xdata()[-1] == mine["latency_ps"].max() / 1e6


def _bytes(size: str) -> int:
    from sim.core.units import parse_size

    return parse_size(size)


def test_many_distributions_are_coloured_by_size_with_a_colour_bar(drawn, tmp_path):
    rows = [pd.DataFrame({"variant": "v", "workload": "w", "bytes": 2 ** k, "latency_us": [1.0 + k, 2.0 + k],
                          "cdf": [0.5, 1.0]}) for k in range(1, 24)]
    figures.latency_cdf(pd.concat(rows, ignore_index=True), tmp_path, "t")
    fig = drawn[0]
    bar = fig.axes[-1]
    assert bar.get_ylabel() == "message size"
    assert [t.get_text() for t in bar.get_yticklabels()] == ["2B", "4KiB", "8MiB"]
    assert len({tuple(line.get_color()) for line in fig.axes[0].get_lines()}) == 23


def test_bandwidth_over_time_names_the_size_each_stretch_ran(drawn, sizes_run, tmp_path):
    spans = size_spans(sizes_run)
    assert [format_size(b) for b in spans["bytes"]] == SIZES
    assert (spans["start_ms"].iloc[1:].to_numpy() >= spans["end_ms"].iloc[:-1].to_numpy() - 1e-9).all()
    figures.bw_over_time(bandwidth_timeline(sizes_run), event_times(sizes_run), tmp_path, "t",
                         post_latencies(sizes_run), [400.0], spans)
    top, bottom = drawn[0].axes
    assert [t.get_text() for t in top.texts if t.get_text() in SIZES] == SIZES
    assert len([p for p in bottom.patches]) == len(SIZES)  # the latency panel is banded too


def test_every_bandwidth_figure_has_the_line_rate(drawn, sizes_run, tmp_path):
    figures.bw_vs_size(sizes_run.summary, tmp_path, "t", [400.0])
    figures.bw_over_time(bandwidth_timeline(sizes_run), event_times(sizes_run), tmp_path, "t", None, [400.0])
    figures.gpu_memory(bandwidth_timeline(sizes_run), event_times(sizes_run), tmp_path, "t", [400.0])
    for fig in drawn:
        rate = [line for line in fig.axes[0].get_lines() if line.get_label() == "line rate 400 Gb/s"]
        assert rate and set(rate[0].get_ydata()) == {400.0}
        assert max(np.nanmax(np.asarray(line.get_ydata(), float)) for line in fig.axes[0].get_lines()) <= 400.0


def test_a_variant_a_hundred_times_slower_is_drawn_on_a_log_axis(drawn, tmp_path):
    time = np.linspace(0, 10, 50)
    timeline = pd.concat([pd.DataFrame({"variant": v, "time_ms": time, "bw_Gbps": bw})
                          for v, bw in (("fast", 392.0), ("starved", 0.2))])
    figures.bw_over_time(timeline, pd.DataFrame(columns=["kind", "time_ms"]), tmp_path, "t")
    assert drawn[0].axes[0].get_yscale() == "log"
    near = timeline.assign(bw_Gbps=np.where(timeline["variant"] == "fast", 392.0, 300.0))
    figures.bw_over_time(near, pd.DataFrame(columns=["kind", "time_ms"]), tmp_path, "t")
    assert drawn[1].axes[0].get_yscale() == "linear"


def test_rails_are_drawn_in_gigabits(drawn, tmp_path):
    rails = pd.DataFrame({"variant": "v", "workload": "w", "bytes": 1 << 20, "stream": [0, 1],
                          "source": ["a.gpu0", "a.gpu1"], "sink": ["b.gpu0", "b.gpu1"], "bw_GBps": [49.65, 2.37],
                          "estimate_GBps": [49.68, 2.99]})
    figures.rail_bw(rails, tmp_path, "t", [400.0])
    ax = drawn[0].axes[0]
    assert ax.get_ylabel() == "delivered bandwidth (Gb/s)"
    assert [bar.get_height() for bar in ax.patches] == pytest.approx([49.65 * 8, 2.37 * 8])


def test_latency_ticks_name_values_between_decades(drawn, sizes_run, tmp_path):
    summary = pd.DataFrame({"workload": "lat", "kind": "write_lat", "bytes": [2, 4096, 1 << 20],
                            "t_typical_us": [1.0, 2.0, 90.0], "t_min_us": [0.9, 1.9, 85.0],
                            "p99_us": [1.2, 2.4, 95.0], "p99_9_us": [1.3, 2.5, 99.0]})
    figures.latency_vs_size(summary, tmp_path, "t")
    ax = drawn[0].axes[0]
    drawn[0].canvas.draw()
    shown = [t.get_text() for t in ax.get_yticklabels() if ax.get_ylim()[0] <= t.get_position()[1] <= ax.get_ylim()[1]]
    assert {"2", "5", "20", "50"} <= set(shown)


def test_sweep_axes_are_named_in_words():
    assert axis_words("workload.stream.sizes.0") == "message size (workload stream)"
    assert axis_words("buffers.src.register") == "registration mode (buffer src)"
    assert "." not in axis_words("nodes.a.nic.preset") and axis_words("variant") == "variant"


def test_no_outcome_runs_into_an_event_label(drawn, tmp_path):
    runs = list(pressure().values())
    figures.bw_over_time(pd.concat([bandwidth_timeline(r) for r in runs]), pd.concat([event_times(r) for r in runs]),
                         tmp_path, "t", pd.concat([post_latencies(r) for r in runs]), [400.0])
    fig = drawn[0]
    fig.canvas.draw()
    top = fig.axes[0]
    labels = [t for t in top.texts if t.get_rotation() == 90 and not t.get_text().endswith("B")]
    outcomes = [t for t in top.texts if t.get_rotation() == 0 and ":" in t.get_text() or "evicted" in t.get_text()]
    assert labels and outcomes
    for label in labels:
        for outcome in outcomes:
            assert not label.get_window_extent().overlaps(outcome.get_window_extent()), (label, outcome)

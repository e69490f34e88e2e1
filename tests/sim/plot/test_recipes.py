"""Plot recipes: each writes a non-empty PNG, PDF and the CSV of the numbers it plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.inspect.compare import bandwidth_timeline, comparison_table
from sim.plot.recipes import RECIPES, RecipeError, plot
from sim.results.write import write_results
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """pin_vs_dmabuf, shortened (600 x 1 MiB, pressure at 2 ms), written as `rdmasim run` does."""
    _, raw, variants = load_scenario_variants(ROOT / "scenarios" / "pin_vs_dmabuf.yaml")
    results = []
    for name, spec in variants:
        short = spec.model_copy(update={
            "workload": [w.model_copy(update={"iterations": 600}) for w in spec.workload],
            "events": [e.model_copy(update={"at": 2 * 10**9, "hold": 4 * 10**9}) for e in spec.events]})
        results.append(run_scenario(short, variant=name))
    out = write_results(results, tmp_path_factory.mktemp("run") / "res", raw)
    return out, results


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "res"
    return out, run_sweep(ROOT / "scenarios" / "sweeps" / "msg_size_x_mode.yaml", out).table


def _files(paths: list[Path], name: str) -> pd.DataFrame:
    """Check the PNG, PDF and CSV of figure ``name``; return the CSV."""
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf", f"{name}.csv"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 5000
    assert paths[1].read_bytes()[:5] == b"%PDF-" and paths[1].stat().st_size > 3000
    data = pd.read_csv(paths[2])
    assert len(data) > 0
    return data


def test_bw_vs_size_of_a_run_plots_the_perftest_rows(run_dir, tmp_path):
    out, results = run_dir
    data = _files(plot(out, "bw_vs_size", tmp_path), "bw_vs_size")
    expected = pd.concat([r.summary for r in results])
    assert list(data["variant"]) == [r.variant for r in results] and set(data["workload"]) == {"stream"}
    np.testing.assert_allclose(data["bw_avg_Gbps"], expected["bw_avg_Gbps"], rtol=1e-12)


def test_latency_cdf_plots_every_operation(run_dir, tmp_path):
    out, results = run_dir
    data = _files(plot(out, "latency_cdf", tmp_path), "latency_cdf")
    assert len(data) == sum(int(r.operations["ok"].sum()) for r in results)
    dmabuf = next(r for r in results if r.variant == "dmabuf").operations
    np.testing.assert_allclose(data[data["variant"] == "dmabuf"]["latency_us"].max(),
                               dmabuf["latency_ps"].max() / 1e6)


def test_timeline_plots_bandwidth_over_time_with_events(run_dir, tmp_path):
    out, results = run_dir
    paths = plot(out, "bw_over_time", tmp_path)
    data = _files(paths, "bw_over_time")
    expected = pd.concat([bandwidth_timeline(r) for r in results], ignore_index=True)
    np.testing.assert_allclose(data["bw_Gbps"], expected["bw_Gbps"], rtol=1e-12)
    dmabuf = data[data["variant"] == "dmabuf"]["bw_Gbps"]
    assert dmabuf.min() < 0.5 * dmabuf.max()  # the eviction stalls the dynamic MR
    assert json.loads((out / "summary.json").read_text())["events"]


def test_mode_comparison_of_a_run_plots_the_comparison_table(run_dir, tmp_path):
    out, results = run_dir
    data = _files(plot(out, "mode_comparison", tmp_path), "mode_comparison")
    table = comparison_table(results)
    assert list(data["variant"]) == list(table["variant"])
    for column, expected in (("bw_avg_Gbps", table["bw_avg_Gbps"]), ("p99_9_us", table["p99_9_us"]),
                             ("register_ms", table["register_us"] / 1e3),
                             ("pinned_GiB", table["pinned_bytes"] / 2**30)):
        np.testing.assert_allclose(data[column], expected, rtol=1e-12)


def test_sweep_recipes_plot_the_sweep_table(sweep_dir):
    out, table = sweep_dir
    bw = _files(plot(out, "bw_vs_size"), "bw_vs_size")
    assert (out / "figures" / "bw_vs_size.png").is_file()
    assert list(bw["workload"].unique()) == ["peermem", "dmabuf", "dmabuf-pinned"]
    np.testing.assert_allclose(bw["bw_avg_Gbps"], table["bw_avg_Gbps"], rtol=1e-12)
    heat = _files(plot(out, "heatmap"), "heatmap_bw_avg_Gbps")
    assert list(heat.columns) == ["variant", "workload.stream.sizes.0", "bw_avg_Gbps", "runs"]
    np.testing.assert_allclose(heat["bw_avg_Gbps"], table["bw_avg_Gbps"], rtol=1e-12)
    modes = _files(plot(out, "mode_comparison"), "mode_comparison")  # like with like: per kind and size
    means = table.groupby(["variant", "kind", "bytes"], sort=False)[["bw_avg_Gbps", "p99_9_us", "run"]].agg(
        {"bw_avg_Gbps": "mean", "p99_9_us": "mean", "run": "nunique"})
    assert list(zip(modes["variant"], modes["kind"], modes["bytes"])) == list(means.index)
    np.testing.assert_allclose(modes["bw_avg_Gbps"], means["bw_avg_Gbps"], rtol=1e-12)
    np.testing.assert_allclose(modes["p99_9_us"], means["p99_9_us"], rtol=1e-12)
    assert list(modes["runs"]) == list(means["run"]) and len(modes) == 9


def test_heatmap_axes_and_metric_can_be_chosen(sweep_dir, tmp_path):
    out, table = sweep_dir
    data = _files(plot(out, "heatmap", tmp_path, metric="p99_9_us", by=["workload.stream.sizes.0", "variant"]),
                  "heatmap_p99_9_us")
    assert list(data.columns[:2]) == ["workload.stream.sizes.0", "variant"]
    expected = table.set_index(["workload.stream.sizes.0", "variant"])["p99_9_us"]
    got = data.set_index(["workload.stream.sizes.0", "variant"])["p99_9_us"]
    np.testing.assert_allclose(got.sort_index(), expected.sort_index(), rtol=1e-12)


def test_the_same_results_give_the_same_figure_bytes(sweep_dir, tmp_path):
    out, _ = sweep_dir
    first = [p.read_bytes() for p in plot(out, "heatmap", tmp_path / "a")]
    assert first == [p.read_bytes() for p in plot(out, "heatmap", tmp_path / "b")]


@pytest.mark.parametrize("which, recipe, options, words", [
    ("run", "scatter", {}, "unknown recipe 'scatter' (recipes: " + ", ".join(RECIPES) + ")"),
    ("run", "heatmap", {}, "needs the results of a sweep"),
    ("sweep", "latency_cdf", {}, "needs per-operation metrics"),
    ("sweep", "bw_over_time", {}, "needs per-operation metrics"),
    ("sweep", "heatmap", {"metric": "nope"}, "no metric 'nope' (metrics: "),
    ("sweep", "heatmap", {"by": ["variant", "nope"]}, "no axis 'nope'"),
    ("sweep", "heatmap", {"by": ["variant"]}, "takes two axes"),
    ("sweep", "mode_comparison", {"by": "fabric.mtu"}, "no axis 'fabric.mtu'"),
    ("sweep", "bw_vs_size", {"metric": "bytes"}, "takes no axes and no metric"),
    ("neither", "bw_vs_size", {}, "not a results directory"),
    ("one", "mode_comparison", {}, "compares variants, and this run has one (base): bw_vs_size and latency_vs_size"),
])
def test_recipe_errors_say_what_is_wrong(run_dir, sweep_dir, tmp_path, which, recipe, options, words):
    if which == "one":
        one, _ = _quickstart_dir(tmp_path, "_bw", [4096])
    directory = {"run": run_dir[0], "sweep": sweep_dir[0], "neither": tmp_path}.get(which) or one
    with pytest.raises(RecipeError) as caught:
        plot(directory, recipe, tmp_path / "figs", **options)
    assert words in str(caught.value)
    assert recipe == "scatter" or str(caught.value).startswith(f"{directory}: ")  # the directory it read is named
    assert not (tmp_path / "figs").exists()



def _quickstart_dir(tmp_path, kinds: str, sizes: list[int]) -> Path:
    """The quickstart's workloads whose kind ends with ``kinds``, 50 iterations of ``sizes``, written as
    `rdmasim run` does."""
    _, raw, variants = load_scenario_variants(ROOT / "scenarios" / "quickstart.yaml")
    (name, spec), = variants
    work = [w.model_copy(update={"iterations": 50, "sizes": sizes}) for w in spec.workload if w.kind.endswith(kinds)]
    result = run_scenario(spec.model_copy(update={"workload": work}), variant=name)
    return write_results([result], tmp_path / "res", raw), result


def test_latency_vs_size_of_a_run_plots_its_latency_rows(tmp_path):
    # The figure `rdmasim run` writes for a latency workload can be drawn again from its results by recipe.
    out, result = _quickstart_dir(tmp_path, "", [64, 4096, 65536])
    data = _files(plot(out, "latency_vs_size", tmp_path / "figs"), "latency_vs_size")
    expected = result.summary[result.summary["kind"].str.endswith("_lat")]
    assert list(data["bytes"]) == [64, 4096, 65536] and set(data["workload"]) == set(expected["workload"])
    for column in ("t_typical_us", "t_min_us", "p99_9_us"):
        np.testing.assert_allclose(data[column], expected[column], rtol=1e-12)


def test_latency_vs_size_of_bandwidth_workloads_only_says_so(tmp_path):
    out, _ = _quickstart_dir(tmp_path, "_bw", [4096])
    with pytest.raises(RecipeError, match="no latency workload to plot"):
        plot(out, "latency_vs_size", tmp_path / "figs")


def test_a_mode_comparison_of_many_cases_widens_its_panels_and_labels_each_case_upright(tmp_path, monkeypatch):
    from sim.plot import recipes
    from tests.conftest import tiny_yaml

    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml(*(f"{{kind: {kind}, from: src, to: dst, sizes: {{from: 2B, to: 64KiB}}, iterations: 5}}"
                                for kind in ("write_bw", "write_lat")),
                          tail="variants:\n  - {name: a, set: {seed: 1}}\n  - {name: b, set: {seed: 2}}\n"))
    _, raw, variants = load_scenario_variants(path)
    out = write_results([run_scenario(spec, variant=name) for name, spec in variants], tmp_path / "res", raw)
    drawn = []
    monkeypatch.setattr(recipes, "save", lambda fig, *args: drawn.append(fig) or [])
    plot(out, "mode_comparison", tmp_path / "figs")
    bandwidth, *_, failed = drawn[0].axes
    assert bandwidth.get_position().width > 1.3 * failed.get_position().width  # 32 cases: room for each label
    labels = bandwidth.get_xticklabels()
    assert len(labels) == 32 and {label.get_rotation() for label in labels} == {90.0}  # 32 cases, two bars each
    assert failed.get_ylim()[0] == 0  # no allocation failed: the axis still starts at zero


def test_a_sweeps_bw_vs_size_rings_the_points_whose_runs_met_the_pressure_event(sweep_dir, tmp_path):
    out, table = sweep_dir
    data = _files(plot(out, "bw_vs_size", tmp_path), "bw_vs_size")
    hit = table[(table["evictions"] + table["failed_allocations"]) > 0]  # what the allocation did to those runs
    assert set(hit["bytes"]) == {1 << 20}  # the smaller sizes ran before it came
    ringed = data[data["events"] > 0]
    assert sorted(zip(ringed["workload"], ringed["bytes"])) == sorted(zip(hit["variant"], hit["bytes"]))

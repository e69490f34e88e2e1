"""Errors as results: completion statuses in the tables, runs whose work requests fail still write everything,
event outcomes on every run, --strict."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from models.nic.wqe import WC_STATUS_NAMES, WcStatus
from sim.inspect.binned import cdf_curves
from sim.cli.app import app
from sim.cli.perftest_report import format_summary
from sim.plot import figures
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import tiny_yaml

ALL_FAIL = tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB, 8KiB], iterations: 100}",
                     "{kind: read_lat, from: src, to: dst, sizes: [4KiB], iterations: 20}", name="all-fail", seed=2,
                     tail="events:\n  - {at: 0ns, kind: process-exit, node: a}\n"
                          "outputs: [bw_vs_size, latency_vs_size, latency_cdf, bw_over_time]\n")

PRESSURE = """schema: 1
name: pressure
seed: 2
nodes:
  - {name: a, nic: {preset: connectx8}, gpus: [{preset: h200, memory: 8GiB}]}
  - {name: b}
buffers:
  - {name: src, on: a.gpu0, size: 6GiB, register: dmabuf-pinned}
  - {name: dst, on: b.host, size: 6GiB}
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [64KiB], iterations: 200}
events:
  - {at: 1us, kind: gpu-memory-pressure, on: a.gpu0, allocate: 4GiB}
"""
runner = CliRunner()


def _scenario(text: str) -> Scenario:
    from ruamel.yaml import YAML

    return Scenario.model_validate(YAML(typ="safe").load(text))


def test_status_values_and_names_are_rdma_core_s():
    assert [s.value for s in WcStatus] == list(range(24))  # enum ibv_wc_status has no gaps
    assert (WcStatus.WR_FLUSH_ERR.value, WcStatus.REM_ACCESS_ERR.value, WcStatus.RNR_RETRY_EXC_ERR.value) == (5, 10, 13)
    assert WC_STATUS_NAMES[5] == WcStatus.WR_FLUSH_ERR.ibv_name == "IBV_WC_WR_FLUSH_ERR"
    assert WC_STATUS_NAMES[23] == "IBV_WC_TM_RNDV_INCOMPLETE"


def test_every_operation_carries_its_completion_status_and_the_summary_counts_them():
    result = run_scenario(_scenario(ALL_FAIL))
    ops = result.operations
    assert list(ops["status"].cat.categories) == WC_STATUS_NAMES
    assert (ops["ok"] == (ops["status"] == "IBV_WC_SUCCESS")).all() and not ops["ok"].any()
    counts = ops.groupby(["workload", "bytes"], observed=True)["status"].value_counts()
    for row in result.summary.itertuples():
        assert sum(row.errors_by_status.values()) == row.errors == row.iterations
        assert row.errors_by_status == {name: n for (w, b, name), n in counts.items()
                                        if (w, b) == (row.workload, row.bytes) and n}
    assert result.summary[["bw_avg_Gbps", "msg_rate_Mpps", "t_typical_us"]].isna().all().all()


def test_a_partly_failed_stream_keeps_both_statuses_and_measures_only_the_successes():
    text = ALL_FAIL.replace("at: 0ns", "at: 3us").replace(", sizes: [4KiB, 8KiB]", ", sizes: [4KiB]")
    result = run_scenario(_scenario(text))
    bw = result.operations[result.operations["kind"] == "write_bw"]
    assert 0 < bw["ok"].sum() < len(bw) and "IBV_WC_WR_FLUSH_ERR" in set(bw["status"])
    row = result.summary.iloc[0]
    assert row["errors"] == (~bw["ok"]).sum() and row["bw_avg_Gbps"] > 0


def test_the_vectorized_core_fills_the_same_status_column():
    text = ALL_FAIL.split("events:")[0]
    fast = run_scenario(_scenario(text + "engine: fast\n"))
    event = run_scenario(_scenario(text))
    assert fast.operations["status"].dtype == event.operations["status"].dtype
    assert (fast.operations["status"] == "IBV_WC_SUCCESS").all()
    pd.testing.assert_frame_equal(fast.operations, event.operations)


def test_the_table_names_the_statuses_and_measures_nothing_when_nothing_succeeded():
    summary = [
        {"variant": "base", "workload": "w", "kind": "write_bw", "bytes": 4096, "iterations": 10, "errors": 10,
         "errors_by_status": {"IBV_WC_REM_ACCESS_ERR": 1, "IBV_WC_WR_FLUSH_ERR": 9},
         "bw_peak_Gbps": np.nan, "bw_avg_Gbps": np.nan, "bw_avg_MiBps": np.nan, "msg_rate_Mpps": np.nan},
        {"variant": "base", "workload": "w", "kind": "write_bw", "bytes": 8192, "iterations": 10, "errors": 2,
         "errors_by_status": {"IBV_WC_REM_ACCESS_ERR": 2},
         "bw_peak_Gbps": 90.0, "bw_avg_Gbps": 80.0, "bw_avg_MiBps": 9536.7, "msg_rate_Mpps": 1.25}]
    text = format_summary(summary)
    assert " 4096       10             no work request succeeded: nothing measured" in text
    assert "80.00" in text and "1.250000" in text and "nan" not in text
    assert "work requests completed in error: 9 IBV_WC_WR_FLUSH_ERR, 3 IBV_WC_REM_ACCESS_ERR" in text


def test_a_run_whose_work_requests_all_fail_writes_every_output(tmp_path):
    path, out = tmp_path / "s.yaml", tmp_path / "res"
    path.write_text(ALL_FAIL)
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "completed in error: 200 IBV_WC_WR_FLUSH_ERR" in result.stdout
    assert result.stdout.count("no work request succeeded") == 3 and "nan" not in result.stdout
    assert "process-exit on a: 1 QPs moved to ERR" in result.stdout
    ops = pd.read_parquet(out / "metrics.parquet")
    assert len(ops) == 220 and set(ops["status"]) <= {"IBV_WC_WR_FLUSH_ERR", "IBV_WC_LOC_PROT_ERR"}
    summary = json.loads((out / "summary.json").read_text())
    assert [r["errors_by_status"] for r in summary["results"]][:2] == [{"IBV_WC_WR_FLUSH_ERR": 100}] * 2
    for name in ("bw_vs_size", "latency_vs_size", "latency_cdf", "bw_over_time"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 0
    assert pd.read_csv(out / "figures" / "latency_cdf.csv").empty


def test_strict_exits_1_after_writing_when_a_completion_failed(tmp_path):
    path, out = tmp_path / "s.yaml", tmp_path / "res"
    path.write_text(ALL_FAIL)
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--strict", "-q"])
    assert result.exit_code == 1 and (out / "metrics.parquet").is_file() and (out / "summary.json").is_file()
    assert "--strict: 220 work requests completed in error (219 IBV_WC_WR_FLUSH_ERR" in result.stderr


def test_event_outcomes_are_printed_without_variants_and_a_failed_one_fails_strict(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(PRESSURE)
    plain = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "one")])
    assert plain.exit_code == 0, plain.output
    assert "gpu-memory-pressure on a.gpu0: failed: no evictable memory" in plain.stdout
    strict = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "two"), "--strict"])
    assert strict.exit_code == 1 and "--strict: 1 event(s) failed" in strict.stderr
    assert "completed in error" not in strict.stderr and (tmp_path / "two" / "summary.json").is_file()


@pytest.mark.parametrize("draw", ["latency_cdf", "latency_vs_size", "bw_vs_size"])
def test_a_figure_without_successful_work_requests_says_so(tmp_path, monkeypatch, draw):
    result = run_scenario(_scenario(ALL_FAIL))
    drawn = []
    real_save = figures.save
    monkeypatch.setattr(figures, "save", lambda fig, *a: (drawn.append(fig), real_save(fig, *a))[1])
    data = cdf_curves([result.table]) if draw == "latency_cdf" else result.summary
    paths = getattr(figures, draw)(data, tmp_path, "all-fail")
    assert all(p.is_file() for p in paths)
    notes = [t.get_text() for ax in drawn[0].axes for t in ax.texts]
    assert notes and set(notes) == {figures.NO_DATA}
    success = run_scenario(_scenario(ALL_FAIL.split("events:")[0]))
    getattr(figures, draw)(cdf_curves([success.table]) if draw == "latency_cdf" else success.summary, tmp_path,
                           "ok")
    assert not [t for ax in drawn[1].axes for t in ax.texts]


def test_the_mode_comparison_recipe_marks_the_panels_nothing_was_measured_for(tmp_path, monkeypatch):
    import sim.plot.recipes as recipes
    from sim.results.write import write_results

    scenario = _scenario(ALL_FAIL)  # two variants: a mode comparison compares variants
    out = write_results([run_scenario(scenario, variant=v) for v in ("one", "two")], tmp_path / "res")
    drawn = []
    monkeypatch.setattr(recipes, "save", lambda fig, *a: (drawn.append(fig), figures.save(fig, *a))[1])
    recipes.plot(out, "mode_comparison", tmp_path / "figs")
    notes = {ax.get_title(): [t.get_text() for t in ax.texts if t.get_text() == figures.NO_DATA]
             for ax in drawn[0].axes}
    assert notes["average bandwidth (Gb/s)"] and notes["p99.9 latency (µs)"]
    assert not notes["registration time (ms)"] and not notes["pinned memory (GiB)"]


def test_bandwidth_over_time_says_so_when_nothing_was_delivered(tmp_path, monkeypatch):
    from sim.inspect.compare import bandwidth_timeline, event_times

    drawn = []
    real_save = figures.save
    monkeypatch.setattr(figures, "save", lambda fig, *a: (drawn.append(fig), real_save(fig, *a))[1])
    for text in (ALL_FAIL, ALL_FAIL.split("events:")[0]):
        result = run_scenario(_scenario(text))
        figures.bw_over_time(bandwidth_timeline(result), event_times(result), tmp_path, "t")
    notes = [[t.get_text() for t in fig.axes[0].texts if t.get_text() == figures.NO_DATA] for fig in drawn]
    assert notes == [[figures.NO_DATA], []]


def test_a_block_is_titled_by_its_workload_and_kind_and_an_unnamed_workload_by_its_kind_once():
    row = {"bytes": 4096, "iterations": 10, "errors": 0, "errors_by_status": {}, "bw_peak_Gbps": 90.0,
           "bw_avg_Gbps": 80.0, "bw_avg_MiBps": 9536.7, "msg_rate_Mpps": 1.25}
    summary = [{"variant": "base", "workload": "write_bw", "kind": "write_bw", **row},
               {"variant": "base", "workload": "stream", "kind": "write_bw", **row},
               {"variant": "dmabuf", "workload": "write_bw", "kind": "write_bw", **row}]
    titles = [line for line in format_summary(summary).splitlines() if "write_bw" in line]
    assert titles == [" write_bw", " stream: write_bw", " write_bw [dmabuf]"]

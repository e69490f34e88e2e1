"""Running sweeps: identical results on every executor, streaming partitions, resume, failed runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import sim.sweep.execute as execute_module
from sim.sweep import read_table, run_sweep
from sim.store.sweep_table import partition_path

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "scenarios" / "sweeps" / "msg_size_x_mode.yaml"


def _partitions(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "runs").iterdir())}


def test_sample_sweep_table_has_axes_perftest_columns_and_counters(tmp_path):
    result = run_sweep(SAMPLE, tmp_path / "out")
    table = result.table
    assert result.ran == 9 and result.skipped == 0 and result.failed == 0
    assert list(table.columns[:6]) == ["run", "repetition", "seed", "variant", "workload.stream.sizes.0", "key"]
    assert {"bw_avg_Gbps", "bw_peak_Gbps", "msg_rate_Mpps", "p99_9_us", "register_us", "pinned_bytes",
            "evictions", "invalidations", "refaults", "failed_allocations"} <= set(table.columns)
    assert list(table["run"]) == list(range(9)) and (table["status"] == "ok").all()
    assert list(table["bytes"]) == [4096, 65536, 1048576] * 3
    one_mib = table[table["bytes"] == 2**20].set_index("variant")
    assert one_mib.loc["dmabuf", "evictions"] == 1 and one_mib.loc["dmabuf", "refaults"] == 1
    assert one_mib.loc["peermem", "failed_allocations"] == 1 and one_mib.loc["peermem", "evictions"] == 0
    assert one_mib.loc["dmabuf", "bw_avg_Gbps"] < one_mib.loc["peermem", "bw_avg_Gbps"]
    assert one_mib.loc["dmabuf", "pinned_bytes"] < one_mib.loc["dmabuf-pinned", "pinned_bytes"]
    stored = pd.read_parquet(tmp_path / "out" / "summary.parquet")
    pd.testing.assert_frame_equal(stored, table)
    assert len(_partitions(tmp_path / "out")) == 9
    assert not [p for p in (tmp_path / "out").rglob(".*")]  # no temporary file left


def test_every_executor_gives_byte_identical_results(tmp_path):
    """dask runs on an in-process LocalCluster (2 workers, processes=False) reached through its scheduler
    address: starting worker processes would take seconds; the default-cluster path is tested below."""
    from distributed import LocalCluster

    run_sweep(SAMPLE, tmp_path / "serial")
    run_sweep(SAMPLE, tmp_path / "processes", executor="processes", workers=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        run_sweep(SAMPLE, tmp_path / "dask", executor="dask", scheduler=cluster.scheduler_address)
    reference = _partitions(tmp_path / "serial")
    for name in ("processes", "dask"):
        assert _partitions(tmp_path / name) == reference
        for f in ("summary.parquet", "summary.csv", "sweep.json"):
            assert (tmp_path / name / f).read_bytes() == (tmp_path / "serial" / f).read_bytes(), (name, f)


def test_dask_starts_a_local_cluster_of_worker_processes_by_default(write_sweep, sweep_text, tmp_path):
    path = write_sweep(sweep_text.replace("samples: 2", "samples: 1").replace("repetitions: 2", "repetitions: 1"))
    serial = run_sweep(path, tmp_path / "serial")
    parallel = run_sweep(path, tmp_path / "dask", executor="dask", workers=2)
    assert parallel.ran == 8 and _partitions(tmp_path / "dask") == _partitions(tmp_path / "serial")
    pd.testing.assert_frame_equal(parallel.table, serial.table)


def test_a_killed_sweep_keeps_finished_runs_and_resumes(write_sweep, tmp_path, monkeypatch):
    path = write_sweep()
    full = run_sweep(path, tmp_path / "full")
    done = []
    real = execute_module.execute

    def killed_after_half(run):
        if len(done) == 16:
            raise KeyboardInterrupt
        done.append(run.key)
        return real(run)

    monkeypatch.setattr(execute_module, "execute", killed_after_half)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(path, tmp_path / "out")
    assert sorted(p.stem for p in (tmp_path / "out" / "runs").iterdir()) == sorted(done)
    assert len(read_table(tmp_path / "out")) == 16  # what finished is readable before the sweep ends
    monkeypatch.setattr(execute_module, "execute", real)
    resumed = run_sweep(path, tmp_path / "out")
    assert (resumed.ran, resumed.skipped) == (16, 16)
    pd.testing.assert_frame_equal(resumed.table, full.table)
    assert _partitions(tmp_path / "out") == _partitions(tmp_path / "full")
    again = run_sweep(path, tmp_path / "out")
    assert (again.ran, again.skipped) == (0, 32)


def test_editing_a_sweep_reruns_only_the_runs_whose_parameters_changed(write_sweep, sweep_text, base_text,
                                                                        tmp_path):
    run_sweep(write_sweep(), tmp_path / "out")
    shrunk = run_sweep(write_sweep(sweep_text.replace("[pinned, odp]", "[pinned]")), tmp_path / "out")
    assert (shrunk.ran, shrunk.skipped) == (0, 16) and len(shrunk.table) == 16
    edited = run_sweep(write_sweep(sweep_text.replace("[300ns, 1us]", "[300ns, 2us]")), tmp_path / "out")
    assert (edited.ran, edited.skipped) == (16, 16)
    rebased = run_sweep(write_sweep(base=base_text.replace("iterations: 50", "iterations: 40")), tmp_path / "out")
    assert (rebased.ran, rebased.skipped) == (32, 0)


def test_a_failed_run_is_a_row_with_its_message(write_sweep, tmp_path):
    sweep = ("schema: 1\nkind: sweep\nname: memlock\nbase: base.yaml\n"
             "grid:\n  nodes.a.host.memlock_limit: [unlimited, 16KiB]\n")
    result = run_sweep(write_sweep(sweep), tmp_path / "out")
    assert result.ran == 2 and result.failed == 1
    failed = result.table[result.table["status"] == "failed"].iloc[0]
    assert failed["nodes.a.host.memlock_limit"] == "16KiB" and "ENOMEM" in failed["error"]
    assert "RLIMIT_MEMLOCK" in failed["error"] and pd.isna(failed["bw_avg_Gbps"])
    ok = result.table[result.table["status"] == "ok"].iloc[0]
    assert ok["bw_avg_Gbps"] > 0 and pd.isna(ok["error"])
    again = run_sweep(write_sweep(sweep), tmp_path / "out")
    assert again.ran == 0 and again.failed == 1


def test_bad_executor_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="serial, processes, dask"):
        run_sweep(SAMPLE, tmp_path, executor="threads")
    with pytest.raises(ValueError, match="dask"):
        run_sweep(SAMPLE, tmp_path, scheduler="tcp://127.0.0.1:8786")
    assert not any(tmp_path.iterdir())


def test_a_scheduler_that_accepts_no_connection_is_named_in_one_line(tmp_path):
    import dask
    import distributed  # noqa: F401 - its defaults join dask's config first, so leaving the block keeps them
    from typer.testing import CliRunner

    from sim.cli.app import app

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        result = CliRunner().invoke(app, ["sweep", str(SAMPLE), "--out", str(tmp_path / "out"), "--scheduler",
                                          "tcp://127.0.0.1:9"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == ["--scheduler tcp://127.0.0.1:9: Timed out trying to connect to "
                                          "tcp://127.0.0.1:9 after 1 s"]


def test_partitions_are_named_by_the_runs_parameter_hash(tmp_path):
    from sim.sweep import load_sweep

    result = run_sweep(SAMPLE, tmp_path / "out")
    plan = load_sweep(SAMPLE)
    assert all(partition_path(tmp_path / "out", run.key).is_file() for run in plan.runs)
    shutil.rmtree(tmp_path / "out" / "runs")
    assert read_table(tmp_path / "out").empty and len(result.table) == 9

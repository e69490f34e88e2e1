"""Sweeps that survive bad points, damaged partitions, a crash between write and rename, and a killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import sim.sweep.execute as execute_module
from sim.sweep import load_sweep, run_sweep
from sim.store.sweep_table import partition_path
from sim.sweep.store import write_partition

LATENCIES = ("schema: 1\nkind: sweep\nname: latencies\nbase: base.yaml\n"
             "grid:\n  fabric.latency: [300ns, 1us, 2us]\n")


def _failing_at(monkeypatch, bad, exc: BaseException) -> None:
    """Make the simulation of run ``bad`` raise ``exc``, as a point whose values the engine cannot hold does."""
    real = execute_module.run_scenario

    def run_scenario(scenario, seed, **kwargs):
        if scenario == bad.scenario:
            raise exc
        return real(scenario, seed, **kwargs)

    monkeypatch.setattr(execute_module, "run_scenario", run_scenario)


@pytest.mark.parametrize("exc", [MemoryError("cannot allocate"), OverflowError("Python int too large to convert"),
                                 ValueError("bad point")])
def test_a_point_that_raises_is_stored_as_failed_and_the_sweep_goes_on(write_sweep, tmp_path, monkeypatch, exc):
    path = write_sweep(LATENCIES)
    bad = load_sweep(path).runs[1]
    _failing_at(monkeypatch, bad, exc)
    result = run_sweep(path, tmp_path / "out", progress=False)
    assert (result.ran, result.failed) == (3, 1)
    table = result.table.set_index("run")
    assert table.loc[1, "status"] == "failed" and table.loc[1, "error"] == f"{type(exc).__name__}: {exc}"
    assert (table.loc[[0, 2], "status"] == "ok").all() and (table.loc[[0, 2], "bw_avg_Gbps"] > 0).all()
    assert pd.read_parquet(partition_path(tmp_path / "out", bad.key))["status"].tolist() == ["failed"]

    resumed = run_sweep(path, tmp_path / "out", progress=False)
    assert (resumed.ran, resumed.skipped, resumed.failed, resumed.retried) == (0, 3, 1, 0)
    monkeypatch.undo()  # the point runs now: only --retry-failed finds out
    retried = run_sweep(path, tmp_path / "out", progress=False, retry_failed=True)
    assert (retried.ran, retried.skipped, retried.failed, retried.retried) == (1, 2, 0, 1)
    assert retried.table.set_index("run").loc[1, "bw_avg_Gbps"] > 0


DIES_AT = {"index": 1}
"""The run whose worker :func:`_worker_dies` kills."""


def _worker_dies(run):
    if run.index == DIES_AT["index"]:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would end it
    return REAL_EXECUTE(run)


REAL_EXECUTE = execute_module.execute


@pytest.mark.parametrize("dies_at, workers", [(0, 1), (1, 1), (2, 1), (1, 2), (3, 2)])
def test_a_worker_killed_stores_no_run_it_did_not_finish_and_a_resume_runs_them(write_sweep, tmp_path, monkeypatch,
                                                                                 dies_at, workers):
    path = write_sweep(LATENCIES.replace("2us]", "2us, 4us]"))
    out = tmp_path / "out"
    monkeypatch.setattr(execute_module, "execute", _worker_dies)
    monkeypatch.setitem(DIES_AT, "index", dies_at)
    with pytest.raises(execute_module.WorkersLost, match=r"runs were not finished and are not stored"):
        run_sweep(path, out, executor="processes", workers=workers, progress=False)
    stored = [pd.read_parquet(p) for p in (out / "runs").glob("*.parquet")]
    assert len(stored) < 4 and all((table["status"] == "ok").all() for table in stored)
    monkeypatch.undo()
    resumed = run_sweep(path, out, progress=False)  # no --retry-failed needed: nothing was stored as failed
    assert (resumed.ran, resumed.skipped, resumed.failed) == (4 - len(stored), len(stored), 0)


def test_the_cli_says_a_worker_was_lost_and_exits_1(write_sweep, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sim.cli.app import app

    monkeypatch.setattr(execute_module, "execute", _worker_dies)
    result = CliRunner().invoke(app, ["sweep", str(write_sweep(LATENCIES)), "--out", str(tmp_path / "out"),
                                      "--executor", "processes", "--workers", "1"])
    assert result.exit_code == 1 and result.stdout == ""
    said = [line for line in result.stderr.splitlines() if not line.startswith("latencies run ")]  # engine lines
    assert said == [f"{tmp_path / 'out'}: a worker process ended without a result (killed, or out of memory): 2 of 3 "
                    "runs were not finished and are not stored; running the sweep again runs them"]
    assert sum(" core ran " in line or " engine ran " in line for line in result.stderr.splitlines()) == 1


def test_the_cli_reports_failed_points_and_retries_them(write_sweep, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sim.cli.app import app

    path = write_sweep(LATENCIES)
    _failing_at(monkeypatch, load_sweep(path).runs[2], OverflowError("too large"))
    out = tmp_path / "out"
    first = CliRunner().invoke(app, ["sweep", str(path), "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert "run 2 failed: OverflowError: too large" in first.output and "1 failed (--retry-failed" in first.output
    monkeypatch.undo()
    again = CliRunner().invoke(app, ["sweep", str(path), "--out", str(out), "--retry-failed"])
    assert again.exit_code == 0 and "1 runs simulated (1 of them failed before)" in again.output
    assert "0 failed" in again.output


def test_unreadable_partitions_are_run_again_and_reported(write_sweep, tmp_path):
    path = write_sweep(LATENCIES)
    out = tmp_path / "out"
    run_sweep(path, out, progress=False)
    keys = [run.key for run in load_sweep(path).runs]
    original = {key: partition_path(out, key).read_bytes() for key in keys}
    partition_path(out, keys[0]).write_bytes(b"")  # a crash before the data reached the disk
    partition_path(out, keys[2]).write_bytes(original[keys[2]][: len(original[keys[2]]) // 2])  # cut short
    resumed = run_sweep(path, out, progress=False)
    assert (resumed.ran, resumed.skipped) == (2, 1)
    assert set(resumed.damaged) == {partition_path(out, keys[0]), partition_path(out, keys[2])}
    assert {key: partition_path(out, key).read_bytes() for key in keys} == original
    assert len(resumed.table) == 3 and (resumed.table["status"] == "ok").all()


@pytest.mark.parametrize("copies", [[(1, 0)], [(0, 2), (2, 1)], [(2, 0), (0, 2)], [(1, 0), (1, 2)]])
def test_a_partition_copied_over_another_is_run_again(write_sweep, tmp_path, copies):
    path = write_sweep(LATENCIES)
    out = tmp_path / "out"
    first = run_sweep(path, out, progress=False)
    keys = [run.key for run in load_sweep(path).runs]
    original = {key: partition_path(out, key).read_bytes() for key in keys}
    for source, target in copies:  # cp runs/B.parquet runs/A.parquet, as first written ([(2, 0), (0, 2)] swaps)
        partition_path(out, keys[target]).write_bytes(original[keys[source]])
    overwritten = {target for _, target in copies}
    resumed = run_sweep(path, out, progress=False)
    assert (resumed.ran, resumed.skipped) == (len(overwritten), 3 - len(overwritten))
    assert set(resumed.damaged) == {partition_path(out, keys[t]) for t in overwritten}
    assert {key: partition_path(out, key).read_bytes() for key in keys} == original
    pd.testing.assert_frame_equal(resumed.table, first.table)


RUNAWAY: dict = {"seed": None, "latency": None}
"""The seed and fabric latency of the run that :func:`_runaway` never finishes."""


def _runaway(scenario, seed, **kwargs):
    if seed == RUNAWAY["seed"] and scenario.fabric.latency == RUNAWAY["latency"]:
        while True:  # a point that never ends
            pass
    return REAL_RUN(scenario, seed, **kwargs)


REAL_RUN = execute_module.run_scenario


@pytest.mark.parametrize("executor, index", [("serial", 0), ("serial", 2), ("processes", 1)])
def test_a_run_past_the_time_limit_is_stored_as_failed_and_the_sweep_goes_on(write_sweep, tmp_path, monkeypatch,
                                                                             executor, index):
    # The limit leaves the other runs (a fresh worker process imports what it runs) seconds on a loaded machine.
    path = write_sweep(LATENCIES.replace("base.yaml\n", "base.yaml\nrun_time_limit: 3s\n"))
    runaway = load_sweep(path).runs[index]
    assert runaway.time_limit_s == 3
    monkeypatch.setattr(execute_module, "run_scenario", _runaway)
    monkeypatch.setitem(RUNAWAY, "seed", runaway.seed)
    monkeypatch.setitem(RUNAWAY, "latency", runaway.scenario.fabric.latency)
    result = run_sweep(path, tmp_path / "out", executor=executor, workers=1, progress=False)
    table = result.table.set_index("run")
    assert table.loc[index, "status"] == "failed"
    assert table.loc[index, "error"] == "RunTimedOut: ran longer than the sweep's run_time_limit (3s)"
    assert (table.drop(index)["status"] == "ok").all() and result.failed == 1


def test_the_time_limit_is_disarmed_once_a_run_ends():
    before = signal.getsignal(signal.SIGALRM)
    with execute_module.time_limit(30):
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is before


def test_a_partition_is_on_disk_before_it_is_renamed_and_the_rename_after(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", str(a), str(b))), real_replace(a, b)))
    path = write_partition(tmp_path, "k", pd.DataFrame({"key": ["k"], "status": ["ok"]}))
    (_, synced), (_, moved, target), (_, directory) = calls
    assert synced == moved and Path(moved).name.startswith(".") and target == str(path)
    assert directory == str(path.parent)


SWEEP_THEN_HANG = """
import sys, time, types
import sim.sweep.execute
import sim.sweep.orphans

def hang(*runs):
    time.sleep(300)

if __name__ == "__main__":
    sim.sweep.execute.execute = sim.sweep.execute.execute_batch = hang
    if sys.argv[3] == "watcher":  # no prctl: only the portable watcher thread
        sim.sweep.orphans.sys = types.SimpleNamespace(platform="other")
    from sim.sweep import run_sweep
    run_sweep(sys.argv[1], sys.argv[2], executor="dask" if sys.argv[3] == "dask" else "processes", workers=2,
              progress=False)
"""
CHILDREN = {"prctl": 2, "watcher": 2, "dask": 3}
"""Processes each guard's sweep starts: the pool's two workers (dask: and multiprocessing's resource tracker)."""


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat[1] != "Z" and int(stat[2]) == pid:
            found.append(int(entry.name))
    return found


def _stat(pid: int) -> list[str] | None:
    """State and parent of ``pid`` (fields 3 and 4 of /proc/PID/stat, after the command name), None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return [str(pid), *text[text.rindex(")") + 2:].split()[:2]]


def _wait(condition, deadline_s: float = 30) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers through /proc")
@pytest.mark.parametrize("guard", ["prctl", "watcher", "dask"])
def test_killing_the_parent_of_a_sweep_leaves_no_worker(write_sweep, tmp_path, guard):
    path = write_sweep(LATENCIES)
    script = tmp_path / "hang.py"  # a file, not -c: dask's spawned workers import the main module again
    script.write_text(SWEEP_THEN_HANG)
    parent = subprocess.Popen([sys.executable, str(script), str(path), str(tmp_path / "out"), guard])
    workers: list[int] = []
    try:
        assert _wait(lambda: len(_children(parent.pid)) == CHILDREN[guard], 60), "the workers did not start"
        workers = _children(parent.pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait(lambda: all(_stat(w) is None or _stat(w)[1] == "Z" for w in workers)), "a worker survived"
    finally:
        parent.kill()
        for worker in workers:
            if _stat(worker) is not None:
                os.kill(worker, signal.SIGKILL)


def test_a_point_over_the_memory_available_is_stored_as_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    import sim.engine.budget
    from sim.sweep import run_sweep
    from tests.conftest import tiny_yaml

    (tmp_path / "base.yaml").write_text(tiny_yaml(
        "{kind: write_bw, name: bw, from: src, to: dst, sizes: [4KiB], iterations: 20}"))
    (tmp_path / "sw.yaml").write_text("schema: 1\nkind: sweep\nname: big-points\nbase: base.yaml\n"
                                      "grid:\n  workload.bw.iterations: [20, 40000000]\n")
    monkeypatch.setattr(sim.engine.budget, "available_memory", lambda: 2**30)
    result = run_sweep(tmp_path / "sw.yaml", tmp_path / "out", progress=False)
    table = result.table.set_index("workload.bw.iterations")
    assert table.loc[20, "status"] == "ok" and table.loc[40000000, "status"] == "failed"
    assert table.loc[40000000, "error"].startswith("OverBudget: run needs about") and "budget 1.0GiB" in \
        table.loc[40000000, "error"]


def test_half_written_files_of_a_killed_sweep_are_removed_when_it_resumes(tmp_path):
    import subprocess
    import sys

    from sim.sweep import run_sweep
    from tests.conftest import tiny_yaml

    (tmp_path / "base.yaml").write_text(tiny_yaml(
        "{kind: write_bw, name: bw, from: src, to: dst, sizes: [4KiB], iterations: 20}"))
    (tmp_path / "sw.yaml").write_text("schema: 1\nkind: sweep\nname: resumed\nbase: base.yaml\n"
                                      "grid:\n  workload.bw.tx_depth: [4, 8]\n")
    out = tmp_path / "out"
    run_sweep(tmp_path / "sw.yaml", out, progress=False)
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    left = [out / "runs" / f".abc.parquet.tmp-{gone}", out / f".summary.csv.tmp-{gone}"]
    live = out / "runs" / f".def.parquet.tmp-{os.getpid()}"
    for path in [*left, live]:
        path.write_bytes(b"half")
    run_sweep(tmp_path / "sw.yaml", out, progress=False)
    assert not any(p.exists() for p in left) and live.read_bytes() == b"half"

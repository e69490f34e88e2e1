"""Reproducibility from the manifest, and the watchdog that turns a stalled simulation into a DeadlockError."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.core import DeadlockError
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("r") / "res"
    assert runner.invoke(app, ["run", str(ROOT / "scenarios" / "pin_vs_dmabuf.yaml"), "--out", str(out), "-q",
                               "--seed", "9"]).exit_code == 0
    return out


def test_repro_reproduces_every_output_bit_for_bit(results):
    result = runner.invoke(app, ["repro", str(results / "manifest.json")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((results / "manifest.json").read_text())
    assert result.stdout.count("identical") == len(manifest["files_sha256"])
    assert manifest["seed"] == 9 and set(manifest["outputs_sha256"]) == {"metrics.parquet", "summary.json"}


def test_repro_detects_a_changed_result(results, tmp_path):
    manifest = json.loads((results / "manifest.json").read_text())
    manifest["outputs_sha256"]["metrics.parquet"] = "0" * 64
    tampered = tmp_path / "manifest.json"
    tampered.write_text(json.dumps(manifest))
    result = runner.invoke(app, ["repro", str(tampered)])
    assert result.exit_code == 1 and "metrics.parquet: re-run DIFFERENT from the manifest" in result.stdout


def test_repro_of_something_else_is_a_clear_error(tmp_path):
    bogus = tmp_path / "manifest.json"
    bogus.write_text("{}")
    result = runner.invoke(app, ["repro", str(bogus)])
    assert result.exit_code == 2 and "not an rdmasim manifest" in result.stderr


def _read_lat() -> Scenario:
    """Two hosts, one read_lat workload of three 8-byte READs, on the event engine (whose watchdog is tested)."""
    return Scenario.model_validate({
        "schema": 1, "name": "read_lat", "engine": "event", "nodes": [{"name": "a"}, {"name": "b"}],
        "buffers": [{"name": "x", "on": "a.host", "size": "4KiB"}, {"name": "y", "on": "b.host", "size": "4KiB"}],
        "workload": [{"kind": "read_lat", "from": "x", "to": "y", "sizes": ["8B"], "iterations": 3}]})


def test_a_stalled_simulation_is_a_deadlock_error_naming_the_waiters(monkeypatch):
    import models.verbs.workloads as workloads

    def never_completes(env, src, dst, size, iterations, opcode, duration_ps=None):
        yield env.event()  # waits for something nobody will ever trigger
    monkeypatch.setattr("sim.engine.run.read_latency", never_completes)
    with pytest.raises(DeadlockError, match="workload 'read_lat' at 8 bytes: the simulation has nothing left"):
        run_scenario(_read_lat())
    assert workloads.read_latency is not never_completes


def test_a_workload_that_fails_is_not_mistaken_for_a_deadlock(monkeypatch):
    """The workload's own RuntimeError, raised as the last event, reaches the caller unchanged."""
    def fails(env, src, dst, size, iterations, opcode, duration_ps=None):
        yield env.timeout(1)
        raise RuntimeError("the workload broke")
    monkeypatch.setattr("sim.engine.run.read_latency", fails)
    with pytest.raises(RuntimeError, match="the workload broke"):
        run_scenario(_read_lat())

"""The command line end to end: exit codes, error locations, atomic results, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from tests.conftest import tiny_yaml

ROOT = Path(__file__).resolve().parents[3]
QUICK = tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [2B, 4KiB, 64KiB], iterations: 100}",
                  "{kind: write_lat, from: src, to: dst, sizes: [2B, 64KiB], iterations: 50}")
runner = CliRunner()


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_run_writes_every_output(tmp_path):
    out = tmp_path / "res"
    result = runner.invoke(app, ["run", str(_write(tmp_path, QUICK)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "t_typical[usec]" in result.stdout and "BW average[Gb/sec]" in result.stdout
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"metrics.parquet", "summary.json", "manifest.json", "figures/bw_vs_size.png",
            "figures/latency_vs_size.png", "figures/bw_vs_size.csv"} <= names
    ops = pd.read_parquet(out / "metrics.parquet")
    assert len(ops) == 3 * 100 + 2 * 50 and ops["ok"].all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 5 and manifest["versions"]["simpy"]
    assert manifest["variants"]["base"]["nodes"]["a"]["pcie"]["gen"] == 5
    assert len(manifest["scenario_sha256"]) == 64


def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path):
    path = _write(tmp_path, QUICK)
    for name, seed in (("one", "5"), ("two", "5"), ("three", "6")):
        args = ["run", str(path), "--out", str(tmp_path / name), "--seed", seed, "-q"]
        assert runner.invoke(app, args).exit_code == 0
    read = lambda name, f: (tmp_path / name / f).read_bytes()
    for f in ("metrics.parquet", "summary.json", "figures/bw_vs_size.png", "figures/latency_vs_size.pdf"):
        assert read("one", f) == read("two", f)
    assert read("one", "metrics.parquet") != read("three", "metrics.parquet")


@pytest.mark.parametrize("mutation, where, words", [
    (("  - {kind: write_bw", "  - {knd: write_bw"), ":11:", "workload[0]"),
    (("size: 64KiB}\n  - {name: dst", "size: 64KIB}\n  - {name: dst"), ":8:", "buffers[0].size"),
    (("on: b.host", "on: c.host"), ":9:", "no node named 'c'"),
    (("to: dst, sizes: [2B, 4KiB", "to: dts, sizes: [2B, 4KiB"), ":11:", "did you mean 'dst'"),
    (("seed: 5", "seed: -5"), ":3:", "seed"),
    (("iterations: 100", "iterations: 100, tx_dpth: 4"), ":11:", "did you mean 'tx_depth'"),
])
def test_bad_scenarios_exit_2_with_location_and_write_nothing(tmp_path, mutation, where, words):
    out = tmp_path / "res"
    path = _write(tmp_path, QUICK.replace(*mutation))
    for command in (["validate", str(path)], ["run", str(path), "--out", str(out)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert f"{path}{where}" in result.stderr and words in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_a_queue_deeper_than_a_nics_max_qp_wr_is_refused_at_its_key(tmp_path):
    """connectx7 takes 32768 work requests per queue and efa 8192 (ibv_create_qp's limit on both ends)."""
    deep = QUICK.replace("iterations: 100}", "iterations: 100, tx_depth: 9000}", 1)
    assert runner.invoke(app, ["validate", str(_write(tmp_path, deep))]).exit_code == 0
    path = _write(tmp_path, deep.replace("  - {name: b}", "  - {name: b, nic: {preset: efa}}"), "efa.yaml")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
    assert f"{path}:11:" in result.stderr and "workload[0].tx_depth" in result.stderr
    assert "node 'b'" in result.stderr and "max_qp_wr 8192" in result.stderr


def test_a_workload_between_two_memories_of_one_node_is_refused(tmp_path):
    """Host memory and a GPU of node a are two places but one node: a measurement needs two."""
    text = QUICK.replace("  - {name: a}", "  - {name: a, gpus: [{preset: h200}]}").replace(
        "  - {name: dst, on: b.host, size: 64KiB}", "  - {name: dst, on: b.host, size: 64KiB}\n"
        "  - {name: gpu, on: a.gpu0, size: 64KiB, register: dmabuf}").replace("to: dst", "to: gpu", 1)
    path = _write(tmp_path, text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "workload[0].to" in result.stderr, result.output
    assert "'src' and 'gpu' are both on node a" in result.stderr


@pytest.mark.parametrize("change, key, says", [
    (("iterations: 100}", "iterations: 100, pairs: [{from: src, to: dst}]}"), "workload[0]",
     "pairs: src -> dst is listed twice"),
    (("size: 64KiB}", "size: 64KiB, nics: [nic0, nic0]}"), "buffers[0].nics", "nic0 listed twice"),
    (("workload:", "events:\n  - {at: 1us, kind: link-flap, node: b, duration: 0us}\nworkload:"),
     "events[0].duration", "give a duration above 0")])
def test_a_stream_a_nic_or_an_outage_given_to_no_effect_is_refused_at_its_key(tmp_path, change, key, says):
    """The same buffer pair twice, a NIC listed twice, a link flap of no duration: refused where they are."""
    result = runner.invoke(app, ["validate", str(_write(tmp_path, QUICK.replace(*change, 1)))])
    assert result.exit_code == 2 and f" {key}: " in result.stderr and says in result.stderr, result.output


def test_registration_failure_exits_1_and_keeps_previous_results(tmp_path):
    out = tmp_path / "res"
    assert runner.invoke(app, ["run", str(_write(tmp_path, QUICK)), "--out", str(out), "-q"]).exit_code == 0
    before = (out / "metrics.parquet").read_bytes()
    tight = QUICK.replace("  - {name: a}", "  - {name: a, host: {memlock_limit: 16KiB}}")
    result = runner.invoke(app, ["run", str(_write(tmp_path, tight, "t.yaml")), "--out", str(out), "--force"])
    assert result.exit_code == 1 and "ENOMEM" in result.stderr and "RLIMIT_MEMLOCK" in result.stderr
    assert (out / "metrics.parquet").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "s.yaml", "t.yaml"]


def test_schema_is_json_schema_with_descriptions():
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.stdout)
    assert result.exit_code == 0 and schema["title"] == "Scenario"
    assert "RLIMIT_MEMLOCK" in json.dumps(schema) and "from" in json.dumps(schema["$defs"]["WorkloadSpec"])


def test_validate_accepts_every_shipped_scenario():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 0, result.output


def test_every_shipped_scenario_runs_at_smoke_size(tmp_path):
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        scenario, _ = load_scenario(path)
        smoke = [w.model_copy(update={"iterations": min(w.iterations, 20)}) for w in scenario.workload]
        summary = run_scenario(scenario.model_copy(update={"workload": smoke})).summary
        assert (summary["errors"] == 0).all() and len(summary) > 0


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and all(c in result.stdout for c in ("run", "validate", "schema"))


def test_python_dash_m_sim_runs(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "sim", "validate", str(_write(tmp_path, QUICK))],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "ok" in proc.stdout


PRESSURE = ROOT / "scenarios" / "pin_vs_dmabuf.yaml"


def test_explain_shows_registration_and_eviction_with_locks_in_time_order():
    result = runner.invoke(app, ["explain", str(PRESSURE), "--variant", "dmabuf"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    order = ["hipMemGetHandleForAddressRange", "ibv_reg_dmabuf_mr", "dma_buf_dynamic_attach", "pagefault_dmabuf_mr",
             "gpu_memory_pressure", "lock dmabuf1.resv", "dma_buf_move_notify", "mlx5_ib_dmabuf_invalidate_cb",
             "MappingInvalidated", "mlx5r_umr_update_mr_pas", "PageFaulted", "BufferMoved", "unlock dmabuf1.resv",
             "MappingRestored"]  # the NIC faults once the zap is done, while the exporter still holds the lock
    at = 0
    for word in order:  # each appears after the previous one
        at = text.index(word, at) + len(word)
    times = [float(line.split()[0]) for line in text.splitlines() if line[:1] == " " and line.split()[0][0].isdigit()]
    assert times == sorted(times) and len(times) > 10
    second = text.split("First memory event")[1]
    assert "lock dmabuf1.resv" in second and "unlock dmabuf1.resv" in second


def test_explain_of_a_pinned_variant_says_nothing_moved():
    result = runner.invoke(app, ["explain", str(PRESSURE), "--variant", "peermem"])
    assert result.exit_code == 0 and "AllocationFailed" in result.stdout and "BufferMoved" not in result.stdout


def test_explain_rejects_an_unknown_variant():
    result = runner.invoke(app, ["explain", str(PRESSURE), "--variant", "nope"])
    assert result.exit_code == 2 and "no variant named 'nope'" in result.stderr


def test_trace_is_chrome_json_with_one_process_per_variant_and_named_tracks(tmp_path):
    out = tmp_path / "res"
    assert runner.invoke(app, ["run", str(PRESSURE), "--out", str(out), "--trace", "-q"]).exit_code == 0
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {"peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify"}
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"a.nic", "a.gpu0", "a.nic.hw", "a.nic.tx_port", "b.nic.rx_engine"} <= threads
    assert any(t.endswith(".up") for t in threads) and any(t.endswith(".down") for t in threads)  # link directions
    assert any(t.startswith("a.qp") for t in threads)  # one slice per work request, post to completion
    slices = [e for e in events if e.get("ph") == "X"]
    assert all(e["dur"] >= 0 for e in slices) and any(e["name"] == "dma_buf_move_notify" for e in slices)
    assert any(e.get("ph") == "i" and e["name"] == "MappingInvalidated" for e in events)


def _write_trace(tmp_path, name: str, *extra: str):
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 400}"))
    out = tmp_path / name
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "-q", *extra])
    events = json.loads((out / "trace.json").read_text())["traceEvents"] if result.exit_code == 0 else []
    return result, [e for e in events if e.get("ph") in ("X", "i")]


def test_a_trace_window_keeps_the_events_that_overlap_it_and_says_how_large_the_trace_is(tmp_path):
    whole, every = _write_trace(tmp_path, "whole", "--trace")
    start, end = 100.0, 110.0  # µs of simulated time, as the trace's timestamps count it (the WRITEs: ~95-130 µs)
    windowed, kept = _write_trace(tmp_path, "window", "--trace-window", "100us..110us")
    assert whole.exit_code == 0 and windowed.exit_code == 0, windowed.output
    assert "trace.json of about" in whole.stderr and "from 100 to 110 µs is kept" in windowed.stderr

    def overlaps(e):
        return e["ts"] < end and e["ts"] + e["dur"] > start if e["ph"] == "X" else start <= e["ts"] < end

    data_path = {(e["name"], e["ts"]) for e in kept if e["name"] in ("busy", "RDMA_WRITE")}
    assert data_path == {(e["name"], e["ts"]) for e in every if e["name"] in ("busy", "RDMA_WRITE") and overlaps(e)}
    assert data_path and len(kept) < len(every) / 2


def test_a_trace_estimated_above_its_limit_is_refused_before_anything_runs(tmp_path):
    refused, _ = _write_trace(tmp_path, "big", "--trace", "--trace-limit", "64KiB")
    assert refused.exit_code == 2 and not (tmp_path / "big").exists()
    assert refused.stderr.count("\n") == 1 and "above --trace-limit 64.0KiB" in refused.stderr
    assert "for 400 work requests" in refused.stderr and "--trace-window" in refused.stderr
    backwards, _ = _write_trace(tmp_path, "backwards", "--trace-window", "5ms..1ms")
    assert backwards.exit_code == 2 and "the window ends before it starts" in backwards.stderr


@pytest.mark.parametrize("args, says", [
    (["run", "s.yaml", "--seed", "-1"], "rdmasim run: --seed: a seed is an integer with 0 <= seed < 2**63, got -1"),
    (["run", "s.yaml", "--engine", "warp"], "rdmasim run: --engine: 'warp' is not one of 'event', 'fast', 'auto'"),
    (["run", "s.yaml", "--bogus"], "rdmasim run: No such option: --bogus"),
    (["run"], "rdmasim run: Missing argument 'FILE'"),
    (["runn", "s.yaml"], "rdmasim: No such command 'runn'. Did you mean 'run'?"),
    (["sweep", "s.yaml", "--workers", "0"], "rdmasim sweep: --workers: "),
    (["sweep", "s.yaml", "--scheduler", "notaurl"], "rdmasim sweep: --scheduler: missing port number in address "
                                                    "'notaurl'; a dask scheduler's address is such as tcp://host:8786"),
    (["run", "s.yaml", "--memory-budget", "10"], "rdmasim run: --memory-budget: 10: give a unit, e.g. '10B'"),
    (["explain", "s.yaml", "--memory-budget", "0B"],
     "rdmasim explain: --memory-budget: a memory budget must be positive"),
])
def test_a_usage_error_is_one_line_naming_the_option_and_the_reason(tmp_path, args, says):
    result = runner.invoke(app, args, prog_name="rdmasim")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stderr.startswith(says), result.stderr


def test_perftest_front_end_is_wired_into_the_cli():
    result = runner.invoke(app, ["perftest", "ib_write_bw", "-s", "4096", "-n", "200", "--use_cuda=0",
                                 "--use_cuda_dmabuf"])
    assert result.exit_code == 0, result.output
    assert "BW average[MiB/sec]" in result.stdout and "4096" in result.stdout
    bad = runner.invoke(app, ["perftest", "ib_write_bw", "--run_infinitely"])
    assert bad.exit_code == 2 and "--run_infinitely" in bad.stderr and bad.stdout == ""
    noted = runner.invoke(app, ["perftest", "ib_write_bw", "-s", "4096", "-n", "20", "-x", "3"])
    assert noted.exit_code == 0 and "-x/--gid-index ignored" in noted.stderr and "ignored" not in noted.stdout


def test_calibrate_command_reports_every_required_row_passing(tmp_path):
    result = runner.invoke(app, ["calibrate", "--figures", str(tmp_path)])
    assert (tmp_path / "pcie_bw_vs_mps.png").stat().st_size > 10_000
    assert (tmp_path / "calib_mtt_cliff.png").stat().st_size > 10_000
    assert result.exit_code == 0, result.output[-2000:]
    assert "0 failed" in result.stdout and "pinning_cost" in result.stdout and "copy_bw" in result.stdout
    assert result.stderr == ""  # no progress off a terminal, and no engine line of its own runs


def test_calibrate_tells_each_experiment_as_it_starts(monkeypatch):
    from sim.inspect import calibrate as module
    from sim.inspect.calibration_rows import row

    started = []
    experiments = (("first", lambda: started.append("ran first") or [row(
        "a", "one", 1, "s", 1.0, 1.0, tolerance=0.1)]), ("second", lambda: started.append("ran second") or []))
    monkeypatch.setattr(module, "EXPERIMENTS", experiments)
    table = module.calibrate(lambda name, index: started.append((name, index)))
    assert started == [("first", 0), "ran first", ("second", 1), "ran second"]
    assert table["case"].tolist() == ["one"]


def test_sweep_and_plot_commands(tmp_path):
    sweep_file = ROOT / "scenarios" / "sweeps" / "msg_size_x_mode.yaml"
    out = tmp_path / "sweep"
    first = runner.invoke(app, ["sweep", str(sweep_file), "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert "9 runs simulated, 0 already stored" in first.stderr
    table = first.stdout.splitlines()
    assert table[0].split()[:2] == ["run", "variant"] and "message size (workload stream)" in table[0]
    assert max(len(line) for line in table) <= 120 and "2147483648" not in first.stdout  # pinned 2 GiB, in words
    assert any(line.split()[:2] == ["2", "peermem"] and "2.0GiB" in line for line in table)
    again = runner.invoke(app, ["sweep", str(sweep_file), "--out", str(out)])
    assert "0 runs simulated, 9 already stored" in again.stderr
    figure = runner.invoke(app, ["plot", str(out), "--recipe", "mode_comparison", "--by", "variant"])
    assert figure.exit_code == 0 and "mode_comparison.png" in figure.stdout
    unknown = runner.invoke(app, ["plot", str(out), "--recipe", "pie"])
    assert unknown.exit_code == 2 and "heatmap" in unknown.stderr


def test_the_readme_scenario_example_is_valid(tmp_path):
    text = (ROOT / "README.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = _write(tmp_path, example)
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0
    commands = text.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(commands) == 2 and "scenarios/quickstart.yaml" in commands[0] and "pytest" in commands[1]


def test_an_unexpected_exception_is_one_line_and_exit_70_unless_the_traceback_is_asked_for(monkeypatch, capsys):
    import sim.cli.app
    import sim.scenario.scenario_file

    def broken(path):
        raise ZeroDivisionError("simulated bug")
    monkeypatch.setattr(sim.scenario.scenario_file, "load_scenario_variants", broken)
    monkeypatch.setattr("sys.argv", ["rdmasim", "validate", "x.yaml"])
    monkeypatch.delenv("RDMASIM_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as stop:
        sim.cli.app.main()
    err = capsys.readouterr().err
    assert stop.value.code == sim.cli.app.INTERNAL_ERROR == 70
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: simulated bug" in err and "Traceback" not in err
    monkeypatch.setenv("RDMASIM_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        sim.cli.app.main()


def test_version_prints_the_package_version():
    from sim import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"rdmasim {__version__}\n"


def test_validate_checks_sweep_files_and_run_and_sweep_say_which_file_is_which():
    sweep_file = ROOT / "scenarios" / "sweeps" / "msg_size_x_mode.yaml"
    scenario_file = ROOT / "scenarios" / "quickstart.yaml"
    checked = runner.invoke(app, ["validate", str(sweep_file)])
    assert checked.exit_code == 0 and "ok (sweep msg-size-x-mode: 9 runs over variant" in checked.stdout
    as_run = runner.invoke(app, ["run", str(sweep_file)])
    assert as_run.exit_code == 2 and "kind: a sweep file, not a scenario: run it with `rdmasim sweep" in as_run.stderr
    assert len(as_run.stderr.strip().splitlines()) == 1
    as_sweep = runner.invoke(app, ["sweep", str(scenario_file)])
    assert as_sweep.exit_code == 2 and "a scenario file, not a sweep" in as_sweep.stderr
    assert len(as_sweep.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "validate", "explain", "sweep", "plot", "repro", "report", "schema",
                                     "calibrate"])
def test_help_names_each_value_by_what_it_is(command):
    """Options say what to give (DIR, NAME, COLUMN), not a Python type; --force has one spelling."""
    text = runner.invoke(app, [command, "--help"], terminal_width=120).stdout
    assert "<str>" not in text and "list[" not in text and "--no-force" not in text, text

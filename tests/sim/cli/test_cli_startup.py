"""What ``rdmasim`` imports before it answers: --version and a refused command line start without the heavy
libraries (a structural check; bench/startup.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "matplotlib", "pyarrow", "dask", "distributed", "simpy", "pydantic")
"""Libraries that cost start-up time and that neither --version nor a refusal needs."""

CHILD = """
import json, sys
import sim.cli.app
sys.argv = ["rdmasim", *json.loads(sys.argv[1])]
try:
    sim.cli.app.main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _started(argv: list[str]) -> tuple[int, set[str]]:
    """Run ``rdmasim argv`` in a fresh interpreter: its exit code and every module it imported."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], capture_output=True, text=True,
                          timeout=120)
    found = json.loads(proc.stdout.splitlines()[-1])
    return found["code"], set(found["modules"])


def _heavy(modules: set[str], names=HEAVY) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names)


@pytest.mark.parametrize("argv, code", [
    (["--version"], 0),
    (["nosuch"], 2),
    (["run", "--no-such-option", "s.yaml"], 2),
    (["perftest", "ib_nope"], 2),
    (["perftest", "ib_write_bw", "--run_infinitely"], 2),
    (["perftest", "ib_write_bw", "-q", "5000"], 2),
    (["perftest", "ib_read_bw", "-I", "64"], 2),
])
def test_version_and_refused_command_lines_start_without_heavy_libraries(argv, code):
    exit_code, modules = _started(argv)
    assert exit_code == code
    assert not _heavy(modules)
    assert "sim.scenario.schema" not in modules and "sim.engine.run" not in modules


def test_a_bad_option_value_is_refused_without_the_simulator():
    exit_code, modules = _started(["run", "--memory-budget", "5", "s.yaml"])
    assert exit_code == 2
    # typer converts every option's value with pydantic; nothing of rdmasim's heavier than the units is loaded
    assert not _heavy(modules, tuple(name for name in HEAVY if name != "pydantic"))
    assert "sim.scenario.schema" not in modules and not any(m.startswith("models") for m in modules)


@pytest.mark.parametrize("command, text", [("validate", "a: [\n"), ("validate", "name: x\n  bad indent: 1\n"),
                                           ("validate", "a: 1\na: 2\n"), ("run", "a: [\n"), ("explain", "a: [\n"),
                                           ("run", None)])
def test_a_file_that_is_not_yaml_is_refused_without_the_schema(tmp_path, command, text):
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_text(text)
    exit_code, modules = _started([command, str(path)])
    assert exit_code == 2
    # typer itself converts FILE with pydantic; the scenario schema and models/ stay unloaded
    assert not _heavy(modules, tuple(name for name in HEAVY if name != "pydantic"))
    assert "sim.scenario.schema" not in modules and not any(m.startswith("models") for m in modules)


@pytest.mark.parametrize("text", ["schema: 1\nnme: x\n",
                                  "schema: 1\nname: x\n"
                                  "nodes: [{name: a, nic: {preset: connectx7}, gpus: [{preset: h200}]}]\n"
                                  "buffers: [{name: s, on: a.gpu0, size: 8388608}]\n"])
def test_a_file_the_schema_refuses_is_refused_without_numpy_or_the_models_its_references_need(tmp_path, text):
    """An unknown key, a unitless size: the schema's one-line errors come before the references' checks, which
    import the models they check (numpy, the GPU and PCIe models)."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    exit_code, modules = _started(["validate", str(path)])
    assert exit_code == 2 and "sim.scenario.schema" in modules
    assert not _heavy(modules, ("numpy", *(name for name in HEAVY if name != "pydantic")))
    assert "sim.scenario.refs" not in modules and "models.gpu" not in modules


@pytest.mark.parametrize("buffers, events", [
    ("[{name: s, on: a.host, size: 1MiB}, {name: d, on: c.host, size: 1MiB}]", ""),
    ("[{name: s, on: a.gpu1, size: 1MiB, register: peermem}, {name: d, on: b.host, size: 1MiB}]", ""),
    ("[{name: s, on: a.host, size: 1MiB}, {name: d, on: b.host, size: 1MiB}]",
     "events: [{at: 1ms, kind: gpu-memory-pressure, on: b.gpu0, allocate: 1GiB}]\n"),
])
def test_a_name_that_does_not_resolve_is_refused_before_the_checks_that_ask_the_models(tmp_path, buffers, events):
    """A node, GPU or memory misspelt: the names are checked before the models' checks (queues, QP types, rails,
    GPU memory, the simulated time) import the models and numpy."""
    path = tmp_path / "bad.yaml"
    path.write_text("schema: 1\nname: x\nnodes: [{name: a, nic: {preset: connectx7}, gpus: [{preset: h200}]},"
                    " {name: b, nic: {preset: connectx7}}]\n"
                    f"buffers: {buffers}\n{events}"
                    "workload: [{kind: write_bw, from: s, to: d, sizes: [4KiB], iterations: 10}]\n")
    exit_code, modules = _started(["validate", str(path)])
    assert exit_code == 2 and "sim.scenario.refs" in modules
    assert not _heavy(modules, ("numpy",)) and "sim.scenario.model_checks" not in modules
    assert not any(m.startswith(("models.gpu", "models.verbs.qp", "models.verbs.peermem")) for m in modules)


def test_validating_a_scenario_builds_no_testbed_unless_it_asks_for_the_vectorized_core(tmp_path):
    """Only ``engine: fast`` needs the planner's word before a run (it builds the testbed to tell); a scenario that
    leaves the engine to ``auto`` is checked by its schema and references alone."""
    path = tmp_path / "ok.yaml"
    path.write_text("schema: 1\nname: x\n"
                    "nodes: [{name: a, nic: {preset: connectx7}}, {name: b, nic: {preset: connectx7}}]\n"
                    "buffers: [{name: s, on: a.host, size: 1MiB}, {name: d, on: b.host, size: 1MiB}]\n"
                    "workload: [{kind: write_bw, from: s, to: d, sizes: [4KiB], iterations: 10}]\n")
    exit_code, modules = _started(["validate", str(path)])
    assert exit_code == 0 and "sim.scenario.refs" in modules
    assert "sim.engine.planner.plan" not in modules and not _heavy(modules, ("pandas", "matplotlib", "pyarrow"))
    path.write_text(path.read_text() + "engine: fast\n")
    exit_code, modules = _started(["validate", str(path)])
    assert exit_code == 0 and "sim.engine.planner.plan" in modules


@pytest.mark.parametrize("kind, argv, words", [
    ("run", ["--recipe", "heatmap"], "recipe 'heatmap' needs the results of a sweep"),
    ("run", ["--recipe", "bw_vs_size", "--by", "variant"], "recipe 'bw_vs_size' takes no axes and no metric"),
    ("run", ["--recipe", "mode_comparison", "--by", "fabric.mtu"], "groups by variant, not 'fabric.mtu'"),
    ("sweep", ["--recipe", "latency_cdf"], "recipe 'latency_cdf' needs per-operation metrics"),
    ("sweep", ["--recipe", "heatmap", "--by", "variant", "--by", "nope"], "no axis 'nope' in sweep 's' (axes: "),
    ("sweep", ["--recipe", "heatmap", "--by", "variant"], "recipe 'heatmap' takes two axes"),
    ("sweep", ["--recipe", "heatmap"], "sweep 's' has 1 axes: a heatmap needs two"),
])
def test_a_plot_refusal_answers_before_the_results_are_loaded(tmp_path, kind, argv, words):
    # The results' tables are not even readable: a refusal that reached them would say so instead.
    if kind == "run":
        (tmp_path / "summary.json").write_text("not json")
        (tmp_path / "metrics.parquet").write_bytes(b"not parquet")
    else:
        (tmp_path / "sweep.json").write_text('{"name": "s", "axes": ["fabric.mtu"]}')
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(["plot", str(tmp_path), *argv])],
                          capture_output=True, text=True, timeout=120)
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["code"] == 2 and proc.stderr.startswith(f"{tmp_path}: ") and words in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    # typer itself converts RESULTS with pydantic; pandas, matplotlib and pyarrow stay unloaded
    assert not _heavy(set(found["modules"]), tuple(name for name in HEAVY if name != "pydantic"))


@pytest.mark.parametrize("out", [False, True])
def test_perftest_imports_matplotlib_only_to_write_figures(tmp_path, out):
    """Without --out, ``rdmasim perftest`` prints its report and draws nothing: it imports no plotting library
    (with --out it writes figures)."""
    argv = ["perftest", "ib_write_bw", "-s", "4096", "-n", "2000"] + (["--out", str(tmp_path / "r")] if out else [])
    exit_code, modules = _started(argv)
    assert exit_code == 0
    assert ("matplotlib" in modules) == out


@pytest.mark.parametrize("test", [["ib_write_bw", "-q", "2", "-n", "200"], ["ib_read_lat", "-n", "200"],
                                  ["ib_send_bw", "-D", "3"], ["ib_write_bw", "-a", "-n", "300", "--output=bandwidth"]])
def test_perftest_prints_its_report_from_the_summary_rows_without_pandas(test):
    """The report is made from the run's summary rows: a run that writes no results and lists no iterations never
    imports pandas or pyarrow (about a quarter of the command's start-up)."""
    exit_code, modules = _started(["perftest", *test])
    assert exit_code == 0
    assert not _heavy(modules, ("pandas", "pyarrow"))

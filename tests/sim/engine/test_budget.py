"""Runs are estimated before they start: a run that would not fit the memory budget is a located error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.engine.budget import estimate
from sim.cli.app import app
from sim.scenario.scenario_file import load_scenario_variants

ROOT = Path(__file__).resolve().parents[3]
BASE = """schema: 1
name: sized
engine: {engine}
nodes:
  - {{name: a, gpus: [{{preset: h200}}]}}
  - {{name: b}}
buffers:
  - {{name: src, on: a.host, size: {size}}}
  - {{name: dst, on: b.host, size: 64KiB}}
workload:
  - {{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: {iterations}, qps: {qps}}}
{extra}"""
runner = CliRunner()


def _variants(tmp_path: Path, engine="fast", size="64KiB", iterations=1000, qps=1, extra=""):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.format(engine=engine, size=size, iterations=iterations, qps=qps, extra=extra))
    return path, load_scenario_variants(path)[2]


@pytest.mark.parametrize("shape, key", [
    ({"engine": "event", "iterations": 10**7}, ("workload", 0, "iterations")),
    ({"engine": "event", "iterations": 1000, "qps": 1024}, ("workload", 0, "qps")),
    ({"size": "16GiB", "extra": "data: true\n"}, ("buffers", 0, "size")),
    ({"extra": "events:\n  - {at: 1us, kind: managed-job, on: a.gpu0, size: 256TiB}\n"}, ("events", 0, "size")),
])
def test_the_estimate_names_the_key_that_drives_it(tmp_path, shape, key):
    _, variants = _variants(tmp_path, **shape)
    small = estimate(_variants(tmp_path)[1])
    big = estimate(variants)
    assert big.key == key and big.bytes > small.bytes + 2**29


def test_a_run_over_the_budget_exits_2_located_and_writes_nothing(tmp_path):
    path, _ = _variants(tmp_path, engine="event", iterations=10**7)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--memory-budget", "1GiB"])
    assert result.exit_code == 2
    line = result.stderr.strip()
    lines = path.read_text().splitlines()
    row = next(n for n, text in enumerate(lines, 1) if "iterations:" in text)
    column = lines[row - 1].index("iterations: ") + len("iterations: ") + 1
    assert line.startswith(f"{path}:{row}:{column} workload[0].iterations: run needs about ")
    assert "(budget 1.0GiB)" in line and "\n" not in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("value", ["0", "lots", "-1GiB"])
def test_a_bad_memory_budget_exits_2(tmp_path, value):
    path, _ = _variants(tmp_path)
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--memory-budget", value],
                           prog_name="rdmasim")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    assert result.stderr.startswith("rdmasim run: --memory-budget: ") and result.stderr.count("\n") == 1


def test_a_streamed_run_of_a_hundred_million_writes_fits_2_gib(tmp_path):
    _, variants = _variants(tmp_path, iterations=10**8)
    assert estimate(variants).bytes < 2 * 2**30


def test_shipped_scenarios_fit_a_4_gib_budget():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        assert estimate(load_scenario_variants(path)[2]).bytes < 4 * 2**30, path.name


CHILD = """
import gc, json, sys
from sim.engine.budget import estimate
from sim.results.write import write_results
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
import tempfile, pathlib
variants = load_scenario_variants(sys.argv[1])[2]
small = load_scenario_variants(sys.argv[2])[2]
run_scenario(small[0][1])
gc.collect()
def status(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field + ":")) * 1024
with open("/proc/self/clear_refs", "w") as clear:  # the peak (VmHWM) starts again from here (Linux >= 4.0)
    clear.write("5")
before = status("VmRSS")
results = [run_scenario(v, variant=name) for name, v in variants]
with tempfile.TemporaryDirectory() as scratch:
    write_results(results, pathlib.Path(scratch) / "out")
peak = status("VmHWM") - before
print(json.dumps({"peak": peak, "estimate": estimate(variants).bytes}))
"""


@pytest.mark.parametrize("shape", [
    {"engine": "event", "iterations": 30000},
    {"engine": "fast", "iterations": 300000, "extra": "outputs: [latency_cdf, bw_over_time]\n"},
    {"engine": "event", "size": "256MiB", "iterations": 100, "extra": "data: true\n"},
], ids=["event", "fast-latency-cdf", "data"])
def test_a_run_peaks_below_its_estimate(tmp_path, shape):
    path, _ = _variants(tmp_path, **shape)
    warm = tmp_path / "warm.yaml"
    warm.write_text(BASE.format(**{"engine": "event", "size": "64KiB", "iterations": 10, "qps": 1, "extra": "",
                                   **{k: v for k, v in shape.items() if k == "engine"}}))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(warm)], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    measured = json.loads(out.stdout)
    assert 0 < measured["peak"] < measured["estimate"]


def test_a_trace_is_counted_for_every_work_request(tmp_path):
    _, variants = _variants(tmp_path, iterations=100_000)
    plain, traced = estimate(variants), estimate(variants, trace=True)
    assert traced.bytes - plain.bytes > 100_000 * 4096 and traced.key == ("workload", 0, "iterations")
    path, _ = _variants(tmp_path, iterations=100_000)
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--trace",
                                 "--memory-budget", f"{(plain.bytes + traced.bytes) // 2}B"])
    assert result.exit_code == 2 and "workload[0].iterations: run needs about" in result.stderr


def test_explain_checks_the_memory_estimate_of_its_traced_run(tmp_path):
    from typer.testing import CliRunner

    from sim.cli.app import app
    from tests.conftest import tiny_yaml

    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 1000000}"))
    refused = CliRunner().invoke(app, ["explain", str(path), "--memory-budget", "64MiB"])
    assert refused.exit_code == 2 and refused.stderr.startswith(f"{path}:11:69 ")
    assert "workload[0].iterations: run needs about" in refused.stderr and "(budget 64.0MiB)" in refused.stderr


def test_auto_is_counted_on_the_vectorized_core_when_only_that_fits(tmp_path):
    """A run ``auto`` gives the vectorized core (its up-front checks pass) is estimated on that core when the event
    engine's estimate would not fit the budget, and runs."""
    path, variants = _variants(tmp_path, engine="auto", size="4KiB", iterations=10**6)
    event, fast = estimate(variants), estimate(variants, fast=frozenset({"base"}))
    assert fast.bytes < event.bytes
    budget = f"{(fast.bytes + event.bytes) // 2}B"
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q", "--memory-budget", budget])
    assert result.exit_code == 0, result.output
    assert "vectorized core ran" in result.stderr


def test_a_run_handed_to_the_event_engine_is_checked_against_the_budget_again(tmp_path):
    """send_bw of 64 B SENDs with 4 receives posted ahead passes the vectorized core's up-front checks, which hands
    it to the event engine once solving shows RNR NAKs may occur: with a budget only the vectorized core's estimate
    fits, the event engine's run is refused then, in one line, and nothing is written."""
    path, variants = _variants(tmp_path, engine="auto", size="4KiB", iterations=10**6,
                               extra="")
    text = path.read_text().replace("kind: write_bw", "kind: send_bw").replace("qps: 1", "qps: 1, rx_depth: 4")
    text = text.replace("sizes: [4KiB]", "sizes: [64B]")
    path.write_text(text)
    variants = load_scenario_variants(path)[2]
    event, fast = estimate(variants), estimate(variants, fast=frozenset({"base"}))
    budget = f"{(fast.bytes + event.bytes) // 2}B"
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "-q", "--memory-budget", budget])
    assert result.exit_code == 1
    refused = [line for line in result.stderr.splitlines() if "run failed" in line]
    assert len(refused) == 1 and "on the event engine the run needs about" in refused[0]
    assert not out.exists()

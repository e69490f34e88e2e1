"""``rdmasim repro`` verifies before it re-runs: the manifest against itself, the files on disk against the
manifest, the re-run against both; a malformed manifest is a located error."""

import json
import shutil

import pytest
from typer.testing import CliRunner

import sim.results.repro
from sim.cli.app import app

runner = CliRunner()
SCENARIO = """\
schema: 1
name: repro-check
seed: 3
nodes: [{name: a}, {name: b}]
fabric: {mtu: 4096}
buffers:
  - {name: src, on: a.host, size: 1MiB}
  - {name: dst, on: b.host, size: 1MiB}
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [4KiB, 64KiB], iterations: 40}
variants:
  - {name: small-mtu, set: {fabric.mtu: 1024}}
  - {name: large-mtu, set: {fabric.mtu: 4096}}
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    (root / "s.yaml").write_text(SCENARIO)
    out = root / "res"
    done = runner.invoke(app, ["run", str(root / "s.yaml"), "--out", str(out), "-q", "--engine", "fast"])
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture
def copy(results, tmp_path):
    target = tmp_path / "res"
    shutil.copytree(results, target)
    return target


def _edit_manifest(directory, change):
    path = directory / "manifest.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=1) + "\n")


def _repro(path):
    result = runner.invoke(app, ["repro", str(path)])
    return result.exit_code, result.stdout, result.stderr


def test_a_results_directory_is_found_verified_and_reproduced(results):
    code, out, _ = _repro(results)
    assert code == 0, out
    assert "DIFFER" not in out and "MISSING" not in out
    files = json.loads((results / "manifest.json").read_text())["files_sha256"]
    assert {"metrics.parquet", "summary.json", "figures/bw_vs_size.png"} <= set(files)
    assert out.count("re-run identical to the manifest and the file on disk") == len(files)
    assert "on disk matches the manifest" in out and "variants match the scenario text (small-mtu, large-mtu)" in out


def test_the_engine_recorded_in_the_manifest_is_used(results, monkeypatch):
    engines = []
    real = sim.results.repro.run_scenario

    def spy(scenario, *args, **kwargs):
        engines.append(scenario.engine)
        return real(scenario, *args, **kwargs)
    monkeypatch.setattr(sim.results.repro, "run_scenario", spy)
    code, out, _ = _repro(results / "manifest.json")
    assert code == 0 and engines == ["fast", "fast"] and "(engine fast)" in out


@pytest.mark.parametrize("name", ["metrics.parquet", "summary.json"])
def test_a_deleted_output_is_reported_missing(copy, name):
    (copy / name).unlink()
    code, out, _ = _repro(copy)
    assert code == 1 and f"{name}: MISSING on disk" in out


@pytest.mark.parametrize("name", ["metrics.parquet", "summary.json"])
def test_a_corrupted_output_differs_from_manifest_and_re_run(copy, name):
    with open(copy / name, "ab") as f:
        f.write(b"\\0")
    code, out, _ = _repro(copy)
    assert code == 1 and f"{name}: on disk DIFFERS from the manifest" in out
    assert f"{name}: re-run DIFFERENT from the manifest and the file on disk" in out


CHANGES = {
    "scenario text": (lambda m: m.update(scenario_text=m["scenario_text"].replace("iterations: 40", "iterations: 41")),
                      ["scenario text DIFFERS from scenario_sha256", "resolved scenario DIFFERS from the scenario "
                       "text at workload[0].iterations", "metrics.parquet: re-run DIFFERENT"]),
    "its hash": (lambda m: m.update(scenario_sha256="a" * 64), ["scenario text DIFFERS from scenario_sha256"]),
    "the resolved block": (lambda m: m["scenario"].update(seed=4), ["resolved scenario DIFFERS from the scenario "
                                                                   "text at seed"]),
    "a variant dropped": (lambda m: m["variants"].pop("large-mtu"),
                          ["variants DIFFER from the scenario text: recorded ['small-mtu'], text gives",
                           "variant 'large-mtu': MISSING from the manifest's parameters"]),
    "a variant's parameters": (lambda m: m["variants"]["small-mtu"]["fabric"].update(mtu=4096),
                               ["variant 'small-mtu': re-run parameters DIFFERENT at fabric.mtu"]),
    "an output hash": (lambda m: m["outputs_sha256"].update({"summary.json": "0" * 64}),
                       ["summary.json: on disk DIFFERS from the manifest",
                        "summary.json: re-run DIFFERENT from the manifest"]),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_each_inconsistency_of_the_manifest_is_reported(copy, what):
    change, expected = CHANGES[what]
    _edit_manifest(copy, change)
    code, out, _ = _repro(copy)
    assert code == 1
    for line in expected:
        assert line in out, out


MALFORMED = {
    "seed": (lambda m: m.update(seed="abc"), "seed: expected an integer, not a string"),
    "negative seed": (lambda m: m.update(seed=-1), "seed: -1 is below the minimum of 0"),
    "versions": (lambda m: m.update(versions=[]), "versions: expected a mapping, not a list"),
    "hash": (lambda m: m["outputs_sha256"].update({"summary.json": "xyz"}), "outputs_sha256.summary.json: String "
                                                                             "should match pattern"),
    "text": (lambda m: m.pop("scenario_text"), "missing required key 'scenario_text'"),
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_manifest_is_a_located_error(copy, what):
    change, reason = MALFORMED[what]
    _edit_manifest(copy, change)
    code, out, err = _repro(copy)
    path = copy / "manifest.json"
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"{path}:") and reason in lines[0]
    line = int(lines[0][len(str(path)) + 1:].split(":")[0])
    key = what if what in ("seed", "versions") else None
    if key:  # the line named holds the key
        assert f'"{key}"' in path.read_text().splitlines()[line - 1]


def test_a_truncated_manifest_is_a_located_error(copy):
    path = copy / "manifest.json"
    path.write_text(path.read_text()[:200])
    code, _, err = _repro(copy)
    assert code == 2 and err.startswith(f"{path}:") and len(err.strip().splitlines()) == 1


def test_a_directory_without_a_manifest_is_a_clear_error(tmp_path):
    code, _, err = _repro(tmp_path)
    assert code == 2 and err.strip() == (f"{tmp_path}: has no manifest.json; name a results directory of "
                                         "`rdmasim run` or its manifest.json")

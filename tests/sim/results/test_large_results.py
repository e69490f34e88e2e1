"""What rdmasim wrote, rdmasim reads back: the results of a scenario of up to 1024 nodes (the README's largest),
whose manifest passes the YAML reader's 1 MiB and 100,000-value limits for scenario files, reproduce and report;
a manifest that is not one stays refused (too large, not JSON, nested past the JSON reader, a field of the wrong
type named by its key)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.results.repro import MANIFEST_LIMIT, read_manifest
from sim.core import ConfigError
from sim.scenario.yaml_reader import DEFAULT_SIZE_LIMIT, MAX_NODES

runner = CliRunner()


def many_nodes(count: int) -> str:
    nodes = "".join(f"  - {{name: n{i}}}\n" for i in range(count))
    return (f"schema: 1\nname: nodes{count}\nseed: 1\nnodes:\n{nodes}buffers:\n"
            "  - {name: src, on: n0.host, size: 64KiB}\n  - {name: dst, on: n1.host, size: 64KiB}\n"
            "workload:\n  - {kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10}\n")


def values(node) -> int:
    """Values (keys included) as the YAML reader counts them."""
    if isinstance(node, dict):
        return 1 + sum(1 + values(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(values(v) for v in node)
    return 1


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    (root / "s.yaml").write_text(many_nodes(1024))
    done = runner.invoke(app, ["run", str(root / "s.yaml"), "--out", str(root / "res"), "-q"])
    assert done.exit_code == 0, done.output
    return root / "res"


def test_the_manifest_of_1024_nodes_is_past_the_scenario_limits(large):
    raw = (large / "manifest.json").read_bytes()
    assert len(raw) > DEFAULT_SIZE_LIMIT and values(json.loads(raw)) > MAX_NODES


def test_large_genuine_results_reproduce_and_report(large, tmp_path):
    directory = tmp_path / "res"
    shutil.copytree(large, directory)
    result = runner.invoke(app, ["repro", str(directory)])
    assert result.exit_code == 0, result.output
    assert "DIFFER" not in result.stdout and "MISSING" not in result.stdout
    result = runner.invoke(app, ["report", str(directory)])
    assert result.exit_code == 0, result.output
    assert (directory / "report.html").stat().st_size > 0
    again = runner.invoke(app, ["repro", str(directory)])  # the page written since is noted, not a failure
    assert again.exit_code == 0 and "note: report.html is not a file of the run" in again.stdout


def test_a_large_manifest_with_a_wrong_field_is_refused_by_key(large, tmp_path):
    record = json.loads((large / "manifest.json").read_text())
    record["seed"] = "seven"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(record, indent=1))
    with pytest.raises(ConfigError) as info:
        read_manifest(path)
    assert info.value.key == "seed"


@pytest.mark.parametrize("text, says", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than a JSON reader follows"),
    ("{rdmasim_manifest: 1", "not JSON"),
    ('{"no": 1}', "not an rdmasim manifest"),
])
def test_bad_manifests_stay_refused(tmp_path, text, says):
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says):
        read_manifest(path)


def test_a_manifest_past_its_limit_is_refused_unread(tmp_path):
    path = tmp_path / "manifest.json"
    with open(path, "wb") as sparse:
        sparse.truncate(MANIFEST_LIMIT + 1)
    with pytest.raises(ConfigError, match="above the 64MiB limit"):
        read_manifest(path)
    os.remove(path)

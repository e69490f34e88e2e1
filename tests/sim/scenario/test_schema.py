"""`rdmasim schema` is a JSON Schema that a standard validator (python-jsonschema, as editors' YAML language
servers use) accepts every shipped scenario and sweep file with, and refuses what rdmasim refuses."""

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from sim.cli.app import app

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SWEEPS = sorted((ROOT / "scenarios" / "sweeps").glob("*.yaml"))


def _validator(*options: str) -> jsonschema.Draft202012Validator:
    printed = CliRunner().invoke(app, ["schema", *options])
    assert printed.exit_code == 0
    schema = json.loads(printed.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _load(path: Path):
    return YAML(typ="safe").load(path.read_text())


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_validates_against_the_schema(path):
    assert [e.message for e in _validator().iter_errors(_load(path))] == []


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_shipped_sweep_validates_against_the_sweep_schema(path):
    assert [e.message for e in _validator("--sweep").iter_errors(_load(path))] == []


@pytest.mark.parametrize("change, where", [
    (lambda d: d["fabric"].update(latency=300), ["fabric", "latency"]),          # a bare number: no unit
    (lambda d: d["buffers"][0].update(size="4 kilobytes"), ["buffers", 0, "size"]),
    (lambda d: d["fabric"].update(rate="400Gbit"), ["fabric", "rate"]),
    (lambda d: d["nodes"][0].update(nic_preset="connectx7"), ["nodes", 0]),        # an unknown key
    (lambda d: d["workload"][0].update(iterations=True), ["workload", 0, "iterations"]),
])
def test_the_schema_refuses_what_validate_refuses(change, where, tmp_path):
    data = _load(ROOT / "scenarios" / "quickstart.yaml")
    change(data)
    errors = list(_validator().iter_errors(data))
    assert errors and any(list(e.absolute_path)[:len(where)] == where for e in errors)
    path = tmp_path / "s.yaml"
    YAML().dump(data, path)
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 2


QUANTITIES = ["4KiB", "64KB", "4096B", " 2 MiB ", "1.5GiB", "4kib", "4KiBB", "4 KiB", "4096", "-4KiB", "1e3B",
              "600ns", "1.5us", "2µs", "3 s", "600 NS", "600", "1e7s", "400Gb/s", "55GB/s", "1Gbps", "8GT/s",
              "400Gbit", "1e400Gb/s", "0.5Mib/s", "", "ns", "1.e3ms"]


@pytest.mark.parametrize("text", QUANTITIES)
def test_the_schemas_unit_patterns_accept_exactly_what_the_parsers_read(text):
    import re

    from sim.core import units

    for pattern, parse in ((units.SIZE_PATTERN, units.parse_size), (units.TIME_PATTERN, units.parse_time),
                           (units.RATE_PATTERN, units.parse_rate)):
        try:
            parse(text)
            readable = True
        except units.BoundError:  # well formed, out of bounds: the schema checks the form only
            readable = True
        except units.UnitError:
            readable = False
        assert bool(re.fullmatch(pattern, text)) == readable, (pattern, text)

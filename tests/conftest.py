"""Shared fixtures: small testbeds built from scenario dictionaries."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sim.compare import comparison_table
from sim.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "schema": 1,
    "name": "t",
    "seed": 3,
    "nodes": [{"name": "a"}, {"name": "b"}],
    "buffers": [{"name": "src", "on": "a.host", "size": "8MiB"}, {"name": "dst", "on": "b.host", "size": "8MiB"}],
    "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 50}],
}


def scenario_dict(**changes) -> dict:
    """A copy of the base scenario with top-level keys replaced."""
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


@pytest.fixture
def make_scenario():
    """Build a validated Scenario from keyword overrides of the base scenario."""
    return lambda **changes: Scenario.model_validate(scenario_dict(**changes))


def run_shipped_variants(name: str):
    """Every variant of ``scenarios/<name>`` run: the results by variant name and their comparison table."""
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / name)
    results = [run_scenario(v, variant=variant) for variant, v in variants]
    return {r.variant: r for r in results}, comparison_table(results).set_index("variant")

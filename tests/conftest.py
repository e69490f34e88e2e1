"""Shared fixtures: small testbeds built from scenario dictionaries."""

from __future__ import annotations

import copy

import pytest

from sim.scenario.schema import Scenario

BASE = {
    "schema": 1,
    "name": "t",
    "seed": 3,
    "nodes": [{"name": "a"}, {"name": "b"}],
    "buffers": [{"name": "src", "on": "a.host", "size": "8MiB"}, {"name": "dst", "on": "b.host", "size": "8MiB"}],
    "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": [4096], "iterations": 50}],
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

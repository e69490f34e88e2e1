"""Shared fixtures: small testbeds built from scenario dictionaries."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sim.inspect.compare import comparison_table
from sim.cli.perftest import run_perftest
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.properties import register_profiles

register_profiles()

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "schema": 1,
    "name": "t",
    "seed": 3,
    "nodes": [{"name": "a"}, {"name": "b"}],
    "buffers": [{"name": "src", "on": "a.host", "size": "8MiB"}, {"name": "dst", "on": "b.host", "size": "8MiB"}],
    "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 50}],
}


def nic_for(register: str) -> dict:
    """The NIC keys of a node whose GPU buffer is registered as ``register``: a ConnectX-8 for ``dmabuf-pinned``
    (mlx5's pinned dma-buf MRs go through data direct, a ConnectX-8 function: ``mlx5_data_direct_pci_table``), the
    default NIC otherwise."""
    return {"preset": "connectx8"} if register == "dmabuf-pinned" else {}


def tiny_yaml(*workload: str, name: str = "tiny", seed: int = 5, tail: str = "") -> str:
    """The text of a two-node scenario file: nodes a and b, 64 KiB pinned host buffers src (on a) and dst (on
    b), the ``workload`` items (YAML flow mappings) and any further top-level ``tail`` text."""
    items = "".join(f"  - {item}\n" for item in workload)
    return (f"schema: 1\nname: {name}\nseed: {seed}\nnodes:\n  - {{name: a}}\n  - {{name: b}}\nbuffers:\n"
            "  - {name: src, on: a.host, size: 64KiB}\n  - {name: dst, on: b.host, size: 64KiB}\n"
            f"workload:\n{items}{tail}")


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


def perftest_streams(argv: list[str]) -> tuple[int, str, str]:
    """``rdmasim perftest ARGV``: the exit code, the report (standard output) and the lines written to stderr."""
    lines: list[str] = []
    code, report = run_perftest(argv, notice=lines.append)
    return code, report, "\n".join(lines)

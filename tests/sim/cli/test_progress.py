"""The progress display: what it counts for a run whose operations are known before it runs, and for a run for a
duration, whose count only the run tells."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sim.cli.progress import progress_bar
from sim.engine.run import run_scenario, total_operations
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict

WORK = {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB"], "iterations": 300}


def _shown(total: int | None, steps: list[int]) -> str:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with progress_bar(console, "w", total) as advance:
        for n in steps:
            advance(n)
    return screen.getvalue()


def test_a_bar_of_known_operations_counts_them_against_their_total_and_one_of_a_duration_counts_them_alone():
    assert "600/600 ops" in _shown(600, [250, 350])
    shown = _shown(None, [250, 350])
    assert "600 ops" in shown and "/" not in shown.split("600 ops")[0].rsplit(" ", 1)[-1]


@pytest.mark.parametrize("engine", ["event", "fast"])
def test_a_run_for_a_duration_tells_the_operations_it_ran_and_nothing_more(engine):
    timed = {k: v for k, v in WORK.items() if k != "iterations"} | {"duration": "30us"}
    scenario = Scenario.model_validate(scenario_dict(engine=engine, workload=[timed]))
    told = []
    result = run_scenario(scenario, progress=told.append, notice=lambda line: None)
    assert total_operations(scenario) is None
    assert sum(told) == len(result.operations) != 600 and all(n >= 0 for n in told)


def test_a_run_of_iterations_is_counted_before_it_runs():
    scenario = Scenario.model_validate(scenario_dict(engine="event", workload=[WORK]))
    told = []
    result = run_scenario(scenario, progress=told.append, notice=lambda line: None)
    assert total_operations(scenario) == sum(told) == len(result.operations) == 600

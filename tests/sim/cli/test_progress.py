"""The progress display: what it counts for a run whose operations are known before it runs, and for a run for a
duration, whose count only the run tells."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sim.cli.progress import progress_bar
from sim.engine.harness import total_duration_ps
from sim.engine.run import progress_totals, run_scenario, total_operations
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


def test_a_bar_of_a_run_for_a_duration_follows_the_simulated_time_with_an_estimate_and_counts_the_operations():
    screen = io.StringIO()
    with progress_bar(Console(file=screen, force_terminal=True, width=120), "w", None, simulated_ps=2 * 10**12) as bar:
        bar(250)
        bar.simulated(10**12)
        bar(350)
    shown = screen.getvalue()
    assert "1/2 s simulated" in shown and "600 ops" in shown and "-:--:--" in shown.split("0/2 s simulated")[-1]


@pytest.mark.parametrize("engine", ["event", "fast"])
def test_a_run_for_a_duration_tells_each_cases_duration_once_on_both_engines(engine):
    """Two workloads for a duration, one on two QPs, at two sizes each: the simulated time told adds up to each
    case's duration, however the engine solves it (the core by each stream's pieces)."""
    timed = {k: v for k, v in WORK.items() if k != "iterations"} | {"duration": "30us", "qps": 2}
    read = {"kind": "read_bw", "from": "dst", "to": "src", "sizes": ["4KiB"], "duration": "20us"}
    scenario = Scenario.model_validate(scenario_dict(engine=engine, workload=[timed, read]))
    told = []
    run_scenario(scenario, simulated=told.append, notice=lambda line: None)
    assert progress_totals([scenario]) == (None, total_duration_ps(scenario)) and total_duration_ps(scenario) == 80e6
    assert sum(told) == total_duration_ps(scenario) and all(t > 0 for t in told) and len(told) >= 3


@pytest.mark.parametrize("engine, work, running", [
    ("auto", WORK, ["vectorized core"]),
    ("event", WORK, ["event engine"]),
    # auto hands a bidirectional send_bw to the event engine: the bar says so as the event engine starts
    ("auto", {"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 50,
              "bidirectional": True}, ["vectorized core", "event engine"]),
])
def test_a_run_tells_which_engine_simulates_as_it_starts_and_the_bar_names_it(engine, work, running):
    scenario = Scenario.model_validate(scenario_dict(engine=engine, workload=[work]))
    told = []
    result = run_scenario(scenario, running=told.append, notice=lambda line: None)
    assert told == running and result.engine == ("event" if running[-1] == "event engine" else "fast")
    screen = io.StringIO()
    with progress_bar(Console(file=screen, force_terminal=True, width=120), "w", 10) as bar:
        for name in told:
            bar.running(name)
        bar(10)
    assert f"w ({running[-1]})" in screen.getvalue()


def test_a_run_solved_again_says_so_with_each_solve():
    """A link flap under a WRITE stream: the vectorized core solves the run again until the frames it lost are
    settled, and the bar says which solve it is on, since those operations were counted once already."""
    data = scenario_dict(workload=[{**WORK, "sizes": ["64KiB"], "iterations": 2000, "tx_depth": 128,
                                    "qp_timeout": 14}],
                         events=[{"at": "200us", "kind": "link-flap", "node": "b", "duration": "50us",
                                  "frames": "lost"}])
    told = []
    result = run_scenario(Scenario.model_validate(data), running=told.append, notice=lambda line: None)
    assert result.engine == "fast" and result.counters["frames_lost"] > 0 and len(told) > 2
    assert told == ["vectorized core"] + [f"vectorized core, solve {n}" for n in range(2, len(told) + 1)]


def test_perftest_notices_print_on_their_own_line_above_the_bar(monkeypatch):
    """perftest's notices go through the console the bar is drawn on, which clears the bar's line before each
    (a line written past it would follow the bar's last drawing on the same line)."""
    import functools

    from typer.testing import CliRunner

    from sim.cli import app as cli, progress

    screen = io.StringIO()
    console = functools.cache(lambda: Console(file=screen, force_terminal=True, width=120))
    console()
    monkeypatch.setattr(progress, "stderr", console)
    monkeypatch.setattr(cli, "stderr", console)
    outcome = CliRunner().invoke(cli.app, ["perftest", "ib_write_bw", "-s", "4096", "-n", "2000"])
    assert outcome.exit_code == 0, outcome.output
    shown = screen.getvalue()
    notice = shown.index("ib_write_bw (base): vectorized core ran ib_write_bw")
    assert "ops" in shown[:notice] and shown[:notice].endswith(("\n", "\x1b[2K"))

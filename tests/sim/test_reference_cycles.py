"""A simulated work request is freed by reference counting once it completes: what a run leaves to the cyclic
garbage collector does not grow with the work requests it simulates (a cycle per work request made the collector
a fifth of an event-engine run)."""

import gc

from sim.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


def _left_to_the_collector(kind: str, iterations: int) -> int:
    work = {"kind": kind, "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": iterations}
    scenario = Scenario.model_validate(scenario_dict(workload=[work], engine="event"))
    gc.collect()
    gc.disable()
    try:
        run_scenario(scenario)
        return gc.collect()
    finally:
        gc.enable()


def test_the_objects_a_run_leaves_in_cycles_do_not_grow_with_its_work_requests():
    for kind in ("write_bw", "read_bw", "send_bw"):
        assert _left_to_the_collector(kind, 4000) - _left_to_the_collector(kind, 1000) < 100, kind

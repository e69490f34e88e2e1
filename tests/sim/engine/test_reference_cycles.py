"""A simulated work request is freed by reference counting once it completes: what a run leaves to the cyclic
garbage collector does not grow with the work requests it simulates (a cycle per work request made the collector
a fifth of an event-engine run)."""

import gc

from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


def _left_to_the_collector(kind: str, iterations: int, **changes) -> tuple[int, dict]:
    """What the cyclic collector finds after a run of ``iterations`` 4 KiB work requests, and the run's counters."""
    work = {"kind": kind, "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": iterations}
    scenario = Scenario.model_validate(scenario_dict(workload=[work], engine="event", **changes))
    gc.collect()
    gc.disable()
    try:
        counters = run_scenario(scenario).counters
        return gc.collect(), counters
    finally:
        gc.enable()


def test_the_objects_a_run_leaves_in_cycles_do_not_grow_with_its_work_requests():
    for kind in ("write_bw", "read_bw", "send_bw"):
        assert _left_to_the_collector(kind, 4000)[0] - _left_to_the_collector(kind, 1000)[0] < 100, kind


def test_work_requests_held_at_their_ack_timers_are_freed_too():
    """A link flap loses frames: their requests wait at their ACK timers (held checks, some asked again sooner by
    a NAK) and go again; once answered, neither the operation nor its run refers to the chain it waited on."""
    flap = {"at": "20us", "kind": "link-flap", "node": "b", "duration": "50us"}
    left, counters = _left_to_the_collector("write_bw", 3000, events=[flap])
    calm, _ = _left_to_the_collector("write_bw", 3000)
    assert counters["frames_lost"] > 10 and left - calm < counters["frames_lost"]

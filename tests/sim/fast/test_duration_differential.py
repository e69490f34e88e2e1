"""Workloads that run for a duration (perftest -D) on the vectorized core against the event engine: each size's
stream is solved block by block until its posting stops, and ends at the very operation the event engine's loop
stops at (:func:`models.verbs.workloads.still_posting`); every row, summary and counter identical."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.planner.plan import outside_domain
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.properties import examples
from tests.sim.fast.test_differential import ATOMIC_ACCESS, falls_back, pin_vs_dmabuf, same_runs, two_nodes


def timed(kind: str, duration: str, sizes=("64B", "4KiB"), **extra) -> dict:
    return {"kind": kind, "from": "src", "to": "dst", "sizes": list(sizes), "duration": duration, **extra}


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx5-gen3x8-100G-roce"])
@pytest.mark.parametrize("kind, extra", [("write_bw", {"tx_depth": 32}), ("read_bw", {"tx_depth": 16}),
                                         ("send_bw", {"tx_depth": 64}), ("write_lat", {}), ("read_lat", {}),
                                         ("send_lat", {})])
def test_a_duration_ends_where_the_event_engine_stops_posting(preset, kind, extra):
    work = [timed(kind, "30us", **extra), timed(kind, "7us", ("1MiB", "2B"), **extra)]
    event, fast = same_runs(scenario_dict(seed=5, workload=work, **two_nodes(preset)))
    posted = fast.operations.groupby(["workload", "bytes"], sort=False).size().tolist()
    assert min(posted) >= 1 and len(set(posted)) > 1  # as many operations as fit, different per size


def test_atomics_for_a_duration_equal_event_engine():
    work = [timed("atomic_bw", "20us", ("8B",), tx_depth=4), timed("atomic_lat", "10us", ("8B",))]
    buffers = [{"name": "src", "on": "a.host", "size": "64KiB", "access": ATOMIC_ACCESS},
               {"name": "dst", "on": "b.host", "size": "64KiB", "access": ATOMIC_ACCESS}]
    same_runs(scenario_dict(seed=5, workload=work, buffers=buffers, **two_nodes("cx7-gen5-400G", atomic="20ns")))


def test_several_qps_each_stop_posting_after_the_duration():
    """perftest -q: the QPs of a size start together and each posts until the duration has passed after that."""
    work = [timed("write_bw", "25us", ("256B", "64KiB"), tx_depth=16, qps=3),
            timed("read_bw", "15us", ("4KiB",), tx_depth=8, qps=2)]
    same_runs(scenario_dict(seed=2, workload=work, **two_nodes("cx6-gen4-200G-mps512")))


def test_an_operation_posted_at_the_very_end_of_the_duration_is_not_posted():
    """The loops post while the clock is less than the duration after their start: a duration that ends at a
    post of the stream leaves that operation out, on both engines."""
    data = scenario_dict(seed=8, workload=[timed("write_bw", "50us", ("4KiB",), tx_depth=8)],
                         **two_nodes("cx7-gen5-400G"))
    posted = run_scenario(Scenario.model_validate({**data, "engine": "fast"})).operations["posted_ps"]
    at = int(posted.iloc[100] - posted.iloc[0])
    assert posted.iloc[99] < posted.iloc[100]
    data["workload"][0]["duration"] = f"{at}ps"
    event, fast = same_runs(data)
    assert len(fast.operations) == 100


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat"]),
       sizes=st.lists(st.sampled_from([2, 64, 700, 4096, 65536]), min_size=1, max_size=3, unique=True),
       depth=st.sampled_from([1, 2, 16, 128]), duration_ns=st.integers(1, 40_000), at_post=st.booleans(),
       seed=st.integers(0, 50))
def test_random_durations_equal_event_engine(kind, sizes, depth, duration_ns, at_post, seed):
    """Random durations, message sizes and depths; half of them end at the very picosecond of a post."""
    work = timed(kind, f"{duration_ns}ns", [f"{s}B" for s in sizes], tx_depth=depth)
    data = scenario_dict(seed=seed, workload=[work], **two_nodes("cx7-gen5-400G"))
    if at_post:
        posted = run_scenario(Scenario.model_validate({**data, "engine": "fast"})).operations["posted_ps"]
        if len(posted) > 1:
            work["duration"] = f"{int(posted.iloc[len(posted) // 2] - posted.iloc[0])}ps"
    if work["duration"] != "0ps":
        same_runs(data)


def test_posting_rules_the_vectorized_core_does_not_follow_still_run_on_the_event_engine():
    for kind, extra, says in (("write_bw", {"post_list": 4}, "posts lists"),
                              ("read_bw", {"cq_mod": 8}, "moderates completions")):
        data = scenario_dict(workload=[timed(kind, "5us", ("4KiB",), **extra)])
        falls_back(data, says, says)
    both = scenario_dict(workload=[timed("send_bw", "5us", ("4KiB",), bidirectional=True)])
    assert "bidirectional send_bw" in outside_domain(Scenario.model_validate(both))


def test_a_duration_whose_source_buffer_moves_runs_on_the_event_engine():
    data = pin_vs_dmabuf([{"at": "200us", "kind": "eviction-storm", "on": "a.gpu0", "count": 1, "every": "1ms"}],
                         1, "64KiB")
    data["workload"][0] = timed("write_bw", "1ms", ("64KiB",), tx_depth=16)
    falls_back(data, "which runs for a duration, reads from moves", "which runs for a duration, reads from moves")

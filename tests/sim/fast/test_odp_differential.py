"""ODP page faults of a stream's own accesses on the vectorized core against the event engine: the first touch of
each page (mlx5's ``pagefault_mr`` through the mmu interval notifier's table), the accesses that wait for a handler
already running, prefetches (``ibv_advise_mr``), implicit ODP's child MRs, and the re-fault after the kernel
migrates the pages (``mlx5_ib_invalidate_range``): every time, row and counter identical."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.properties import examples
from tests.sim.fast.test_differential import ATOMIC_ACCESS, falls_back, same_runs


def odp_stream(kind: str = "write_bw", sizes=("64KiB",), iterations: int = 300, depth: int = 16, qps: int = 1,
               events=(), prefaulted: bool = False, **source) -> dict:
    """``scenarios/pinned_vs_odp.yaml``'s shape: an ODP source on node a (a READ's responses land in it), a
    pinned buffer on node b."""
    nodes = [{"name": "a", "nic": {"preset": "connectx7"}, "host": {"prefaulted": prefaulted}},
             {"name": "b", "nic": {"preset": "connectx7"}}]
    access = {"access": ATOMIC_ACCESS} if kind.startswith("atomic") else {}
    buffers = [{"name": "src", "on": "a.host", "size": "64MiB", "register": "odp", **access, **source},
               {"name": "dst", "on": "b.host", "size": "64MiB", **access}]
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": list(sizes), "iterations": iterations,
             "tx_depth": depth, "qps": qps}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=list(events),
                         fabric={"rate": "400Gb/s", "latency": "300ns"})


MIGRATION = {"at": "2ms", "kind": "host-page-migration", "buffer": "src"}


@pytest.mark.parametrize("kind", ["write_bw", "read_bw", "send_bw", "atomic_bw", "read_lat"])
def test_first_touch_faults_of_each_workload_kind_equal_event_engine(kind):
    """Each size's first access faults in the pages the earlier sizes left unmapped (64 KiB at a time); the
    accesses behind it wait for the handler."""
    sizes = ["8B"] if kind.startswith("atomic") else ["4KiB", "64KiB", "256KiB"]
    event, fast = same_runs(odp_stream(kind, sizes=sizes, iterations=200))
    assert fast.engine == "fast"
    faults = 1 if kind.startswith("atomic") else 2  # 4 KiB and 64 KiB share the first 64 KiB span
    assert fast.counters["refaults"] == faults


@pytest.mark.parametrize("source, refaults", [({}, 2), ({"advise": {"advice": "prefetch_write", "flush": True}}, 1),
                                              ({"advise": {"advice": "prefetch_no_fault", "flush": True}}, 2),
                                              ({"implicit": True}, 2)])
def test_a_migration_re_faults_on_the_next_access_on_both_engines(source, refaults):
    """The kernel migrates the source's pages mid-run: the notifier zaps the NIC's translation and the next access
    faults again (a prefetch removes only the first fault; implicit ODP re-creates its child MR)."""
    event, fast = same_runs(odp_stream(iterations=3000, events=[MIGRATION], **source))
    assert fast.engine == "fast" and fast.counters["invalidations"] == 1
    assert fast.counters["refaults"] == refaults


def test_several_qps_on_one_odp_buffer_share_its_faults_on_both_engines():
    """Two QPs read the same pages: the first to arrive faults, the other waits for that handler."""
    event, fast = same_runs(odp_stream(qps=2, sizes=["64KiB", "1MiB"], iterations=200))
    assert fast.engine == "fast" and fast.counters["refaults"] == 2


def test_a_fault_the_core_cannot_follow_is_left_to_the_event_engine():
    """A migration while the buffer's first fault is still being handled: the held access is asked again when
    the handler is done and faults once more, which only the event engine decides."""
    data = odp_stream(iterations=200, events=[{"at": "5us", "kind": "host-page-migration", "buffer": "src"}])
    says = "buffer 'src' was invalidated at 6.12726ms while one of its page faults was handled"
    falls_back(data, says, says)


def test_a_responders_odp_buffer_stays_on_the_event_engine():
    """A fault at the responder answers an RNR NAK (a retry timer): the event engine simulates it."""
    data = odp_stream()
    data["buffers"][0]["register"], data["buffers"][1]["register"] = "pinned", "odp"
    falls_back(data, "at its check 'responder' the model decides at run time", "ODP maps a page")


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["write_bw", "read_bw", "send_bw"]),
       sizes=st.lists(st.sampled_from(["2KiB", "64KiB", "100KiB", "512KiB"]), min_size=1, max_size=3, unique=True),
       depth=st.integers(1, 32), qps=st.integers(1, 2), prefaulted=st.booleans(),
       source=st.sampled_from([{}, {"implicit": True}, {"advise": {"advice": "prefetch_write", "flush": False}}]),
       migrations=st.lists(st.integers(1, 400), max_size=2, unique=True))
def test_random_odp_streams_equal_event_engine(kind, sizes, depth, qps, prefaulted, source, migrations):
    """Random mixes of first touches, sizes, prefetches and migrations: the vectorized core follows them with the
    event engine's every time, or hands the run to it (then the two are the same run)."""
    events = [{"at": f"{at}us", "kind": "host-page-migration", "buffer": "src"} for at in migrations]
    data = odp_stream(kind, sorted(sizes, key=lambda s: int(s[:-3])), 150, depth, qps, events, prefaulted, **source)
    event, auto = same_runs_auto(data)
    assert auto.counters == event.counters


def same_runs_auto(data: dict):
    """The run under ``engine: auto`` and under the event engine, every table identical."""
    import pandas as pd
    runs = [run_scenario(Scenario.model_validate({**data, "engine": engine})) for engine in ("event", "auto")]
    for table in ("operations", "summary", "events", "registrations"):
        pd.testing.assert_frame_equal(getattr(runs[1], table), getattr(runs[0], table))
    return runs


def test_a_fault_the_devices_odp_capabilities_refuse_is_left_to_the_event_engine():
    """A ConnectX-6 reports no ATOMIC in its RC ODP capabilities (mlx5 ``internal_fill_odp_caps``): the atomic's
    response, landing in a page its ODP MR does not hold yet, takes no fault and completes in error, which the event
    engine simulates."""
    data = odp_stream("atomic_bw", sizes=["8B"], iterations=50)
    for node in data["nodes"]:
        node["nic"]["preset"] = "connectx6"
    data["fabric"]["rate"] = "200Gb/s"
    falls_back(data, r"completes in error \(IBV_WC_LOC_PROT_ERR\)", "completes in error (IBV_WC_LOC_PROT_ERR)")


def test_a_duration_run_whose_source_faults_is_left_to_the_event_engine():
    """perftest -D over an ODP source that faults: where its posting stops would depend on the re-solve after the
    fault, which the vectorized core does not follow for a duration; the event engine runs it."""
    data = odp_stream()
    del data["workload"][0]["iterations"]
    data["workload"][0]["duration"] = "200us"
    says = "reads from moves or takes a page fault"
    falls_back(data, says, says)

"""Translation caches (the NIC's MPT/MTT caches, the IOMMU's IO-TLB) on the vectorized core: each check's first
access and the later ones asked of the testbed's caches before the solve (sim.engine.planner.translations), the stages run
as a detour after the check on both engines. Every table and counter is the event engine's: a request that gets to
the transmit port before the one ahead of it waits for it there (a send queue's turn), and so does a response at
the responder (it takes a QP's requests up in order). Where the core cannot follow (a cache reached by two checks at
once, READ responses that land out of order), auto runs the event engine and fast refuses."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.engine.run import run_scenario
from sim.engine.planner.domain import OutsideDomain
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import ATOMIC_ACCESS, same_runs

CACHES = {
    "mtt": [{"name": "a", "nic": {"translation_cache": True}}, {"name": "b", "nic": {"translation_cache": True}}],
    "iotlb": [{"name": "a", "iommu": "vtd"}, {"name": "b", "iommu": "vtd"}],
}


def _workload(kind: str, sizes: list[str], iterations: int = 300) -> list[dict]:
    return [{"kind": kind, "from": "src", "to": "dst", "sizes": sizes, "iterations": iterations}]


@pytest.mark.parametrize("caches", CACHES)
@pytest.mark.parametrize("kind, sizes", [("read_lat", ["4KiB", "1MiB"]), ("atomic_lat", ["8B"])])
def test_latency_streams_through_translation_caches_equal_the_event_engine(caches, kind, sizes):
    """One operation at a time: the first misses at both ends (the MR context and MTT lines read over PCIe, or
    the IO-TLB's page walks), the later ones hit; both engines give the same operations to the picosecond."""
    buffers = [{**b, "access": ATOMIC_ACCESS} for b in scenario_dict()["buffers"]]
    fast = same_runs(scenario_dict(nodes=CACHES[caches], workload=_workload(kind, sizes), buffers=buffers))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)
    latency = fast.operations["latency_ps"].iloc[:300]  # the first size's
    assert latency.iloc[0] > latency.iloc[1:].max()  # the cold first access costs its misses (a test of the scenario, not of the core)


def test_a_responder_side_translation_cache_under_a_write_stream_equals_the_event_engine():
    """write_bw into a responder whose NIC caches translations: its first WRITE's detour delays only that
    WRITE's landing, and the core's merge of the responder's PCIe link orders the rest as the event engine does."""
    nodes = [{"name": "a"}, {"name": "b", "nic": {"translation_cache": True}}]
    fast = same_runs(scenario_dict(nodes=nodes, workload=_workload("write_bw", ["4KiB", "64KiB"], 500)))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)


def test_a_first_miss_at_the_source_under_a_write_stream_equals_the_event_engine():
    """The first WRITE's payload read waits for its translation's misses while the next ones' reads go ahead:
    they reach the transmit port first and wait there for it (RC's send queue order), on both engines."""
    fast = same_runs(scenario_dict(nodes=CACHES["mtt"], workload=_workload("write_bw", ["64KiB"])))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)


@pytest.mark.parametrize("caches", CACHES)
def test_a_send_stream_through_translation_caches_equals_the_event_engine(caches):
    """SENDs through both nodes' caches: the receive's buffer is translated at the responder's check of each SEND,
    the check whose times also tell when each SEND arrives to take its receive (both are read from it)."""
    work = [{**_workload("send_bw", ["4KiB", "64KiB"], 600)[0], "tx_depth": 32}]
    fast = same_runs(scenario_dict(nodes=CACHES[caches], workload=work))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)


@pytest.mark.parametrize("node", [{"nic": {"translation_cache": True}}, {"iommu": "vtd"}])
def test_a_first_miss_at_the_responder_under_a_read_stream_equals_the_event_engine(node):
    """READs: the responder's first miss holds the first READ's payload read, and the responder takes the QP's
    later READs up only after it (models.nic.datapath.RESPONSES), so the responses land in order and
    max_rd_atomic's slots come back in order: both engines give the same rows."""
    nodes = [{"name": "a"}, {"name": "b", **node}]
    fast = same_runs(scenario_dict(nodes=nodes, workload=_workload("read_bw", ["4KiB", "64KiB"])))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)


def test_a_first_miss_where_a_read_response_lands_lets_a_later_one_land_first_on_the_event_engine():
    """The requester's own first miss holds the first response's landing while the next ones land: max_rd_atomic's
    slots then come back out of order, which the core's slots do not follow; auto says so and gives the event
    engine's rows, and fast refuses."""
    says = "landed out of order where its steps change"
    data = scenario_dict(nodes=CACHES["mtt"], workload=_workload("read_bw", ["4KiB"]))
    lines: list[str] = []
    auto = run_scenario(Scenario.model_validate({**data, "engine": "auto"}), notice=lines.append)
    event = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert auto.engine == "event" and len(lines) == 1 and says in lines[0], lines
    pd.testing.assert_frame_equal(auto.operations, event.operations)
    with pytest.raises(OutsideDomain, match=says):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))


def test_a_cache_reached_by_two_checks_of_one_stream_stays_on_the_event_engine():
    """A loopback stream: the requester's payload read and the responder's write go through one NIC's cache, in
    an interleaving only the run tells."""
    data = scenario_dict(nodes=[{"name": "a", "nic": {"translation_cache": True}}, {"name": "b"}],
                         workload=_workload("read_lat", ["4KiB"]))
    data["buffers"] = [{**b, "on": "a.host"} for b in data["buffers"]]
    with pytest.raises(OutsideDomain, match="reached by two streams or checks at once"):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))

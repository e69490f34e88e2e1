"""Read tags in the event engine: the NIC's tag pool bounds DMA-read bandwidth by tags x size / round trip, as
the TLP-level model and the closed form do, and paces queued reads instead of issuing them all at once."""

import pytest

from models.pcie import closed_form as cf
from models.nic.stages import dma_read, dma_read_stream_Bps
from sim.core.interpreter import Operation, compile_steps
from sim.core.steps import Delay, Mark, Rebase, Wake
from models.pcie.link import PcieLink, PcieParams, read_tags
from models.pcie.tlp import simulate_stream
from models.pcie.topology import build_topology, dma_path, dma_read_stages
from sim.core import PS_PER_NS, Environment

CASES = {
    "gen5x16-256tags-64B": (dict(gen=5), 64),
    "gen5x16-8tags-4KiB": (dict(gen=5, read_tags=8), 4096),
    "gen4x16-32tags-64KiB-2us": (dict(gen=4, read_tags=32, read_latency_ps=2000 * PS_PER_NS), 65536),
    "gen4x16-1tag-2KiB": (dict(gen=4, read_tags=1), 2048),
    "gen3x8-256tags-1MiB": (dict(gen=3, lanes=8), 1 << 20),
    "gen5x16-unlimited-4KiB": (dict(gen=5, read_tags=None), 4096),
}


def _reads(link: PcieLink, n: int, count: int) -> list[tuple[int, int]]:
    """``count`` reads of ``n`` bytes queued at time 0 (a deep send queue); (first request issued, last
    completion) of each, in ps."""
    env, out = Environment(1), []
    for k in range(count):
        stages = dma_read(link, n)
        first = 2 if stages[0].server is link.tags else 1  # through the first request's claim
        steps = (*stages[:first], Mark("issued"), Rebase(False), *stages[first:],
                 Rebase(True), Wake())
        env.step_runner.start(Operation(compile_steps(steps), k, _Issued(out)))
    env.run()
    return sorted(out)


class _Issued:
    """Owner of a read: records (first request issued, last completion)."""

    def __init__(self, out: list) -> None:
        self.out, self.issued = out, 0

    def mark(self, op, name: str, head: int, tail: int) -> None:
        self.issued = head

    def wake(self, op, head: int) -> None:
        self.out.append((self.issued, head))


@pytest.mark.parametrize("case", CASES)
def test_stream_of_reads_matches_the_tlp_model_and_the_closed_form(case):
    params, n = CASES[case]
    p = PcieParams(**params)
    engine_Bps = dma_read_stream_Bps(p, n)
    assert engine_Bps == pytest.approx(simulate_stream(p, "read", n).Bps, rel=0.01)
    assert engine_Bps == pytest.approx(cf.read_Bps(p, n), rel=0.01)


def test_some_cases_are_tag_bound_and_some_link_bound():
    bound = {case: cf.read_tag_Bps(PcieParams(**params), n) < cf.read_link_Bps(PcieParams(**params), n)
             for case, (params, n) in CASES.items()}
    assert bound["gen5x16-8tags-4KiB"] and bound["gen4x16-32tags-64KiB-2us"] and bound["gen5x16-256tags-64B"]
    assert not bound["gen3x8-256tags-1MiB"] and not bound["gen5x16-unlimited-4KiB"]


@pytest.mark.parametrize("tags", [1, 2, 4])
def test_one_tag_limited_read_takes_its_round_trips_over_the_tags(tags):
    p = PcieParams(gen=4, read_tags=tags, read_latency_ps=1000 * PS_PER_NS)
    n = 16 * p.mrrs
    ((_, done),) = _reads(PcieLink("l", p), n, 1)
    expected = cf.read_tag_hold_ps(p, n, p.read_latency_ps) / tags
    assert done == pytest.approx(expected, rel=0.02)


def test_a_read_that_is_not_tag_limited_keeps_its_unlimited_latency():
    p = PcieParams(gen=5)
    n = 64 * 1024
    ((_, limited),) = _reads(PcieLink("l", p), n, 1)
    ((_, free),) = _reads(PcieLink("l", PcieParams(gen=5, read_tags=None)), n, 1)
    assert limited == free


def test_queued_reads_issue_as_tags_come_back_not_all_at_once():
    p = PcieParams(gen=5)
    n = 1 << 20
    link = PcieLink("l", p)
    reads = _reads(link, n, 8)
    completion_ps = p.read_return_ps(n)
    for (issued, _), (previous_issued, previous_done) in zip(reads[1:], reads):
        assert issued - previous_issued == completion_ps  # one read's completions apart
        assert issued > previous_done - 2 * p.read_latency_ps  # about a round trip before the previous ends
    unlimited = _reads(PcieLink("l", PcieParams(gen=5, read_tags=None)), n, 8)
    assert unlimited[-1][0] < completion_ps  # without tags every request is out within one read's time
    assert reads[-1][1] == unlimited[-1][1]  # and the link, not the tags, sets when the last one ends


def test_the_tag_pool_leaves_the_request_link_free_for_other_traffic():
    p = PcieParams(gen=4, read_tags=2)
    link = PcieLink("l", p)
    _reads(link, 1 << 16, 1)
    assert link.up.free_at == p.read_request_ps(1 << 16)  # the requests took only their own wire time


def test_unlimited_tags_add_no_stage():
    assert read_tags(PcieLink("l", PcieParams(read_tags=None)), 4096, 550 * PS_PER_NS) is None
    assert len(dma_read(PcieLink("l", PcieParams(read_tags=None)), 4096)) == 3


@pytest.mark.parametrize("layout", ["switch", "root_complex"])
def test_topology_reads_use_the_nic_tags_and_the_route_round_trip(layout):
    g = build_topology(layout)
    stages = dma_read_stages(g, "nic0", "gpu0", 4096)
    nic_link = g.edges["nic0", next(iter(g.adj["nic0"]))]["link"]
    assert stages[0].server is nic_link.tags
    path = dma_path(g, "nic0", "gpu0", 4096)
    latencies = [s.ps if isinstance(s, Delay) else s.latency_ps for s in stages[1:]]
    assert path.read_latency_ps == sum(latencies)  # the pool's tail shaping is no latency

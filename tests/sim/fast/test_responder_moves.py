"""A dma-buf that the exporter moves under a stream's responder, on the vectorized core against the event engine:
the first request to reach it after ``move_notify`` re-faults (``pagefault_dmabuf_mr``), every request that arrives
before the re-map is done gets an RNR NAK and goes again after the NAK's way back and the responder's min_rnr_timer
(rnr_retry 7: for ever), and the requests posted after the zap reach the buffer where it went. Every table and
counter identical; what the core does not follow stays on the event engine, saying why."""

from __future__ import annotations

import numpy as np
import pytest

from models.nic.datapath import Path, checked_accesses, path
from models.nic.retransmit import rnr_retried
from models.nic.wqe import Opcode
from sim.core.steps import Check, Claim, Rebase
from sim.engine.harness import setup_run
from sim.engine.planner.streams import streams
from sim.engine.planner.retries import REMOTE, Retries, attempts_labelled
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.conftest import ROOT, scenario_dict
from tests.sim.fast.test_differential import same_runs

PRESSURE = {"at": "100us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "7.5GiB"}
"""A competing allocation that makes the MI300X-like exporter evict the 1 GiB buffer to system memory."""


def responder_moves(kind: str, sizes: list[str], depth: int, iterations: int, events: list[dict]) -> dict:
    """A stream from node b's host memory to a dynamic dma-buf in node a's GPU (a WRITE's sink, a READ's source)."""
    nodes = [{"name": "a", "gpus": [{"preset": "mi300x", "memory": "8GiB"}], "kernel": {"dmabuf_move_notify": True}},
             {"name": "b"}]
    buffers = [{"name": "gpu", "on": "a.gpu0", "size": "1GiB", "register": "dmabuf"},
               {"name": "host", "on": "b.host", "size": "1GiB"}]
    work = [{"kind": kind, "from": "host", "to": "gpu", "sizes": sizes, "iterations": iterations, "tx_depth": depth}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=events)


@pytest.mark.parametrize("kind, sizes, depth, iterations, event", [
    ("write_bw", ["1MiB"], 16, 2000, PRESSURE),
    ("read_bw", ["1MiB"], 16, 2000, PRESSURE),
    ("write_bw", ["64KiB"], 64, 6000, {**PRESSURE, "at": "300us", "hold": "2ms"}),
    ("read_bw", ["64KiB"], 4, 3000, {**PRESSURE, "at": "50us"}),
    ("read_bw", ["4KiB", "64KiB"], 16, 3000, {**PRESSURE, "at": "700us"})])
def test_a_buffer_moved_under_the_responder_costs_rnr_naks_exactly_as_the_event_engine(kind, sizes, depth,
                                                                                       iterations, event):
    """The requests in flight at the move are answered with RNR NAKs for as long as the re-map takes, each
    attempt counted; the core solves it and gives the event engine's tables and counters."""
    _, fast = same_runs(responder_moves(kind, sizes, depth, iterations, [event]))
    assert fast.engine == "fast"
    assert fast.counters["refaults"] == 1 and fast.counters["rnr_naks"] >= depth and fast.operations["ok"].all()
    assert fast.summary["rnr_naks"].sum() == fast.counters["rnr_naks"]


@pytest.mark.parametrize("name, variant", [("gpu_pressure.yaml", "dmabuf"), ("managed_pressure.yaml", "amd-dmabuf")])
def test_the_shipped_responder_moves_run_on_the_vectorized_core(name, variant):
    """``auto`` solves each shipped variant whose responder buffer is evicted on the core, saying so, with the
    event engine's tables and counters."""
    scenario = dict(load_scenario_variants(ROOT / "scenarios" / name)[2])[variant]
    lines: list[str] = []
    auto = run_scenario(scenario.model_copy(update={"engine": "auto"}), variant=variant, notice=lines.append)
    event = run_scenario(scenario.model_copy(update={"engine": "event"}), variant=variant)
    assert any("vectorized core ran" in line for line in lines), lines
    for table in ("operations", "summary", "events", "registrations"):
        assert getattr(auto, table).equals(getattr(event, table)), table
    assert auto.counters == event.counters and auto.counters["rnr_naks"] > 0


@pytest.mark.parametrize("every, engine", [("40ms", "fast"), ("30ms", "fast"), ("5ms", "event")])
def test_an_eviction_storm_under_the_responder(every, engine):
    """Three evictions of the responder's buffer: 30 or 40 ms apart, each re-map is done before the next zap and the
    core follows all three (a zap that comes while the last one's RNR NAK counts still settle waits for them, as the
    times after their window are not sure until then); 5 ms apart, the exporter zaps the buffer again while its re-map is still handled (the
    requests that come meanwhile reach the old pages instead of waiting), which the event engine simulates, saying
    so. Either way every table and counter is the event engine's."""
    storm = {"at": "100us", "kind": "eviction-storm", "on": "a.gpu0", "count": 3, "every": every}
    data = responder_moves("read_bw", ["1MiB"], 8, 3000, [storm])
    lines: list[str] = []
    auto = run_scenario(Scenario.model_validate({**data, "engine": "auto"}), notice=lines.append)
    event = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert auto.engine == engine and auto.counters == event.counters and auto.counters["rnr_naks"] > 0, lines
    assert engine == "fast" or "moved again at" in lines[0] and "while its last re-fault was handled" in lines[0]
    for table in ("operations", "summary", "events", "registrations"):
        assert getattr(auto, table).equals(getattr(event, table)), table


def test_a_retried_request_claims_its_send_queue_turns_once():
    """After an RNR NAK the request goes again from the send engine (``_send_again``: the path's forward steps):
    its ticket in the send queue's turns passed at its first claim there, so the claims of each retry are plain
    ones (the interpreter finds the turn gone from the operation's); each retry starts from the check's tail,
    numbered from 0 (a program a check puts in place of the rest)."""
    data = responder_moves("write_bw", ["64KiB"], 16, 10, [])
    scenario = Scenario.model_validate(data)
    bed = setup_run(scenario, scenario.seed)[0]
    end = streams(scenario, bed)[0]
    qp = end.src.path_qp(end.dst)
    found: Path = path(qp, Opcode.RDMA_WRITE, 65536, False, *end.targets,
                       checked_accesses(qp, [end.src.mr], end.dst.mr))
    steps = rnr_retried(found, 3, 640_000_000)
    k = next(k for k, s in enumerate(found.steps) if isinstance(s, Check) and s.name == "responder")
    assert steps[:k + 1] == found.steps[:k + 1] and steps[len(steps) - len(found.after["responder"]):] == \
        found.after["responder"]
    turns = [s.turn for s in steps if isinstance(s, Claim) and s.turn is not None]
    assert sorted(turns) == sorted(s.turn for s in found.steps if isinstance(s, Claim) and s.turn is not None)
    assert [s for s in steps if isinstance(s, Rebase) and s.renumber == 0] == [Rebase(True, renumber=0)] * 3
    labelled = [s.label for s in attempts_labelled(steps) if isinstance(s, Check) and s.name == "responder"]
    assert labelled == [f"{REMOTE}{n}" for n in range(4)]
    assert rnr_retried(found, 0, 1) is found.steps


def test_the_counts_settle_from_the_attempts_the_solve_gives():
    """Every attempt but the last inside the window, the last outside; an operation whose attempts all came
    inside gets as many more as fit at the spacing of its last two (those still inside go on together); the
    operations its completion posts (after the window's depth) start again from none."""
    retries = Retries({0: 4})
    retries.windows[0] = [(100, 1000)]
    marks = {(0, 64): {f"{REMOTE}0": np.array([50, 120, 150, 300, 2000]),
                       f"{REMOTE}1": np.full(5, -1), f"{REMOTE}2": np.full(5, -1)}}
    assert retries.settle(marks)
    assert retries.decided[0, 64].tolist() == [0, 1, 1, 1, 0]
    marks[0, 64][f"{REMOTE}1"] = np.array([-1, 420, 450, 1100, -1])
    assert retries.settle(marks)
    assert retries.decided[0, 64].tolist() == [0, 3, 3, 1, 0]  # 120, 420, 720 inside then 1020; 300, 1100
    marks[0, 64][f"{REMOTE}2"] = np.array([-1, 720, 750, -1, -1])
    marks[0, 64][f"{REMOTE}3"] = np.array([-1, 1020, 1050, -1, -1])
    assert not retries.settle(marks) and retries.total(0) == 7

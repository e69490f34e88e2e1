"""Frames a link outage loses under a WRITE stream, on the vectorized core against the event engine: a request the
outage meets is lost (``_request_wire``) and sent again when its requester's ACK timer fires, one whose
acknowledgement is lost is sent again then too and acknowledged as a duplicate, not executed again; the first
request to reach the responder while a lost one is missing carries a NAK PSN sequence error back, which wakes the
requests waiting (the lost ones go again, an earlier one whose acknowledgement was lost completes), and those that
arrive behind it after the NAK wait until the missing one arrives. Every table and counter identical."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.nic.datapath import ACK_TIMER, COMPLETION, REPLY_WIRE, REQUEST_WIRE, checked_accesses, path
from models.nic.retransmit import timed_out
from models.nic.wqe import Opcode
from sim.core.steps import Check, Claim, Rebase
from sim.engine.harness import setup_run
from sim.engine.planner.losses import BEHIND, NAK_SENT, REPLY_LOST, REQUEST_LOST, _responder
from sim.engine.planner.streams import streams
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.conftest import ROOT, scenario_dict
from tests.properties import examples
from tests.sim.fast.test_differential import auto_runs


def flapped(sizes: list[str], depth: int, iterations: int, at: str, duration: str, node: str = "b",
            timeout: int = 8, qps: int = 1) -> dict:
    """``scenarios/link_flap_retries.yaml``'s testbed: a WRITE stream (on ``qps`` QPs) between two ConnectX-7s whose
    link at ``node`` loses every frame for ``duration`` from ``at``; the QPs' ``timeout`` sets the ACK timer."""
    nodes = [{"name": "a", "nic": {"preset": "connectx7"}}, {"name": "b", "nic": {"preset": "connectx7"}}]
    buffers = [{"name": "src", "on": "a.host", "size": "64MiB"}, {"name": "dst", "on": "b.host", "size": "64MiB"}]
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": sizes, "iterations": iterations,
             "tx_depth": depth, "qp_timeout": timeout, "qps": qps}]
    events = [{"at": at, "kind": "link-flap", "node": node, "duration": duration, "frames": "lost"}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=events,
                         fabric={"rate": "400Gb/s", "latency": "300ns"})


@pytest.mark.parametrize("sizes, depth, iterations, at, duration, node, timeout", [
    (["1MiB"], 16, 1440, "41us", "298us", "a", 14),
    (["64KiB"], 64, 1507, "526us", "191us", "b", 14),
    (["4KiB", "64KiB"], 128, 749, "377us", "239us", "a", 8),
    (["64KiB"], 1, 561, "144us", "262us", "b", 8),
    (["4KiB", "64KiB"], 4, 1240, "243us", "366us", "a", 8)])
def test_requests_an_outage_loses_are_sent_again_by_their_timers_exactly_as_the_event_engine(
        sizes, depth, iterations, at, duration, node, timeout):
    """Every request in flight meets the outage (and the acknowledgement of the one before them, where it was on
    the wire then): each goes again when its ACK timer fires; the core solves it with the event engine's tables."""
    auto, lines = auto_runs(flapped(sizes, depth, iterations, at, duration, node, timeout))
    assert auto.engine == "fast" and auto.counters["frames_lost"] >= depth, lines
    latency = auto.operations["latency_ps"]
    assert latency.max() > 2 ** timeout * 4096 * 1000  # a timer fired: 4.096 us x 2^timeout


def test_a_request_ahead_of_a_lost_one_draws_the_nak_exactly_as_the_event_engine():
    """A shorter outage than the requests in flight take to send: the first after it reaches the responder while
    the lost ones are missing and carries a NAK PSN sequence error back, which wakes the requests waiting for their
    timers; those arriving behind it after the NAK wait until the missing one arrives sent again."""
    auto, lines = auto_runs(flapped(["1MiB"], 64, 1067, "186us", "121us", "a", 14))
    assert auto.engine == "fast" and auto.counters["frames_lost"] > 0, lines
    assert auto.operations["latency_ps"].max() < 2 ** 14 * 4096 * 1000  # no timer fired: the NAK woke them


@pytest.mark.parametrize("variant", ["nak", "long14", "long8", "held"])
def test_the_shipped_link_flaps(variant):
    """``link_flap_retries.yaml``: the short outage whose NAK PSN sequence error wakes the requests, the long ones
    (every request in flight lost, each sent again by its timer) and the held one run on the core; every table and
    counter identical."""
    engine = "fast"
    scenario = dict(load_scenario_variants(ROOT / "scenarios" / "link_flap_retries.yaml")[2])[variant]
    lines: list[str] = []
    auto = run_scenario(scenario.model_copy(update={"engine": "auto"}), variant=variant, notice=lines.append)
    event = run_scenario(scenario.model_copy(update={"engine": "event"}), variant=variant)
    assert auto.engine == engine, lines
    for table in ("operations", "summary", "events", "registrations"):
        assert getattr(auto, table).equals(getattr(event, table)), table
    assert auto.counters == event.counters


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.sampled_from([["4KiB"], ["64KiB"], ["1MiB"], ["4KiB", "64KiB"]]), depth=st.sampled_from([1, 4, 16, 64]),
       iterations=st.integers(100, 1200), at_us=st.integers(1, 600), duration_us=st.integers(1, 400),
       node=st.sampled_from(["a", "b"]), timeout=st.sampled_from([1, 4, 8, 10, 14]), qps=st.sampled_from([1, 1, 2]),
       later=st.one_of(st.none(), st.tuples(st.integers(1, 2_000), st.integers(1, 400))))
def test_any_outage_under_a_write_stream_equals_the_event_engine(sizes, depth, iterations, at_us, duration_us, node,
                                                                 timeout, qps, later):
    """An outage at a random time and of a random length on either end, under one QP's stream or two, and maybe
    another some time after it: whichever engine ``auto`` picks, every table and counter is the event engine's."""
    data = flapped(sizes, depth, iterations, f"{at_us}us", f"{duration_us}us", node, timeout, qps)
    if later is not None:
        after_us, length_us = later
        data["events"].append({"at": f"{at_us + duration_us + after_us}us", "kind": "link-flap", "node": node,
                               "duration": f"{length_us}us", "frames": "lost"})
    auto_runs(data)


def test_a_lost_frames_request_waits_for_its_timer_then_goes_again():
    """The event engine's ``_lost``: the timer runs from when the frame left (the fabric's latency before its last
    bit reached the far port) and the program that waits for it is numbered from its own start, its check first;
    then the request goes again from the send engine, its send-queue claims plain ones (their tickets passed). One
    whose acknowledgement was lost is acknowledged again as a duplicate (the path's ``rejected``)."""
    data = flapped(["64KiB"], 16, 10, "1ms", "1us")
    scenario = Scenario.model_validate(data)
    bed = setup_run(scenario, scenario.seed)[0]
    end = streams(scenario, bed)[0]
    qp = end.src.path_qp(end.dst)
    found = path(qp, Opcode.RDMA_WRITE, 65536, False, *end.targets, checked_accesses(qp, [end.src.mr], end.dst.mr))
    names = [s.name for s in found.steps if isinstance(s, Check)]
    assert REQUEST_WIRE in names and REPLY_WIRE in names
    for frame in (REQUEST_WIRE, REPLY_WIRE):
        steps = timed_out(found, frame, 300_000, 1_000_000)
        k = next(k for k, s in enumerate(steps) if isinstance(s, Check) and s.name == frame)
        assert steps[:k + 1] == found.steps[:k + 1]
        assert steps[k + 1:k + 4] == (Rebase(True, 700_000, renumber=0), Check(ACK_TIMER, 0), Rebase(False, renumber=0))
        again = steps[k + 4:]
        assert not any(isinstance(s, Claim) and s.turn is not None and s.turn != "responses" for s in again)
        assert again[:len(found.forward)] == tuple(
            s if not isinstance(s, Claim) else type(s)(**{**s.__dict__, "turn": None}) for s in found.forward)
        checked = next(k for k, s in enumerate(again) if isinstance(s, Check) and s.name == "responder")
        assert again[checked + 1:] == ((Rebase(True, renumber=0), *found.reply, *COMPLETION) if frame == REPLY_WIRE
                                       else found.after["responder"])


def test_the_responder_state_decides_who_sends_the_nak_and_who_waits_behind():
    """Replayed from a solve's times as ``_responder`` runs them: request 1 is lost at 10 and goes missing
    (request 2, lost at 12 while it is, never does); request 3 arrives at 20 while 1 is missing and carries the NAK
    back (its ``nak`` check at 40 wakes those waiting: the lost ones, and request 4 that arrived behind at 30);
    request 5 arrives behind at 50, after the NAK, and waits until request 1 arrives sent again at 100; request 0's
    acknowledgement was lost, and the NAK, which asks for a later PSN, completes it."""
    labelled = {"remote0": np.array([5, 100, 101, 20, 30, 50, 120]), "wire0": np.array([1, 10, 12, 15, 25, 45, 110]),
                "reply0": np.array([8, -1, -1, -1, -1, -1, -1]), "nak": np.array([-1, -1, -1, 40, -1, -1, -1])}
    request = np.array([False, True, True, False, False, False, False])
    reply = np.array([True, False, False, False, False, False, False])
    old = np.array([0, 0, 0, NAK_SENT, 0, 0, 0])
    decided, broken, known = _responder(labelled, request, reply, old)
    assert broken is None and known == 7
    assert (decided & 7).tolist() == [REPLY_LOST, REQUEST_LOST, REQUEST_LOST, NAK_SENT, BEHIND, BEHIND, 0]
    assert (decided >> 3).tolist() == [40, 40, 40, 0, 40, 100, 0]
    # Solved up to 60 only: request 1 may still be missing when a later request arrives, and the NAK to come may
    # still complete request 0, whose acknowledgement was lost: no decision is final yet.
    assert _responder(labelled, request, reply, old, horizon=60)[2] == 0
    # Solved past every time here, with no outage to come: every decision is final and the same.
    prefix, _, known = _responder(labelled, request, reply, old, horizon=130)
    assert known == 7 and prefix.tolist() == decided.tolist()
    labelled["remote0"][2] = 90  # request 2, sent again, arrives while request 1 is still missing
    assert _responder(labelled, request, reply, old)[1] is not None


def test_a_nak_wakes_only_the_requests_of_its_own_gap():
    """Two outages: requests 0 and 1 are lost in the first (at 10 and 12), which no request arrives during, so
    their timers send them again (request 0 arrives at 300); request 3 is lost in the second (at 1000) and request 4,
    arriving at 1020 while it is missing, carries the NAK back (at 1040), which wakes request 3 but not the first
    gap's."""
    labelled = {"remote0": np.array([300, 310, 400, 1100, 1020]), "wire0": np.array([10, 12, 390, 1000, 1010]),
                "reply0": np.array([-1, -1, -1, -1, -1]), "nak": np.array([-1, -1, -1, -1, 1040])}
    request = np.array([True, True, False, True, False])
    old = np.array([0, 0, 0, 0, NAK_SENT])
    decided, broken, _ = _responder(labelled, request, np.zeros(5, bool), old)
    assert broken is None
    assert (decided & 7).tolist() == [REQUEST_LOST, REQUEST_LOST, 0, REQUEST_LOST, NAK_SENT]
    assert (decided >> 3).tolist() == [0, 0, 0, 1040, 0]
    # Solved up to 500: the first gap closed at 300, the second (missing request 3 until 1100) is still open, so the
    # decisions of requests 0-2 are final, and the same as the whole solve's.
    prefix, _, known = _responder(labelled, request, np.zeros(5, bool), old, horizon=500)
    assert known == 3 and prefix[:3].tolist() == decided[:3].tolist()
    # Request 2 arrives in the first gap and carries its NAK back at 1032, after the second gap began (at 1000).
    labelled["remote0"][2], labelled["nak"][2], old[2] = 200, 1032, NAK_SENT
    assert _responder(labelled, request, np.zeros(5, bool), old)[1] is not None


@pytest.mark.parametrize("first, second, timeout", [("50us", "50us", 14), ("300us", "50us", 8), ("50us", "300us", 8)])
def test_outages_one_after_the_other_equal_the_event_engine(first, second, timeout):
    """A WRITE stream through two link outages 3 ms apart, short ones (a NAK PSN sequence error wakes the requests
    lost) and long ones (every request in flight lost, each sent again by its timer, 1 ms at ``timeout`` 8): the core
    settles each outage's decisions in turn, every table and counter the event engine's."""
    data = flapped(["64KiB"], 128, 6000, "1ms", first, timeout=timeout)
    data["events"].append({"at": "4ms", "kind": "link-flap", "node": "b", "duration": second, "frames": "lost"})
    one, _ = auto_runs(flapped(["64KiB"], 128, 6000, "1ms", first, timeout=timeout))
    auto, lines = auto_runs(data)
    assert auto.engine == "fast", lines
    assert auto.counters["frames_lost"] > one.counters["frames_lost"]


def test_an_outage_after_the_run_ends_is_not_reached():
    """The stream ends at 439.6 us, before the second outage (at 440 us): its row says it was not reached, though a
    solve made with the decisions not settled yet ran past it."""
    data = flapped(["4KiB"], 4, 759, "434us", "1us", timeout=1)
    data["events"].append({"at": "440us", "kind": "link-flap", "node": "b", "duration": "1us", "frames": "lost"})
    auto, lines = auto_runs(data)
    assert auto.engine == "fast", lines
    assert auto.events["outcome"].iloc[1].startswith("not reached")


def test_a_decision_that_differs_on_the_solve_prefix_stops_the_solve(monkeypatch):
    """The NAK case with 6,000 WRITEs, the outage at 1 ms: once the solve has passed a gap, a decision there that
    differs from the one it was made with sends the run to its next solve before the rest is solved; the last solve
    is complete, and every table and counter is the event engine's."""
    from sim.engine.planner.events import Watch
    follow, ended = Watch.follow, []

    def recorded(self, solved):
        changed = follow(self, solved)
        ended.append(solved.complete)
        return changed

    monkeypatch.setattr(Watch, "follow", recorded)
    auto, lines = auto_runs(flapped(["64KiB"], 128, 6000, "1ms", "50us", timeout=14))
    assert auto.engine == "fast" and auto.counters["frames_lost"] > 0, lines
    assert ended[-1] and not all(ended[:-1]) and len(ended) > 1

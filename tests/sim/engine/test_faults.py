"""Fault injection: each event has a defined outcome, and every posted work request gets one completion."""

import pytest

from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import nic_for


def _scenario(events, kind="write_bw", register="dmabuf", iterations=3000, size="64MiB"):
    return Scenario.model_validate({
        "schema": 1, "name": "f", "seed": 2,
        "nodes": [{"name": "a", "gpus": [{"preset": "mi300x", "memory": "8GiB"}], "kernel": {"version": "7.1"},
                   "nic": nic_for(register)},
                  {"name": "b"}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": size, "register": register},
                    {"name": "h", "on": "b.host", "size": size}],
        "workload": [{"kind": kind, "from": "g", "to": "h", "sizes": ["64KiB"], "iterations": iterations,
                      "tx_depth": 32}],
        "events": events})


def _statuses(result):
    ops = result.operations
    return int(ops["ok"].sum()), int((~ops["ok"]).sum())


@pytest.mark.parametrize("kind", ["qp-error", "nic-reset", "process-exit"])
def test_node_failures_flush_the_rest_and_every_request_completes_once(kind):
    result = run_scenario(_scenario([{"at": "500us", "kind": kind, "node": "a"}]))
    ok, failed = _statuses(result)
    assert ok > 0 and failed > 0 and ok + failed == 3000
    ops = result.operations
    first_failure = ops[~ops["ok"]]["iteration"].min()
    assert ops[ops["iteration"] >= first_failure]["ok"].sum() == 0  # in order: nothing succeeds after an error
    outcome = result.events.set_index("kind").loc[kind, "outcome"]
    assert "ERR" in outcome


def test_process_exit_cleans_up_in_the_kernel_order():
    result = run_scenario(_scenario([{"at": "200us", "kind": "process-exit", "node": "a"}]), trace=True)
    dmabuf = result.testbed.registrations["g"].mr.backing.umem.attach.dmabuf
    assert dmabuf.released and not dmabuf.attachments  # revoke, unmap, detach and put all ran
    names = [e.name for e in result.testbed.env.trace.events if e.component == "a.nic"]
    order = ["mlx5_umr_revoke_mr_with_lock", "dma_buf_unmap_attachment", "dma_buf_detach", "dma_buf_put"]
    positions = [len(names) - 1 - names[::-1].index(n) for n in order]
    assert positions == sorted(positions)
    assert result.testbed.nodes["a"].host.pinned_pages == 0


def test_eviction_storm_invalidates_and_refaults_hundreds_of_times_without_losing_requests():
    storm = [{"at": "100us", "kind": "eviction-storm", "on": "a.gpu0", "count": 300, "every": "1ms"}]
    result = run_scenario(_scenario(storm, iterations=40000, size="8MiB"))
    counters = result.counters
    ops = result.operations
    seconds = (ops["completed_ps"].max() - ops["posted_ps"].min()) / 1e12
    assert counters["invalidations"] >= 40 and counters["invalidations"] / seconds > 300  # hundreds per second
    assert counters["refaults"] == counters["invalidations"]
    assert _statuses(result) == (40000, 0) and counters["invariant_violations"] == 0


def test_eviction_storm_cannot_move_a_pinned_importer():
    storm = [{"at": "100us", "kind": "eviction-storm", "on": "a.gpu0", "count": 5, "every": "100us"}]
    result = run_scenario(_scenario(storm, register="dmabuf-pinned"))
    assert result.events.set_index("kind").loc["eviction-storm", "outcome"] == "0 moves, 5 refused (pinned)"


def test_a_held_link_flap_stalls_the_stream_for_its_duration():
    base = run_scenario(_scenario([]))
    flap = run_scenario(_scenario([{"at": "1ms", "kind": "link-flap", "node": "a", "duration": "2ms",
                                    "frames": "held"}]))
    span = lambda r: r.operations["completed_ps"].max() - r.operations["posted_ps"].min()
    assert span(flap) - span(base) == pytest.approx(2e9, rel=0.05)
    assert _statuses(flap) == (3000, 0)


def test_fault_events_check_their_node():
    from sim.scenario.refs import check_references

    problems = check_references(_scenario([{"at": "1ms", "kind": "qp-error", "node": "z"}]))
    assert problems and problems[0][0] == ("events", 0, "node")


def test_an_eviction_storm_the_run_outlasts_says_how_far_it_got():
    storm = [{"at": "10us", "kind": "eviction-storm", "on": "a.gpu0", "count": 100000, "every": "100us"}]
    result = run_scenario(_scenario(storm, iterations=300, size="1MiB"))
    rows = result.events[result.events["kind"] == "eviction-storm"]
    ran_us = (result.operations["completed_ps"].max() - result.operations["posted_ps"].min()) / 1e6
    steps = int(rows["outcome"].iloc[0].split(" in ")[1].split(" of ")[0])
    assert len(rows) == 1 and rows["outcome"].iloc[0].endswith(" of 100000 steps (the run ended first)")
    assert rows["outcome"].iloc[0].startswith(f"{steps} moves, 0 refused")
    assert abs(steps - (ran_us - 10) / 100) <= 2  # one step per 100 us while the workload ran


def test_the_steps_of_a_growing_job_the_run_ended_before_are_named():
    grows = [{"at": "10us", "kind": "gpu-job-grows", "on": "a.gpu0", "step": "1MiB", "every": "50us", "steps": 1000}]
    result = run_scenario(_scenario(grows, iterations=300))
    rows = result.events[result.events["kind"] == "gpu-job-grows"]
    done = int((rows["outcome"] == "allocated").sum())
    assert 0 < done < 1000 and rows["outcome"].iloc[-1].startswith(f"not reached: steps {done + 1} to 1000 (")
    failing = [{**grows[0], "step": "4GiB"}]  # the third 4 GiB step cannot fit in 8 GiB: the job stops there
    stopped = run_scenario(_scenario(failing, iterations=300)).events
    assert not stopped["outcome"].str.startswith("not reached").any()
    assert stopped["outcome"].str.startswith("failed").sum() == 1

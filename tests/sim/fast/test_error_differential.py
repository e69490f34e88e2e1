"""Work requests that complete in error after a scenario event, on the vectorized core against the event engine:
VFIO revokes the dma-buf a WRITE stream reads from (mlx5's dynamic importer: the re-fault's re-map fails; a
revocable pinned importer: the revoked umem), the access that finds it so completes IBV_WC_LOC_PROT_ERR and its send
queue stops there: the work requests already past the requester's check are flushed at their source, the rest at
the requester; every table and counter identical. What the core does not follow stays on the event engine, saying
why."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.nic.datapath import failing, work_request_path
from models.nic.wqe import Opcode, WcStatus
from models.verbs.workloads import work_request
from sim.core.interpreter import CLAIMS, TURN
from sim.core.steps import Claim, walk_order
from sim.engine.harness import setup_run
from sim.engine.run import run_scenario
from sim.fast.steps import claim_wpos
from sim.engine.planner.domain import OutsideDomain
from sim.engine.planner.errors import NONE, REQUESTER, Failure, first_flushed
from sim.engine.planner.streams import streams
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.conftest import ROOT, scenario_dict
from tests.properties import examples
from tests.sim.fast.test_differential import same_runs

REVOKED = (WcStatus.LOC_PROT_ERR.ibv_name, WcStatus.WR_FLUSH_ERR.ibv_name)


def revoked(register: str, at: str, sizes: list[str], depth: int, iterations: int, kind: str = "write_bw") -> dict:
    """``scenarios/dmabuf_revoke.yaml``'s testbed: a VFIO export registered as ``register`` (``dmabuf``: a
    ConnectX-7's dynamic MR; ``dmabuf-pinned``: an EFA that accepts revocation), revoked at ``at`` under a stream."""
    pinned = register == "dmabuf-pinned"
    nic = {"preset": "efa", "dmabuf_revocable": True} if pinned else {"preset": "connectx7"}
    nodes = [{"name": "a", "nic": nic, "gpus": [{"preset": "h200", "exporter": "vfio"}], "kernel": {"version": "7.1"}},
             {"name": "b", "nic": {"preset": nic["preset"]}}]
    buffers = [{"name": "bar", "on": "a.gpu0", "size": "64MiB", "register": register},
               {"name": "sink", "on": "b.host", "size": "64MiB"}]
    work = [{"kind": kind, "from": "bar", "to": "sink", "sizes": sizes, "iterations": iterations, "tx_depth": depth}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, seed=11,
                         events=[{"at": at, "kind": "dmabuf-revoke", "buffer": "bar"}],
                         fabric={"rate": "100Gb/s" if pinned else "400Gb/s", "latency": "300ns"})


@pytest.mark.parametrize("register, at, size, depth, iterations", [
    ("dmabuf", "1ms", "1MiB", 16, 1000),
    ("dmabuf", "300us", "64KiB", 32, 3000),
    ("dmabuf", "700us", "4KiB", 64, 20000),
    ("dmabuf-pinned", "500us", "64KiB", 16, 2000),
    ("dmabuf-pinned", "2ms", "1MiB", 8, 600)])
def test_a_revoked_source_fails_its_stream_exactly_as_the_event_engine(register, at, size, depth, iterations):
    """The revocation lands mid-window: the failed WRITE has later ones in flight (posted before it completed),
    which are flushed at their source or at the requester; statuses, times and counters are the event engine's."""
    event, fast = same_runs(revoked(register, at, [size], depth, iterations))
    assert fast.engine == "fast"
    ops = fast.operations
    failed = int((~ops["ok"]).to_numpy().argmax())
    assert list(ops["status"].iloc[failed:failed + 2]) == list(REVOKED)
    assert set(ops["status"].iloc[failed + 1:]) == {REVOKED[1]} and ops["ok"].iloc[:failed].all()
    assert ops["posted_ps"].iloc[failed + 1] < ops["completed_ps"].iloc[failed]  # later ones were in flight


@pytest.mark.parametrize("register", ["dmabuf", "dmabuf-pinned"])
def test_a_stream_that_starts_after_the_revocation_fails_from_its_first_work_request(register):
    """A workload from host memory runs first; the revoked buffer's stream comes after it: its first access
    fails, every later one is flushed, and the workload before it is untouched."""
    data = revoked(register, "1.5ms", ["64KiB"], 16, 2000)
    data["buffers"].append({"name": "host", "on": "a.host", "size": "64MiB"})
    data["workload"].insert(0, {"kind": "write_bw", "name": "first", "from": "host", "to": "sink",
                                "sizes": ["64KiB"], "iterations": 2000, "tx_depth": 16})
    _, fast = same_runs(data)
    assert fast.engine == "fast"
    ops = fast.operations.set_index("workload")
    assert ops.loc["first", "ok"].all()
    assert list(ops.loc["write_bw", "status"]) == [REVOKED[0]] + [REVOKED[1]] * 1999


@pytest.mark.parametrize("name", ["dmabuf_revoke.yaml", "pinned_revocable.yaml", "exporter_faults.yaml"])
def test_the_shipped_revocations_run_on_the_vectorized_core(name):
    """Each variant: ``auto`` solves it on the core, saying so, with the event engine's tables and counters
    (exporter_faults.yaml's failed map after a move, its send queue stopped there)."""
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / name)
    for variant, scenario in variants:
        lines: list[str] = []
        auto = run_scenario(scenario.model_copy(update={"engine": "auto"}), variant=variant, notice=lines.append)
        event = run_scenario(scenario.model_copy(update={"engine": "event"}), variant=variant)
        assert any("vectorized core ran" in line for line in lines), lines
        for table in ("operations", "summary", "events", "registrations"):
            assert getattr(auto, table).equals(getattr(event, table)), (variant, table)
        assert auto.counters == event.counters and not auto.operations["ok"].all()


def _refused(scenario: Scenario, says: str) -> None:
    """``engine: fast`` refuses ``scenario`` saying what the pattern ``says`` matches; ``auto`` says it and gives the
    event engine's operations."""
    def run(engine: str, **options):
        return run_scenario(scenario.model_copy(update={"engine": engine}), **options)

    with pytest.raises(OutsideDomain, match=says):
        run("fast")
    lines: list[str] = []
    auto = run("auto", notice=lines.append)
    assert any(re.search(says, line) and "event engine simulates that" in line for line in lines), lines
    assert auto.operations.equals(run("event").operations)


@pytest.mark.parametrize("register, at, sizes", [
    ("dmabuf", "1ms", ["1MiB", "2MiB"]),
    ("dmabuf", "300us", ["4KiB", "64KiB", "1MiB"]),
    ("dmabuf", "1.2ms", ["4KiB", "64KiB", "1MiB"]),
    ("dmabuf-pinned", "500us", ["64KiB", "256KiB"])])
def test_a_failure_before_the_last_size_flushes_every_later_size_as_the_event_engine(register, at, sizes):
    """ib_write_bw's loop goes on to the next message size with its QP in the error state: the requester flushes
    every work request of it (mlx5 completes a WQE posted to a QP in IBV_QPS_ERR with IBV_WC_WR_FLUSH_ERR)."""
    _, fast = same_runs(revoked(register, at, sizes, 16, 1000))
    assert fast.engine == "fast"
    by_size = [set(got) for _, got in fast.operations.groupby("bytes", sort=False)["status"]]
    first = next(k for k, got in enumerate(by_size) if got != {"IBV_WC_SUCCESS"})
    assert REVOKED[0] in by_size[first] and first < len(sizes) - 1
    assert all(got == {REVOKED[1]} for got in by_size[first + 1:])


WRITE_NS = {"4KiB": 90, "64KiB": 1_400, "1MiB": 21_000}
"""About the time one WRITE of each size takes on the 400 Gb/s link (ns; four times that at 100 Gb/s)."""


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), register=st.sampled_from(["dmabuf", "dmabuf-pinned"]),
       sizes=st.lists(st.sampled_from(sorted(WRITE_NS)), min_size=1, max_size=3, unique=True),
       depth=st.sampled_from([1, 8, 64]), iterations=st.integers(50, 600))
def test_a_revocation_at_any_time_fails_the_stream_exactly_as_the_event_engine(data, register, sizes, depth,
                                                                               iterations):
    """VFIO revokes the source at a random time before, during or after a stream of one to three message sizes:
    ``auto`` runs it on the vectorized core, every table and counter the event engine's."""
    sizes = sorted(sizes, key=WRITE_NS.get)
    span = sum(WRITE_NS[size] for size in sizes) * iterations * (4 if register == "dmabuf-pinned" else 1)
    at = data.draw(st.integers(0, span + span // 10), label="revoked, ns after the stream starts")
    _, fast = same_runs(revoked(register, f"{at}ns", sizes, depth, iterations))
    assert fast.engine == "fast"


def test_a_revocation_after_the_last_access_changes_nothing_the_run_sees():
    """VFIO revokes the buffer of a revocable pinned importer after the stream's last access of it, while its last
    WRITEs complete (drawn by the property above): no work request meets it, the run is solved as it was, and the
    testbed keeps the revoked buffer."""
    _, fast = same_runs(revoked("dmabuf-pinned", "111517ns", ["4KiB"], 8, 308))
    assert fast.engine == "fast" and fast.operations["ok"].all()
    assert "revoked" in " ".join(fast.events["outcome"].astype(str))


def test_errors_the_core_does_not_follow_stay_on_the_event_engine():
    """READ responses landing in a revoked buffer run on the event engine."""
    _refused(Scenario.model_validate(revoked("dmabuf", "1ms", ["1MiB"], 16, 1000, kind="read_bw")),
             "which the vectorized core follows only for a WRITE stream of one RC QP")


def faulted_exporter(size: str, depth: int, iterations: int, fail_at: str, move_at: str) -> dict:
    """``scenarios/exporter_faults.yaml``'s testbed: a dynamic (amdgpu-like) exporter whose map fails once (EIO)
    after the invalidation at ``fail_at``; at ``move_at`` it moves the buffer to system memory under a WRITE
    stream."""
    nodes = [{"name": "a", "nic": {"preset": "connectx7"}, "gpus": [{"preset": "mi300x", "memory": "1GiB"}],
              "kernel": {"version": "7.1"}}, {"name": "b", "nic": {"preset": "connectx7"}}]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "16MiB", "register": "dmabuf"},
               {"name": "dst", "on": "b.host", "size": "16MiB", "register": "pinned"}]
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": [size], "iterations": iterations,
             "tx_depth": depth}]
    events = [{"at": fail_at, "kind": "exporter-fault", "buffer": "src", "fault": "fail-map-after-invalidate",
               "errno": "EIO"}, {"at": move_at, "kind": "exporter-fault", "buffer": "src", "fault": "move",
                                 "to": "system"}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=events, seed=9,
                         fabric={"rate": "400Gb/s", "latency": "300ns"})


@pytest.mark.parametrize("size, depth, iterations, fail_at, move_at", [
    ("64KiB", 16, 6000, "200us", "300us"),
    ("1MiB", 8, 600, "500us", "1ms"),
    ("256KiB", 64, 3000, "50us", "60us")])
def test_a_failed_remap_stops_the_send_queue_exactly_as_the_event_engine(size, depth, iterations, fail_at, move_at):
    """The re-map after the move to system memory fails once (EIO) and that WRITE completes IBV_WC_LOC_PROT_ERR; the
    driver resumes its fault with an error, so its send queue stops there (mlx5 completes the WQE in error, rxe
    moves the QP to ERR at its requester's ``err:`` label): no later WRITE reaches the buffer, though the exporter's
    next map would succeed, and each is flushed. Every table and counter is the event engine's."""
    event, fast = same_runs(faulted_exporter(size, depth, iterations, fail_at, move_at))
    assert fast.engine == "fast"
    ops = fast.operations
    failed = int((~ops["ok"]).to_numpy().argmax())
    assert ops["status"].iloc[failed] == WcStatus.LOC_PROT_ERR.ibv_name
    assert set(ops["status"].iloc[failed + 1:]) == {WcStatus.WR_FLUSH_ERR.ibv_name}
    for result in (event, fast):  # no access re-faulted after the failed one (that re-map would have succeeded)
        assert result.testbed.registrations["src"].mr.backing.faults == 0


@pytest.mark.parametrize("check", ["requester", "source"])
def test_a_failure_is_numbered_on_from_its_check_in_both_engines(check):
    """What a failing check puts in the place of the rest of a work request (Path.failure, after the CQE write) is
    numbered on from the check (Path.at) in the event engine's program, and :func:`failing` gives the vectorized
    core the same position for its claim."""
    scenario = Scenario.model_validate(revoked("dmabuf", "1ms", ["1MiB"], 16, 10))
    bed = setup_run(scenario, scenario.seed)[0]
    end = streams(scenario, bed)[0]
    found = work_request_path(end.src.qp, work_request(0, Opcode.RDMA_WRITE, end.src, end.dst, 1 << 20, False), 0)
    engine = [step[1] for step in found.failed[check] if step[0] in (CLAIMS, TURN)]
    steps = failing(found, check)
    claims = [k for k, s in enumerate(walk_order(steps)) if isinstance(s, Claim)]
    assert engine == [found.at[check] + 1] == [claim_wpos(steps)[k] for k in claims[-len(engine):]]


def test_the_split_follows_where_the_send_queue_stops():
    """The send queue stops when the failed access is answered: a requester check after that flushes, one before it
    lets its work request reach the source, where it is flushed. A solve that puts the first flush elsewhere is solved
    again with it; a later work request reaching the source before the failure, or a requester check at the very
    time the send queue stops, cannot be settled."""
    marks = {"local": np.array([10, 20, 30, 40, 50, NONE, NONE]), REQUESTER: np.array([5, 15, 25, 28, 35, 60, 70])}
    assert first_flushed(2, 30, marks) == 4  # operation 3's check (28) came before the failure at 30, 4's (35) after
    assert Failure("bar", 0, 4096, 2, 30, 25, WcStatus.LOC_PROT_ERR, 5).settled(marks) == 4
    assert Failure("bar", 0, 4096, 2, 30, 25, WcStatus.LOC_PROT_ERR, 4).settled(marks) is None
    marks["local"][3] = 29
    assert "at another time" in Failure("bar", 0, 4096, 2, 30, 25, WcStatus.LOC_PROT_ERR, 4).settled(marks)
    marks["local"][3], marks[REQUESTER][3] = 40, 30
    assert "as its send queue stops" in Failure("bar", 0, 4096, 2, 30, 25, WcStatus.LOC_PROT_ERR, 4).settled(marks)

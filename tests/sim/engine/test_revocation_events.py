"""dmabuf-revoke and exporter-fault events in scenarios: what the run reports, the schema's checks, both engines."""

import re

import pandas as pd
import pytest

from sim.engine.build import RegistrationFailed
from sim.core import DeadlockError, InvariantViolation, UnboundedWait
from sim.engine.run import run_scenario
from sim.scenario.refs import check_references
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


def bed(events, *, nic=None, register="dmabuf", exporter="vfio", version="7.1", iterations=400, extra_buffer=False,
        engine="event", invariants="raise") -> Scenario:
    """Node a's GPU buffer 'src' (4 MiB) written to node b's host buffer 'dst', 64 KiB at a time."""
    gpu = {"preset": "mi300x", "memory": "1GiB"} | ({"exporter": exporter} if exporter else {})
    buffers = [{"name": "src", "on": "a.gpu0", "size": "4MiB", "register": register},
               {"name": "dst", "on": "b.host", "size": "4MiB"}]
    if extra_buffer:
        buffers.append({"name": "idle", "on": "a.gpu0", "size": "4MiB", "register": register})
    nodes = [{"name": "a", "gpus": [gpu], "kernel": {"version": version}, **({"nic": nic} if nic else {})},
             {"name": "b", **({"nic": {"preset": nic["preset"]}} if nic else {})}]
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": iterations,
             "tx_depth": 16}]
    return Scenario.model_validate(scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=events,
                                                 engine=engine, invariants=invariants))


REVOKE = {"at": "100us", "kind": "dmabuf-revoke", "buffer": "src"}


def statuses(result) -> dict:
    """How many operations failed with each completion status."""
    counts = result.operations.loc[~result.operations["ok"], "status"].astype(str).value_counts()
    return counts[counts > 0].to_dict()


@pytest.mark.parametrize("nic, register", [(None, "dmabuf"), ({"preset": "efa", "dmabuf_revocable": True},
                                                              "dmabuf-pinned")])
def test_a_buffer_revoked_mid_stream_fails_the_next_access_and_flushes_the_rest(nic, register):
    result = run_scenario(bed([REVOKE], nic=nic, register=register))
    ops = result.operations
    failed = statuses(result)
    assert failed.get("IBV_WC_LOC_PROT_ERR") == 1 and failed.get("IBV_WC_WR_FLUSH_ERR", 0) > 0
    first_error = ops.loc[~ops["ok"], "posted_ps"].min()
    assert ops.loc[ops["ok"], "posted_ps"].max() < first_error          # no success after the failure
    outcome = result.events.set_index("kind").loc["dmabuf-revoke", "outcome"]
    assert outcome.startswith("revoked: every importer unmapped")
    mr = result.testbed.registrations["src"].mr
    assert mr.pd.context.node.nic.lookup(mr.lkey) is mr                 # the key stays until ibv_dereg_mr


@pytest.mark.parametrize("version, rule", [("7.0", "a.gpu0 refuses pinned importers"),
                                           ("7.1", "dma_buf_attach_revocable")])
def test_a_pinned_importer_that_cannot_be_revoked_is_refused_with_eopnotsupp(version, rule):
    with pytest.raises(RegistrationFailed, match=f"EOPNOTSUPP.*{rule}"):
        run_scenario(bed([REVOKE], nic={"preset": "efa"}, register="dmabuf-pinned", version=version))


def test_revoking_a_buffer_whose_exporter_cannot_revoke_fails_the_event_only():
    result = run_scenario(bed([REVOKE], exporter="amd"))
    outcome = result.events.set_index("kind").loc["dmabuf-revoke", "outcome"]
    assert outcome.startswith("failed: the amd exporter of 'src' cannot revoke") and result.operations["ok"].all()


def test_an_importer_that_breaks_the_bounded_time_promise_stops_the_run_or_is_counted():
    broken = {"preset": "connectx7", "ignore_move_notify": True}
    late = [REVOKE | {"bound": "50us"}]
    with pytest.raises(InvariantViolation, match=r"a\.nic \(revocable: it has invalidate_mappings\) still mapped"):
        run_scenario(bed(late, nic=broken))
    result = run_scenario(bed(late, nic=broken, invariants="record"))
    assert result.counters["invariant_violations"] == 1
    assert "WARN: a.nic still mapped the buffer 50us" in result.events.set_index("kind").loc["dmabuf-revoke",
                                                                                             "outcome"]


def test_an_exporter_holding_its_lock_stalls_the_refault_by_the_hold():
    hold = [{"at": "100us", "kind": "exporter-fault", "buffer": "src", "fault": "invalidate-and-hold", "hold": h}
            for h in ("0us", "300us")]
    worst = [run_scenario(bed([event], exporter="amd")).operations["latency_ps"].max() for event in hold]
    assert worst[1] - worst[0] >= 300 * 10**6 * 0.95


@pytest.mark.parametrize("fault, error, says", [
    ({"fault": "block-map"}, UnboundedWait, "never returns"),
    ({"fault": "invalidate-and-hold"}, DeadlockError, "never wakes"),
])
def test_importer_hangs_are_named(fault, error, says):
    events = [{"at": "100us", "kind": "exporter-fault", "buffer": "src", "fault": "invalidate-and-hold",
               "hold": "0us"}] if fault["fault"] == "block-map" else []
    events = [{"at": "50us", "kind": "exporter-fault", "buffer": "src"} | fault] + events
    with pytest.raises(error, match=says):
        run_scenario(bed(events, exporter="amd"))


def test_a_move_under_an_importer_that_ignores_it_is_a_stale_access():
    move = [{"at": "100us", "kind": "exporter-fault", "buffer": "src", "fault": "move", "to": "system"}]
    with pytest.raises(InvariantViolation, match="stale mapping"):
        run_scenario(bed(move, exporter="amd", nic={"preset": "connectx7", "ignore_move_notify": True}))


def test_the_schema_asks_for_what_each_fault_needs_and_a_dma_buf_buffer():
    with pytest.raises(ValueError, match="fault 'delay-map' needs 'delay'"):
        bed([{"at": "1us", "kind": "exporter-fault", "buffer": "src", "fault": "delay-map"}])
    scenario = bed([REVOKE | {"buffer": "dst"}])
    assert [p for _, p in check_references(scenario)] == ["'dst' is not registered from a dma-buf (register: dmabuf "
                                                          "or dmabuf-pinned)"]


def test_revocation_on_both_engines():
    """Revoking a buffer the workloads never touch changes nothing they see: the vectorized core runs it, with the
    event engine's every row. Revoking the stream's source makes its next access fail and the QP flush the rest:
    the vectorized core follows that too, with the same rows and counters."""
    idle = [REVOKE | {"buffer": "idle"}]
    runs = [run_scenario(bed(idle, extra_buffer=True, engine=engine, iterations=2000)) for engine in ("event", "fast")]
    for table in ("operations", "summary", "events"):
        pd.testing.assert_frame_equal(getattr(runs[1], table), getattr(runs[0], table))
    assert runs[0].events.set_index("kind").loc["dmabuf-revoke", "outcome"].startswith("revoked")
    lines = []
    auto = run_scenario(bed([REVOKE], engine="auto", iterations=2000), notice=lines.append)
    event = run_scenario(bed([REVOKE], iterations=2000))
    assert len(lines) == 1 and "vectorized core ran" in lines[0]
    for table in ("operations", "summary", "events"):
        pd.testing.assert_frame_equal(getattr(auto, table), getattr(event, table))
    assert auto.counters == event.counters and statuses(auto).get("IBV_WC_LOC_PROT_ERR") == 1


@pytest.mark.parametrize("name, variant, shown", [
    ("dmabuf_revoke.yaml", "irdma-like", ["vfio_pci_dma_buf_move", "KeyInvalidated", "BufferRevoked",
                                          "takes it as a permanent revocation", "accepts revocation"]),
    ("exporter_faults.yaml", "base", ["FaultInjector.invalidate_and_hold", "MappingRestored"])])
def test_explain_shows_the_revocation_and_the_injected_fault_each_outcome_with_its_why(name, variant, shown):
    from sim.inspect.explain import explain
    from sim.scenario.scenario_file import load_scenario_variants
    from tests.conftest import ROOT

    _, _, variants = load_scenario_variants(ROOT / "scenarios" / name)
    scenario = dict(variants)[variant]
    text = explain(run_scenario(scenario, trace=True, variant=variant))
    assert all(words in text for words in shown), text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s+\d+\.\d{3} µs", line) and not line.rstrip().endswith("]") \
                and not re.search(r"\b(un)?lock \S+$", line):
            assert lines[i + 1].lstrip().startswith("why: "), line


def test_a_fault_on_a_buffer_already_released_fails_the_event_only():
    events = [{"at": "20us", "kind": "process-exit", "node": "a"},
              {"at": "25us", "kind": "exporter-fault", "buffer": "src", "fault": "hold-lock", "hold": "10us"}]
    result = run_scenario(bed(events, exporter="amd"))
    outcome = result.events.set_index("kind").loc["exporter-fault", "outcome"]
    assert outcome.startswith("failed: FaultInjector: dmabuf1 was released"), outcome

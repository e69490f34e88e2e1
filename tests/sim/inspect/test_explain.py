"""``sim.inspect.explain`` and ``sim.inspect.timeline``: one section per registration mode, fence waits where they
end, lock nesting, the queued note only for accesses, one line of why per outcome, µs everywhere."""

from __future__ import annotations

import re
from functools import cache

import pytest

from sim.core.trace import TraceEvent
from sim.inspect.explain import explain, first_accesses_only
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from sim.inspect.timeline import collapse, sections
from tests.conftest import ROOT, nic_for

MODES = {"pinned": "a.host", "odp": "a.host", "peermem": "b.gpu0", "dmabuf": "a.gpu0", "dmabuf-pinned": "a.gpu0"}
"""Where each mode's buffer is: peer memory on an NVIDIA GPU, the only one a peer-memory client claims."""


def every_mode(move_notify: bool = True) -> Scenario:
    """One buffer of each registration mode on node a (peer memory on b's NVIDIA GPU), a pinned sink on b, a short
    write stream. Node a has a ConnectX-8: its data-direct function registers the pinned dma-buf MR."""
    return Scenario.model_validate({
        "schema": 1, "name": "modes", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"name": "gpu0", "preset": "mi300x", "memory": "8GiB"}],
                   "kernel": {"dmabuf_move_notify": move_notify}, "host": {"prefaulted": False},
                   "nic": nic_for("dmabuf-pinned")},
                  {"name": "b", "gpus": [{"name": "gpu0", "preset": "h200", "memory": "8GiB"}]}],
        "buffers": [{"name": mode, "on": on, "size": "1MiB", "register": mode} for mode, on in MODES.items()]
        + [{"name": "sink", "on": "b.host", "size": "1MiB"}],
        "workload": [{"kind": "write_bw", "from": "odp", "to": "sink", "sizes": ["64KiB"], "iterations": 20}]})


@cache
def traced(move_notify: bool = True):
    return run_scenario(every_mode(move_notify), trace=True)


@cache
def shipped(variant: str):
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "pin_vs_dmabuf.yaml")
    return run_scenario(dict(variants)[variant], trace=True, variant=variant)


def _section(text: str, buffer: str) -> str:
    return text.split(f"Registration of '{buffer}'")[1].split("\n\n")[0]


@pytest.mark.parametrize("mode, shown, absent", [
    ("pinned", ["ibv_reg_mr(", "pin_user_pages(pages=256)", "mtt_entries=256", "RLIMIT_MEMLOCK"], ["dma_buf"]),
    ("odp", ["ibv_reg_mr(", "ON_DEMAND", "mlx5_ib_init_odp_mr(pages=0)", "mtt_entries=0", "first touch"],
     ["pin_user_pages"]),
    ("peermem", ["ibv_reg_mr(", "nvidia_p2p_get_pages(gpu_pages=16)", "mtt_entries=16"], ["pin_user_pages"]),
    ("dmabuf", ["dma_buf_export", "dma_buf_dynamic_attach", "lock dmabuf", "dma_buf_map_attachment",
                "MappingRestored"], ["dma_buf_pin", "BufferPinned"]),
    ("dmabuf-pinned", ["dma_buf_export", "dma_buf_pin(", "BufferPinnedIn", "dma_buf_map_attachment"],
     ["BufferPinned ("]),
])
def test_every_registration_mode_has_its_section_with_its_own_calls(mode, shown, absent):
    section = _section(explain(traced()), mode)
    assert f"{mode} on {MODES[mode]}" in section.splitlines()[0]
    for word in shown:
        assert word in section, (word, section)
    for word in absent:
        assert word not in section, (word, section)


def test_without_move_notify_the_map_pins_the_dynamic_buffer_and_says_why():
    section = _section(explain(traced(move_notify=False)), "dmabuf")
    assert "CONFIG_DMABUF_MOVE_NOTIFY off" in section
    pinned = section.index("BufferPinned (")
    assert section.index("dma_buf_map_attachment") < pinned and "why:" in section[pinned:].splitlines()[1]
    assert "BufferPinned" not in _section(explain(traced()), "dmabuf")


def test_odp_without_memory_event_shows_its_first_faults():
    text = explain(traced())
    run = text.split("No memory event came; the first access that faulted")[1]
    assert "AccessStalled" in run and "until=" in run


def test_a_fence_wait_is_shown_when_it_ends_with_the_time_waited():
    result = shipped("dmabuf")
    raw = [e for e in result.testbed.env.trace.events if e.name == "FencesWaited" and e.args["until_ps"] > e.time_ps]
    assert len(raw) == 1
    wait = raw[0]
    line = next(line for line in explain(result).splitlines() if "FencesWaited" in line
                and "waited=0.000" not in line)
    assert float(line.split()[0]) == pytest.approx(wait.args["until_ps"] / 1e6, abs=1e-3)
    assert f"waited={(wait.args['until_ps'] - wait.time_ps) / 1e6:.3f} µs" in line


def test_calls_made_under_a_lock_are_indented_right_of_the_lock_and_the_unlock_comes_back():
    lines = explain(shipped("dmabuf")).split("First memory event")[1].splitlines()
    indent = lambda line: len(line) - len(line[24:].lstrip())  # noqa: E731 - after time and component
    lock = next(i for i, line in enumerate(lines) if line.endswith("lock dmabuf1.resv") and "unlock" not in line)
    notify = next(i for i, line in enumerate(lines) if "dma_buf_move_notify(" in line)
    unlock = next(i for i, line in enumerate(lines) if line.endswith("unlock dmabuf1.resv"))
    assert lock < notify < unlock
    assert indent(lines[notify]) > indent(lines[lock]) and indent(lines[unlock]) < indent(lines[notify])


def _event(name: str, t: int, **args) -> TraceEvent:
    return TraceEvent(t, "x", name, None, args)


def test_the_queued_note_is_only_for_accesses_that_waited_for_the_same_fault():
    stalls = collapse([_event("AccessStalled", t, until_ps=900) for t in (1, 2, 3)])
    faults = collapse([_event("FaultBatchServiced", t, faults=4) for t in (1, 2, 3)])
    different = collapse([_event("AccessStalled", t, until_ps=900 + t) for t in (1, 2)])
    assert [(e.count, e.queued) for e in stalls] == [(3, True)]
    assert [(e.count, e.queued) for e in faults] == [(3, False)] and faults[0].last_ps == 3
    assert [e.count for e in different] == [1, 1]


def test_one_outcome_recorded_by_two_layers_at_once_is_one_line_with_both_arguments():
    merged = collapse([_event("AllocationFailed", 5, bytes=8, largest_free=4), _event("AllocationFailed", 5, bytes=8,
                                                                                         free=6)])
    assert len(merged) == 1 and merged[0].event.args == {"bytes": 8, "largest_free": 4, "free": 6}


@pytest.mark.parametrize("variant, why", [
    ("peermem", "allocation failed: 1GiB of this GPU pinned by a.nic through peermem"),
    ("dmabuf-pinned", "allocation failed: 1GiB of this GPU pinned by a.nic through dmabuf-pinned"),
    ("dmabuf", "move_notify: a.nic zaps its translation"),
])
def test_each_outcome_says_why(variant, why):
    assert why in explain(shipped(variant))


def test_every_time_is_in_microseconds_with_its_unit():
    text = explain(shipped("dmabuf")) + explain(traced())
    assert "_ps" not in text and " us " not in text
    timed = [line for line in text.splitlines() if re.match(r"\s+\d", line)]
    assert len(timed) > 20 and all(re.match(r"\s+\d+\.\d{3} µs  ", line) for line in timed)
    assert re.search(r"\[\d+\.\d{3} µs\]", text)


def test_with_variants_the_first_line_says_which_one_and_how_to_pick_another():
    names = ["peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify"]
    first = explain(shipped("dmabuf"), names).splitlines()[0]
    assert first.startswith("Variant 'dmabuf' (2 of 4: peermem, dmabuf") and "--variant NAME" in first
    assert not explain(traced(), ["base"]).startswith("Variant")


def test_each_registration_section_holds_what_its_calls_recorded_even_at_the_boundary():
    parts = {s.registration.buffer: s for s in sections(shipped("dmabuf").testbed) if s.registration}
    names = lambda buffer: [e.event.name for e in parts[buffer].entries]  # noqa: E731
    assert names("src")[-1] == "dma_buf_put"  # close(fd) ends where the next registration begins
    assert "dma_buf_put" not in names("dst") and names("dst")[0] == "ibv_reg_mr"


def test_a_scenario_without_events_is_explained_at_each_workloads_first_size_only_on_the_event_engine():
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "quickstart.yaml")
    quick = variants[0][1]
    trimmed = first_accesses_only(quick)
    assert [w.size_list() for w in trimmed.workload] == [w.size_list()[:1] for w in quick.workload]
    assert len(quick.workload[0].size_list()) > 1
    pressure = dict(load_scenario_variants(ROOT / "scenarios" / "pin_vs_dmabuf.yaml")[2])["dmabuf"]
    assert first_accesses_only(pressure) == pressure.model_copy(update={"engine": "event"})
    assert quick.engine == "auto" and trimmed.engine == "event"


def test_no_outcome_goes_without_its_line_of_why():
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "managed_pressure.yaml")
    managed = run_scenario(variants[0][1], trace=True, variant=variants[0][0])
    for result in (managed, shipped("dmabuf"), shipped("peermem"), traced(), traced(move_notify=False)):
        lines = explain(result).splitlines()
        outcomes = [i for i, line in enumerate(lines) if re.match(r"\s+\d+\.\d{3} µs", line)
                    and not line.rstrip().endswith("]") and not re.search(r"\b(un)?lock \S+$", line)]
        assert outcomes
        for i in outcomes:
            assert lines[i + 1].lstrip().startswith("why: "), lines[i]


def test_move_notify_sent_before_anything_is_mapped_is_not_called_a_zap():
    """The pin on map of a kernel without CONFIG_DMABUF_MOVE_NOTIFY moves the buffer into GTT during the importer's
    first map; mlx5_ib_dmabuf_invalidate_cb (drivers/infiniband/hw/mlx5/mr.c) returns when ``!umem_dmabuf->sgt``."""
    text = explain(shipped("dmabuf-no-move-notify"))
    section = _section(text, "src")
    line = next(i for i, l in enumerate(section.splitlines()) if "MappingInvalidated" in l)
    why = section.splitlines()[line + 1]
    assert "live_mappings=0" in section.splitlines()[line]
    assert "no zap" in why and "next access faults" not in why


def test_a_window_in_which_nothing_was_lost_does_not_say_it_was_not_restored():
    text = explain(shipped("dmabuf-no-move-notify"))
    assert "not restored" not in text and "no translation was lost in them" in text


def test_a_buffer_pinned_into_gtt_holds_no_vram():
    from sim.inspect.compare import comparison_table
    runs = [shipped(v) for v in ("peermem", "dmabuf-no-move-notify", "dmabuf-pinned")]
    table = comparison_table(runs).set_index("variant")
    gib = 1 << 30
    assert table.loc["dmabuf-no-move-notify", "gpu_pinned_bytes"] == 0                 # its VRAM is free
    assert table.loc["dmabuf-no-move-notify", "pinned_bytes"] == 2 * gib                # pinned, in system memory
    assert table.loc["dmabuf-pinned", "gpu_pinned_bytes"] == table.loc["peermem", "gpu_pinned_bytes"] == gib


def test_a_dynamic_registration_on_a_static_exporter_says_it_never_moves_in_run_and_explain():
    """nv_dma_buf has no pin op: a dynamic importer's buffer never moves (no move_notify)."""
    scn = Scenario.model_validate({
        "schema": 1, "name": "static", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": "h200", "memory": "8GiB"}]}, {"name": "b"}],
        "buffers": [{"name": "src", "on": "a.gpu0", "size": "1MiB", "register": "dmabuf"},
                    {"name": "dst", "on": "b.host", "size": "1MiB"}],
        "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 20}]})
    result = run_scenario(scn, trace=True)
    events = result.events
    outcome = events.loc[events["kind"] == "registration", "outcome"].item()
    assert "static" in outcome and "never" in outcome
    note = _section(explain(result), "src").splitlines()[2]
    assert "static" in note and "may move" not in note


@pytest.mark.parametrize("name, variant, failed, effect", [
    ("dmabuf_revoke.yaml", "connectx7", "PageFaultFailed (errno=ENODEV)", "BufferRevoked"),
    ("dmabuf_revoke.yaml", "irdma-like", "AccessRefused (reason=its umem was revoked)", "KeyInvalidated"),
    ("pinned_revocable.yaml", "base", "AccessRefused (reason=its umem was revoked)", "KeyInvalidated")])
def test_a_revocation_ends_with_the_one_access_that_failed_after_it(name, variant, failed, effect):
    """After VFIO revokes the buffer, the timeline shows one access failing, once the revocation took effect (the
    re-map that fails with ENODEV; the first access after the revoke callback invalidated the key, though the
    exporter's call began earlier), and none after it: the send queue stopped there, so the work requests in flight
    are flushed without faulting each in turn."""
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / name)
    scenario = first_accesses_only(dict(variants)[variant])
    text = explain(run_scenario(scenario, trace=True, variant=variant))
    run = text.split("First memory event")[1]
    assert run.count(failed) == 1 and run.count("PageFaulted") <= 1
    assert run.index(effect) < run.index(failed)
    assert "the send queue stops there" in run.split(failed)[1].splitlines()[1]

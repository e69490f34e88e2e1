"""The shipped pinned-vs-ODP scenario (scenarios/pinned_vs_odp.yaml): what each registration pays and where,
while the host migrates the buffer's pages."""

import pytest

from models.ib.implicit_odp import child_create_ps, ksm_update_ps, parent_create_ps
from models.nic.nic import NicParams, OdpParams
from models.presets import NIC_PRESETS
from models.verbs.advise import ADVISE_MR_IOCTL_PS
from models.verbs.mr import REG_MR_FIXED_PS
from sim.core.errors import ConfigErrors
from sim.engine.run import run_scenario
from sim.scenario.loader import validate
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from sim.scenario.yaml_reader import load_yaml

ODP = OdpParams()
PAGE = 4096
FIRST_FAULT_PS = ODP.fault_ps + ODP.fault_granularity // PAGE * ODP.fault_page_ps
"""The closed form of the stream's first fault: one 64 KiB span of never-mapped pages."""


@pytest.fixture(scope="module")
def results():
    _, _, variants = load_scenario_variants("scenarios/pinned_vs_odp.yaml")
    return {name: run_scenario(scenario, variant=name) for name, scenario in variants}


def _first_latency_ps(result) -> int:
    ops = result.operations.sort_values(["posted_ps", "iteration"])
    return int(ops["latency_ps"].iloc[0])


def test_every_variant_completes_every_write_and_the_migration_outcomes_follow_the_pin(results):
    for name, result in results.items():
        assert result.operations["ok"].all(), name
        outcome = result.events.set_index("kind").loc["host-page-migration", "outcome"]
        assert outcome.startswith("blocked" if name == "pinned" else "invalidated"), name


def test_faults_pinned_none_odp_two_prefetch_removes_only_the_first(results):
    refaults = {name: r.counters["refaults"] for name, r in results.items()}
    assert refaults == {"pinned": 0, "odp": 2, "odp-prefetch": 1, "odp-no-fault": 2, "odp-implicit": 2}
    assert all(r.counters["rnr_naks"] == 0 for r in results.values())


def test_the_first_write_pays_the_fault_unless_prefetched(results):
    odp, prefetched = _first_latency_ps(results["odp"]), _first_latency_ps(results["odp-prefetch"])
    assert odp - prefetched == pytest.approx(FIRST_FAULT_PS, rel=0.02)
    assert _first_latency_ps(results["odp-no-fault"]) == odp
    assert prefetched == pytest.approx(_first_latency_ps(results["pinned"]), rel=0.01)


def test_an_implicit_mr_pays_for_its_child_at_the_first_fault_and_again_after_the_migration(results):
    nic = NicParams(**NIC_PRESETS["connectx7"])
    build = child_create_ps(nic.umr, PAGE) + ksm_update_ps(nic.umr, 1)
    assert _first_latency_ps(results["odp-implicit"]) - _first_latency_ps(results["odp"]) == build
    src = results["odp-implicit"].registrations.set_index("buffer").loc["src"]
    assert src["register_us"] * 1e6 == REG_MR_FIXED_PS + parent_create_ps(nic.umr)
    worst = results["odp-implicit"].operations["latency_ps"].nlargest(2)
    assert (worst > build).all() and not (results["odp"].operations["latency_ps"] > build).any()


def test_pinning_costs_registration_time_and_pinned_memory_odp_costs_neither(results):
    def src(name):
        return results[name].registrations.set_index("buffer").loc["src"]
    assert src("pinned")["pinned_bytes"] == 64 << 20 and src("odp")["pinned_bytes"] == 0
    assert src("pinned")["register_us"] > 100 * src("odp")["register_us"]


def test_the_prefetch_delays_the_stream_by_the_advice_alone(results):
    start = {name: int(r.operations["posted_ps"].min()) for name, r in results.items()}
    whole = ADVISE_MR_IOCTL_PS + ODP.fault_ps + (64 << 20) // PAGE * ODP.fault_page_ps
    assert start["odp-prefetch"] - start["odp"] == whole
    assert start["odp-no-fault"] - start["odp"] == ADVISE_MR_IOCTL_PS + ODP.fault_ps


BASE = ("schema: 1\nname: t\nnodes: [{name: a}, {name: b}]\nbuffers:\n"
        "  - {name: src, on: a.host, size: 1MiB, SRC}\n  - {name: dst, on: b.host, size: 1MiB}\n"
        "workload:\n  - {kind: write_bw, from: src, to: dst, sizes: [8B]}\n")


@pytest.mark.parametrize("src, key, words", [
    ("register: pinned, advise: {advice: prefetch}", "buffers[0].advise", "ODP MRs only"),
    ("register: pinned, implicit: true", "buffers[0].implicit", "an implicit MR is an ODP MR"),
    ("register: odp, implicit: yes-please", "buffers[0].implicit", "bool"),
    ("register: odp, advise: {advice: prefetch_all}", "buffers[0].advise.advice", "prefetch_write"),
    ("register: odp, advise: {flush: 1}", "buffers[0].advise.flush", "bool"),
    ("register: odp, advise: {range: 4KiB}", "buffers[0].advise.range", "valid keys: advice, flush"),
])
def test_bad_advise_keys_are_reported_at_their_line(tmp_path, src, key, words):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("SRC", src))
    data, positions = load_yaml(path)
    with pytest.raises(ConfigErrors) as info:
        validate(Scenario, data, positions, str(path))
    (error,) = info.value.errors
    assert (error.file, error.line, error.key) == (str(path), 5, key) and words in error.reason, error.reason


def test_a_good_advise_key_validates(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("SRC", "register: odp, advise: {advice: prefetch_no_fault, flush: false}"))
    data, positions = load_yaml(path)
    scenario = validate(Scenario, data, positions, str(path))
    assert scenario.buffers[0].advise.advice == "prefetch_no_fault" and scenario.buffers[0].advise.flush is False

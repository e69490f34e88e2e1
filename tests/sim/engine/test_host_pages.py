"""The host page backing of a scenario: what registering costs, how many MTT entries a pinned MR needs, and the
translation-cache reach that follows (``scenarios/host_pages.yaml``)."""

import pandas as pd
import pytest

from models.host import HostParams
from models.nic.nic import UmrParams
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.conftest import ROOT, run_shipped_variants

GiB = 1 << 30


@pytest.fixture(scope="module")
def host_pages():
    return run_shipped_variants("host_pages.yaml")


def test_huge_pages_keep_a_large_mr_within_the_mtt_cache_reach(host_pages):
    _, table = host_pages
    assert table.loc["base-pages", "bw_avg_Gbps"] < 0.2 * table.loc["thp", "bw_avg_Gbps"]
    assert table.loc["thp", "bw_avg_Gbps"] == pytest.approx(table.loc["hugetlb", "bw_avg_Gbps"])


def test_huge_pages_register_faster_by_the_measured_pin_curves(host_pages):
    _, table = host_pages
    for pages in ("thp", "hugetlb"):
        assert table.loc[pages, "register_us"] < table.loc["base-pages", "register_us"] / 4
    entries = UmrParams().pinned_entry_ps * (6 * GiB // (2 << 20) - 6 * GiB // 4096)  # one per 2 MiB, per 4 KiB
    expected = 2 * (HostParams(pages="thp").pin_cost_ps(6 * GiB) - HostParams().pin_cost_ps(6 * GiB) + entries) / 1e6
    assert table.loc["thp", "register_us"] - table.loc["base-pages", "register_us"] == pytest.approx(expected)


@pytest.mark.parametrize("pages, entries", [("4k", 256), ("thp", 1), ("hugetlb", 1)])
def test_a_pinned_mr_gets_one_mtt_entry_per_backing_page(pages, entries):
    result = run_scenario(Scenario.model_validate({
        "schema": 1, "name": "p", "seed": 1,
        "nodes": [{"name": "a", "host": {"pages": pages}}, {"name": "b"}],
        "buffers": [{"name": "s", "on": "a.host", "size": "1MiB"}, {"name": "d", "on": "b.host", "size": "1MiB"}],
        "workload": [{"kind": "write_bw", "from": "s", "to": "d", "sizes": ["4KiB"], "iterations": 10}]}), trace=True)
    created = [e for e in result.testbed.env.trace.events if e.name == "MkeyCreated" and e.component == "a.nic"]
    assert [e.args["mtt_entries"] for e in created] == [entries]


def test_every_variant_runs_on_the_vectorized_core_with_the_event_engines_rows(host_pages):
    """The READ stream's first access misses the MPT and MTT caches at both ends (a detour of entry reads, or the
    deep-MR walk of every write beyond the reach): the vectorized core takes those translations from the caches
    before solving and gives the event engine's rows (sim.engine.planner.translations)."""
    results, _ = host_pages
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "host_pages.yaml")
    for name, variant in variants:
        event = run_scenario(variant.model_copy(update={"engine": "event"}), variant=name)
        assert (results[name].engine, results[name].fallback) == ("fast", None)
        pd.testing.assert_frame_equal(results[name].operations, event.operations)
        pd.testing.assert_frame_equal(results[name].summary, event.summary)

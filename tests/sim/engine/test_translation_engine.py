"""NIC translation caches and the IOMMU in the event engine (both opt-in)."""

import pytest

from models.nic.stages import dma_read, end_times
from models.nic.mtt_cache import MttParams, deep_lookup_ps
from models.pcie.link import PcieLink, PcieParams
from models.pcie.presets import PCIE_PRESETS
from sim.core import PS_PER_S
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario


def _run(dst_size, cache=True, iommu="off", kind="read_bw", iterations=300, size="1MiB", pcie=None):
    return run_scenario(Scenario.model_validate({
        "schema": 1, "name": "t", "seed": 1,
        "nodes": [{"name": "a", "nic": {"preset": "connectx5", "translation_cache": cache}, "iommu": iommu,
                   **({"pcie": pcie} if pcie else {})},
                  {"name": "b", "nic": {"preset": "connectx5", "translation_cache": cache}}],
        "buffers": [{"name": "local", "on": "a.host", "size": dst_size},
                    {"name": "far", "on": "b.host", "size": "64MiB"}],
        "workload": [{"kind": kind, "from": "local", "to": "far", "sizes": [size], "iterations": iterations}]}))


def test_a_nic_written_mr_past_4_gib_of_4_kib_pages_hits_the_translation_cliff():
    small = _run("3584MiB").summary["bw_avg_Gbps"].iloc[0] / 8
    large = _run("6GiB").summary["bw_avg_Gbps"].iloc[0] / 8
    off = _run("6GiB", cache=False).summary["bw_avg_Gbps"].iloc[0] / 8
    assert large == pytest.approx(6.0, rel=0.03)  # LMCache PR #4432: 6.0 GB/s into one MR > ~4 GiB
    assert small > 1.5 * large and off == pytest.approx(small, rel=0.02)


def test_past_the_reach_each_written_page_waits_on_one_entry_read_over_the_nics_link():
    slow = PcieParams(**PCIE_PRESETS["gen3x16"], read_latency_ps=1_000_000)
    rate = _run("6GiB", pcie={"read_latency": "1us"}).summary["bw_avg_Gbps"].iloc[0] * 1e9 / 8
    assert rate == pytest.approx(4096 * PS_PER_S / deep_lookup_ps(MttParams(), slow), rel=0.02)
    assert rate < 0.8 * _run("6GiB").summary["bw_avg_Gbps"].iloc[0] * 1e9 / 8


@pytest.mark.parametrize("preset", ["gen3x16", "nfp6000"])
def test_a_deep_lookup_is_one_entry_line_read_alone_in_the_event_engine_plus_the_walkers_own_time(preset):
    link, params = PcieParams(**PCIE_PRESETS[preset]), MttParams()
    (read,) = end_times(lambda: dma_read(PcieLink("l", link), params.line_bytes), 1)
    assert deep_lookup_ps(params, link) == read + params.lookup_ps


def test_the_cliff_only_hits_the_mr_the_nic_writes():
    reads_from_large = _run("6GiB", kind="write_bw").summary["bw_avg_Gbps"].iloc[0]
    assert reads_from_large == pytest.approx(_run("64MiB", kind="write_bw").summary["bw_avg_Gbps"].iloc[0], rel=0.02)


def test_cold_translations_cost_extra_reads_once():
    cold = _run("64MiB", kind="read_lat", iterations=20, size="4KiB").operations["latency_ps"]
    assert cold.iloc[0] > cold.iloc[1:].max() + 500_000  # MPT and MTT misses: PCIe reads of the entries
    assert cold.iloc[1:].max() - cold.iloc[1:].min() < 100_000


def test_iommu_misses_add_latency_to_the_first_access_only():
    with_iommu = _run("64MiB", cache=False, iommu="vtd", kind="read_lat", iterations=20, size="4KiB")
    without = _run("64MiB", cache=False, kind="read_lat", iterations=20, size="4KiB")
    first = with_iommu.operations["latency_ps"].iloc[0] - without.operations["latency_ps"].iloc[0]
    assert first >= 226_000  # one IO-TLB miss: the measured +226 ns
    assert (with_iommu.operations["latency_ps"].iloc[1:] == without.operations["latency_ps"].iloc[1:]).all()

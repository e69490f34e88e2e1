"""The DMA engine's limits beyond the link: posted-write issue spacing and a read latency that grows with size.
The event engine's stages, the TLP-level model and the closed form agree; the ``nfp6000`` preset is the fit of
pcie-bench's NFP-6000 and meets its points within their spread; the NIC presets have neither limit."""

from dataclasses import replace

import pytest

from models.nic.stages import dma_read, dma_write, end_times, stream_Bps
from models.pcie import closed_form as cf
from models.pcie import dma_engine
from models.pcie.link import PcieLink, PcieParams, write_issue
from models.pcie.tlp import simulate_stream
from models.pcie.topology import build_topology, device_link, dma_path, dma_read_stages, dma_write_stages
from models.pcie.presets import PCIE_PRESETS
from models.presets import NIC_PCIE
from sim.core import PS_PER_NS

NFP = PcieParams(**PCIE_PRESETS["nfp6000"])
DATA = dma_engine.load()
GEN5_SLOW_ENGINE = PcieParams(gen=5, dma_write_issue_ps=10 * PS_PER_NS, read_latency_ps_per_byte=20.0)


def _write_Bps(p: PcieParams, n: int) -> float:
    link = PcieLink("l", p)
    return stream_Bps(lambda: dma_write(link, n), n)


def _lone_read_ps(p: PcieParams, n: int) -> int:
    (end,) = end_times(lambda: dma_read(PcieLink("l", p), n), 1)
    return end


def test_the_preset_is_the_fit_of_the_pciebench_data():
    link = PcieParams(**{k: v for k, v in PCIE_PRESETS["nfp6000"].items()
                         if k in ("gen", "lanes", "mps", "mrrs")})
    assert NFP.dma_write_issue_ps == dma_engine.fit_write_issue_ps(DATA)
    assert (NFP.read_latency_ps, NFP.read_latency_ps_per_byte) == dma_engine.fit_read_latency(link, DATA)


def test_the_link_explains_half_the_latency_slope_and_the_fit_only_the_rest():
    rows = {r["bytes"]: r["median_ns"] for r in DATA["latency_rows"]}
    measured = (rows[2048] - rows[8]) / (2048 - 8) * 1000  # ps per byte
    wire_only = replace(NFP, read_latency_ps_per_byte=0.0)
    link = (wire_only.lone_read_ps(2048) - wire_only.lone_read_ps(8)) / (2048 - 8)
    assert 0.4 < link / measured < 0.6  # completions serialise at the TLP rate: about half of the slope
    assert NFP.read_latency_ps_per_byte == pytest.approx(measured - link, rel=0.05)


@pytest.mark.parametrize("p", [NFP, GEN5_SLOW_ENGINE, replace(NFP, mrrs=128, mps=128)], ids=["nfp", "gen5", "mrrs128"])
@pytest.mark.parametrize("n", [8, 64, 300, 512, 2048, 8192])
def test_one_read_alone_takes_the_lone_read_latency_in_the_event_engine(p, n):
    assert _lone_read_ps(p, n) == p.lone_read_ps(n)  # to the picosecond: each term rounded as the stages round it


def test_the_size_term_is_latency_only():
    n = 2048
    without = replace(NFP, read_latency_ps_per_byte=0.0)
    assert _lone_read_ps(NFP, n) - _lone_read_ps(without, n) == NFP.read_size_ps(n) == round(149.06 * n)
    links = PcieLink("l", NFP), PcieLink("m", without)
    assert stream_Bps(lambda: dma_read(links[0], n), n) == stream_Bps(lambda: dma_read(links[1], n), n)
    assert cf.read_tag_Bps(NFP, n) == cf.read_tag_Bps(without, n)  # tags are held no longer


@pytest.mark.parametrize("p", [NFP, GEN5_SLOW_ENGINE], ids=["nfp", "gen5"])
@pytest.mark.parametrize("n", [16, 64, 100, 128, 256, 257, 512, 4096])
def test_write_streams_agree_in_event_engine_tlp_model_and_closed_form(p, n):
    closed = cf.write_Bps(p, n)
    assert closed == min(cf.write_link_Bps(p, n), cf.write_issue_Bps(p, n))
    assert _write_Bps(p, n) == pytest.approx(closed, rel=1e-3)
    assert simulate_stream(p, "write", n).Bps == pytest.approx(closed, rel=0.005)


def test_small_writes_are_issue_bound_and_large_ones_link_bound():
    for n in (16, 32, 64):
        assert cf.write_issue_Bps(NFP, n) < 0.6 * cf.write_link_Bps(NFP, n)
    for n in (512, 1024, 2048):
        assert cf.write_link_Bps(NFP, n) < 0.3 * cf.write_issue_Bps(NFP, n)


def test_mixed_read_write_is_also_held_to_the_issue_spacing():
    n = 16
    assert cf.read_write_Bps(NFP, n) == cf.write_issue_Bps(NFP, n)
    assert simulate_stream(NFP, "read_write", n).Bps == pytest.approx(cf.read_write_Bps(NFP, n), rel=0.005)


def test_issue_spacing_spaces_writes_without_delaying_a_lone_one():
    free = replace(NFP, dma_write_issue_ps=0)
    assert end_times(lambda: dma_write(PcieLink("l", NFP), 64), 1) == end_times(
        lambda: dma_write(PcieLink("l", free), 64), 1)
    link = PcieLink("l", NFP)
    ends = end_times(lambda: dma_write(link, 64), 4)
    assert [b - a for a, b in zip(ends, ends[1:])] == [NFP.dma_write_issue_ps] * 3


@pytest.mark.parametrize("r", [r for r in DATA["write_rows"] if r["bytes"] not in (128, 256)],
                         ids=lambda r: f"{r['bytes']}B")
def test_write_rates_meet_pciebench_within_the_repeat_spread(r):
    n = r["bytes"]
    assert cf.write_Bps(NFP, n) * 8 / 1e9 == pytest.approx(r["bw_Gbps"], rel=dma_engine.write_tolerance(DATA, n))


def test_where_issue_and_link_cross_the_nfp_is_slower_than_the_ceiling():
    rows = {r["bytes"]: r["bw_Gbps"] for r in DATA["write_rows"]}
    for n in (128, 256):
        assert rows[n] < 0.96 * cf.write_Bps(NFP, n) * 8 / 1e9


@pytest.mark.parametrize("r", [r for r in DATA["latency_rows"] if r["bytes"] >= 8], ids=lambda r: f"{r['bytes']}B")
def test_read_latency_meets_pciebench_within_the_sample_spread(r):
    assert NFP.lone_read_ps(r["bytes"]) / 1000 == pytest.approx(
        r["median_ns"], rel=dma_engine.latency_tolerance(r))


def test_nic_presets_keep_an_engine_without_limits():
    for preset in set(NIC_PCIE.values()):
        p = PcieParams(**PCIE_PRESETS[preset])
        assert p.dma_write_issue_ps == 0 and p.read_size_ps(1 << 20) == 0
        link = PcieLink("l", p)
        assert write_issue(link) == [] and len(dma_write(link, 64)) == 1
        assert dma_read(link, 4096)[-1].latency_ps == 0


def test_topology_paths_carry_the_device_engine():
    g = build_topology("switch", nic=NFP)
    nic = device_link(g, "nic0")
    n = 64
    write = dma_write_stages(g, "nic0", "gpu0", n)
    assert write[0].server is nic.writes
    path = dma_path(g, "nic0", "mem0", n)
    assert path.write_Bps == pytest.approx(cf.write_issue_Bps(NFP, n), rel=1e-3)
    free = dma_path(build_topology("switch", nic=replace(NFP, dma_write_issue_ps=0, read_latency_ps_per_byte=0.0)),
                    "nic0", "mem0", n)
    assert path.write_latency_ps == free.write_latency_ps  # the spacing is no latency
    read = dma_read_stages(g, "nic0", "mem0", 2048)
    assert read[-1].latency_ps == NFP.read_size_ps(2048)
    assert path.read_latency_ps - free.read_latency_ps == NFP.read_size_ps(n)


def test_negative_engine_limits_are_rejected():
    with pytest.raises(ValueError, match="dma_write_issue_ps"):
        PcieParams(dma_write_issue_ps=-1)
    with pytest.raises(ValueError, match="read_latency_ps_per_byte"):
        PcieParams(read_latency_ps_per_byte=-0.5)

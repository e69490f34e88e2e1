"""The closed-form PCIe model against pcie-model's published numbers (pcie-model's printout and pcie-bench's data), its own
splitting rules, and the PcieParams helpers the event engine uses."""

from dataclasses import replace
from math import ceil

import pytest

from models.pcie import closed_form as cf
from models.pcie.link import PcieParams
from sim.core import transfer_ps

GEN5 = PcieParams(gen=5, lanes=16, mps=256)
Gbps = 1e9 / 8


@pytest.mark.parametrize("gen, lanes, raw_Gbps", [(3, 8, 63.02), (3, 16, 126.03), (4, 16, 252.06), (5, 16, 504.12),
                                                 (6, 16, 968.0), (1, 1, 2.0), (2, 1, 4.0)])
def test_raw_rate_anchors(gen, lanes, raw_Gbps):
    assert cf.raw_Bps(gen, lanes) / Gbps == pytest.approx(raw_Gbps, abs=0.006)


def test_tlp_layer_and_best_write_anchors():
    assert cf.tlp_Bps(3, 8, 256) / Gbps == pytest.approx(57.88, abs=0.006)
    assert GEN5.tlp_Bps / Gbps == pytest.approx(454.80, abs=0.006)
    assert cf.write_Bps(GEN5, 256) / Gbps == pytest.approx(415.82, abs=0.006)
    assert cf.write_Bps(GEN5, 4096) / 1e9 == pytest.approx(51.98, abs=0.006)
    gen4 = replace(GEN5, gen=4)
    assert gen4.raw_Bps / 1e9 == pytest.approx(31.5, abs=0.01)
    assert cf.write_Bps(gen4, 1 << 20) / 1e9 == pytest.approx(25.99, abs=0.006)
    assert replace(GEN5, gen=6).raw_Bps / 1e9 == pytest.approx(121.0)


def test_dllp_intervals_follow_the_x8_and_x16_tables():
    assert [cf.dllp_interval(5, 16, m) for m in cf.MPS_CHOICES] == [144, 168, 182, 246, 374, 630]
    assert [cf.dllp_interval(3, 8, m) for m in cf.MPS_CHOICES] == [163, 203, 182, 246, 374, 630]
    assert cf.dllp_interval(6, 16, 256) == cf.dllp_interval(4, 16, 256) == 168
    # narrower links acknowledge less often, so lose less to DLLPs
    assert cf.tlp_Bps(5, 1, 256) / cf.raw_Bps(5, 1) > cf.tlp_Bps(5, 8, 256) / cf.raw_Bps(5, 8)


def test_per_tlp_overheads_for_3dw_4dw_headers_and_ecrc():
    assert cf.request_overhead(addr64=True, ecrc=False) == 24
    assert cf.request_overhead(addr64=False, ecrc=False) == 20
    assert cf.request_overhead(addr64=True, ecrc=True) == 28
    assert cf.completion_overhead(ecrc=False) == 20 and cf.completion_overhead(ecrc=True) == 24
    p32 = replace(GEN5, addr64=False)
    assert cf.write_Bps(p32, 256) / cf.write_Bps(GEN5, 256) == pytest.approx(280 / 276)
    assert cf.write_wire_bytes(replace(GEN5, ecrc=True), 1000) == 1000 + 4 * 28


@pytest.mark.parametrize("mps", cf.MPS_CHOICES)
@pytest.mark.parametrize("mrrs", cf.MPS_CHOICES)
def test_aligned_counts_are_pcie_models_ceilings(mps, mrrs):
    p = replace(GEN5, mps=mps, mrrs=mrrs)
    chunk = min(mps, mrrs)  # pcie-model assumes MRRS >= MPS; a request never returns more than it asked
    for n in (1, 63, 64, 65, mps - 1, mps, mps + 1, 3 * mrrs + 5, 4096, 65536):
        assert cf.write_tlps(p, n) == ceil(n / mps)
        assert cf.read_requests(p, n) == ceil(n / mrrs)
        assert cf.read_completions(p, n) == ceil(n / chunk)
        assert cf.read_completions(replace(p, rcb_chunks=True), n) == ceil(n / 64)


def test_unaligned_start_costs_extra_tlps():
    assert cf.write_tlps(GEN5, 256, addr=0) == 1 and cf.write_tlps(GEN5, 256, addr=1) == 2
    assert cf.write_tlps(GEN5, 4096, addr=4095) == 17
    assert cf.read_requests(GEN5, 512, addr=100) == 2
    # first CplD ends on the RCB boundary below addr + MPS: 100..320, then 320..612
    assert cf.read_completions(GEN5, 512, addr=100) == 3
    assert cf.write_Bps(GEN5, 256, addr=64) < cf.write_Bps(GEN5, 256)


def test_read_is_request_bound_only_for_tiny_reads():
    # 1 B: a 24 B MRd up, a 21 B CplD down -> the request direction limits
    assert cf.read_link_Bps(GEN5, 1) == pytest.approx(GEN5.tlp_Bps / 24)
    assert cf.read_link_Bps(GEN5, 100) == pytest.approx(GEN5.tlp_Bps * 100 / 120)
    # pcie-model: a CplD header is smaller than an MWr's, so link-limited reads beat writes
    assert cf.read_link_Bps(GEN5, 4096) > cf.write_Bps(GEN5, 4096)


def test_tag_bound_is_tags_times_size_over_round_trip():
    p = replace(GEN5, read_tags=4)
    rtt_ps = (24 + 84) / p.tlp_Bps * 1e12 + p.read_latency_ps
    assert cf.read_tag_Bps(p, 64) == pytest.approx(4 * 64 / rtt_ps * 1e12)
    assert cf.read_Bps(p, 64) == cf.read_tag_Bps(p, 64) < cf.read_link_Bps(p, 64)
    assert cf.read_Bps(replace(p, read_tags=None), 64) == cf.read_link_Bps(p, 64)
    # the default 256 tags and 550 ns round trip cap 64 B reads at ~30 of the link's ~43 GB/s
    assert cf.read_Bps(GEN5, 64) == pytest.approx(256 * 64 / rtt_ps * 1e12)
    assert cf.read_Bps(GEN5, 64) < 0.7 * cf.read_link_Bps(GEN5, 64)
    assert cf.read_Bps(GEN5, 4096) == cf.read_link_Bps(GEN5, 4096)


def test_tag_classes_when_tags_share_a_factor_with_requests_per_read():
    # 2 tags, reads of one full and one 1 B request: each tag always serves the same position, so the
    # slower position (the full request) sets the pace, not the average of the two
    p = replace(GEN5, read_tags=2, mrrs=512)
    full_ps = (24 + 512 + 2 * 20) / p.tlp_Bps * 1e12 + p.read_latency_ps
    assert cf.read_tag_Bps(p, 513) == pytest.approx(513 / full_ps * 1e12)
    three = replace(p, read_tags=3)  # gcd 1: the tags rotate over both positions
    small_ps = (24 + 1 + 20) / p.tlp_Bps * 1e12 + p.read_latency_ps
    assert cf.read_tag_Bps(three, 513) == pytest.approx(3 * 513 / (full_ps + small_ps) * 1e12)


def test_mixed_read_write_shares_the_upstream_direction():
    n = 4096
    up = cf.write_wire_bytes(GEN5, n) + cf.read_request_wire_bytes(GEN5, n)
    assert cf.read_write_Bps(GEN5, n) == pytest.approx(GEN5.tlp_Bps * n / up)
    assert cf.read_write_Bps(GEN5, n) < cf.write_Bps(GEN5, n)


@pytest.mark.parametrize("mps", cf.MPS_CHOICES)
def test_sawtooth_and_bounds(mps):
    p = replace(GEN5, mps=mps)
    for k in range(1, 4096 // mps + 1):
        assert cf.write_Bps(p, k * mps + 1) < cf.write_Bps(p, k * mps)
    for n in range(1, 8193, 37):
        for f in (cf.write_Bps, cf.read_Bps, cf.read_write_Bps):
            assert 0 < f(p, n) < p.tlp_Bps < p.raw_Bps


@pytest.mark.parametrize("params", [GEN5, PcieParams(gen=3, lanes=8, mps=128, mrrs=256, ecrc=True),
                                    PcieParams(gen=4, mps=512, mrrs=128, addr64=False, rcb_chunks=True)])
def test_engine_helpers_are_the_closed_form(params):
    for n in (0, 1, 2, 255, 256, 257, 4096, 65537):
        assert params.write_ps(n) == transfer_ps(cf.write_wire_bytes(params, n), cf.tlp_Bps(params.gen, params.lanes,
                                                                                           params.mps))
        assert params.read_request_ps(n) == transfer_ps(cf.read_request_wire_bytes(params, n), params.tlp_Bps)
        assert params.read_return_ps(n) == transfer_ps(cf.read_completion_wire_bytes(params, n), params.tlp_Bps)
        if n:
            assert params.write_ps(n) == pytest.approx(n / params.write_efficiency(n) * 1e12, abs=0.5)
            assert params.read_efficiency(n) == cf.read_link_Bps(params, n)


def test_first_version_engine_numbers_are_unchanged():
    # the constants the first PcieParams hard-coded: 24 B per MWr/MRd, 20 B per CplD, x16 table
    p = PcieParams()
    assert p.write_wire_bytes(1000) == 1000 + 4 * 24
    assert p.read_request_bytes(1000) == 2 * 24
    assert p.read_completion_bytes(1000) == 1000 + 4 * 20
    assert p.tlp_Bps == pytest.approx(p.raw_Bps * (1 - 16 / 168 - 4 / 1538))


@pytest.mark.parametrize("bad", [{"gen": 7}, {"lanes": 32}, {"mps": 100}, {"mrrs": 8192}, {"rcb": 512, "mps": 256},
                                 {"rcb": 32}, {"read_tags": 0}])
def test_impossible_links_are_rejected(bad):
    with pytest.raises(ValueError, match="PcieParams"):
        PcieParams(**bad)

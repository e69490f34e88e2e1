"""What the NIC, the kernel and the GPU driver do when something happens to a testbed: a fatal NIC error, QPs
flushed to ERR, a link outage, a process's exit, a host page migration, a peer-memory reclaim, an exporter moving
its buffers. Each is called directly on a small built testbed."""

import pytest

from models.dmabuf import Placement
from models.ib.mr_backing import OdpBacking, migrate_pages
from models.nic.nic import flush_qps
from models.nic.wqe import QpState
from models.verbs.cleanup import uverbs_destroy_ufile_hw
from models.verbs.peermem import peermem_reclaim
from models.verbs.cq import ibv_create_cq
from models.verbs.mr import ibv_dereg_mr
from models.verbs.qp import ibv_create_qp
from sim.engine.build import build
from sim.scenario.schema import Scenario
from tests.conftest import nic_for


def _bed(gpu="dmabuf", host="pinned", vendor="mi300x"):
    """Node a: a GPU buffer ``g`` and a host buffer ``h``; node b: a host buffer ``d``; one connected QP pair."""
    scenario = Scenario.model_validate({
        "schema": 1, "name": "k", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": vendor, "memory": "8GiB"}], "kernel": {"dmabuf_move_notify": True},
                   "nic": nic_for(gpu)}, {"name": "b"}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": "4MiB", "register": gpu},
                    {"name": "h", "on": "a.host", "size": "4MiB", "register": host},
                    {"name": "d", "on": "b.host", "size": "4MiB"}],
        "workload": [{"kind": "write_bw", "from": "g", "to": "d", "sizes": ["4KiB"], "iterations": 1}]})
    bed = build(scenario, 1)
    qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 16), 16) for pd in (bed.pds["a"], bed.pds["b"])]
    qps[0].connect(qps[1])
    bed.qps.extend(qps)
    return bed


def _mr(bed, name):
    return bed.registrations[name].mr


def test_flush_qps_moves_each_qp_to_err_and_says_how_many():
    bed = _bed()
    assert all(qp.state is not QpState.ERR for qp in bed.qps)
    assert flush_qps(bed.qps[:1]) == "1 QPs moved to ERR (outstanding work requests flushed)"
    assert [qp.state is QpState.ERR for qp in bed.qps] == [True, False]


def test_enter_error_state_fails_the_qps_and_loses_every_key_but_keeps_the_mrs_registered():
    bed = _bed()
    nic = bed.nodes["a"].nic
    mrs = [_mr(bed, "g"), _mr(bed, "h")]
    keys = len(nic.mrs)
    assert keys == len(mrs) and all(mr.valid for mr in mrs)
    outcome = nic.enter_error_state(bed.qps[:1])
    assert outcome == f"1 QPs moved to ERR (outstanding work requests flushed); {keys} memory keys lost"
    assert bed.qps[0].state is QpState.ERR and bed.qps[1].state is not QpState.ERR
    assert not nic.mrs and all(nic.lookup(mr.lkey) is None and not mr.valid and mr.registered for mr in mrs)
    assert bed.nodes["b"].nic.lookup(_mr(bed, "d").lkey) is _mr(bed, "d")  # the peer's keys stay


def test_link_down_loses_frames_in_the_outage_only():
    nic = _bed().nodes["a"].nic
    assert nic.link_down(1_000_000, 50_000_000) == "link down for 50us, frames on it lost"
    assert nic.tx_port.stalls == nic.rx_port.stalls == ()
    assert [nic.link_lost(a, b) for a, b in ((0, 999_999), (0, 1_000_001), (50_999_999, 60_000_000),
                                             (51_000_000, 60_000_000))] == [False, True, True, False]


def test_a_held_link_down_stalls_both_ports_for_the_outage_only():
    bed = _bed()
    nic = bed.nodes["a"].nic
    assert nic.link_down(1_000_000, 50_000_000, held=True) == "link down for 50us, frames held"
    for port in (nic.tx_port, nic.rx_port):
        assert port.stalls == ((1_000_000, 51_000_000),)
        assert port.claim(2_000_000, 10) == (51_000_000, 51_000_010)  # a frame due in the outage waits for it
    assert bed.nodes["b"].nic.tx_port.stalls == ()


def test_process_exit_deregisters_what_is_still_registered_and_closes_the_files():
    bed = _bed()
    node = bed.nodes["a"]
    g, h = _mr(bed, "g"), _mr(bed, "h")
    ibv_dereg_mr(h)  # the process cleaned this one up itself
    fd = node.fds.open("log.txt")
    assert fd in node.fds.files
    outcome = uverbs_destroy_ufile_hw(node, bed.qps[:1], [g, h])
    assert outcome == ("1 QPs moved to ERR (outstanding work requests flushed); kernel cleanup deregistered 1 MRs "
                       "and closed the process's files")
    assert bed.qps[0].state is QpState.ERR and not g.registered and node.nic.lookup(g.lkey) is None
    assert g.backing.umem.attach.dmabuf.released and fd not in node.fds.files


@pytest.mark.parametrize("host", ["odp", "pinned"])
def test_migrate_pages_zaps_an_odp_mr_and_is_blocked_by_a_long_term_pin(host):
    bed = _bed(host=host)
    mr = _mr(bed, "h")
    if host == "odp":
        assert isinstance(mr.backing, OdpBacking)
        mr.backing.mapped[:] = True  # as if the NIC had touched every page
        assert migrate_pages(mr, mr.addr, mr.length) == "invalidated (ODP re-faults on next access)"
        assert mr.backing.invalidations == 1 and not mr.backing.mapped.any()
    else:
        pinned = bed.nodes["a"].host.pinned_pages
        assert pinned > 0
        assert migrate_pages(mr, mr.addr, mr.length) == "blocked: pages are pinned (long-term pin prevents migration)"
        assert bed.nodes["a"].host.pinned_pages == pinned and mr.valid


def test_peermem_reclaim_invalidates_the_mr_and_drops_the_pin():
    bed = _bed(gpu="peermem", vendor="h200")  # only NVIDIA memory has a peer-memory client
    mr = _mr(bed, "g")
    alloc = mr.backing.allocation
    assert alloc.pinned_by and mr.backing.pinned_bytes > 0
    assert peermem_reclaim(mr, 5) == "MR invalidated (later accesses fail)"
    assert mr.backing.invalidated_at == 5 and mr.backing.pinned_bytes == 0 and not alloc.pinned_by


@pytest.mark.parametrize("gpu, vendor, moved", [("dmabuf", "mi300x", (1, 0)), ("dmabuf-pinned", "mi300x", (0, 1)),
                                               ("dmabuf", "h200", (0, 0))])
def test_swap_exported_moves_each_movable_export_there_and_back(gpu, vendor, moved):
    bed = _bed(gpu=gpu, vendor=vendor)
    dmabuf = _mr(bed, "g").backing.umem.attach.dmabuf
    start = dmabuf.placement
    assert bed.gpus["a.gpu0"].swap_exported() == moved
    if moved[0]:
        assert (start, dmabuf.placement) == (Placement.VRAM, Placement.SYSTEM)
        bed.env.run()  # the move's copy and fence
        assert bed.gpus["a.gpu0"].swap_exported() == moved and dmabuf.placement is Placement.VRAM
    else:
        assert dmabuf.placement is start

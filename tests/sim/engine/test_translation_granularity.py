"""The NIC's translation follows each MR's page size: a large GPU MR registered through peer memory (64 KiB
entries) stays within the direct translation level that the same MR through mlx5's dma-buf path (4 KiB entries)
overflows."""

import pytest

from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario


def _read_into_gpu(register: str):
    """An RDMA READ stream whose responses the NIC writes into a 6 GiB GPU MR."""
    return run_scenario(Scenario.model_validate({
        "schema": 1, "name": "t", "seed": 1,
        "nodes": [{"name": "a", "nic": {"preset": "connectx7", "translation_cache": True},
                   "gpus": [{"preset": "h200"}]},
                  {"name": "b", "nic": {"preset": "connectx7", "translation_cache": True}}],
        "fabric": {"rate": "400Gb/s", "latency": "300ns"},
        "buffers": [{"name": "dst", "on": "a.gpu0", "size": "6GiB", "register": register},
                    {"name": "src", "on": "b.host", "size": "64MiB"}],
        "workload": [{"kind": "read_bw", "from": "dst", "to": "src", "sizes": ["1MiB"], "iterations": 200,
                      "tx_depth": 16}]}))


def test_a_peer_memory_mr_escapes_the_deep_walk_that_the_dmabuf_mr_takes():
    peer, dmabuf = (_read_into_gpu(mode) for mode in ("peermem", "dmabuf"))
    entries = [r.registrations.set_index("buffer").loc["dst", "mtt_entries"] for r in (peer, dmabuf)]
    assert entries[1] == 16 * entries[0] == 6 << 18
    peer_GBps, dmabuf_GBps = (r.summary["bw_avg_Gbps"].iloc[0] / 8 for r in (peer, dmabuf))
    assert dmabuf_GBps == pytest.approx(6.0, rel=0.03)  # 4096 B per deep lookup (mtt_cache.deep_walk_ps)
    assert peer_GBps > 6 * dmabuf_GBps

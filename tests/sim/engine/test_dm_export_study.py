"""The shipped dm-export scenario: NIC device memory exported as a dma-buf, refused to static and pinned importers,
imported by the GPU, revoked by ibv_free_dm; a kernel without the export; a GPU importer that breaks the promise."""

from __future__ import annotations

import pytest

from models.dmabuf.revoke import UNMAP_BOUND_PS
from tests.sim.engine.test_library import run_shipped


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    library, printed = run_shipped(tmp_path_factory.mktemp("dm"), "dm_export")
    return {variant: records[0] for variant, records in library.items()}, printed


def _outcomes(record) -> dict[str, str]:
    return {row["call"]: row["outcome"] for row in record["rows"]}


def test_the_export_refuses_static_and_pinned_importers_and_the_gpu_loses_the_memory_at_the_free(shipped):
    records, printed = shipped
    outcomes = _outcomes(records["kernel-7-1"])
    assert "EOPNOTSUPP" in outcomes["dma_buf_attach (static importer)"]
    assert "EOPNOTSUPP" in outcomes["ib_umem_dmabuf_get_pinned"]
    assert outcomes["GPU import (dma_buf_dynamic_attach)"].endswith("revocable: yes")
    assert "ENODEV" in outcomes["GPU access after the free"]
    totals = records["kernel-7-1"]["totals"]
    assert 0 < totals["revoke_ps"] < UNMAP_BOUND_PS and totals["broken_promises"] == 0
    assert not records["kernel-7-1"]["warnings"] and "library kernel-7-1: nic-memory (dm-export)" in printed


def test_a_kernel_before_7_0_cannot_export_device_memory(shipped):
    records, _ = shipped
    rows = records["kernel-6-19"]["rows"]
    assert [r["call"] for r in rows] == ["ibv_alloc_dm", "ibv_dm_export_dmabuf_fd"]
    assert "EPROTONOSUPPORT" in rows[-1]["outcome"]


def test_a_gpu_that_keeps_its_mapping_breaks_the_bounded_time_promise_and_reads_stale_memory(shipped):
    records, printed = shipped
    record = records["broken-importer"]
    assert record["totals"] == {"revoke_ps": None, "broken_promises": 1}
    assert any(w.startswith("ibv_free_dm (revocation): unbounded revocation") for w in record["warnings"])
    assert any(w.endswith("(stale)") for w in record["warnings"]) and "warning: GPU access after the free" in printed

"""Managed-memory pressure at the scenario level (scenarios/managed_pressure.yaml): a unified-memory job's page
faults evict the dynamic dma-buf buffer an RDMA stream reads, or, where the buffer is pinned or the exporter
never moves memory, the job evicts its own pages instead."""

from pathlib import Path

import pytest

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.scenario_file import load_scenario_variants
from tests.conftest import run_shipped_variants

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def managed():
    return run_shipped_variants("managed_pressure.yaml")


def _job(result) -> str:
    (outcome,) = result.events.loc[result.events["kind"] == "managed-job", "outcome"]
    return outcome


def test_the_jobs_faults_evict_only_the_dynamic_buffer(managed):
    results, table = managed
    row = table.loc["amd-dmabuf"]
    assert (row["evictions"], row["invalidations"], row["refaults"]) == (1, 1, 1) and row["rnr_naks"] > 0
    assert "0B of its own pages evicted" in _job(results["amd-dmabuf"])
    for kept in ("amd-dmabuf-pinned", "nvidia-dmabuf"):
        assert table.loc[kept, ["evictions", "invalidations", "rnr_naks"]].tolist() == [0, 0, 0]
        assert "512MiB of its own pages evicted" in _job(results[kept])  # 2.5 GiB job, 2 GiB free
    assert row["bw_avg_Gbps"] < 0.97 * table.loc["amd-dmabuf-pinned", "bw_avg_Gbps"]


def test_vram_fills_as_the_job_faults_and_empties_when_it_frees(managed):
    results, _ = managed
    for name, result in results.items():
        events = result.events
        progress = events[events["kind"] == "managed-job-faults"]
        assert len(progress) > 10 and progress["gpu_used"].max() == 3 * 2**30
        assert progress["bytes"].is_monotonic_increasing
        (end,) = events.loc[events["kind"] == "managed-job-end", "gpu_used"]
        assert end == (0 if name == "amd-dmabuf" else 2**30)  # the evicted buffer stays in system memory


def test_managed_job_names_its_gpu(tmp_path):
    path = tmp_path / "s.yaml"
    text = (ROOT / "scenarios" / "managed_pressure.yaml").read_text().replace("on: a.gpu0, size: 2560MiB",
                                                                                "on: a.gpu1, size: 2560MiB")
    path.write_text(text)
    with pytest.raises((ConfigError, ConfigErrors)) as info:
        load_scenario_variants(path)
    assert "events[0].on" in str(info.value) and "no GPU named 'a.gpu1'" in str(info.value)

"""Registration modes at the scenario level: pinned vs. dynamic under GPU memory pressure, reclaim, migration."""

from pathlib import Path

import pytest

from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from tests.conftest import nic_for, run_shipped_variants

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pin_vs_dmabuf():
    return run_shipped_variants("pin_vs_dmabuf.yaml")


def test_only_the_dynamic_dmabuf_mr_lets_the_exporter_evict(pin_vs_dmabuf):
    _, table = pin_vs_dmabuf
    assert table.loc["dmabuf", "evictions"] == 1 and table.loc["dmabuf", "failed_allocations"] == 0
    for pinned in ("peermem", "dmabuf-pinned", "dmabuf-no-move-notify"):
        assert table.loc[pinned, "evictions"] == 0
        assert table.loc[pinned, "pinned_bytes"] == 2 * 2**30  # GPU buffer + the pinned host destination
    for in_vram in ("peermem", "dmabuf-pinned"):
        assert table.loc[in_vram, "failed_allocations"] == 1
    # Without move_notify the map pins and amdgpu pins into GTT: the buffer left VRAM at registration, so the
    # competing allocation fits and the NIC reads host memory.
    assert table.loc["dmabuf-no-move-notify", "failed_allocations"] == 0
    assert table.loc["dmabuf", "pinned_bytes"] == 2**30


def test_eviction_costs_one_invalidation_one_refault_and_a_stall_of_the_copy(pin_vs_dmabuf):
    results, table = pin_vs_dmabuf
    row = table.loc["dmabuf"]
    assert row["invalidations"] == 1 and row["refaults"] == 1 and row["errors"] == 0
    copy_us = 2**30 / 55.4e9 * 1e6
    assert row["p99_9_us"] > copy_us
    assert table.loc["peermem", "p99_9_us"] < 1000
    assert row["bw_avg_Gbps"] < 0.85 * table.loc["peermem", "bw_avg_Gbps"]
    counters = results["dmabuf"].testbed.registrations["src"].mr.backing
    assert counters.umem.attach.dmabuf.placement.value == "SYSTEM"


def test_no_invariant_violation_and_the_pinned_importer_never_warns(pin_vs_dmabuf):
    _, table = pin_vs_dmabuf
    assert (table["invariant_violations"] == 0).all() and (table["kernel_warnings"] == 0).all()


def _base(**changes):
    data = {"schema": 1, "name": "m", "seed": 1,
            "nodes": [{"name": "a", "gpus": [{"preset": "h200"}]}, {"name": "b"}],
            "buffers": [{"name": "src", "on": "a.gpu0", "size": "4MiB", "register": "peermem"},
                        {"name": "dst", "on": "b.host", "size": "4MiB"}],
            "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 400}]}
    data.update(changes)
    return Scenario.model_validate(data)


def test_peermem_reclaim_turns_later_accesses_into_errors():
    scn = _base(events=[{"at": "100us", "kind": "peermem-reclaim", "buffer": "src"}])
    result = run_scenario(scn)
    ops = result.operations
    assert ops["ok"].iloc[0] and not ops["ok"].iloc[-1]
    assert result.events.set_index("kind").loc["peermem-reclaim", "outcome"].startswith("MR invalidated")
    assert result.registrations.set_index("buffer").loc["src", "pinned_bytes"] == 0


@pytest.mark.parametrize("mode, outcome, refaults", [("odp", "invalidated", 1), ("pinned", "blocked", 0)])
def test_host_page_migration_refaults_odp_and_is_blocked_by_pins(mode, outcome, refaults):
    """The buffer was touched before registration, so an ODP MR starts mapped: only the migration re-faults."""
    scn = _base(buffers=[{"name": "src", "on": "a.host", "size": "4MiB", "register": mode},
                         {"name": "dst", "on": "b.host", "size": "4MiB"}],
                events=[{"at": "100us", "kind": "host-page-migration", "buffer": "src"}])
    result = run_scenario(scn)
    assert result.events.set_index("kind").loc["host-page-migration", "outcome"].startswith(outcome)
    assert result.counters["refaults"] == refaults and result.operations["ok"].all()


def test_nvidia_exporter_never_evicts_so_pressure_fails_even_for_dmabuf():
    scn = _base(buffers=[{"name": "src", "on": "a.gpu0", "size": "4MiB", "register": "dmabuf"},
                         {"name": "dst", "on": "b.host", "size": "4MiB"}],
                events=[{"at": "10us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "143770MiB"}])
    result = run_scenario(scn)
    assert result.counters["failed_allocations"] == 1 and result.counters["evictions"] == 0
    assert result.counters["invalidations"] == 0 and result.operations["ok"].all()


def test_registration_cost_and_pinned_bytes_per_mode():
    costs = {}
    for mode in ("peermem", "dmabuf", "dmabuf-pinned"):
        scn = _base(nodes=[{"name": "a", "gpus": [{"preset": "h200"}], "nic": nic_for(mode)}, {"name": "b"}],
                    buffers=[{"name": "src", "on": "a.gpu0", "size": "1GiB", "register": mode},
                             {"name": "dst", "on": "b.host", "size": "4MiB"}],
                    workload=[{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 10}])
        reg = run_scenario(scn).registrations.set_index("buffer").loc["src"]
        costs[mode] = reg["register_us"]
        assert reg["pinned_bytes"] == 2**30  # on an NVIDIA GPU even the dynamic MR's buffer never moves
    assert all(cost > 18 for cost in costs.values())  # the dma-buf export alone takes 18 us


@pytest.fixture(scope="module")
def gpu_pressure():
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "gpu_pressure.yaml")
    return {name: run_scenario(v, variant=name) for name, v in variants}


def test_growing_job_evicts_only_the_dynamic_buffer(gpu_pressure):
    dyn, pinned = gpu_pressure["dmabuf"], gpu_pressure["peermem"]
    grows = dyn.events[dyn.events["kind"] == "gpu-job-grows"]
    assert grows["evicted"].sum() == 1 and (grows["gpu_used"] <= 16 * 2**30).all()
    pinned_grows = pinned.events[pinned.events["kind"] == "gpu-job-grows"]
    assert pinned_grows["outcome"].iloc[-1].startswith("failed") and pinned_grows["evicted"].sum() == 0
    # the dynamic job got further: one more step succeeded because the RDMA buffer left VRAM
    assert (grows["outcome"] == "allocated").sum() == (pinned_grows["outcome"] == "allocated").sum() + 1


def test_responder_side_refault_costs_rnr_naks_while_the_copy_runs(gpu_pressure):
    counters = gpu_pressure["dmabuf"].counters
    copy_ms = 2 * 2**30 / 55.4e9 * 1e3
    assert counters["refaults"] == 1 and counters["rnr_naks"] > 16
    ops = gpu_pressure["dmabuf"].operations
    assert ops["latency_ps"].max() / 1e9 > copy_ms and ops["ok"].all()


def test_gpu_memory_figure_is_written(gpu_pressure, tmp_path):
    from sim.results.write import write_results

    out = write_results(list(gpu_pressure.values()), tmp_path / "res")
    csv = (out / "figures" / "gpu_memory.csv").read_text()
    assert (out / "figures" / "gpu_memory.png").stat().st_size > 10_000 and "gpu-job-grows" in csv


def test_exporting_an_amd_buffer_twice_shares_one_dmabuf_that_eviction_moves():
    from models.dmabuf import DmaBufCore, FdTable, dma_buf_get
    from models.gpu import gpu_params
    from models.dmabuf.gpu_export import Gpu
    from sim.core import Environment

    gpu = Gpu("g", "amd", gpu_params("mi300x"), DmaBufCore(Environment()), capacity=64 << 20)
    alloc = gpu.malloc("x", 32 << 20)
    fds = FdTable()
    first, second = gpu.export(alloc, fds), gpu.export(alloc, fds)
    assert dma_buf_get(fds, first) is dma_buf_get(fds, second)
    assert gpu.pressure(48 << 20) and alloc.exporter.dmabuf.placement.value == "SYSTEM"

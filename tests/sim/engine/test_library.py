"""Scenario ``library`` studies end to end: schema errors with their location, the shipped scenarios' results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.app import app

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()
GPU_NODE = """schema: 1
name: lib
seed: 4
nodes:
  - {name: a, gpus: [{preset: h200, memory: 1GiB}]}
  - {name: b}
buffers:
  - {name: src, on: a.host, size: 64KiB}
  - {name: dst, on: b.host, size: 64KiB}
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10}
library:
  - {kind: rcache-churn, on: a.gpu0, sizes: [4MiB], steps: 4, lifetime: 2, policy: nccl}
"""


@pytest.mark.parametrize("mutation, where, words", [
    (("policy: nccl", "policy: ncl"), ":13:", "library[0]"),
    (("on: a.gpu0", "on: a.gpu1"), ":13:", "no GPU named 'a.gpu1'"),
    (("sizes: [4MiB]", "sizes: [2GiB]"), ":13:", "do not fit"),
    (("steps: 4", "stps: 4"), ":13:", "steps"),
    (("policy: nccl}", "policy: nccl, name: x}\n  - {kind: fallback-chain, name: x, stacks: [{on: a.gpu0}]}"),
     ":14:", "duplicate study name 'x'"),
    (("policy: nccl}", "policy: nccl}\n  - {kind: fallback-chain, stacks: [{on: a.gpu0}, {on: a.gpu0}]}"),
     ":14:", "listed twice"),
])
def test_bad_library_keys_exit_2_with_their_location(tmp_path, mutation, where, words):
    path = tmp_path / "s.yaml"
    path.write_text(GPU_NODE.replace(*mutation))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and f"{path}{where}" in result.stderr and words in result.stderr, result.output


def run_shipped(tmp_path: Path, name: str) -> tuple[dict, str]:
    out = tmp_path / name
    result = runner.invoke(app, ["run", str(ROOT / "scenarios" / f"{name}.yaml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())["library"], result.stdout


def test_churn_hooks_miss_no_hooks_hit_stale_buffer_ids_catch_it_and_peermem_writes_fail(tmp_path):
    library, printed = run_shipped(tmp_path, "rcache_churn")
    totals = {variant: records[0]["totals"] for variant, records in library.items()}
    hooks, stale, ids, peer = (totals[v] for v in ("memory-hooks", "no-hooks", "no-hooks-buffer-id",
                                                    "no-hooks-peermem"))
    assert hooks["stale_hits"] == ids["stale_hits"] == 0 < stale["stale_hits"] == peer["stale_hits"]
    assert hooks["invalidations"] > 0 and ids["rejected_stale"] > 0 and hooks["misses"] == ids["misses"]
    assert stale["bytes_to_freed_memory"] > 0 and stale["vram_held_bytes"] > 0 and stale["failed_writes"] == 0
    assert peer["failed_writes"] == peer["stale_hits"] and peer["vram_held_bytes"] == 0
    assert "stale hit at 0x" in printed and "library no-hooks: churn" in printed


def test_fallback_chains_on_three_stacks(tmp_path):
    library, printed = run_shipped(tmp_path, "fallback_chains")
    rows = {(r["stack"].split()[0], r["policy"]): r for r in library["base"][0]["rows"]}
    assert rows["a.gpu0", "peermem-first"]["attempts"] == "peermem: EFAULT -> next; dmabuf: ok"
    assert {rows["b.gpu0", p]["method"] for p in ("nccl", "libfabric-efa", "ucx", "mori")} == {"peermem"}
    assert rows["b.gpu0", "ucx-rocm-11934"]["error"] == "EOPNOTSUPP"
    assert all("GTT" in rows["c.gpu0", p]["warnings"] for p in ("nccl", "mori")) and "warning: c.gpu0" in printed


def test_registration_order_device_memory_depends_on_the_order_and_host_memory_does_not(tmp_path):
    library, _ = run_shipped(tmp_path, "registration_order")
    device, host = library["device-memory"][0]["totals"], library["host-memory"][0]["totals"]
    assert device["descending_ps"] > 2 * device["ascending_ps"] and host["descending_ps"] == host["ascending_ps"]


def test_library_results_are_byte_identical_for_the_same_seed(tmp_path):
    outs = []
    for name in ("one", "two"):
        assert runner.invoke(app, ["run", str(ROOT / "scenarios" / "fallback_chains.yaml"), "--out",
                                   str(tmp_path / name), "-q"]).exit_code == 0
        outs.append((tmp_path / name / "summary.json").read_bytes())
    assert outs[0] == outs[1]


def test_rail_server_prints_the_matrix_and_rail_aligned_traffic_beats_cross_rail(tmp_path):
    library, printed = run_shipped(tmp_path, "rail_server")
    for variant, records in library.items():
        totals, rows = records[0]["totals"], records[0]["rows"]
        assert totals["rail_aligned_GBps"] > 10 * totals["cross_rail_GBps"]
        assert totals["register_all_nics_ps"] > totals["register_rail_nics_ps"] * (
            totals["registrations_all_nics"] / totals["registrations_rail_nics"])
        assert all(r["rail_nics"].split()[0] in r["nearest_nics"].split() for r in rows)
    assert "GPU0 X PIX PHB" in " ".join(printed.split()) and "Legend:" in printed

"""Host memory is a capacity per node: pinning or filling buffers beyond it fails with ENOMEM."""

from __future__ import annotations

import pytest

from sim.engine.build import RegistrationFailed, build
from sim.scenario.scenario_file import load_scenario

SCENARIO = """schema: 1
name: host-memory
nodes:
  - {{name: a{host}}}
  - {{name: b}}
buffers:
  - {{name: src, on: a.host, size: {first}, register: {mode}}}
  - {{name: dst, on: a.host, size: {second}, register: {mode}}}
  - {{name: far, on: b.host, size: 64KiB}}
workload:
  - {{kind: write_bw, from: src, to: far, sizes: [4KiB], iterations: 10}}
{extra}"""


def _build(tmp_path, first, second, host="", mode="pinned", extra=""):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(first=first, second=second, host=host, mode=mode, extra=extra))
    scenario, _ = load_scenario(path)
    return build(scenario, scenario.seed)


def test_pinning_past_the_node_memory_fails_with_enomem_naming_the_buffer(tmp_path):
    with pytest.raises(RegistrationFailed) as info:
        _build(tmp_path, "768MiB", "768MiB", host=", host: {memory: 1GiB}")
    assert "buffers[1] 'dst'" in str(info.value) and "ENOMEM" in str(info.value)
    assert info.value.__cause__.errno == "ENOMEM"
    assert "needs 768MiB of a's host memory but 256MiB of 1GiB are free" in str(info.value)  # sizes a reader reads


def test_the_default_node_memory_is_a_dgx_h200s(tmp_path):
    bed = _build(tmp_path, "1TiB", "512GiB")
    assert bed.nodes["a"].host.resident_bytes() == 1536 * 2**30
    with pytest.raises(RegistrationFailed, match="ENOMEM"):
        _build(tmp_path, "1TiB", "1025GiB")


def test_odp_buffers_are_not_resident_when_registered(tmp_path):
    bed = _build(tmp_path, "768MiB", "768MiB", host=", host: {memory: 1GiB}", mode="odp")
    assert bed.nodes["a"].host.resident_bytes() == 0


def test_data_mode_past_the_node_memory_fails_with_enomem_not_memory_error(tmp_path):
    with pytest.raises(RegistrationFailed) as info:
        _build(tmp_path, "2MiB", "64KiB", host=", host: {memory: 1MiB}", extra="data: true\n")
    assert "buffers[0] 'src'" in str(info.value) and info.value.__cause__.errno == "ENOMEM"


def test_a_managed_range_beyond_gpu_and_host_memory_fails_as_an_event_outcome():
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario_variants

    _, _, variants = load_scenario_variants("scenarios/managed_pressure.yaml")
    base = variants[0][1]
    work = base.workload[0].model_copy(update={"iterations": 200})
    job = base.events[0].model_copy(update={"size": 4 * 2**40, "at": 1})
    result = run_scenario(base.model_copy(update={"workload": [work], "events": [job]}))
    outcome = result.events.loc[result.events["kind"] == "managed-job", "outcome"].item()
    assert outcome.startswith("failed: cudaMallocManaged: cudaErrorMemoryAllocation") and "4398046511104" in outcome
    assert result.counters["evictions"] == 0 and result.operations["ok"].all()

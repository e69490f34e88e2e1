"""The GPU's coherent and chipset_p2p keys and the kernel's on_demand_paging key: validated at the YAML boundary,
described by ``rdmasim schema``, and what they change in a run."""

import json

import pytest
from typer.testing import CliRunner

from sim.engine.build import RegistrationFailed
from sim.cli.app import app
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import nic_for


def _scenario(topology="switch", gpu=None, kernel=None, register="dmabuf"):
    return Scenario.model_validate({
        "schema": 1, "name": "platform", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": "h200", "memory": "1GiB"} | (gpu or {})], "topology": topology,
                   "kernel": kernel or {}, "nic": nic_for(register)}, {"name": "b"}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": "4MiB", "register": register},
                    {"name": "h", "on": "b.host", "size": "4MiB"}],
        "workload": [{"kind": "write_bw", "from": "g", "to": "h", "sizes": ["64KiB"], "iterations": 20}]})


def _refusal(scenario) -> str:
    with pytest.raises(RegistrationFailed) as info:
        run_scenario(scenario)
    return str(info.value)


def _segments(scenario):
    return run_scenario(scenario).testbed.registrations["g"].mr.backing.umem.sgt.segments


@pytest.mark.parametrize("topology", ["root_complex", "cross_socket"])
def test_a_chipset_without_p2p_refuses_a_nic_outside_the_gpus_switch_at_attach(topology):
    message = _refusal(_scenario(topology, {"chipset_p2p": False}))
    assert "dma_buf_dynamic_attach: ENOTSUPP" in message and "PCI topology not supported" in message
    assert run_scenario(_scenario(topology)).summary["errors"].sum() == 0  # a chipset known to do P2P: accepted


@pytest.mark.parametrize("gpu", [{"chipset_p2p": False, "coherent": True}, {"chipset_p2p": False, "driver": "575"}])
def test_a_coherent_platform_or_a_driver_without_the_attach_op_skips_the_topology_check(gpu):
    assert run_scenario(_scenario("root_complex", gpu)).summary["errors"].sum() == 0


def test_a_chipset_without_p2p_still_serves_a_nic_under_the_gpus_switch():
    assert run_scenario(_scenario("switch", {"chipset_p2p": False})).summary["errors"].sum() == 0


def test_a_coherent_platform_maps_the_memorys_pages_instead_of_bar1():
    bar1, pages = _segments(_scenario()), _segments(_scenario(gpu={"coherent": True}))
    assert [length for _, length in bar1] == [length for _, length in pages]
    assert bar1[0][0] != pages[0][0]


@pytest.mark.parametrize("register, call", [("dmabuf", "ibv_reg_dmabuf_mr"), ("dmabuf-pinned", "mlx5dv_reg_dmabuf_mr")])
def test_a_kernel_without_on_demand_paging_refuses_mlx5_dmabuf_mrs(register, call):
    message = _refusal(_scenario(kernel={"on_demand_paging": False}, register=register))
    assert f"{call}: EOPNOTSUPP" in message and "CONFIG_INFINIBAND_ON_DEMAND_PAGING" in message
    assert run_scenario(_scenario(register=register)).summary["errors"].sum() == 0


BAD = """schema: 1
name: bad
nodes:
  - name: a
    gpus: [{preset: mi300x, coherent: true}]
  - name: b
    gpus: [{preset: h200, exporter: vfio, chipset_p2p: false}]
    kernel: {on_demand_paging: "no"}
buffers:
  - {name: g, on: a.gpu0, size: 4MiB, register: dmabuf}
  - {name: h, on: b.host, size: 4MiB}
workload: {kind: write_bw, from: g, to: h, sizes: [64KiB], iterations: 10}
"""


def test_bad_values_name_file_line_column_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith(f"{path}:5:") and " nodes[0].gpus[0].coherent: " in lines[0] and "'amd'" in lines[0]
    assert lines[1].startswith(f"{path}:7:") and " nodes[1].gpus[0].chipset_p2p: " in lines[1] and "'vfio'" in lines[1]
    assert lines[2].startswith(f"{path}:8:") and " nodes[1].kernel.on_demand_paging: " in lines[2]


def test_the_schema_describes_the_keys_with_their_defaults():
    schema = json.loads(CliRunner().invoke(app, ["schema"]).output)
    gpu, kernel = schema["$defs"]["GpuSpec"]["properties"], schema["$defs"]["KernelSpec"]["properties"]
    assert (gpu["coherent"]["default"], gpu["chipset_p2p"]["default"], kernel["on_demand_paging"]["default"]) == (
        False, True, True)
    assert "NVLink-C2C" in gpu["coherent"]["description"] and "switch" in gpu["chipset_p2p"]["description"]
    assert "CONFIG_INFINIBAND_ON_DEMAND_PAGING" in kernel["on_demand_paging"]["description"]
    assert "580" in gpu["driver"]["description"]

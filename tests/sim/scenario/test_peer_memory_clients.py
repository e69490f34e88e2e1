"""Peer memory is claimed only by a client for the GPU's driver: nvidia-peermem's acquire probes a range with
nvidia_p2p_get_pages (kernel-open/nvidia-peermem/nvidia-peermem.c ``nv_mem_acquire``), so on a GPU with another
driver no client claims it and ``ib_umem_get`` falls back to ``get_user_pages``, which cannot pin device memory:
EFAULT. The scenario is refused before it runs, at the buffer's register key."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from models.verbs.peermem import no_peer_memory_client
from sim.cli.app import app
from sim.engine.build import build
from sim.scenario.schema import Scenario
from sim.core import VerbsError
from tests.conftest import ROOT

runner = CliRunner()


def _scenario(preset: str, exporter: str | None = None, register: str = "peermem") -> dict:
    gpu = {"preset": preset} | ({"exporter": exporter} if exporter else {})
    return {"schema": 1, "name": "peer", "nodes": [{"name": "a", "gpus": [gpu]}, {"name": "b"}],
            "buffers": [{"name": "src", "on": "a.gpu0", "size": "1MiB", "register": register},
                        {"name": "dst", "on": "b.host", "size": "1MiB"}],
            "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"]}]}


@pytest.mark.parametrize("vendor, claimed", [("nvidia", True), ("amd", False), ("vfio", False)])
def test_only_nvidia_memory_has_a_peer_memory_client(vendor, claimed):
    assert (no_peer_memory_client(vendor) is None) == claimed


def test_peermem_on_an_amd_gpu_is_refused_at_its_register_key_before_anything_runs():
    result = runner.invoke(app, ["validate", str(ROOT / "docs" / "examples" / "peermem_on_amd.yaml")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert "peermem_on_amd.yaml:9:" in line and "buffers[0].register" in line and "no peer-memory client" in line


def test_the_model_answers_efault_too_where_no_client_claims_the_memory():
    scn = Scenario.model_validate(_scenario("mi300x", register="dmabuf"))
    bed = build(scn, seed=1)
    from models.verbs.peermem import ibv_reg_mr_peermem
    from models.nic.wqe import Access
    alloc = bed.gpus["a.gpu0"].malloc("extra", 1 << 20)
    with pytest.raises(VerbsError) as err:
        ibv_reg_mr_peermem(bed.registrations["src"].mr.pd, alloc, 0, 1 << 20, Access.LOCAL_WRITE)
    assert err.value.errno == "EFAULT" and "no peer-memory client" in str(err.value)


def test_peermem_on_an_nvidia_gpu_still_registers():
    bed = build(Scenario.model_validate(_scenario("h200")), seed=1)
    assert bed.registrations["src"].mr.backing.mode == "peermem"

"""EFA creates the QP types its rdma-core provider creates (providers/efa/verbs.c ``efa_create_qp``): UD, and SRD
(which the model runs as its RC); a UC QP is refused with EOPNOTSUPP, by the verb and at the scenario's key."""

import pytest
from typer.testing import CliRunner

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.transport import QpType
from models.node import Node
from models.pcie.link import PcieParams
from models.presets import NIC_PRESETS
from models.nic.nic import NicParams
from models.verbs.cq import ibv_create_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.qp import ibv_create_qp
from sim.cli.app import app
from sim.core import Environment, VerbsError
from tests.conftest import tiny_yaml


def _create(preset: str, qp_type: QpType):
    node = Node.create("a", HostParams(), PcieParams(), NicParams(**NIC_PRESETS[preset]))
    fabric = Fabric(FabricParams())
    fabric.attach(node.nic.name)
    pd = ibv_alloc_pd(ibv_open_device(node, Environment(1), fabric))
    return ibv_create_qp(pd, ibv_create_cq(pd.context, 4), 4, qp_type=qp_type)


@pytest.mark.parametrize("preset, qp_type, refused", [
    ("efa", QpType.UC, True), ("efa", QpType.UD, False), ("efa", QpType.RC, False),
    ("connectx7", QpType.UC, False)])
def test_efa_refuses_a_uc_qp_as_its_provider_does(preset, qp_type, refused):
    if not refused:
        assert _create(preset, qp_type).qp_type is qp_type
        return
    with pytest.raises(VerbsError) as info:
        _create(preset, qp_type)
    assert info.value.errno == "EOPNOTSUPP" and info.value.call == "ibv_create_qp" and "efa_create_qp" in str(info.value)


@pytest.mark.parametrize("node, refused", [("b", True), ("a", True), (None, False)])
def test_a_uc_workload_with_an_efa_end_is_refused_at_its_transport_key(tmp_path, node, refused):
    text = tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10, transport: uc}")
    if node is not None:
        text = text.replace(f"  - {{name: {node}}}", f"  - {{name: {node}, nic: {{preset: efa}}}}")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    if not refused:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert f"{path}:" in result.stderr and " workload[0].transport: " in result.stderr
    assert f"the efa NIC of node '{node}' refuses it" in result.stderr and "EOPNOTSUPP" in result.stderr

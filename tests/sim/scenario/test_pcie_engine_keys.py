"""A node's ``pcie`` keys set the DMA engine's limits beyond the link, over any preset's."""

import pytest
from pydantic import ValidationError

from models.pcie.presets import PCIE_PRESETS
from sim.scenario.resolve import pcie_params
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


def _node_pcie(pcie: dict):
    data = scenario_dict()
    data["nodes"][0]["pcie"] = pcie
    return pcie_params(Scenario.model_validate(data).nodes[0])


def test_the_nfp6000_preset_and_key_overrides_reach_the_link():
    nfp = _node_pcie({"preset": "nfp6000"})
    assert (nfp.gen, nfp.lanes, nfp.read_tags) == (3, 8, 35)
    assert nfp.dma_write_issue_ps == PCIE_PRESETS["nfp6000"]["dma_write_issue_ps"]
    tuned = _node_pcie({"preset": "nfp6000", "write_issue": "30ns", "read_latency_per_byte": "0.5ns"})
    assert (tuned.dma_write_issue_ps, tuned.read_latency_ps_per_byte) == (30_000, 500)
    plain = _node_pcie({})
    assert (plain.dma_write_issue_ps, plain.read_latency_ps_per_byte) == (0, 0.0)


def test_a_negative_issue_spacing_is_refused():
    with pytest.raises(ValidationError):
        _node_pcie({"write_issue": "-1ns"})

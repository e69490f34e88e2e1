"""scenarios/bar1_exhaustion.yaml: the registrations report the BAR1 they hold and their translation entries, and
one buffer more fails on every path (dma-buf ENOMEM, peer memory EFAULT) while VRAM is free."""

from pathlib import Path

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from models.gpu.bar1 import BAR1_PAGE
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario

ROOT = Path(__file__).resolve().parents[3]
GiB = 1 << 30


@pytest.fixture(scope="module")
def results():
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "bar1_exhaustion.yaml")
    return {name: run_scenario(v, variant=name) for name, v in variants}


@pytest.fixture(scope="module")
def result(results):
    return results["bar1-4GiB"]


def test_each_gpu_registration_holds_its_pages_of_bar1(result):
    regs = result.registrations.set_index("buffer")
    gpu = result.testbed.gpus["a.gpu0"]
    for name in ("peer", "dmabuf"):
        assert regs.loc[name, "bar1_bytes"] == -(-regs.loc[name, "bytes"] // BAR1_PAGE) * BAR1_PAGE
    assert regs.loc["dst", "bar1_bytes"] == 0
    assert regs["bar1_bytes"].sum() == gpu.bar1.used <= gpu.bar1.size


def test_peer_memory_has_a_sixteenth_of_the_dmabuf_mr_entries(result):
    regs = result.registrations.set_index("buffer")
    assert regs.loc["peer", "mtt_page_bytes"] == 16 * regs.loc["dmabuf", "mtt_page_bytes"] == 64 << 10
    assert 16 * regs.loc["peer", "mtt_entries"] == regs.loc["dmabuf", "mtt_entries"]


def test_one_buffer_more_fails_on_every_library_while_vram_is_free(results):
    for name, fails in (("bar1-4GiB", True), ("bar1-256GiB", False)):
        (study,) = results[name].library
        gpu = results[name].testbed.gpus["a.gpu0"]
        assert study["rows"] and all(bool(row["error"]) == fails and bool(row["method"]) != fails
                                     for row in study["rows"])
        for row in study["rows"] if fails else ():  # each attempt's errno: the last one is the row's error
            assert all(step.startswith(("dmabuf: ENOMEM", "peermem: EFAULT")) for step in row["attempts"].split("; "))
        assert (gpu.bar1.size - gpu.bar1.used < 2 * GiB) == fails and 2 * GiB < gpu.capacity - gpu.memory.used


def test_bar1_is_refused_on_a_gpu_whose_aperture_is_not_modelled():
    spec = YAML(typ="safe").load(ROOT / "scenarios" / "bar1_exhaustion.yaml")
    spec["nodes"][0]["gpus"][0]["preset"] = "mi300x"
    with pytest.raises(ValidationError, match="drop 'bar1'"):
        Scenario.model_validate(spec)
    spec["nodes"][0]["gpus"][0]["preset"] = "h100"
    assert Scenario.model_validate(spec).nodes[0].gpus[0].bar1 == 4 * GiB

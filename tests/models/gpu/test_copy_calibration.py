"""Copy rates per GPU generation against nvbandwidth's published figures (models/data/nvbandwidth_copy.json)."""

from __future__ import annotations

import doctest
import json

import pytest

import models.gpu.copy_calibration
from models.gpu.copy_calibration import DATA, FLOOR, compare, spread
from models.gpu.copy_engine import COPY_PRESETS, CopyEngines
from models.gpu.presets import gpu_params

SETS = {s["name"]: s for s in json.loads(DATA.read_text())["sets"]}
CHECKS = {c.name: c for c in compare()}
GiB = 1 << 30


def test_spread_is_the_wider_side_about_the_median():
    assert spread([1.0, 2.0, 4.0]) == 1.0  # median 2: 2 above, 1 below
    assert spread([5.0]) == 0.0


@pytest.mark.parametrize("name", [n for n, s in SETS.items() if s["engine"] == "ce"])
def test_copy_engine_rates_within_the_published_spread(name):
    """nvbandwidth #6 (H100, Gen5) and #15 (copy engines on Gen4 x16): the set's median within its per-GPU
    spread about the median (at least 5 %)."""
    check, values = CHECKS[name], SETS[name]["values_GBps"]
    assert check.tolerance == max(FLOOR, spread(values))
    assert abs(check.sim_GBps / check.measured_GBps - 1) <= check.tolerance, check


def test_gen4_tolerance_is_its_spread_and_the_h100_set_needs_the_floor():
    assert CHECKS["gen4_ce_h2d"].tolerance == pytest.approx((26.185 - 23.90) / 26.185)  # GPU 2 of #15
    assert spread(SETS["h100_ce_h2d"]["values_GBps"]) < 0.01 and CHECKS["h100_ce_h2d"].tolerance == FLOOR
    assert CHECKS["h100_ce_h2d"].sim_GBps < CHECKS["h100_ce_h2d"].measured_GBps  # our H200 copied 3 % slower


def test_h100_sm_rates_are_not_copy_engine_rates():
    """#24's 35 GB/s host-to-device is a copy kernel's: the copy engines (#6) are 60 % faster on the same link;
    its device-to-host kernel (posted writes) comes within 5 % of them."""
    ce, sm_h2d, sm_d2h = CHECKS["h100_ce_h2d"], CHECKS["h100_sm_h2d"], CHECKS["h100_sm_d2h"]
    assert ce.measured_GBps / sm_h2d.measured_GBps > 1.6
    assert sm_h2d.sim_GBps / sm_h2d.measured_GBps - 1 > 0.5  # far above: the model copies on the engines
    assert abs(sm_d2h.sim_GBps / sm_d2h.measured_GBps - 1) < 0.05


def test_a100_copies_at_half_the_gen5_rate_on_its_gen4_link():
    a100, h200 = gpu_params("a100"), gpu_params("h200")
    assert a100.pcie == "gen4x16" and a100.copy_preset == "a100" and gpu_params("h100").copy_preset == "h200"
    fast, slow = CopyEngines(COPY_PRESETS["h200"]), CopyEngines(COPY_PRESETS[a100.copy_preset])
    for d in ("h2d", "d2h"):
        assert slow.costs[d, "pinned"].bw_Bps == pytest.approx(fast.costs[d, "pinned"].bw_Bps / 2)
        assert slow.costs[d, "pageable"] == fast.costs[d, "pageable"]  # host staging bound, not the link
    assert slow.costs["d2d", "pinned"].bw_Bps / fast.costs["d2d", "pinned"].bw_Bps == pytest.approx(
        a100.hbm_bw_Bps / h200.hbm_bw_Bps)
    # #42: the A100's copy kernel at 512 MiB..1 GiB comes within 11 % of the modelled engines, 25.13 GB/s
    assert all(0 < CHECKS[n].sim_GBps / 25.13 - 1 < 0.11 for n in ("a100_sm_h2d_512MiB", "a100_sm_h2d_1GiB"))


def test_docstring_examples_run():
    result = doctest.testmod(models.gpu.copy_calibration)
    assert result.failed == 0 and result.attempted > 0

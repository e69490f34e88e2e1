import math

import pytest

from models.libs import studies
from models.libs.regcost import (GIB, MIB, MOONCAKE_EFA, MOONCAKE_EFA_DATA, UCX_IB_REG_COST, LinearCost, crossover,
                                 fit_linear, zcopy_auto_thresh)
from models.verbs.mr import ibv_reg_mr
from tests.models.libs.stacks import make_stack

PS_PER_MS = 10**9


@pytest.mark.parametrize("point", MOONCAKE_EFA_DATA["points"], ids=lambda p: p["what"])
def test_efa_device_registration_cost_within_5_percent_of_each_published_point(point):
    size = int(point["size_MiB"] * MIB)
    got = MOONCAKE_EFA.cost_ps(size, int(point["prior_GiB"] * GIB)) / PS_PER_MS
    assert got == pytest.approx(point["cost_ms"], rel=0.05)


def order_sizes():
    return [int(2.79 * MIB) // 4096 * 4096] * 24 + [391 * MIB] * 24


def test_the_9_gib_order_experiment_within_15_percent_of_the_published_totals_on_the_simulated_efa_node():
    stack = make_stack(data=False, nic={"preset": "efa"})
    rows, totals = studies.registration_order(stack, order_sizes(), ["ascending", "descending"], "device")
    published = MOONCAKE_EFA_DATA["order_experiment"]
    assert totals["ascending"] / 1e12 == pytest.approx(published["ascending_total_s"], rel=0.15)
    assert totals["descending"] / 1e12 == pytest.approx(published["descending_total_s"], rel=0.15)
    finals = [r["cost_ps"] / PS_PER_MS for r in rows if r["index"] == 47]
    assert finals == pytest.approx([published["ascending_final_ms"], published["descending_final_ms"]], rel=0.05)
    assert stack.gpu.memory.used == 0  # every buffer deregistered and freed between and after the orders


def test_host_memory_does_not_accumulate_and_mlx5_shows_no_growth():
    host = studies.registration_order(make_stack(data=False, nic={"preset": "efa"}), order_sizes(),
                                      ["ascending", "descending"], "host")[1]
    mlx5 = studies.registration_order(make_stack(data=False), order_sizes()[::8], ["ascending", "descending"],
                                      "device")[1]
    assert host["ascending"] == host["descending"] and mlx5["ascending"] == mlx5["descending"]


@pytest.mark.parametrize("bandwidth", [12.5e9, 25e9, 50e9])
def test_ucx_zero_copy_threshold_matches_the_crossover_of_its_cost_model(bandwidth):
    closed = zcopy_auto_thresh(UCX_IB_REG_COST, bandwidth)
    assert closed == pytest.approx(crossover(UCX_IB_REG_COST, bandwidth), abs=1.0)
    assert 1e5 < closed < 1e6  # 16 us of overhead pays off between 100 KB and 1 MB


def test_growth_faster_than_copy_savings_gives_ucx_size_max():
    steep = LinearCost(16e-6, 1e-9)
    assert zcopy_auto_thresh(steep, 12.5e9) == math.inf == crossover(steep, 12.5e9)


def test_the_simulated_host_registration_cost_is_nearly_linear_and_the_fit_predicts_its_crossover():
    stack = make_stack(data=False)
    made = iter(range(10**6))

    def simulated_s(size: int) -> float:
        buf = stack.node.host.allocate(f"fit{next(made)}", max(size, 1))
        return ibv_reg_mr(stack.pd, buf.addr, buf.size, 1).reg_ps / 1e12

    # UCX's model is fitted where the zero-copy decision is made, 64 KiB..4 MiB around the crossover: above a few
    # MiB the measured pinning curve bends (its per-byte cost falls from 28 to 19 ps/B), which no line follows.
    sizes = [2**k for k in range(16, 23)]
    fit = fit_linear(sizes, [simulated_s(s) for s in sizes])
    assert max(abs(fit(s) - simulated_s(s)) / simulated_s(s) for s in sizes) < 0.1
    assert zcopy_auto_thresh(fit, 25e9) == pytest.approx(crossover(simulated_s, 25e9, limit=2**30), rel=0.1)

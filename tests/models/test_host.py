import json
from pathlib import Path

import pytest

from models.host import CUDA_HOST_REGISTER_FIXED_PS, HostMemory, HostParams
from sim.core import PS_PER_S, VerbsError

CALIB = json.loads((Path(__file__).parents[2] / "models/data/h200_pinning_cost.json").read_text())
ROWS = [r for r in CALIB["rows"] if r["what"] == "cudaHostRegister" and 64 * 1024 <= r["bytes"] <= 4 * 2**30]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['bytes']}-{'pre' if r['prefaulted'] else 'cold'}")
def test_pin_cost_matches_h200_measurement_within_20_percent(row):
    pin_ps = HostParams().pin_cost_ps(row["bytes"], prefaulted=row["prefaulted"])
    model_s = (CUDA_HOST_REGISTER_FIXED_PS + pin_ps) / PS_PER_S
    assert model_s == pytest.approx(row["reg_s"], rel=0.20)


@pytest.mark.parametrize("row", [r for r in ROWS if r["bytes"] >= 2**28], ids=lambda r: str(r["bytes"]))
def test_unpin_cost_matches_large_measurements(row):
    model_s = HostParams().unpin_cost_ps(row["bytes"]) / PS_PER_S
    assert model_s == pytest.approx(row["unreg_s"], rel=0.20)


def test_memlock_limit_counts_pages_across_registrations():
    mem = HostMemory("a", HostParams(memlock_limit=64 * 1024))
    buf = mem.allocate("b", 128 * 1024)
    mem.pin(buf.addr, 32 * 1024, call="t")
    mem.pin(buf.addr + 32 * 1024, 32 * 1024, call="t")
    with pytest.raises(VerbsError) as info:
        mem.pin(buf.addr, 1, call="t")
    assert info.value.errno == "ENOMEM" and "RLIMIT_MEMLOCK" in str(info.value)
    mem.unpin(buf.addr, 32 * 1024)
    mem.pin(buf.addr, 4096, call="t")
    assert mem.pinned_pages == 9


def test_pinning_an_unmapped_range_is_efault():
    mem = HostMemory("a", HostParams())
    buf = mem.allocate("b", 8192)
    with pytest.raises(VerbsError) as info:
        mem.pin(buf.addr + 4096, 8192, call="t")
    assert info.value.errno == "EFAULT"


def test_pages_spanned_counts_partial_pages():
    mem = HostMemory("a", HostParams())
    assert mem.pages_spanned(4095, 2) == 2 and mem.pages_spanned(4096, 4096) == 1


def test_pinning_beyond_the_node_memory_is_enomem():
    mem = HostMemory("a", HostParams(memory=1 << 20))
    small, big = mem.allocate("small", 512 * 1024), mem.allocate("big", 768 * 1024)
    mem.pin(small.addr, small.size, call="ibv_reg_mr")
    mem.pin(small.addr, 4096, call="ibv_reg_mr")  # already resident: counted once
    with pytest.raises(VerbsError) as info:
        mem.pin(big.addr, big.size, call="ibv_reg_mr")
    assert info.value.errno == "ENOMEM" and "'big'" in info.value.rule and info.value.call == "ibv_reg_mr"
    assert mem.resident_bytes() == 512 * 1024


def test_data_beyond_the_node_memory_is_enomem_before_it_is_made():
    mem = HostMemory("a", HostParams(memory=1 << 20))
    mem.allocate("big", 2 << 20)
    made = []
    with pytest.raises(VerbsError) as info:
        mem.fill("big", lambda: made.append(1))
    assert info.value.errno == "ENOMEM" and not made and "big" not in mem.data

import json
from pathlib import Path

import pytest

from models.ib.mkey_page import ib_umem_num_dma_blocks, mkey_page_size, page_segments
from models.host import PAGE_BACKINGS, PIN_PATHS, PIN_PRESETS, HostMemory, HostParams, pin_curve_holds
from models.nic.nic import NicParams
from models.size_cost import fit_call_cost, fit_proportional
from sim.inspect.calibrate import calibrate
from sim.core import VerbsError

PAGES = json.loads((Path(__file__).parents[2] / "models" / "data" / "h200_host_pinning_pages.json").read_text())
BACKINGS = sorted({(p["path"], p["pages"]) for p in PAGES["points"]})


@pytest.mark.parametrize("path, pages", BACKINGS, ids="-".join)
def test_each_pin_curve_is_the_fit_of_its_points(path, pages):
    def medians(prefaulted):
        return {p["bytes"]: p["median_s"] for p in PAGES["points"]
                if (p["path"], p["pages"], p["prefaulted"]) == (path, pages, prefaulted)}
    warm, cold = medians(True), medians(False)
    assert fit_call_cost(list(warm), list(warm.values())) == PIN_PRESETS["h200"][path, pages, True]
    big = [n for n in cold if pin_curve_holds(n, False)]
    assert fit_proportional(big, [cold[n] - warm[n] for n in big]) == PIN_PRESETS["h200"][path, pages, False]


def test_every_pin_curve_holds_its_measurements_within_their_spread():
    rows = calibrate()
    rows = rows[rows["experiment"].isin(["host_pinning", "pinning_cost"])]
    assert rows["required"].sum() >= 70 and rows.loc[rows["required"], "passed"].all()
    assert not rows.loc[rows["case"].str.endswith("cold") & (rows["x"] < 128 << 20), "required"].any()


def test_huge_pages_make_pinning_cheaper_and_the_mtt_smaller():
    base, huge = HostParams(), HostParams(pages="hugetlb")
    gib = 1 << 30
    assert huge.pin_cost_ps(gib) < base.pin_cost_ps(gib) / 4               # present pages: per folio, not per page
    assert huge.pin_cost_ps(gib, prefaulted=False) < base.pin_cost_ps(gib, prefaulted=False)  # fewer faults
    entries = [ib_umem_num_dma_blocks(0, gib, mkey_page_size(NicParams(), 0, page_segments(0, gib, p.mtt_page_size),
                                                             is_dmabuf=False)) for p in (base, huge)]
    assert entries == [512 * 512, 512]
    assert PAGE_BACKINGS["thp"] == HostParams(pages="thp").mtt_page_size == 2 << 20


@pytest.mark.parametrize("path", PIN_PATHS)
def test_pinning_a_part_of_a_huge_page_costs_the_whole_page(path):
    huge = HostParams(pages="thp", pin_path=path)
    assert huge.pin_cost_ps(4096) == huge.pin_cost_ps(2 << 20)


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

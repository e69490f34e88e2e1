"""The managed-memory model against the H200 measurements (models/data/h200_managed_memory.json,
h200_um_edges.json, h200_um_range.json) and the stride experiment (h100_um_cpu.json)."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from models.gpu.managed import UVM_PRESETS
from models.gpu.um_calibration import RANGE, compare, fit, load_cases

TOLERANCE = 0.25


@pytest.fixture(scope="module")
def cases():
    return load_cases()


@pytest.fixture(scope="module")
def rows(cases):
    return {row["case"]: row for row in compare(cases, UVM_PRESETS["h200"])}


def test_preset_is_the_fit(cases):
    fitted, preset = fit(cases), UVM_PRESETS["h200"]
    for f in fields(preset):
        assert getattr(preset, f.name) == pytest.approx(getattr(fitted, f.name), rel=2e-3), f.name


def test_every_fitted_measurement_within_25_percent(cases, rows):
    """Prefetches of exactly one 2 MiB block are 16-28 % slower than a fixed cost and a rate predict (in both
    experiments): the prefetch group is held to 30 %."""
    fitted = [c for c in cases if c.role == "fit"]
    assert len(fitted) == 37
    bad = {c.name: round(rows[c.name]["error"], 3) for c in fitted
           if abs(rows[c.name]["error"]) > (0.30 if c.group == "prefetch" else TOLERANCE)}
    assert not bad


def test_the_prefetch_fixed_cost_is_the_smallest_calls(cases, rows):
    for name in ("prefetch to gpu 4KiB of 64MiB", "prefetch to gpu 64KiB of 64MiB"):
        assert rows[name]["model_ms"] == pytest.approx(UVM_PRESETS["h200"].prefetch_call_ps / 1e9, rel=0.05)
        assert abs(rows[name]["error"]) < 0.05


def test_sparse_first_touches_of_a_small_range_cost_less_than_the_model_charges(cases, rows):
    """Shown, not fitted: on a 64 MiB range one touch cost ~60 us on two machines, the model (fitted to 1 GiB-range
    experiments on four others) charges ~160 us."""
    edges = {c.name: rows[c.name] for c in cases if c.role == "edge"}
    assert len(edges) == 8
    one = edges["touch 1 blocks of 64MiB"]
    assert one["measured_ms"] < 0.1 < one["model_ms"]
    more = [edges[f"touch {k} blocks of 64MiB"]["measured_ms"] for k in (1, 2, 4, 8, 32)]
    assert more == sorted(more)          # each further VA block costs more (~21 us)


def test_checks(cases, rows):
    """Touching the first M pages of every block and the reads after it (the prefetch tree), and the CPU's reads of
    one byte per 2 MiB (the touch's distance rule), were not fitted."""
    checks = [c.name for c in cases if c.role == "check"]
    assert len(checks) == 12 and "cpu 2048KiB on host" in checks
    bad = {name: round(rows[name]["error"], 3) for name in checks if abs(rows[name]["error"]) > TOLERANCE}
    assert not bad


@pytest.mark.parametrize("m", [192, 256])
def test_half_resident_blocks_complete_on_one_fault_each_many_to_a_batch(cases, m):
    """After the first 192 or 256 pages of every block, 256 are resident (the 1 MiB subtree is over 51 %); one more
    faulted 64 KiB page makes 272 of 512 and compute_prefetch_region (uvm_perf_prefetch.c) takes the whole block.
    read_all's lanes run past the resident halves, so one batch holds faults of several blocks (fault_batches.py)."""
    stats = next(c for c in cases if c.name == f"heads {m} then read").model(UVM_PRESETS["h200"])
    assert stats.blocks_serviced == 512 and stats.pages_to_gpu == 512 * 256 and stats.pages_prefetched > 0
    assert stats.batches < 512 // 4


def test_completed_blocks_leave_nothing_to_migrate(cases, rows):
    """Where the measured follow-up read costs about as much as a resident read, the model migrates nothing."""
    empty = [c for c in cases if c.role == "empty"]
    assert {c.name for c in empty} == {"sparse 4KiB then read", "sparse 64KiB then read", "heads 384 then read"}
    full = {"gpu": rows["first_touch 1024MiB"]["measured_ms"]}
    for case in empty:
        stats = case.model(UVM_PRESETS["h200"])
        assert stats.pages_to_gpu == stats.pages_to_host == 0
        assert rows[case.name]["measured_ms"] < 0.02 * full[case.group]


@pytest.mark.parametrize("name", ["cpu 4KiB then read", "cpu 64KiB then read", "cpu 4KiB on host"])
def test_cpu_reads_of_host_pages_cost_a_touch_each(cases, rows, name):
    """Once the CPU faulted a block back (or it never left the host), reading one byte of each of its 262144 pages
    migrates nothing and costs 2.5-3.6 ms measured: one TLB miss and line fill per page, not zero. Each read is one
    page on from the last; the first lands as far as the farthest distance measured."""
    case = next(c for c in cases if c.name == name)
    p = UVM_PRESETS["h200"]
    stats = case.model(p)
    assert stats.cpu_faults == stats.pages_to_host == 0 and stats.accesses == (1 << 30) // 4096
    assert stats.cpu_touch_ps == stats.accesses * p.cpu_touch_ps + 9 * p.cpu_touch_doubling_ps
    assert abs(rows[name]["error"]) <= TOLERANCE


def test_sparser_cpu_reads_cost_more_per_touch_by_the_doublings_of_their_stride(cases, rows):
    """One byte per 64 KiB or 2 MiB of host memory costs 25-33 ns and 51-91 ns a touch on three machines, against
    10-12 ns per 4 KiB: each doubling of the stride adds about as much (4 doublings: +15 ns, 9: +45 ns less the
    read's own start). Fitted to 4 KiB and 64 KiB, the rule puts 2 MiB within the machines' spread."""
    per_touch = {}
    for stride in (4, 64, 2048):
        case = next(c for c in cases if c.name == f"cpu {stride}KiB on host")
        stats = case.model(UVM_PRESETS["h200"])
        touches = (1 << 30) // (stride << 10)
        measured = [ms * 1e6 / touches for ms in rows[case.name]["runs_ms"]]  # ns per touch, each run
        per_touch[stride] = (min(measured), stats.cpu_touch_ps / 1e3 / touches)
    for side in (0, 1):  # measured (the fastest run), then the model
        assert per_touch[4][side] < per_touch[64][side] < per_touch[2048][side]
    assert per_touch[64][0] > 2 * per_touch[4][0] and per_touch[2048][0] > 1.5 * per_touch[64][0]
    assert abs(rows["cpu 2048KiB on host"]["error"]) <= TOLERANCE


def test_the_doubling_rule_follows_reads_at_every_stride_where_each_needs_its_own_page_table_line(cases, rows):
    """The stride experiment (one machine, all strides in one process; each run less its read of one byte): the
    measured cost of a read never falls as the stride doubles from 4 KiB to 2 MiB, nor does the model's; from 32 KiB
    on (a 64-byte line of the page table maps 8 pages: each read needs a line of its own) every stride, 2 MiB and
    farther included (charged as 2 MiB), is within its repetitions' spread (at least 25 %). Closer reads share a
    line and cost less than the rule charges (16 KiB: +38 %), which no fitted row shows."""
    strides = sorted((c for c in cases if c.role == "stride"), key=lambda c: int(c.name.split()[2][:-3]))
    assert [c.name.split()[2] for c in strides] == [f"{4 << k}KiB" for k in range(12)]
    reads = [(1 << 30) // (4096 << k) for k in range(12)]
    for side in ("measured_ms", "model_ms"):
        per_read = [rows[c.name][side] / n for c, n in zip(strides, reads)]
        assert per_read[:10] == sorted(per_read[:10]), side
    far = {c.name: round(rows[c.name]["error"], 3) for c in strides[3:] if abs(rows[c.name]["error"]) > c.tolerance}
    assert not far


def test_threshold_shape_matches_the_hardware(rows):
    """Below 51 % of a block the rest stays on the host; at 75 % the prefetcher completed every block."""
    follow = {m: rows[f"heads {m} then read"]["measured_ms"] for m in (64, 192, 256, 384)}
    assert follow[64] > follow[192] > 0.2 * rows["first_touch 1024MiB"]["measured_ms"] > 10 * follow[384]


RANGE_ITEMS = [(key, item) for run in json.loads(RANGE.read_text())["runs"]
               for key in ("touch", "touch_after_partial") for item in run[key]]
"""calib/gpu_um/measure_um_range.py's items: ``touch`` after the whole range went back to the host,
``touch_after_partial`` after only the touched blocks did; 64 MiB .. 4 GiB, K = 1 and 8 blocks, 15 repetitions
interleaved in one process."""


def _range_name(key: str, item: dict) -> str:
    back = "range" if key == "touch" else "blocks"
    return f"touch {item['va_blocks']} blocks of {item['range_bytes'] >> 20}MiB, {back} to host"


def test_range_rows_hold_each_item_to_its_repetitions_spread(cases):
    """One run: the tolerance is the wider side of the item's [min, max] about its median, never a fixed figure."""
    by_name = {c.name: c for c in cases}
    assert len(RANGE_ITEMS) == 16
    for key, item in RANGE_ITEMS:
        case, t = by_name[_range_name(key, item)], item["faulted"]
        assert case.role == ("range" if key == "touch" else "partial") and case.group == "gpu"
        assert case.measured_s == (t["median_s"],)
        assert case.tolerance == max(1 - t["min_s"] / t["median_s"], t["max_s"] / t["median_s"] - 1)


@pytest.mark.parametrize("key,item", RANGE_ITEMS, ids=[_range_name(*i) for i in RANGE_ITEMS])
def test_a_range_touch_migrates_the_touched_64_kib_of_each_block_in_one_batch(cases, key, item):
    """One 4 B write at the start of each of K host-resident blocks faults one 64 KiB chunk each (one touch per 2 MiB
    migrates only the touched 64 KiB, calib/gpu_um/README.md), K < 256 faults: one batch."""
    case = next(c for c in cases if c.name == _range_name(key, item))
    k = item["va_blocks"]
    stats = case.model(UVM_PRESETS["h200"])
    assert (stats.batches, stats.faults, stats.blocks_serviced) == (1, k, k)
    assert stats.pages_to_gpu == k * 16 and stats.pages_prefetched == 0


def test_the_range_size_moves_a_touch_less_than_machines_do(rows):
    """In one process one touch costs 72-121 us over 64 MiB .. 4 GiB (1.7x), and only 1.24x from 64 MiB to 1 GiB;
    the same touch measured 49-74 us on a 64 MiB range (two machines) and 111-273 us on a 1 GiB range (four
    others): the gap behind the edge rows is mostly the machines'."""
    one = {item["range_bytes"] >> 20: item["faulted"]["median_s"] for key, item in RANGE_ITEMS
           if key == "touch" and item["va_blocks"] == 1}
    across_sizes = max(one.values()) / min(one.values())
    machines_1g, machines_64m = rows["blocks 1"]["runs_ms"], rows["touch 1 blocks of 64MiB"]["runs_ms"]
    assert across_sizes < max(machines_1g) / min(machines_1g)
    assert one[1024] / one[64] < rows["blocks 1"]["measured_ms"] / rows["touch 1 blocks of 64MiB"]["measured_ms"]
    assert min(machines_1g) > one[1024] * 1e3 and max(machines_64m) < one[64] * 1e3  # this run: between the two


def test_a_touch_after_only_its_blocks_went_back_costs_less_and_the_model_charges_both_alike(rows):
    """Same range, same K, the touched blocks on the host either way: 17-71 us less when the rest of the range was
    not prefetched just before. The model keeps no state that such a prefetch of pages on the host would change."""
    for key, item in RANGE_ITEMS:
        if key == "touch":
            whole, partial = rows[_range_name(key, item)], rows[_range_name("touch_after_partial", item)]
            assert partial["measured_ms"] < whole["measured_ms"]
            assert partial["model_ms"] == whole["model_ms"]
            assert whole["error"] > 0 and partial["error"] > 0  # the model charges more than either


@pytest.mark.parametrize("roles", [("range",), ("range", "partial")])
def test_refitting_with_the_range_rows_would_break_a_fitted_row(cases, roles):
    """Why the range rows are shown, not fitted: as fit rows they pull the fault latency to zero and one block's
    touch on 1 GiB (measured on four machines) more than 25 % below its measurement."""
    refit = fit([replace(c, role="fit") if c.role in roles else c for c in cases])
    again = {row["case"]: row for row in compare(cases, refit)}
    assert refit.fault_latency_ps == 0
    assert again["blocks 1"]["error"] < -TOLERANCE

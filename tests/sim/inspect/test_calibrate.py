"""The calibration report: every measured point simulated, tolerances enforced."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.gpu.alloc_cost import ALLOC_PRESETS, CALLS, compare
from models.gpu.um_calibration import range_cases, stride_cases
from sim.inspect.calibrate import COLUMNS, calibrate, format_calibration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report() -> pd.DataFrame:
    return calibrate()


def test_every_required_row_passes(report):
    failed = report[report.required & ~report.passed]
    assert failed.empty, failed[["experiment", "case", "x", "sim", "measured", "err"]].to_string()


def test_required_tolerances_and_ranges(report):
    copies = report[(report.experiment == "copy_bw") & report.required]
    assert set(copies.case) == {"pinned h2d", "pinned d2h", "pageable h2d", "pageable d2h"}
    assert copies.x.min() == 64 << 10 and copies.x.max() == 1 << 30 and len(copies) == 32
    pinned = copies.case.str.startswith("pinned")
    assert (copies.tolerance == np.where(pinned, 0.10, 0.20)).all() and (copies.err.abs() <= copies.tolerance).all()
    pins = report[(report.experiment == "pinning_cost") & report.required]
    assert pins.x.min() == 64 << 10 and pins.x.max() == 4 << 30 and len(pins) == 9  # cold: from 128 MiB
    assert (pins.err_median.abs() <= 0.50).all()  # held out: another machine, 25-35 % faster
    assert (pins.err_median > 0).all()


def test_every_new_measured_quantity_has_rows(report):
    """Allocation calls, pinning per path and backing (and at scale on an H100 host), unified memory: one row per
    measured point (the H200's and
    the H100s' calls, each against its GPU's fit, required alike), one per case of the back-to-back cycles (the
    five H100 and one H200 alternation runs, but for the H200's 8 GiB cycles, where no call waited, and the H200's
    six earlier (call, size) cases, shown: the slow path's replay) and per headroom
    probe, one per case of the clearing runs on each of two GPUs, and one per case of the taking-back runs (the held-out
    fifth and sixth H100 pause runs' shown)."""
    rows = report.groupby("experiment").size()
    reclaim = json.loads((ROOT / "models" / "data" / "gpu_reclaim.json").read_text())["machines"].values()
    alternation = json.loads((ROOT / "models" / "data" / "gpu_alternation.json").read_text())
    cycles = sum(len(run["cases"]) for run in alternation["runs"]) - 1 + 6
    probes = sum(len(run["extras"]) for run in alternation["headroom"])
    assert len(reclaim) == 2 and [run["gpu"] for run in alternation["runs"]] == ["h100"] * 5 + ["h200"]
    h100 = json.loads((ROOT / "models" / "data" / "h100_gpu_alloc.json").read_text())["points"]
    assert rows["gpu_alloc"] == 81 + len(h100) + cycles + probes + 2 * 14 + sum(len(m["cases"]) for m in reclaim)
    for run in ("h100_pause_run5", "h100_pause_run6"):
        held_out = report[report.case.str.endswith(f"({run})")]
        assert len(held_out) == 36 and not held_out.required.any()
    calls = report[report.case.isin([f"h100: {call}" for call in CALLS])]
    required = sum(r["required"] for r in compare(h100, ALLOC_PRESETS["h100"]))
    assert len(calls) == len(h100) and calls.required.sum() == required >= 44
    scale = json.loads((ROOT / "models" / "data" / "h100_host_pin_scale.json").read_text())["rows"]
    assert rows["host_pinning"] == 90 + len(scale) and len(scale) == 16 and rows["managed"] >= 50
    assert rows["host_faults"] == sum("touch_samples_s" in r for r in scale) == 8  # each first write timed
    waits = report[report.case.str.endswith(": waits")]
    assert len(waits) == cycles and not waits.required.any()
    alloc = report[report.experiment == "gpu_alloc"]
    assert set(alloc.case) >= {"cudaMalloc", "cudaFree", "cuMemCreate", "cuMemMap", "cuMemRelease"}
    assert alloc.loc[alloc.case == "cudaFree", "required"].all()
    pins = report[report.experiment == "host_pinning"]
    assert {c.split()[1] for c in pins.case} == {"4k", "thp", "hugetlb"}
    assert ((pins.tolerance >= 0.30) & (pins.tolerance < 6)).all()  # from each point's spread


def test_dma_engine_rows_cover_writes_and_read_latency_with_spread_tolerances(report):
    rows = report[report.experiment == "dma_engine"]
    writes, latency = rows[rows.unit == "Gb/s"].set_index("x"), rows[rows.unit == "ns"].set_index("x")
    assert list(writes.index) == [16, 32, 64, 128, 256, 512, 1024, 2048]
    assert list(latency.index) == [8, 16, 24, 32, 48, 64, 128, 256, 512, 768, 1024, 1280, 1520, 2048]
    assert not writes.loc[[128, 256], "required"].any() and writes.drop([128, 256]).required.all()
    assert (writes.loc[[128, 256], "err"] > 0.04).all()  # where the limits cross the ceiling is too fast
    assert (writes.tolerance >= 0.005).all() and (writes.tolerance < 0.01).all()  # pcie-bench repeats agree
    assert latency.required.all() and ((latency.tolerance > 0.01) & (latency.tolerance < 0.08)).all()
    assert latency.loc[2048, "sim"] - latency.loc[8, "sim"] > 550  # about 0.30 ns per byte, as measured


def test_copy_generation_rows_require_the_copy_engines_only(report):
    rows = report[report.experiment == "copy_gen"]
    assert len(rows) == 9 and set(rows[rows.required].case) == {"h100_ce_h2d", "gen4_ce_h2d", "gen4_ce_d2h"}
    assert (rows.tolerance >= 0.05).all() and (rows.tolerance < 0.10).all()  # per-GPU spread, at least 5 %
    assert rows[~rows.required].note.str.contains("SM copy kernel").all()


def test_published_anchors_are_reproduced(report):
    topo = report[report.experiment == "topology"].set_index("case")
    assert 0.4 < topo.loc["GPU/host bandwidth ratio", "sim"] < 0.6  # GPU through the CPU: about half
    mtt = report[(report.experiment == "mtt_cache") & (report.unit == "GB/s")]
    assert (mtt[mtt.x > 4 << 30].sim < 6.5).all() and (mtt[mtt.x <= 4 << 30].sim > 9).all()
    assert len(mtt) == 6 and mtt.required.all() and (mtt.tolerance < 0.01).all()  # the published spread
    ratios = report[(report.experiment == "mtt_cache") & (report.unit == "ratio")]
    assert len(ratios) == 4 and (ratios.tolerance < 0.02).all()  # both sides' spreads added
    assert ratios.required.sum() == 3 and ratios.passed.sum() == 3  # the data path's own rate before: shown
    port = report[report.experiment == "port_rate"]
    assert len(port) == 13 and (port.sim > port.measured).all()  # headers and credits only, no PCIe
    assert port.required.sum() == 1 and port[port.required].case.str.contains("host memory").all()
    iommu = report[(report.experiment == "iommu") & (report.unit == "Gb/s")].set_index(["case", "x"])
    small = iommu.loc["64 B random reads, 4 KiB pages"]
    assert small.loc[256 << 10, "sim"] > 27 and small.loc[64 << 20, "sim"] < 11  # most throughput lost
    assert (iommu.loc["64 B random reads, 2 MiB pages"].sim > 27).all()  # superpages: no drop
    assert (report[report.note.str.startswith("anchor")].err.abs() <= 0.10).all()


def test_report_is_deterministic_and_formatted(report):
    assert list(report.columns) == COLUMNS
    pd.testing.assert_frame_equal(report, calibrate())
    text = format_calibration(report)
    assert f"{len(report)} rows, {int(report.required.sum())} required, 0 failed" in text
    assert text.count("\n") == len(report) + 3 + 1 + report.experiment.nunique()
    assert "FAIL" not in text.split("\n", 1)[1]  # the first line is the legend


def test_a_failing_required_row_is_reported(report):
    broken = report.copy()
    broken.loc[0, ["required", "passed"]] = [True, False]
    text = format_calibration(broken)
    assert "1 failed" in text and "FAIL" in text


def test_the_table_says_which_rows_are_weak_and_which_misses_are_not_failures(report):
    lines = format_calibration(report).splitlines()
    rows = dict(zip(report.index, lines[3:3 + len(report)]))
    weak = report[report.tolerance > 1.0]
    # every weak reference's tolerance is its samples' spread: 10-90 % (host pinning, GPU allocation calls), or
    # min-max where only the extremes were kept (unified-memory touches by range size, CPU reads by stride)
    assert len(weak) > 0 and set(weak.experiment) <= {"host_pinning", "gpu_alloc", "managed"}
    assert set(weak.loc[weak.experiment == "managed", "case"]) <= {c.name for c in range_cases() + stride_cases()}
    for i in weak.index:
        spread = "min-max" if report.experiment[i] == "managed" else "10-90 %"
        assert f"weak reference: tolerance {report.tolerance[i]:.0%} is its samples' own {spread} spread" in rows[i]
        assert "  weak    " in rows[i] or "  miss    " in rows[i]
    assert not any("weak reference" in rows[i] for i in report.index.difference(weak.index))
    missed = report[~report.required & ~report.passed]
    assert all("  no   miss " in rows[i] for i in missed.index)
    assert all("  no   shown " in rows[i] for i in report[~report.required & report.passed
                                                          & (report.tolerance <= 1.0)].index)
    assert (f"{len(report)} rows, {int(report.required.sum())} required, 0 failed; {len(missed)} not required "
            f"outside tolerance (miss); {len(weak)} weak references (tolerance above 100%)") in "\n".join(lines)

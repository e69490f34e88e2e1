#!/usr/bin/env python3
"""Reduce the back-to-back cycles of ``measure_alternation.py`` (``raw/{h100,h200}_alternation_run*.json``) and the
probes of ``measure_headroom.py`` (``raw/{h100,h200}_headroom_run*.json``) to ``models/data/gpu_alternation.json``
and fit the driver's slow path per GPU on its first alternation run.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_alternation.py

Per run: each case's size, the memory free in all (the room a ballast left, else all the GPU's free memory), and
per cycle when its allocation started, how long it took and when its free returned (s from the case's start).
The slow path's wait, a power of the allocation's size (:func:`models.gpu.scrub_calibration.fit_slow`), is fitted
per GPU to its first run only, on that GPU's clearing rates; the H100's later runs and the H200's earlier
back-to-back cycles (``h200_alloc_slow_path.json``) check it. ``SCRUB_PRESETS`` in ``models/gpu/scrub.py`` carries
the fitted values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.gpu.alloc_cost import gpu_alloc_costs  # noqa: E402
from models.gpu.scrub import SCRUB_PRESETS  # noqa: E402
from models.gpu.scrub_calibration import fit_slow  # noqa: E402

GPUS = ("h100", "h200")
RAW = [p for gpu in GPUS for p in sorted((Path(__file__).parent / "raw").glob(f"{gpu}_alternation_run*.json"))]
HEADROOM = [p for gpu in GPUS for p in sorted((Path(__file__).parent / "raw").glob(f"{gpu}_headroom_run*.json"))]
OUT = ROOT / "models" / "data" / "gpu_alternation.json"


def reduce(path: Path) -> dict:
    """One run: its environment and its cases, each replayed on its own (a pause before each clears the rest)."""
    run = json.loads(path.read_text())
    cases = [{"bytes": row["bytes"], "free_bytes": row.get("room_bytes", run["free_bytes"]),
              "alloc_at_s": row["alloc_at_s"], "alloc_s": row["alloc_s"],
              "free_end_s": [at + took for at, took in zip(row["free_at_s"], row["free_s"])]}
             for row in run["by_size"] + run["by_room"]]
    return {"source": path.stem, "gpu": path.stem.split("_")[0], "env": run["env"], "cases": cases}


def headroom(path: Path) -> dict:
    """A run of headroom probes: per extra, the free memory the driver reported before each probe and the probe's
    time."""
    run = json.loads(path.read_text())
    return {"source": path.stem, "gpu": path.stem.split("_")[0], "env": run["env"], "bytes": run["bytes"],
            "extras": [{k: row[k] for k in ("extra_bytes", "free_before_probe", "probe_s")} for row in run["extras"]]}


def main() -> None:
    runs = [reduce(p) for p in RAW]
    fit = {}
    for gpu in GPUS:
        first = next(run for run in runs if run["gpu"] == gpu)
        at_GiB, exponent = fit_slow([([c], c["free_bytes"]) for c in first["cases"]],
                                    gpu_alloc_costs(gpu), SCRUB_PRESETS[gpu])
        fit[gpu] = {"source": first["source"], "ps_at_GiB": at_GiB, "exponent": exponent}
        print(f"{gpu} slow path: {at_GiB / 1e9:.3f} ms x GiB^{exponent:g} (fitted to {first['source']})")
    data = {"method": json.loads(RAW[0].read_text())["method"],
            "notes": ("five runs, each on a freshly started H100 80GB HBM3 (the fourth on 2026-12-07 and the fifth "
                      "on 2026-12-08, each asked for an H200), and one on an H200 (141 GB; driver "
                      "580.159.04); raw files calib/gpu_alloc/raw/{h100_alternation_run{1,2,3,4,5},"
                      "h200_alternation_run1}.json, script calib/gpu_alloc/measure_alternation.py, reduced by "
                      "calib/gpu_alloc/fit_alternation.py; the slow path fitted per GPU to its first run; 'headroom': "
                      "runs of calib/gpu_alloc/measure_headroom.py (raw h100_headroom_run{1,2}.json, the second on the "
                      "third H100 run's machine, and h200_headroom_run1.json on the H200 run's machine); times in s, "
                      "memory in bytes"),
            "runs": runs, "fit": fit, "headroom": [headroom(p) for p in HEADROOM]}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

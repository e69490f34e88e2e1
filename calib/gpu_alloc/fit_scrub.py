#!/usr/bin/env python3
"""Reduce the clearing runs (``raw/*_scrub_run*.json``) to ``models/data/gpu_scrub.json`` and fit each GPU's
clearing time per GiB freed.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_scrub.py

Per machine (the GPU the run names): the cases of ``measure_scrub.py`` with their repetitions' allocation times
(s), the memory free at the start, and the rate that fits the ``sizes`` cases
(:func:`models.gpu.scrub_calibration.fit_rate`, with the taking back that ``fit_pause.py`` fitted; the other cases
check it). ``SCRUB_PRESETS`` in
``models/gpu/scrub.py`` carries the fitted rates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.gpu.alloc_cost import gpu_alloc_costs  # noqa: E402
from models.gpu.scrub import GiB, SCRUB_PRESETS  # noqa: E402
from models.gpu.scrub_calibration import fit_rate  # noqa: E402

RAW = sorted((Path(__file__).parent / "raw").glob("*_scrub_run*.json"))
OUT = ROOT / "models" / "data" / "gpu_scrub.json"
MACHINES = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100"}


def grouped(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Rows with equal ``keys`` as one case: those keys and the list of their allocation and free times."""
    cases: dict[tuple, dict] = {}
    for r in rows:
        case = cases.setdefault(tuple(r[k] for k in keys), {**{k: r[k] for k in keys}, "alloc_s": [], "free_s": []})
        case["alloc_s"].append(r["alloc_s"])
        case["free_s"].append(r.get("free_s", r.get("frees_s")))
    return list(cases.values())


def reduce(run: dict) -> dict:
    machine = MACHINES[run["env"]["gpu"]]
    costs = gpu_alloc_costs(machine)
    sizes = grouped(run["sizes"], ("gib",))
    return {"env": run["env"], "free_bytes": run["free_bytes"], "sizes": sizes,
            "progress": grouped(run["progress"], ("delay_s", "k_gib")),
            "two_frees": grouped(run["two_frees"], ()), "idle": grouped(run["idle"], ("wait_s",)),
            "fit_ps_per_GiB": fit_rate(sizes, costs, SCRUB_PRESETS[machine].reclaim_ps_per_GiB)}


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    data = {"method": runs[0]["method"],
            "notes": ("one run per GPU, each on a freshly started machine (driver 580.159.04); raw files "
                      "calib/gpu_alloc/raw/{h200,h100}_scrub_run1.json, script calib/gpu_alloc/measure_scrub.py, "
                      "reduced and fitted by calib/gpu_alloc/fit_scrub.py; times in s"),
            "machines": {MACHINES[r["env"]["gpu"]]: reduce(r) for r in runs}}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    for name, machine in data["machines"].items():
        print(f"{name}: {machine['fit_ps_per_GiB'] / 1e9:.3f} ms per GiB freed")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

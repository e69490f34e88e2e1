#!/usr/bin/env python3
"""Reduce the slow-path runs (``raw/h200_slow_path_run*.json``) to ``models/data/h200_alloc_slow_path.json``.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_slow_path.py

Per item: the small calls' median and 10-90 % spread (the first 10 of each 200 dropped as warm-up), the empty
synchronize's median, the back-to-back cycles' samples in order with which are slow (more than ``SLOW_FACTOR``
times the fastest of their call and size), and the cycles after a wait.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.gpu.alloc_cost import SLOW_FACTOR  # noqa: E402

RAW = sorted((Path(__file__).parent / "raw").glob("h200_slow_path_run*.json"))
OUT = ROOT / "models" / "data" / "h200_alloc_slow_path.json"
WARM_UP = 10


def spread(samples) -> dict:
    s = np.asarray(samples, dtype=float)
    return {"median_s": float(np.median(s)), "p10_s": float(np.percentile(s, 10)),
            "p90_s": float(np.percentile(s, 90)), "samples": len(s)}


def reduce(run: dict) -> dict:
    small = [{"call": r["call"], "bytes": r["bytes"], "sync": r["sync"], "alloc": spread(r["alloc_s"][WARM_UP:]),
              "free": spread(r["free_s"][WARM_UP:])} for r in run["small"]]
    small += [{"call": r["call"], "bytes": r["bytes"], "held": True, "alloc": spread(r["alloc_s"][WARM_UP:]),
               "free": spread(r["free_s"][WARM_UP:])} for r in run["small_held"]]
    cycles = []
    for kind in ("back_to_back", "after_wait"):
        for r in run[kind]:
            fastest = min(a for x in run["back_to_back"] + run["after_wait"]
                          if (x["call"], x["bytes"]) == (r["call"], r["bytes"]) for a in x["alloc_s"])
            cycles.append({"item": kind, "call": r["call"], "bytes": r["bytes"], "wait_s": r["wait_s"],
                           "alloc_s": r["alloc_s"], "free_s": r["free_s"],
                           "slow": [a > SLOW_FACTOR * fastest for a in r["alloc_s"]]})
    return {"env": run["env"], "free_bytes": run["free_bytes"], "sync_floor": spread(run["sync_floor_s"]),
            "fresh": run["fresh"], "small": small, "cycles": cycles}


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    data = {"method": runs[0]["method"],
            "notes": (f"{len(runs)} run(s) on freshly started H200 machines; raw files calib/gpu_alloc/raw/"
                      "h200_slow_path_run*.json, script calib/gpu_alloc/measure_slow_path.py, reduced by "
                      "calib/gpu_alloc/fit_slow_path.py"),
            "runs": [reduce(r) for r in runs]}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

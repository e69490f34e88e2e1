#!/usr/bin/env python3
"""Combine the raw allocation runs into ``models/data/h200_gpu_alloc.json`` and fit each call's cost curve.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_alloc.py            # writes models/data/h200_gpu_alloc.json, prints the fit

Per call and size, the samples of every run are pooled; those more than ``SLOW_FACTOR`` times the fastest are
slow-path samples (counted, not fitted). The typical time is the median of the others, its spread their 10th
and 90th percentiles; :func:`models.size_cost.fit_call_cost` fits the curve to the typical times.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.gpu.alloc_cost import CALLS, SLOW_FACTOR, typical_samples  # noqa: E402
from models.size_cost import fit_call_cost  # noqa: E402

RAW = sorted((Path(__file__).parent / "raw").glob("h200_run*.json"))
OUT = ROOT / "models" / "data" / "h200_gpu_alloc.json"


def points(runs: list[dict]) -> list[dict]:
    """One row per (call, size) with the pooled samples' typical time, spread and slow-path count."""
    rows = []
    for kind in ("malloc", "vmm"):
        for i, first in enumerate(runs[0][kind]):
            for call in (c for c in CALLS if c in first):
                pooled = np.concatenate([run[kind][i][call]["samples_s"] for run in runs])
                fast = typical_samples(pooled)
                slow = pooled[pooled > SLOW_FACTOR * pooled.min()]
                rows.append({"call": call, "bytes": first["bytes"], "median_s": float(np.median(fast)),
                             "p10_s": float(np.percentile(fast, 10)), "p90_s": float(np.percentile(fast, 90)),
                             "samples": len(pooled), "slow_samples": len(slow),
                             "slow_median_s": float(np.median(slow)) if len(slow) else None})
    return rows


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    rows = points(runs)
    fits = {}
    for call in CALLS:
        mine = [r for r in rows if r["call"] == call]
        cost = fit_call_cost([r["bytes"] for r in mine], [r["median_s"] for r in mine])
        fits[call] = {"fixed_ps": cost.fixed_ps, "per_GiB_ps": cost.per_GiB_ps, "exponent": cost.exponent}
        print(f'        "{call}": CallCost({cost.fixed_ps:_}, {cost.per_GiB_ps:_}, {cost.exponent}),')
    data = {
        "method": runs[0]["method"],
        "notes": (f"{len(runs)} runs, each on a freshly started H200 machine (same host type, 2026-12-01), "
                  f"{', '.join(str(r['reps']) for r in runs)} repetitions per size; samples pooled per call and "
                  f"size. A sample more than {SLOW_FACTOR:g} times the fastest of its size is a slow-path sample "
                  "(cudaMalloc and cuMemCreate of 2 GiB and more, ~4.7 ms per GiB): counted in slow_samples, not "
                  "in median_s/p10_s/p90_s. Raw files: calib/gpu_alloc/raw/; script: "
                  "calib/gpu_alloc/measure_alloc.py; fit: calib/gpu_alloc/fit_alloc.py."),
        "env": [r["env"] for r in runs],
        "points": rows,
        "fit": fits,
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} points)")


if __name__ == "__main__":
    main()

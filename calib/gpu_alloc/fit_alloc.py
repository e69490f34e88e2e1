#!/usr/bin/env python3
"""Combine one GPU's raw allocation runs into ``models/data/<gpu>_gpu_alloc.json`` and fit each call's cost
curve.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_alloc.py            # writes models/data/h200_gpu_alloc.json, prints the fit
    python calib/gpu_alloc/fit_alloc.py --gpu h100 # models/data/h100_gpu_alloc.json, from raw/h100_*.json

Per call and size, the samples of every run (``raw/<gpu>_run*.json``) are pooled; the H200's slow-path runs' 2 MiB
cycles (``raw/h200_slow_path_run*.json``, :data:`JOINED`: 200 cudaMalloc/cudaFree and 200
cuMemCreate/cuMemRelease with the synchronize inside the span, as here; the first ``WARM_UP`` of each dropped, as
``fit_slow_path.py`` drops them) join the 2 MiB samples of those four calls. Samples more than ``SLOW_FACTOR``
times the fastest are slow-path samples (counted, not fitted). The typical time is the median of the others, its
spread their 10th and 90th percentiles; :func:`models.size_cost.fit_call_cost` fits the curve to the typical times.
Of the curves fitted per exponent, the one kept is that whose worst point lies least far out relative to its spread
(:func:`models.size_cost.spread_tolerance`): a tightly measured time holds the curve more than a scattered one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling reduction script

from fit_slow_path import WARM_UP  # noqa: E402
from models.gpu.alloc_cost import CALLS, MIN_TOLERANCE, SLOW_FACTOR, typical_samples  # noqa: E402
from models.size_cost import fit_call_cost, spread_tolerance  # noqa: E402

RAW = Path(__file__).parent / "raw"
FREED_BY = {"cudaMalloc": "cudaFree", "cuMemCreate": "cuMemRelease"}
MACHINES = {"h200": "a freshly started H200 machine (same host type, 2026-12-01)",
            "h100": "a freshly started H100 80GB HBM3 machine (2026-12-07)"}
"""What each GPU's runs ran on, for the data file's notes."""
SLOW_FROM = {"h200": "2 GiB", "h100": "32 GiB"}
"""The smallest size at which each GPU's runs took the slow path, for the notes."""
JOINED = {"h200": True, "h100": False}
"""Whether the GPU's slow-path runs' 2 MiB cycles join its 2 MiB points. The H200's do: its first runs' 2 MiB
medians held each repetition's first call. The H100's do not: its slow-path run's machine made small calls 50 %
slower than both fresh machines (cudaMalloc 69 us against 43-58 us), and its 190 cycles would set the 2 MiB points
alone."""


def small_cycles(runs: list[dict]) -> dict[tuple[str, int], list[float]]:
    """The slow-path runs' timed small cycles (synchronize inside the span), by (call, size): allocations and
    the frees that followed them."""
    out: dict[tuple[str, int], list[float]] = {}
    for run in runs:
        for r in run["small"]:
            if r["sync"]:
                out.setdefault((r["call"], r["bytes"]), []).extend(r["alloc_s"][WARM_UP:])
                out.setdefault((FREED_BY[r["call"]], r["bytes"]), []).extend(r["free_s"][WARM_UP:])
    return out


def points(runs: list[dict], small: dict[tuple[str, int], list[float]]) -> list[dict]:
    """One row per (call, size) with the pooled samples' typical time, spread and slow-path count."""
    rows = []
    for kind in ("malloc", "vmm"):
        for i, first in enumerate(runs[0][kind]):
            for call in (c for c in CALLS if c in first):
                pooled = np.concatenate([run[kind][i][call]["samples_s"] for run in runs]
                                        + [small.get((call, first["bytes"]), [])])
                fast = typical_samples(pooled)
                slow = pooled[pooled > SLOW_FACTOR * pooled.min()]
                rows.append({"call": call, "bytes": first["bytes"], "median_s": float(np.median(fast)),
                             "p10_s": float(np.percentile(fast, 10)), "p90_s": float(np.percentile(fast, 90)),
                             "samples": len(pooled), "slow_samples": len(slow),
                             "slow_median_s": float(np.median(slow)) if len(slow) else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", choices=sorted(MACHINES), default="h200")
    gpu = parser.parse_args().gpu
    small_raw = sorted(RAW.glob(f"{gpu}_slow_path_run*.json")) if JOINED[gpu] else []
    runs = [json.loads(p.read_text()) for p in sorted(RAW.glob(f"{gpu}_run*.json"))]
    rows = points(runs, small_cycles([json.loads(p.read_text()) for p in small_raw]))
    fits = {}
    for call in CALLS:
        mine = [r for r in rows if r["call"] == call]
        cost = fit_call_cost([r["bytes"] for r in mine], [r["median_s"] for r in mine],
                             tolerances=[spread_tolerance(r, MIN_TOLERANCE) for r in mine])
        fits[call] = {"fixed_ps": cost.fixed_ps, "per_GiB_ps": cost.per_GiB_ps, "exponent": cost.exponent}
        print(f'        "{call}": CallCost({cost.fixed_ps:_}, {cost.per_GiB_ps:_}, {cost.exponent}),')
    data = {
        "method": runs[0]["method"],
        "notes": (f"{len(runs)} run{'s' * (len(runs) > 1)}, each on {MACHINES[gpu]}, "
                  f"{', '.join(str(r['reps']) for r in runs)} repetitions per size; samples pooled per call and "
                  + (f"size, with {len(small_raw)} slow-path run(s)' 2 MiB cycles (200 each, the first {WARM_UP} "
                     "dropped) joining cudaMalloc, cudaFree, cuMemCreate and cuMemRelease at 2 MiB. " if small_raw
                     else "size. ")
                  + f"A sample more than {SLOW_FACTOR:g} times the fastest of its size is a slow-path sample "
                  f"(cudaMalloc and cuMemCreate of {SLOW_FROM[gpu]} and more, ~3-5 ms per GiB): counted in "
                  "slow_samples, not in median_s/p10_s/p90_s. Raw files: calib/gpu_alloc/raw/; script: "
                  "calib/gpu_alloc/measure_alloc.py; fit: calib/gpu_alloc/fit_alloc.py."),
        "env": [r["env"] for r in runs],
        "points": rows,
        "fit": fits,
    }
    out = ROOT / "models" / "data" / f"{gpu}_gpu_alloc.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)} ({len(rows)} points)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Combine the raw host-pinning runs into ``models/data/h200_host_pinning_pages.json`` and fit the pin curves.

Usage (from the repository root)::

    python calib/host_pin/fit_pin.py       # writes models/data/h200_host_pinning_pages.json, prints the fit

Per (path, page backing, prefaulted, size) the pin samples of every run are pooled: the typical time is their
median, the spread their 10th and 90th percentiles; unpin times are the runs' medians pooled over both
prefault states (unpinning does not depend on how the pages came in). Per (path, backing): the present-page pin
curve and the unpin curve are :func:`models.size_cost.fit_call_cost` over 2 MiB .. 4 GiB; faulting the pages in
adds a cost per byte that rises past a knee, fitted to cold minus prefaulted at every size with one knee per
page size (:func:`models.host.fit_fault_in`; stored under ``prefaulted`` False). The knee's range is the knees
of ``models.host.FAULT_KNEES`` at which every cold point of that page size stays within its tolerance in
``rdmasim calibrate`` (its 10-90 % spread, at least 30 %).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.host import FAULT_KNEES, PAGE_BACKINGS, fit_fault_in  # noqa: E402
from models.size_cost import fit_call_cost, fit_knee_cost, spread_tolerance  # noqa: E402

RAW = sorted((Path(__file__).parent / "raw").glob("h200_run*.json"))
OUT = ROOT / "models" / "data" / "h200_host_pinning_pages.json"


def points(runs: list[dict]) -> list[dict]:
    """One row per (path, pages, prefaulted, bytes)."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        for row in run["rows"]:
            groups.setdefault((row["path"], row["pages"], row["prefaulted"], row["bytes"]), []).append(row)
    out = []
    for (path, pages, prefaulted, nbytes), rows in sorted(groups.items()):
        pin = np.concatenate([r["pin_samples_s"] for r in rows])
        out.append({"path": path, "pages": pages, "prefaulted": prefaulted, "bytes": nbytes,
                    "median_s": float(np.median(pin)), "p10_s": float(np.percentile(pin, 10)),
                    "p90_s": float(np.percentile(pin, 90)), "samples": len(pin),
                    "unpin_s": [r["unpin_s"] for r in rows], "huge_fraction": min(r["huge_fraction"] for r in rows)})
    return out


def knee_ranges(rows: list[dict], pin: dict) -> dict[str, tuple[int, int, int]]:
    """Per page size (``4KiB``, ``2MiB``): the fitted knee and the least and greatest of ``FAULT_KNEES`` at which,
    the fault-in rates refitted there, every cold point stays within its tolerance (10-90 % spread, at least 30 %)."""
    out = {}
    for page in sorted({PAGE_BACKINGS[r["pages"]] for r in rows}):
        cold = [r for r in rows if PAGE_BACKINGS[r["pages"]] == page and not r["prefaulted"]]
        keys = sorted({(r["path"], r["pages"]) for r in cold})
        warm = {(r["path"], r["pages"], r["bytes"]): r["median_s"] for r in rows if r["prefaulted"]}
        good = []
        for knee in FAULT_KNEES:
            held = True
            for key in keys:
                mine = sorted((r for r in cold if (r["path"], r["pages"]) == key), key=lambda r: r["bytes"])
                cost, _ = fit_knee_cost([r["bytes"] for r in mine],
                                        [r["median_s"] - warm[(*key, r["bytes"])] for r in mine], knee)
                held &= all(abs((warm[(*key, r["bytes"])] + cost.time_ps(r["bytes"]) / 1e12) / r["median_s"] - 1)
                            <= spread_tolerance(r, 0.30) for r in mine)
            if held:
                good.append(knee)
        if not good:
            raise ValueError(f"no knee holds every cold point of {page}-byte pages within its tolerance")
        fitted = pin[f"{keys[0][0]}|{keys[0][1]}|False"]["knee_bytes"]
        out["4KiB" if page == 4096 else f"{page >> 20}MiB"] = (fitted, min(good), max(good))
    return out


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    rows = points(runs)
    pin, unpin, faults = {}, {}, fit_fault_in(rows)
    for path, pages in sorted({(r["path"], r["pages"]) for r in rows}):
        warm = {r["bytes"]: r["median_s"] for r in rows if (r["path"], r["pages"], r["prefaulted"]) == (path, pages, True)}
        present, fault_in = fit_call_cost(list(warm), list(warm.values())), faults[path, pages]
        pin[f"{path}|{pages}|True"] = {"fixed_ps": present.fixed_ps, "per_GiB_ps": present.per_GiB_ps,
                                       "exponent": present.exponent}
        pin[f"{path}|{pages}|False"] = {"near_per_GiB_ps": fault_in.near_per_GiB_ps,
                                        "far_per_GiB_ps": fault_in.far_per_GiB_ps, "knee_bytes": fault_in.knee_bytes}
        print(f'    ("{path}", "{pages}", True): CallCost({present.fixed_ps:_}, {present.per_GiB_ps:_}, '
              f'{present.exponent}),')
        print(f'    ("{path}", "{pages}", False): KneeCost({fault_in.near_per_GiB_ps:_}, {fault_in.far_per_GiB_ps:_}, '
              f'{fault_in.knee_bytes:_}),')
    knees = knee_ranges(rows, pin)
    for page, (knee, low, high) in knees.items():
        print(f"knee of {page} pages: {knee >> 20} MiB, every cold point within its tolerance for "
              f"{low >> 20} .. {high >> 20} MiB")
    for key in sorted({(r["path"], r["pages"]) for r in rows}):
        mine = [r for r in rows if (r["path"], r["pages"]) == key]
        sizes = sorted({r["bytes"] for r in mine})
        medians = [float(np.median([t for r in mine if r["bytes"] == n for t in r["unpin_s"]])) for n in sizes]
        cost = fit_call_cost(sizes, medians)
        unpin["|".join(key)] = {"fixed_ps": cost.fixed_ps, "per_GiB_ps": cost.per_GiB_ps, "exponent": cost.exponent,
                                "points": [{"bytes": n, "median_s": m} for n, m in zip(sizes, medians)]}
        print(f'    ("{key[0]}", "{key[1]}"): CallCost({cost.fixed_ps:_}, {cost.per_GiB_ps:_}, {cost.exponent}),')
    data = {
        "method": runs[0]["method"],
        "notes": (f"{len(runs)} runs, each on a freshly started H200 machine (the same host type, 2026-12-01), "
                  f"{', '.join(str(r['reps']) for r in runs)} repetitions up to 128 MiB and half as many above; "
                  "pin samples pooled per point. pin_user_pages is measured through io_uring's fixed-buffer "
                  "registration (pin_user_pages_fast with FOLL_WRITE | FOLL_LONGTERM, ib_umem_get's call). "
                  "Raw files: calib/host_pin/raw/; script: calib/host_pin/measure_pin.py; fit: "
                  "calib/host_pin/fit_pin.py."),
        "env": [r["env"] for r in runs],
        "points": rows,
        "fit": {"pin": pin, "unpin": unpin, "fault_knee": {
            page: {"knee_bytes": knee, "range_bytes": [low, high]} for page, (knee, low, high) in knees.items()}},
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} points)")


if __name__ == "__main__":
    main()

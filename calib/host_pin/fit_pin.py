#!/usr/bin/env python3
"""Combine the raw host-pinning runs into ``models/data/h200_host_pinning_pages.json`` and fit the pin curves.

Usage (from the repository root)::

    python calib/host_pin/fit_pin.py       # writes models/data/h200_host_pinning_pages.json, prints the fit

Per (path, page backing, prefaulted, size) the pin samples of every run are pooled: the typical time is their
median, the spread their 10th and 90th percentiles; unpin times are the runs' medians pooled over both
prefault states (unpinning does not depend on how the pages came in). Per (path, backing): the present-page pin
curve and the unpin curve are :func:`models.size_cost.fit_call_cost` over 2 MiB .. 4 GiB; faulting the pages in
adds a cost proportional to the size, fitted to cold minus prefaulted from ``models.host.COLD_FIT_FROM`` up
(stored under ``prefaulted`` False).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.host import pin_curve_holds  # noqa: E402
from models.size_cost import fit_call_cost, fit_proportional  # noqa: E402

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


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    rows = points(runs)
    pin, unpin = {}, {}
    for path, pages in sorted({(r["path"], r["pages"]) for r in rows}):
        warm, cold = ({r["bytes"]: r["median_s"] for r in rows
                       if (r["path"], r["pages"], r["prefaulted"]) == (path, pages, state)} for state in (True, False))
        present = fit_call_cost(list(warm), list(warm.values()))
        big = [n for n in cold if pin_curve_holds(n, False)]
        fault_in = fit_proportional(big, [cold[n] - warm[n] for n in big])
        for prefaulted, cost in ((True, present), (False, fault_in)):
            pin[f"{path}|{pages}|{prefaulted}"] = {"fixed_ps": cost.fixed_ps, "per_GiB_ps": cost.per_GiB_ps,
                                                   "exponent": cost.exponent}
            print(f'    ("{path}", "{pages}", {prefaulted}): CallCost({cost.fixed_ps:_}, {cost.per_GiB_ps:_}, '
                  f'{cost.exponent}),')
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
        "fit": {"pin": pin, "unpin": unpin},
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} points)")


if __name__ == "__main__":
    main()

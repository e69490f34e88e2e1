#!/usr/bin/env python3
"""Reduce the runs of ``measure_pin.py`` at scale (1-32 GiB, pin_user_pages, 4 KiB pages and THP) into
``models/data/h100_host_pin_scale.json`` and fit what an application's own first write to every page costs it.

Usage (from the repository root)::

    python calib/host_pin/fit_scale.py     # writes models/data/h100_host_pin_scale.json, prints the fit

Per (backing, prefaulted, size): the pin samples, and for the prefaulted rows the timed first writes that faulted
the pages in from user space (``touch_samples_s``). The touch curve per backing is
:func:`models.size_cost.fit_call_cost` over those writes' medians, each held to its samples' range (at least 10 %).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.size_cost import fit_call_cost, range_tolerance  # noqa: E402

RAW = sorted((Path(__file__).parent / "raw").glob("h100_scale_run*.json"))
OUT = ROOT / "models" / "data" / "h100_host_pin_scale.json"
FLOOR = 0.10
"""The least tolerance of a touch point in the fit."""


def main() -> None:
    runs = [json.loads(p.read_text()) for p in RAW]
    rows = [{k: r[k] for k in ("bytes", "pages", "path", "prefaulted", "pin_samples_s", "huge_fraction")}
            | ({"touch_samples_s": r["touch_samples_s"]} if "touch_samples_s" in r else {})
            for run in runs for r in run["rows"]]
    fit = {}
    for pages in sorted({r["pages"] for r in rows}):
        mine = [r for r in rows if r["pages"] == pages and "touch_samples_s" in r]
        cost = fit_call_cost([r["bytes"] for r in mine], [float(np.median(r["touch_samples_s"])) for r in mine],
                             tolerances=[range_tolerance(r["touch_samples_s"], FLOOR) for r in mine])
        fit[pages] = {"fixed_ps": cost.fixed_ps, "per_GiB_ps": cost.per_GiB_ps, "exponent": cost.exponent}
        print(f'    "{pages}": CallCost({cost.fixed_ps:_}, {cost.per_GiB_ps:_}, {cost.exponent}),')
    data = {"method": runs[0]["method"],
            "notes": (f"{len(runs)} run(s) of calib/host_pin/measure_pin.py on a freshly started H100 machine's host "
                      "(16-core Xeon VM, Linux 6.18, THP madvise, 2026-12-07): --paths pin_user_pages --backings "
                      "4k,thp --sizes-mib 1024,4096,16384,32768, 2 repetitions; raw "
                      "calib/host_pin/raw/h100_scale_run1.json, reduced by calib/host_pin/fit_scale.py; times in s"),
            "env": [run["env"] for run in runs], "rows": rows, "touch_fit": fit}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} rows)")


if __name__ == "__main__":
    main()

"""``rdmasim calibrate``'s host pinning rows (:mod:`sim.inspect.calibrate`): pinning by path and page backing on the
H200 host against its fitted curves, the same curves held out at scale on an H100 machine's host, and the
application's own first write to every page of a buffer (``host_faults``)."""

from __future__ import annotations

import numpy as np

from models.host import USER_TOUCH, HostParams
from models.size_cost import range_tolerance, spread_tolerance
from sim.core import PS_PER_MS
from sim.inspect.calibration_rows import load, row


def host_pages() -> list[dict]:
    """Pinning by path and page backing: each curve against its own points (2 MiB .. 4 GiB)."""
    rows = []
    for p in load("h200_host_pinning_pages.json")["points"]:
        host = HostParams(pages=p["pages"], pin_path=p["path"])
        state = "prefaulted" if p["prefaulted"] else "cold"
        near = not p["prefaulted"] and p["bytes"] <= host.fault_in(p["path"]).knee_bytes
        rows.append(row("host_pinning", f"{p['path']} {p['pages']} {state}", p["bytes"], "ms",
                        host.pin_cost_ps(p["bytes"], prefaulted=p["prefaulted"]) / PS_PER_MS, p["median_s"] * 1e3,
                        tolerance=spread_tolerance(p, 0.30), required=True,
                        note=f"huge pages {p['huge_fraction']:.0%}" + ("; zeroing in the LLC" if near else "")))
    return rows + _at_scale()


def _at_scale() -> list[dict]:
    """pin_user_pages of 1-32 GiB on an H100 machine's host (``h100_host_pin_scale.json``): the H200 host's curves
    held out beyond the 4 GiB they were fitted to, shown; and the application's own first write to every page
    (:data:`models.host.USER_TOUCH`), the fit's points, required within their samples' range (at least 10 %)."""
    rows = []
    for r in load("h100_host_pin_scale.json")["rows"]:
        host, state = HostParams(pages=r["pages"], pin_path=r["path"]), "prefaulted" if r["prefaulted"] else "cold"
        rows.append(row("host_pinning", f"{r['path']} {r['pages']} {state}, an H100 host", r["bytes"], "ms",
                        host.pin_cost_ps(r["bytes"], prefaulted=r["prefaulted"]) / PS_PER_MS,
                        float(np.median(r["pin_samples_s"])) * 1e3,
                        tolerance=range_tolerance(r["pin_samples_s"], 0.30), required=False,
                        note="held out: another host, beyond the fitted 4 GiB"))
        if "touch_samples_s" in r:
            rows.append(row("host_faults", f"first write from user space {r['pages']}", r["bytes"], "ms",
                            USER_TOUCH[r["pages"]].time_ps(r["bytes"]) / PS_PER_MS,
                            float(np.median(r["touch_samples_s"])) * 1e3,
                            tolerance=range_tolerance(r["touch_samples_s"], 0.10), required=True,
                            note="an H100 host: one write per page faults it in (models.host.USER_TOUCH)"))
    return rows

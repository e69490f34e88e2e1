#!/usr/bin/env python3
"""Reduce the runs that show what an allocation pays to take back cleared memory to ``models/data/gpu_reclaim.json``
and fit that cost per GPU.

Usage (from the repository root)::

    python calib/gpu_alloc/fit_pause.py

Every timed allocation of the runs below whose freed memory is, by the clearing queue's rates
(:data:`models.gpu.scrub.SCRUB_PRESETS`), plainly cleared or plainly not when it is asked (:func:`plain`), as one
case: the call, its size, the bytes it takes back and its samples (s). Those near the end of a clearing are left
out, since the measured clearing rates differ by ~15 % between machines. The sources:

* ``raw/h100_pause_run{1,2,3,4,5,6}.json`` (``measure_pause.py``, room to spare in every case): each cycle starts
  0.3 s after the previous one, so its first allocation takes back what the previous cycle freed and its own timed
  allocation takes back the cycle's own free once cleared;
* ``raw/{h200,h100}_slow_path_run1.json`` (``measure_slow_path.py``'s ``after_wait``): cudaMalloc and cuMemCreate
  of 64 (H200) or 32 GiB (H100), allocated and freed, then again W s later;
* ``raw/{h200,h100}_scrub_run1.json`` (``measure_scrub.py``'s ``idle``): 8 GiB allocated and freed, W s later
  8 GiB again; the cycles run back to back, so the timed allocation also takes back the previous cycle's free.

The taking-back cost per GiB is fitted per run by relative least squares on the cases that take something back
(:func:`models.gpu.scrub_calibration.fit_reclaim`); a GPU's is the mean of its fitted runs', each run weighing the
same (they differ up to twofold between machines). The runs of :data:`HELD_OUT` are reduced alike, their cases and
own fit kept under ``held_out``, but not fitted: ``rdmasim calibrate`` shows them against the others' fit.
``fit_scrub.py`` then fits the clearing rate with it known.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.gpu.alloc_cost import gpu_alloc_costs  # noqa: E402
from models.gpu.scrub import GiB, SCRUB_PRESETS  # noqa: E402
from models.gpu.scrub_calibration import fit_reclaim  # noqa: E402
from fit_scrub import MACHINES  # noqa: E402 - this script's folder: the GPU names the runs record

RAW = Path(__file__).parent / "raw"
OUT = ROOT / "models" / "data" / "gpu_reclaim.json"
HELD_OUT = {"h100_pause_run5": "a different machine took memory back ~2x slower",
            "h100_pause_run6": ("a different machine, its calls slower, took memory back at 0.343 ms per GiB "
                                "against the fitted runs' mean 0.261")}
"""Runs reduced but not fitted (by file stem), each with why."""


def clear_s(machine: str, gib: float) -> float:
    """The clearing time of ``gib`` freed on ``machine`` by its preset (s)."""
    return gib * SCRUB_PRESETS[machine].clear_ps_per_GiB / 1e12


def plain(machine: str, gib: float, wait_s: float) -> bool | None:
    """True where ``gib`` freed ``wait_s`` earlier is plainly cleared (1.5 times its clearing time or more), False
    where plainly not (half of it or less), None in between."""
    if wait_s >= 1.5 * clear_s(machine, gib):
        return True
    return False if wait_s <= 0.5 * clear_s(machine, gib) else None


class Cases:
    """Cases of one machine, keyed by source, item and words, each with its samples."""

    def __init__(self) -> None:
        self.cases: dict[tuple, dict] = {}

    def add(self, source: str, item: str, words: str, call: str, gib: float, back_gib: float, seconds: float) -> None:
        key = (source, item, words)
        case = self.cases.setdefault(key, {"source": source, "item": item, "case": words, "call": call,
                                           "bytes": round(gib * GiB), "taken_back_bytes": round(back_gib * GiB),
                                           "alloc_s": []})
        case["alloc_s"].append(seconds)


def pause_run(run: dict, source: str, cases: Cases) -> None:
    machine = MACHINES[run["env"]["gpu"]]
    for item in ("after_free", "busy_gpu", "busy_cpu", "kernel_first", "twice", "threshold"):
        for r in run.get(item, []):
            gib, w = r["gib"], r["wait_s"]
            cleared = plain(machine, gib, w)
            if cleared is None or gib < 1:
                continue
            words = f"{gib:g} GiB, {w:g} s after freeing it" + ("" if item in ("after_free", "threshold")
                                                                  else f" ({item.replace('_', ' ')})")
            cases.add(source, item, words, "cudaMalloc", gib, gib if cleared else 0, r["alloc_s"])
            if "second_alloc_s" in r:
                cases.add(source, item, f"{gib:g} GiB right after that one", "cudaMalloc", gib, 0,
                          r["second_alloc_s"])
    for r in run.get("no_free", []):
        cases.add(source, "no_free", f"8 GiB, {r['wait_s']:g} s after another, nothing freed", "cudaMalloc", 8, 0,
                  r["alloc_s"])
    for r in run.get("two_sizes", []):
        w = r["wait_s"]
        since_first = w + r["frees_s"][1]  # the 8 GiB's clearing starts when its free returns, before the 32's
        small, large = plain(machine, 8, since_first), plain(machine, 8 + 32, since_first)  # one after the other
        if small is None or large is None:
            continue
        back = 40 if large else 8 if small else 0
        cases.add(source, "two_sizes", f"1 GiB, {w:g} s after freeing 8 then 32 GiB", "cudaMalloc", 1, back,
                  r["alloc_s"])


def slow_path_run(run: dict, source: str, cases: Cases) -> None:
    machine = MACHINES[run["env"]["gpu"]]
    for r in run["after_wait"]:
        gib, w = r["bytes"] / GiB, r["wait_s"]
        if w > 0 and plain(machine, gib, w):
            for seconds in r["alloc_s"][1:]:  # the first follows the previous item's frees
                cases.add(source, "after_wait", f"{r['call']} {gib:g} GiB, {w:g} s after freeing it", r["call"],
                          gib, gib, seconds)


def scrub_run(run: dict, source: str, cases: Cases) -> None:
    machine = MACHINES[run["env"]["gpu"]]
    for r in run["idle"]:
        w = r["wait_s"]
        cleared = plain(machine, 16, w)  # this cycle's 8 GiB and the previous cycle's, cleared one after the other
        if cleared is not None:
            cases.add(source, "idle", f"8 GiB, {w:g} s after freeing it (and 8 GiB just before)", "cudaMalloc", 8,
                      16 if cleared else 0, r["alloc_s"])


def main() -> None:
    by_machine: dict[str, Cases] = {}
    readers = (("*_pause_run*.json", pause_run), ("*_slow_path_run*.json", slow_path_run),
               ("*_scrub_run*.json", scrub_run))
    for pattern, reader in readers:
        for path in sorted(RAW.glob(pattern)):
            run = json.loads(path.read_text())
            reader(run, path.stem, by_machine.setdefault(MACHINES[run["env"]["gpu"]], Cases()))
    machines = {}
    for name, found in sorted(by_machine.items()):
        cases = list(found.cases.values())
        runs = {source: fit_reclaim([c for c in cases if c["source"] == source], gpu_alloc_costs(name))
                for source in sorted({c["source"] for c in cases})}
        fitted = {source: fit for source, fit in runs.items() if source not in HELD_OUT}
        machines[name] = {"cases": cases, "runs_ps_per_GiB": fitted,
                          "fit_ps_per_GiB": round(np.mean(list(fitted.values()))),
                          "held_out": {source: {"why": HELD_OUT[source], "ps_per_GiB": fit}
                                       for source, fit in runs.items() if source in HELD_OUT}}
    data = {"method": __doc__,
            "notes": ("H100: four runs of measure_pause.py, each on a freshly started machine (2026-12-05), and "
                      "the after_wait and idle cases of the earlier slow-path and clearing runs (another machine), "
                      "fitted; a fifth and a sixth run of measure_pause.py (2026-12-07 and 2026-12-08, two other "
                      "machines), held out; H200: those of the earlier runs; driver 580.159.04 throughout; times in s"),
            "machines": machines}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    for name, machine in machines.items():
        runs = ", ".join(f"{k} {v / 1e9:.3f}" for k, v in machine["runs_ps_per_GiB"].items())
        held = "".join(f"; held out: {k} {v['ps_per_GiB'] / 1e9:.3f}" for k, v in machine["held_out"].items())
        print(f"{name}: {len(machine['cases'])} cases, {machine['fit_ps_per_GiB'] / 1e9:.3f} ms per GiB taken back "
              f"(fitted runs: {runs}{held})")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

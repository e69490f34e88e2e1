#!/usr/bin/env python3
"""Fit the unified-memory model to models/data/h200_managed_memory.json and print model vs measured.

Usage: ``python calib/gpu_um/fit_um.py`` (from the repository root, rdmasim importable). Prints the fitted
constants (paste them into ``UVM_PRESETS["h200"]`` in models/gpu/managed.py) and one line per measured
item: model, geometric mean of the runs' medians, each run, error.
"""

from __future__ import annotations

from dataclasses import fields

from models.gpu.managed import UVM_PRESETS
from models.gpu.um_calibration import compare, fit, load_cases


def main() -> None:
    cases = load_cases()
    fitted = fit(cases)
    print("fitted constants:")
    for f in fields(fitted):
        print(f"  {f.name} = {getattr(fitted, f.name)!r}")
    for title, params in (("fit", fitted), ("preset h200", UVM_PRESETS["h200"])):
        print(f"\n{title}: model vs measured (ms)")
        for row in compare(cases, params):
            print(f"  {row['case']:<28} model {row['model_ms']:9.3f}  measured {row['measured_ms']:9.3f}  "
                  f"runs {row['runs_ms']}  error {100 * row['error']:+6.1f} %")


if __name__ == "__main__":
    main()

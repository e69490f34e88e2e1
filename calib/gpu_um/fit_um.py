#!/usr/bin/env python3
"""Fit the unified-memory model to models/data/h200_managed_memory.json and print model vs measured.

Usage: ``python calib/gpu_um/fit_um.py [--also-fit ROLE ...]`` (from the repository root, rdmasim importable).
Prints the fitted constants (paste them into ``UVM_PRESETS["h200"]`` in models/gpu/managed.py) and one line per
measured item: model, geometric mean of the runs' medians, each run, error, and ``OUT`` where the error is beyond
the item's tolerance. ``--also-fit range partial`` fits the range experiment's items too (what was tried before
they were shown, not fitted: see calib/gpu_um/README.md).
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

from models.gpu.managed import UVM_PRESETS
from models.gpu.um_calibration import compare, fit, load_cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--also-fit", nargs="*", default=[], metavar="ROLE", help="roles to fit besides 'fit'")
    args = parser.parse_args()
    cases = [replace(c, role="fit") if c.role in args.also_fit else c for c in load_cases()]
    fitted = fit(cases)
    print("fitted constants:")
    for f in fields(fitted):
        print(f"  {f.name} = {getattr(fitted, f.name)!r}")
    for title, params in (("fit", fitted), ("preset h200", UVM_PRESETS["h200"])):
        print(f"\n{title}: model vs measured (ms)")
        for case, row in zip(cases, compare(cases, params)):
            out = "  OUT" if case.role in ("fit", "check") and abs(row["error"]) > case.tolerance else ""
            print(f"  {row['case']:<44} {case.role:<7} model {row['model_ms']:9.3f}  measured {row['measured_ms']:9.3f}"
                  f"  runs {row['runs_ms']}  error {100 * row['error']:+6.1f} %{out}")


if __name__ == "__main__":
    main()

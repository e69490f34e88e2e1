"""A sweep's results directory, written while the sweep runs and readable at any point of it.

Layout: ``sweep.json`` (the resolved runs: index, repetition, seed, variant, axis values, key; hashes of the
sweep and base files; package versions), ``runs/<key>.parquet`` (one file per finished run, failed or not,
written to a temporary file, flushed to disk and renamed, so a file that exists is complete; one that cannot
be read anyway, e.g. after a crash of the machine, counts as not stored) and, once the sweep ends,
``summary.parquet`` and ``summary.csv`` (:func:`sim.store.sweep_table.read_table`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from sim.store.leftovers import leftovers
from sim.store.outdir import TEMPORARY_NAME, write_atomically
from sim.results.write import package_versions
from sim.store.sweep_table import partition_path
from sim.sweep.plan import SweepPlan

FAILED = "failed"
"""The ``status`` of a run that raised instead of finishing (its ``error`` says what); finished runs are 'ok'."""


def remove_stale_temporaries(out_dir: str | os.PathLike) -> list[Path]:
    """Remove the half-written files that a killed sweep process left in ``out_dir`` and its ``runs/``
    (temporaries of processes no longer running); returns them."""
    removed = []
    for folder in (Path(out_dir), Path(out_dir) / "runs"):
        for entry, _ in leftovers(folder, re.compile(TEMPORARY_NAME)):
            if entry.is_file():
                entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed


def write_partition(out_dir: str | os.PathLike, key: str, table: pd.DataFrame) -> Path:
    """Store one finished run's table atomically."""
    path = partition_path(out_dir, key)
    write_atomically(path, lambda tmp: table.to_parquet(tmp, index=False))
    return path


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1) + "\n"))


def sweep_record(plan: SweepPlan) -> dict:
    """The content of ``sweep.json``."""
    return {
        "rdmasim_sweep": 1, "name": plan.sweep.name, "file": plan.file, "base": plan.base_file,
        "sweep_sha256": plan.sweep_sha256, "base_sha256": plan.base_sha256, "seed": plan.seed,
        "repetitions": plan.sweep.repetitions, "axes": plan.axes,
        "runs": [{"run": r.index, "repetition": r.repetition, "seed": r.seed, "variant": r.variant,
                  "axes": r.axes, "key": r.key} for r in plan.runs],
        "versions": package_versions(),
    }


def write_summary(out_dir: str | os.PathLike, table: pd.DataFrame) -> None:
    """Store the final table as ``summary.parquet`` and ``summary.csv``."""
    out = Path(out_dir)
    write_atomically(out / "summary.parquet", lambda tmp: table.to_parquet(tmp, index=False))
    write_atomically(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))

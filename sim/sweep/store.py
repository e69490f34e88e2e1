"""A sweep's results directory, written while the sweep runs and readable at any point of it.

Layout: ``sweep.json`` (the resolved runs: index, repetition, seed, variant, axis values, key; hashes of the
sweep and base files; package versions), ``runs/<key>.parquet`` (one file per finished run, failed or not,
written to a temporary file, flushed to disk and renamed, so a file that exists is complete; one that cannot
be read anyway, e.g. after a crash of the machine, counts as not stored) and, once the sweep ends,
``summary.parquet`` and ``summary.csv`` (:func:`read_table`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from sim.core.process import leftovers
from sim.outdir import TEMPORARY_NAME, write_atomically
from sim.results import package_versions
from sim.sweep.plan import VARIANT, SweepPlan

FAILED = "failed"
"""The ``status`` of a run that raised instead of finishing (its ``error`` says what); finished runs are 'ok'."""
RUN_COLUMNS = ["run", "repetition", "seed", "variant"]
"""Columns that say which run a row belongs to; the axis columns follow them, then the run's results."""


def partition_path(out_dir: str | os.PathLike, key: str) -> Path:
    """Where the results of the run with ``key`` are stored."""
    return Path(out_dir) / "runs" / f"{key}.parquet"


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


def read_partition(out_dir: str | os.PathLike, key: str) -> pd.DataFrame | None:
    """The stored table of the run with ``key``; None if there is none, its file cannot be read (empty, cut
    short, not Parquet, without a ``status`` column) or it holds another run's rows (a file copied over it): the
    run is still to do."""
    path = partition_path(out_dir, key)
    if not path.is_file():
        return None
    try:
        table = pd.read_parquet(path)
    except (OSError, pa.ArrowException):
        return None
    ours = {"status", "key"} <= set(table.columns) and len(table) and (table["key"] == key).all()
    return table if ours else None


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


def _axis_column(values: list) -> list:
    """One type per axis column, as Parquet needs: numbers, strings or booleans as they are, ints mixed with
    floats as floats, anything else as its JSON text."""
    kinds = {type(v) for v in values}
    if kinds <= {int, float} and float in kinds:
        return [float(v) for v in values]
    if len(kinds) == 1 and kinds <= {int, float, str, bool}:
        return values
    return [v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]


def read_table(out_dir: str | os.PathLike) -> pd.DataFrame:
    """The sweep's table so far: one row per finished run and (workload, message size), ordered by run; a
    failed run is one row with ``status`` :data:`FAILED` and its ``error``; an unreadable partition is left out.

    :raises FileNotFoundError: ``out_dir`` holds no ``sweep.json``.
    """
    record = json.loads((Path(out_dir) / "sweep.json").read_text())
    axes = [a for a in record["axes"] if a != VARIANT]
    cache: dict[str, pd.DataFrame | None] = {}
    frames = []
    for run in record["runs"]:
        if run["key"] not in cache:
            cache[run["key"]] = read_partition(out_dir, run["key"])
        results = cache[run["key"]]
        if results is not None:
            ids = pd.DataFrame({"run": run["run"], "repetition": run["repetition"], "seed": run["seed"],
                                "variant": run["variant"]}, index=results.index)
            frames.append(pd.concat([ids, results], axis=1))
    if not frames:
        return pd.DataFrame(columns=RUN_COLUMNS + axes + ["key", "status", "error"])
    table = pd.concat(frames, ignore_index=True)
    values = {run["run"]: run["axes"] for run in record["runs"]}
    for i, axis in enumerate(axes):
        table.insert(len(RUN_COLUMNS) + i, axis, _axis_column([values[r][axis] for r in table["run"]]))
    return table


def write_summary(out_dir: str | os.PathLike, table: pd.DataFrame) -> None:
    """Store the final table as ``summary.parquet`` and ``summary.csv``."""
    out = Path(out_dir)
    write_atomically(out / "summary.parquet", lambda tmp: table.to_parquet(tmp, index=False))
    write_atomically(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))

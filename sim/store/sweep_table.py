"""A sweep's table read from its results directory (``sweep.json`` and ``runs/<key>.parquet``, as
:mod:`sim.sweep.store` writes them), at any point of the sweep: below both the sweep that writes it and the
figures drawn from it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa

VARIANT = "variant"
"""The axis that picks one of the base file's variants."""
RUN_COLUMNS = ["run", "repetition", "seed", "variant"]
"""Columns that say which run a row belongs to; the axis columns follow them, then the run's results."""


def partition_path(out_dir: str | os.PathLike, key: str) -> Path:
    """Where the results of the run with ``key`` are stored."""
    return Path(out_dir) / "runs" / f"{key}.parquet"


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

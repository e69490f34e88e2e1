"""``run_sweep``: plan a sweep, skip the runs already stored, dispatch the others, stream results to disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from sim.store import outdir
from sim.store.sweep_table import partition_path, read_partition, read_table
from sim.engine.run import engine_line
from sim.sweep.execute import EXECUTORS
from sim.sweep.plan import RunSpec, load_sweep
from sim.sweep.store import FAILED, remove_stale_temporaries, sweep_record, write_json, write_partition, write_summary


@dataclass(frozen=True)
class SweepResult:
    """What a sweep left in its results directory."""

    out_dir: Path
    table: pd.DataFrame
    """One row per run and (workload, message size); see :func:`sim.store.sweep_table.read_table`."""
    ran: int
    """Runs simulated by this call."""
    skipped: int
    """Runs whose results were already stored (a resumed sweep)."""
    damaged: tuple[Path, ...] = ()
    """Stored partitions that could not be read (empty, cut short) or held another run's rows, so their runs were
    simulated again."""
    retried: int = 0
    """Runs stored as failed that this call simulated again (``retry_failed``)."""

    @property
    def failed(self) -> int:
        """Runs recorded as failed."""
        return int(self.table.loc[self.table["status"] == FAILED, "run"].nunique())


def run_sweep(path: str | os.PathLike, out_dir: str | os.PathLike, executor: str = "serial",
              workers: int | None = None, scheduler: str | None = None, progress: bool = True,
              retry_failed: bool = False, force: bool = False,
              notice: Callable[[str], None] | None = None) -> SweepResult:
    """Run every run of the sweep file ``path`` not yet stored in ``out_dir``; each finished run is stored
    at once, so an interrupted sweep resumes where it stopped. ``out_dir`` is claimed by
    :func:`sim.store.outdir.claim`: new, empty, this sweep's (resumed) or, with ``force``, another sweep's or run's
    results (replaced).

    A run that fails (or takes longer than the sweep's ``run_time_limit``) is stored as failed with its error and
    the sweep goes on; a resumed sweep skips it unless ``retry_failed``. A stored partition that cannot be read,
    or that holds another run's rows, is run again (listed in ``damaged``).

    ``executor`` is ``serial``, ``processes`` (``workers`` local processes) or ``dask`` (the cluster at
    ``scheduler``, e.g. ``tcp://host:8786``, else a LocalCluster of ``workers`` processes). Results do not
    depend on the executor. The progress bar (with ETA) shows only on a terminal. ``notice`` is told, in one line
    per run simulated, which engine ran its workloads and, when ``auto`` fell back, why (:func:`run_notice`).

    :raises ConfigError: the sweep or its base scenario is invalid (nothing runs).
    :raises OutputError: ``out_dir`` may not be written (nothing runs).
    :raises ValueError: an unknown executor, or a scheduler without the dask executor.
    :raises sim.sweep.execute.WorkersLost: a worker process died; the runs finished before it are stored.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r} (executors: {', '.join(EXECUTORS)})")
    if scheduler is not None and executor != "dask":
        raise ValueError("a scheduler address needs executor='dask'")
    plan = load_sweep(path)
    target = outdir.claim(out_dir, outdir.SWEEP, force=force, sweep=plan.sweep.name)
    if target.replace:
        outdir.remove_owned(target.path, target.found, keep_directory=True)
    out = target.path
    remove_stale_temporaries(out)
    write_json(out / "sweep.json", sweep_record(plan))
    todo, damaged, retried = _to_do(plan.runs, out, retry_failed)
    skipped = sum(run.key not in todo for run in plan.runs)
    console = Console(stderr=True)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
               TimeRemainingColumn())
    with Progress(*columns, console=console, disable=not (progress and console.is_terminal)) as bar:
        label = plan.sweep.name + (f" ({skipped} done before)" if skipped else "")
        task = bar.add_task(label, total=len(todo))
        for run, table in EXECUTORS[executor](list(todo.values()), workers, scheduler):
            write_partition(out, run.key, table)
            bar.advance(task)
            line = run_notice(plan.sweep.name, run, table)
            if notice and line:
                notice(line)
    table = read_table(out)
    write_summary(out, table)
    return SweepResult(out, table, len(todo), skipped, damaged, retried)


def run_notice(sweep: str, run: RunSpec, table: pd.DataFrame) -> str | None:
    """:func:`sim.engine.run.engine_line` of a finished run (None for a failed one):
    ``sweep-name run 3 (base): ...``."""
    if "engine" not in table or table["engine"].isna().any():
        return None
    first = table.iloc[0]
    return engine_line(f"{sweep} run {run.index} ({run.variant})", first["engine"],
                       list(dict.fromkeys(table["workload"])), first["fallback"] or None)


def _to_do(runs: list[RunSpec], out: Path, retry_failed: bool
           ) -> tuple[dict[str, RunSpec], tuple[Path, ...], int]:
    """The runs to simulate, by key (those without a readable partition, and with ``retry_failed`` those
    stored as failed); the unreadable partitions; how many failed runs are retried."""
    todo: dict[str, RunSpec] = {}
    damaged, retried = [], 0
    for run in runs:
        if run.key in todo:
            continue
        stored = read_partition(out, run.key)
        if stored is None:
            todo[run.key] = run
            if partition_path(out, run.key).exists():
                damaged.append(partition_path(out, run.key))
        elif retry_failed and (stored["status"] == FAILED).any():
            todo[run.key] = run
            retried += 1
    return todo, tuple(damaged), retried

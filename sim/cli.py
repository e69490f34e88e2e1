"""The ``rdmasim`` command line: run, validate and schema."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from sim.core.errors import ConfigError, SimError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="rdmasim: simulate RDMA memory registration, NICs, PCIe and GPU memory.")
out = Console()
err = Console(stderr=True)

ScenarioPath = Annotated[Path, typer.Argument(help="Scenario YAML file.", show_default=False)]


def _load(path: Path):
    from sim.scenario.scenario_file import load_scenario

    try:
        return load_scenario(path)
    except ConfigError as exc:
        err.print(str(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None


def print_summary(summary, console: Console) -> None:
    """Print the perftest-style tables, one per workload."""
    from sim.run import SUMMARY_COLUMNS

    for label, rows in summary.groupby("workload", sort=False):
        kind = rows["kind"].iloc[0]
        columns = SUMMARY_COLUMNS["bw" if kind.endswith("_bw") else "lat"]
        table = Table(title=f"{label} ({kind})", title_justify="left")
        for col in columns:
            table.add_column(col.replace("_", " "), justify="right")
        if rows["errors"].any():
            table.add_column("errors", justify="right")
        for _, row in rows.iterrows():
            cells = [f"{int(row[c])}" if c in ("bytes", "iterations") else f"{row[c]:.2f}" for c in columns]
            if rows["errors"].any():
                cells.append(str(int(row["errors"])))
            table.add_row(*cells)
        console.print(table)


@app.command()
def run(scenario: ScenarioPath,
        out_dir: Annotated[Optional[Path], typer.Option("--out", help="Results directory "
                                                        "(default: results/<scenario name>).")] = None,
        seed: Annotated[Optional[int], typer.Option(help="Override the scenario's seed.", min=0)] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables.")] = False) -> None:
    """Run a scenario: print perftest-style tables; write metrics, summary, manifest and figures."""
    from sim.results import write_results
    from sim.run import run_scenario, total_operations

    spec, raw = _load(scenario)
    target = out_dir or Path("results") / spec.name
    started = time.perf_counter()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} ops"),
                  TimeRemainingColumn(), console=err, disable=not err.is_terminal, transient=True) as bar:
        task = bar.add_task(spec.name, total=total_operations(spec))
        try:
            result = run_scenario(spec, seed, progress=lambda n: bar.advance(task, n))
        except SimError as exc:
            err.print(f"{scenario}: run failed: {exc}", markup=False, highlight=False)
            raise typer.Exit(1) from None
    path = write_results(result, target, raw)
    if not quiet:
        print_summary(result.summary, out)
    err.print(f"wrote {path} ({time.perf_counter() - started:.1f} s)", highlight=False)


@app.command()
def validate(scenario: ScenarioPath) -> None:
    """Check a scenario file; print every problem as FILE:LINE:COL key: reason (exit 2 if any)."""
    spec, _ = _load(scenario)
    out.print(f"{scenario}: ok ({spec.name}: {len(spec.nodes)} nodes, {len(spec.buffers)} buffers, "
              f"{len(spec.workload)} workloads)", highlight=False)


@app.command()
def schema() -> None:
    """Print the scenario JSON Schema (for editor completion and validation)."""
    from sim.scenario.schema import Scenario

    sys.stdout.write(json.dumps(Scenario.model_json_schema(by_alias=True), indent=1) + "\n")


def main() -> None:
    """Console-script entry point."""
    app()

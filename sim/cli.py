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
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


RULE = "-" * 100
BW_HEADER = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
LAT_HEADER = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
              "   99% percentile[usec]   99.9% percentile[usec]")


def format_summary(summary) -> str:
    """perftest's report layout (as with --report_gbits), one block per workload."""
    blocks = []
    for label, rows in summary.groupby("workload", sort=False):
        kind = rows["kind"].iloc[0]
        lines = [f" {label}: {kind}", RULE]
        if kind.endswith("_bw"):
            lines.append(BW_HEADER)
            for r in rows.itertuples():
                lines.append(f" {r.bytes:<10d} {r.iterations:<10d}     {r.bw_peak_Gbps:<18.2f} "
                             f"{r.bw_avg_Gbps:<20.2f} {r.msg_rate_Mpps:.6f}")
        else:
            lines.append(LAT_HEADER)
            for r in rows.itertuples():
                lines.append(f" {r.bytes:<6d} {r.iterations:<10d}  {r.t_min_us:<14.2f} {r.t_max_us:<12.2f} "
                             f"{r.t_typical_us:<18.2f} {r.t_avg_us:<16.2f} {r.t_stdev_us:<15.2f} "
                             f"{r.p99_us:<22.2f} {r.p99_9_us:.2f}")
        if rows["errors"].any():
            lines.append(f" work requests completed in error: {int(rows['errors'].sum())}")
        lines.append(RULE)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


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
            typer.echo(f"{scenario}: run failed: {exc}", err=True)
            raise typer.Exit(1) from None
    path = write_results(result, target, raw)
    if not quiet:
        sys.stdout.write(format_summary(result.summary) + "\n")
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

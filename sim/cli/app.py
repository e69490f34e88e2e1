"""The ``rdmasim`` command line: run, sweep, perftest, validate, schema, explain, plot, repro, report, calibrate."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from enum import Enum
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from sim.cli.group import CommandGroup
from sim.cli.limits import (MemoryBudgetOption, TraceLimitOption, TraceWindowOption, check_budget, check_engine,
                            check_trace)
from sim.cli.progress import say, stderr
from sim.core.errors import ConfigError, SimError
from sim.store.outdir import OutputError

# pandas, rich's progress bar and every module that simulates are imported by the commands that use them:
# `rdmasim --version` and a refused command line start without them.
app = typer.Typer(cls=CommandGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  help="rdmasim: simulate RDMA memory registration, NICs, PCIe and GPU memory.")

ScenarioPath = Annotated[Path, typer.Argument(help="Scenario YAML file.", show_default=False, metavar="FILE")]


def _print_version(asked: bool) -> None:
    if asked:
        from sim import __version__

        typer.echo(f"rdmasim {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                   help="Print rdmasim's version and exit.")] = False) -> None:
    pass


def _load(path: Path):
    from sim.scenario.scenario_file import load_scenario_variants

    with _refused(ConfigError):
        return load_scenario_variants(path)


def _seed(value: Optional[int]) -> Optional[int]:
    """``--seed`` follows the scenario's ``seed`` rule."""
    if value is None:
        return None
    from sim.scenario.fields import check_seed  # pydantic: only for a seed given

    try:
        return check_seed(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


class Engine(str, Enum):
    """The scenario's ``engine`` choices."""

    event = "event"
    fast = "fast"
    auto = "auto"


def strict_failures(results) -> list[str]:
    """What ``--strict`` refuses in finished runs: completions other than IBV_WC_SUCCESS, failed events."""
    import pandas as pd

    from sim.engine.events import event_failed
    from sim.cli.perftest_report import error_counts

    summary = pd.concat([r.summary for r in results], ignore_index=True)
    errors = int(summary["errors"].sum())
    failed = sum(sum(event_failed(o) for o in r.events["outcome"]) for r in results)
    reasons = []
    if errors:
        reasons.append(f"{errors} work requests completed in error ({error_counts(summary['errors_by_status'])})")
    if failed:
        reasons.append(f"{failed} event(s) failed")
    return reasons


OutOption = Annotated[Optional[str], typer.Option("--out", show_default=False, metavar="DIR", help="Results directory "
                                                "(default: results/<name>): a new or empty directory, or "
                                                "earlier results with --force.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace the earlier rdmasim results in --out (only "
                                                           "if every file there is one rdmasim wrote).")]


@contextmanager
def _refused(*kinds: type[Exception], prefix: str = ""):
    """Turn an input rdmasim refuses (an error of one of ``kinds``) into its one-line message, after ``prefix``,
    and exit code 2."""
    try:
        yield
    except kinds as exc:
        typer.echo(f"{prefix}{exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def run(scenario: ScenarioPath,
        out_dir: OutOption = None,
        force: ForceOption = False,
        seed: Annotated[Optional[int], typer.Option(help="Override the scenario's seed (0 <= seed < 2**63).",
                                                    callback=_seed)] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables nor show progress.")
                         ] = False,
        trace: Annotated[bool, typer.Option("--trace", help="Also write trace.json (Chrome/Perfetto format: "
                                                             "open in ui.perfetto.dev).")] = False,
        engine: Annotated[Optional[Engine], typer.Option(
            help="Override the scenario's engine (default auto: the vectorized core where it gives the event "
                 "engine's answers; a line on stderr per variant says which engine ran and why auto fell back).")
        ] = None,
        strict: Annotated[bool, typer.Option("--strict", help="Exit 1 (after writing the results) if any work "
                                             "request completed in error or any event failed.")] = False,
        memory_budget: MemoryBudgetOption = None,
        trace_window: TraceWindowOption = None,
        trace_limit: TraceLimitOption = None,
        ) -> None:
    """Run a scenario: print perftest-style tables and the events' outcomes; write metrics, summary, manifest
    and figures (nothing if a variant fails)."""
    spec, raw, variants = _load(scenario)  # before the imports below: a file refused needs none of them
    import pandas as pd

    from sim.store.outdir import RUN, claim
    from sim.cli.perftest_report import format_summary
    from sim.cli.progress import phase, progress_bar
    from sim.results.write import write_results
    from sim.engine.run import progress_totals, run_scenario

    if engine is not None:
        variants = [(name, v.model_copy(update={"engine": engine.value})) for name, v in variants]
    trace = trace_window or trace  # a window implies --trace
    with _refused(ConfigError):
        guards = check_budget(scenario, variants, memory_budget, bool(trace))
        check_engine(scenario, spec, variants, engine is not None, bool(trace))
    operations, simulated = progress_totals([v for _, v in variants])
    if trace:
        say(check_trace(str(scenario), operations, trace_window, trace_limit))
    target = Path("results") / spec.name if out_dir is None else out_dir
    with _refused(OutputError):
        claim(target, RUN, force=force)
    started = time.perf_counter()
    results, failures = [], []
    with progress_bar(stderr(), spec.name, operations, quiet, simulated) as advance:
        for name, variant in variants:
            try:
                results.append(run_scenario(variant, seed, progress=advance, variant=name, trace=trace, notice=say,
                                            before_fallback=guards.get(name), simulated=advance.simulated,
                                            running=advance.running))
            except SimError as exc:
                label = "" if name == "base" else f" variant '{name}'"
                failures.append(f"{scenario}:{label} run failed: {exc}")
    if failures:
        for message in failures:
            typer.echo(message, err=True)
        typer.echo(f"{scenario}: wrote nothing ({len(failures)} of {len(variants)} variant(s) failed)", err=True)
        raise typer.Exit(1)
    with _refused(OutputError), phase(stderr(), f"writing results and figures to {target}", quiet):
        path = write_results(results, target, raw, trace=trace, force=force)
    if not quiet:
        from sim.inspect.compare import comparison_table, event_times, format_comparison

        sys.stdout.write(format_summary([row for r in results for row in r.summary_rows]) + "\n")
        from sim.cli.outcomes import format_events, never_moves

        events = format_events(pd.concat([event_times(r) for r in results], ignore_index=True),
                               never_moves((r.variant, r.scenario) for r in results))
        if events:
            sys.stdout.write(events + "\n")
        from sim.inspect.rails import format_rails
        rails = format_rails(results)
        if rails:
            sys.stdout.write(rails + "\n")
        if spec.library:
            from sim.engine.library import format_library
            sys.stdout.write(format_library({r.variant: r.library for r in results}) + "\n")
        if len(variants) > 1:
            sys.stdout.write("\n comparison per workload and message size:\n"
                             + format_comparison(comparison_table(results)) + "\n")
    typer.echo(f"wrote {path} ({time.perf_counter() - started:.1f} s)", err=True)
    refused = strict_failures(results) if strict else []
    for reason in refused:
        typer.echo(f"{scenario}: --strict: {reason}", err=True)
    if refused:
        raise typer.Exit(1)


@app.command()
def explain(scenario: ScenarioPath,
            variant: Annotated[Optional[str], typer.Option(metavar="NAME", help="Which variant to explain "
                                                                "(default: the first).")] = None,
            memory_budget: MemoryBudgetOption = None,
            diagram: Annotated[Optional[Path], typer.Option(
                help="Also draw the timeline as a sequence diagram (swimlanes) into this .svg or .png file.",
                metavar="FILE")] = None,
            force: Annotated[bool, typer.Option("--force", help="Replace a diagram drawn before at --diagram's "
                                                         "path.")] = False,
            ) -> None:
    """Print the protocol timeline of each registration and of the first memory event: who calls what, under
    which lock, at what simulated time, and why each outcome happened."""
    _, _, variants = _load(scenario)  # before the imports below: a file refused needs none of them
    from sim.inspect.explain import explain as timeline, first_accesses_only
    from sim.engine.run import run_scenario

    names = [name for name, _ in variants]
    if variant is not None and variant not in names:
        typer.echo(f"{scenario}: no variant named '{variant}' (variants: {', '.join(names)})", err=True)
        raise typer.Exit(2)
    if diagram is not None:  # matplotlib only when drawing
        from sim.inspect.diagram import diagram_path, draw, write_diagram
        from sim.inspect.timeline import sections

        with _refused(OutputError):
            diagram_path(diagram, force=force)
    name, spec = next((n, first_accesses_only(v)) for n, v in variants if variant in (None, n))
    with _refused(ConfigError):
        check_budget(scenario, [(name, spec)], memory_budget, trace=True)
    try:
        result = run_scenario(spec, trace=True, variant=name, notice=lambda _: None)
    except SimError as exc:
        typer.echo(f"{scenario}: run failed: {exc}", err=True)
        raise typer.Exit(1) from None
    sys.stdout.write(timeline(result, names) + "\n")
    if diagram is not None:
        title = scenario.name + ("" if len(names) == 1 else f", variant '{name}'")
        with _refused(OutputError):
            written = write_diagram(draw(result.testbed, sections(result.testbed), title), diagram, force=force)
        typer.echo(f"wrote {written}", err=True)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def perftest(ctx: typer.Context) -> None:
    """Run a perftest command line in the simulator: ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat,
    ib_send_bw, ib_send_lat, ib_atomic_bw or ib_atomic_lat with perftest's options (rdmasim perftest ib_write_bw
    --help lists them)."""
    from sim.cli.perftest import run_perftest

    from sim.cli.progress import progress_bar

    code, report = run_perftest(ctx.args, notice=say,
                                display=lambda what, total, simulated: progress_bar(stderr(), what, total,
                                                                                    simulated_ps=simulated))
    if report:
        typer.echo(report)
    raise typer.Exit(code)


@app.command()
def validate(scenario: Annotated[Path, typer.Argument(help="Scenario or sweep YAML file.", show_default=False,
                                                     metavar="FILE")]) -> None:
    """Check a scenario or sweep file; print its problems as FILE:LINE:COL key: reason (exit 2 if any): every
    one the schema finds, else every broken name, else every one the models find."""
    from sim.scenario.scenario_file import SweepFileGiven, load_scenario_variants

    with _refused(ConfigError):
        try:
            spec, _, variants = load_scenario_variants(scenario)
        except SweepFileGiven:
            from sim.sweep.plan import check_sweep, read_sweep  # only for a sweep file

            swept = read_sweep(scenario)
            _say_count(scenario, swept, "; checking each")
            axes = check_sweep(swept)
            typer.echo(f"{scenario}: ok (sweep {swept.sweep.name}: {swept.count} runs over "
                       f"{', '.join(axes) or 'no axes'}; base {swept.files.base_file})")
            return
        check_engine(scenario, spec, variants, forced=False)
    typer.echo(f"{scenario}: ok ({spec.name}: {len(spec.nodes)} nodes, {len(spec.buffers)} buffers, "
               f"{len(spec.workload)} workloads, {len(variants)} variant(s))")


def _interactive() -> bool:
    """Whether stderr is a terminal (a person watching, not a pipe)."""
    return sys.stderr.isatty()


def _say_count(file: Path, swept, then: str) -> None:
    """On a terminal, say how many runs a sweep file makes before they are built (seconds for thousands); piped
    output stays one line per problem."""
    if _interactive():
        typer.echo(f"{file}: {swept.count} runs ({swept.shape}){then}", err=True)


MAX_WORKERS = 1024
"""Most sweep worker processes one command may start (beyond it a machine runs out of processes, not CPUs)."""


class Executor(str, Enum):
    """Where sweep runs execute."""

    serial = "serial"
    processes = "processes"
    dask = "dask"


def _scheduler(value: Optional[str]) -> Optional[str]:
    """``--scheduler``: an address dask connects to, a host with its port for TCP and TLS (``tcp://host:8786``)."""
    if value is None:
        return None
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        protocol, location = parse_address(value)
        if protocol in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; a dask scheduler's address is such as tcp://host:8786") from None
    return value


@app.command()
def sweep(file: Annotated[Path, typer.Argument(help="Sweep YAML file.", show_default=False, metavar="FILE")],
          out_dir: OutOption = None,
          force: Annotated[bool, typer.Option("--force", help="Replace the results of another sweep or run in "
                                                              "--out (a sweep resumes into its own without it).")
                           ] = False,
          executor: Annotated[Executor, typer.Option(help="Where runs execute.")] = Executor.serial,
          workers: Annotated[Optional[int], typer.Option(min=1, max=MAX_WORKERS, help="Worker processes "
                                                         "(default: one per CPU).")] = None,
          scheduler: Annotated[Optional[str], typer.Option(metavar="ADDRESS", callback=_scheduler, help="A running "
                                                                "dask scheduler, e.g. tcp://host:8786 (implies "
                                                                "--executor dask).")] = None,
          retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Also run again the runs stored as "
                                                     "failed (a resumed sweep skips them otherwise).")] = False
          ) -> None:
    """Run a parameter sweep; each finished run (failed or not) is stored at once, so running it again resumes."""
    from sim.sweep import run_sweep
    from sim.sweep.execute import SchedulerUnreachable, WorkersLost
    from sim.sweep.plan import read_sweep
    from sim.sweep.store import FAILED

    with _refused(ConfigError, OutputError, SchedulerUnreachable):
        swept = read_sweep(file)
        _say_count(file, swept, "")
        target = Path("results") / swept.sweep.name if out_dir is None else out_dir
        try:
            result = run_sweep(file, target, executor="dask" if scheduler else executor.value, workers=workers,
                               scheduler=scheduler, retry_failed=retry_failed, force=force, notice=say)
        except WorkersLost as exc:
            typer.echo(f"{target}: {exc}", err=True)
            raise typer.Exit(1) from None
    shown = [c for c in result.table.columns if c in ("run", "variant", "status", "bytes", "bw_avg_Gbps",
             "t_typical_us", "p99_9_us", "pinned_bytes", "evictions") or "." in c]
    from sim.inspect.tables import blocks, cell, header

    rows = [[cell(c, r[c]) for c in shown] for r in result.table[shown].to_dict("records")]
    sys.stdout.write(blocks([header(c) for c in shown], rows, 2) + "\n")
    for path in result.damaged:
        typer.echo(f"{path}: unreadable (empty, cut short) or another run's: its run was simulated again", err=True)
    for row in result.table[result.table["status"] == FAILED].itertuples():
        typer.echo(f"{target}: run {row.run} failed: {row.error}", err=True)
    retried = f" ({result.retried} of them failed before)" if result.retried else ""
    hint = " (--retry-failed runs them again)" if result.failed and not retry_failed else ""
    typer.echo(f"wrote {target}: {result.ran} runs simulated{retried}, {result.skipped} already stored, "
               f"{result.failed} failed{hint}", err=True)


@app.command()
def plot(results: Annotated[Path, typer.Argument(help="Results directory of `rdmasim run` or `rdmasim sweep`.",
                                                 show_default=False, metavar="RESULTS")],
         recipe: Annotated[str, typer.Option(metavar="RECIPE", help="bw_vs_size, latency_vs_size, latency_cdf, "
                                                                   "bw_over_time, mode_comparison or heatmap.")],
         out_dir: Annotated[Optional[str], typer.Option("--out", show_default=False, metavar="DIR",
                                                        help="Figures directory "
                                                        "(default: RESULTS/figures): new, empty or rdmasim's.")
                            ] = None,
         force: Annotated[bool, typer.Option("--force", help="Replace figures of the same name drawn "
                                                             "before.")] = False,
         metric: Annotated[Optional[str], typer.Option(metavar="COLUMN", help="heatmap: the column shown.")] = None,
         by: Annotated[Optional[list[str]], typer.Option(metavar="AXIS", help="Sweep axis: twice for heatmap, once for "
                                                              "mode_comparison.")] = None) -> None:
    """Draw a figure from a results directory: PNG, PDF and the CSV of the plotted numbers."""
    from sim.plot.request import RecipeError, check_request

    with _refused(RecipeError):  # before pandas, matplotlib and the results are loaded
        check_request(results, recipe, list(by or ()), metric)
    from sim.plot.recipes import plot as draw

    try:
        paths = draw(results, recipe, out_dir, metric=metric, by=by or (), force=force)
    except SimError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    for path in paths:
        typer.echo(str(path))


@app.command()
def repro(manifest: Annotated[Path, typer.Argument(help="A results directory, or its manifest.json.",
                                                  show_default=False, metavar="PATH")]) -> None:
    """Verify a results directory against its manifest (the manifest's own consistency, the files' hashes),
    re-run it (every variant, the recorded seed and engine) and check its outputs are bit-identical to both;
    exit 1 if anything differs, 2 if the manifest is malformed."""
    from sim.results.repro import reproduce

    try:
        with _refused(ConfigError):
            identical, lines = reproduce(manifest)
    except SimError as exc:
        typer.echo(f"{manifest}: re-run failed: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("\n".join(lines))
    raise typer.Exit(0 if identical else 1)


@app.command()
def report(results: Annotated[Path, typer.Argument(help="Results directory of `rdmasim run`.", show_default=False,
                                                  metavar="RESULTS_DIR")],
           out: Annotated[Optional[Path], typer.Option("--out", show_default=False, metavar="FILE", help="The page "
                                                       "(default: RESULTS_DIR/report.html): a new file, or one "
                                                       "rdmasim wrote with --force.")] = None,
           force: Annotated[bool, typer.Option("--force", help="Replace a report rdmasim wrote before at that "
                                                        "path.")] = False
           ) -> None:
    """Write one self-contained HTML page of a run's results (tables, figures, each variant's explain timeline and
    sequence diagram, the manifest) that opens offline."""
    from sim.results.report import ReportError, write_report

    try:
        with _refused(ReportError, OutputError, ConfigError):
            written = write_report(results, out, force=force)
    except SimError as exc:
        typer.echo(f"{results}: re-run for the timeline failed: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {written}", err=True)


@app.command("calibrate")
def calibrate_cmd(figures: Annotated[Optional[Path], typer.Option(help="Also draw the PCIe efficiency figures "
                                                                        "(MPS sawtooth, reads vs. writes, per "
                                                                        "generation), one figure per measured "
                                                                        "H200 curve (allocation, pinning, prefetch) "
                                                                        "and pcie-bench's DMA engine, and of the "
                                                                        "large-MR translation cliff "
                                                                        "into this directory (new, empty or of "
                                                                        "figures rdmasim drew).")] = None,
                  force: Annotated[bool, typer.Option("--force", help="Replace figures of the same names drawn "
                                                                      "before in --figures.")] = False,
                  quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Show no progress.")] = False
                  ) -> None:
    """Simulate every calibration measurement (H200 copies, pinning by page backing, allocation and unified
    memory; published PCIe, IOMMU and MTT anchors) and print simulated vs. measured with the error; exit 1 if a
    required row is out of tolerance."""
    from sim.cli.calibration import calibrate_command

    with _refused(OutputError):
        code = calibrate_command(figures, force, quiet)
    raise typer.Exit(code)


@app.command()
def schema(sweep: Annotated[bool, typer.Option("--sweep", help="The sweep file's schema instead.")] = False
           ) -> None:
    """Print the scenario (or sweep file) JSON Schema, for editors' YAML language servers: sizes, durations and
    rates are strings with units."""
    from sim.scenario.schema import Scenario
    from sim.sweep.spec import Sweep

    model = Sweep if sweep else Scenario
    sys.stdout.write(json.dumps(model.model_json_schema(by_alias=True), indent=1) + "\n")


INTERNAL_ERROR = 70
"""Exit status of an unexpected exception (EX_SOFTWARE): a bug in rdmasim, not a problem with the input."""


def main() -> None:
    """Console-script entry point. An unexpected exception is a bug: it is reported in one line with exit
    status 70, and ``RDMASIM_TRACEBACK=1`` shows its traceback."""
    try:
        app()
    except Exception as exc:
        if os.environ.get("RDMASIM_TRACEBACK"):
            raise
        typer.echo(f"rdmasim: internal error: {type(exc).__name__}: {exc} (a bug in rdmasim, not in the input; "
                   "run again with RDMASIM_TRACEBACK=1 to see where)", err=True)
        raise SystemExit(INTERNAL_ERROR) from None

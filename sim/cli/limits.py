"""What a run may take, checked before it starts: its memory (``--memory-budget``, against the run's estimate) and
its trace (``--trace-window``, a window of simulated time, and the size of trace.json estimated before anything is
recorded, refused above ``--trace-limit`` unless a window bounds it)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sim.core.trace import BYTES_PER_OPERATION, TraceWindow
from sim.core.units import UnitError, format_size_about, parse_size, parse_time


def _size(parse, value: str) -> int:
    """``value`` parsed by ``parse``, its refusal as the option's."""
    try:
        return parse(value)
    except UnitError as exc:
        raise typer.BadParameter(str(exc)) from None


def memory_budget(value: Optional[str]) -> Optional[int]:
    """``--memory-budget`` in bytes: a positive size with its unit."""
    if value is None:
        return None
    from sim.engine.budget import parse_budget

    return _size(parse_budget, value)


MemoryBudgetOption = Annotated[Optional[str], typer.Option(
    "--memory-budget", help="Refuse a run estimated to need more memory than this (e.g. '8GiB'; default: the "
                            "memory available now).", metavar="SIZE", callback=memory_budget)]


def check_budget(scenario, variants, budget_bytes: int | None, trace: bool) -> dict:
    """Check, before simulating ``variants``, that their estimated memory fits ``--memory-budget`` (bytes;
    default: the memory available now); return, per variant admitted on the vectorized core's estimate alone, the
    check to make should ``auto`` hand it to the event engine (:func:`sim.engine.budget.check_fallback`).

    :raises ConfigError: it does not, located at the key that drives the estimate.
    """
    from functools import partial

    from sim.engine import budget

    limit = budget.available_memory() if budget_bytes is None else budget_bytes
    need = budget.check(str(scenario), variants, limit, trace)
    return {name: partial(budget.check_fallback, name, variants, need.guarded, limit) for name in need.guarded}


def check_engine(scenario, spec, variants, forced: bool, trace: bool = False) -> None:
    """Check, before simulating, that every variant asking for ``engine: fast`` is one the vectorized core can run
    (with ``trace``) as far as it tells without solving (:func:`sim.engine.planner.plan.fast_refusal`); ``forced``:
    ``--engine`` asked.

    :raises ConfigError: one it cannot, located at the ``engine`` key that asks (``--engine`` when ``forced``,
        a variant's ``set`` when it sets the engine).
    """
    asking = [(i, name, variant) for i, (name, variant) in enumerate(variants) if variant.engine == "fast"]
    if not asking:
        return  # none asks for the vectorized core: the planner, which builds the testbed to tell, stays unimported
    from sim.core import ConfigError
    from sim.engine.planner.plan import fast_refusal
    from sim.scenario.yaml_reader import error_at, load_yaml

    for i, name, variant in asking:
        reason = fast_refusal(variant, trace)
        if reason is None:
            continue
        which = "" if name == "base" else f"variant '{name}': "
        reason = f"{which}engine fast: {reason} (engine auto or event runs it)"
        if forced:
            raise ConfigError(reason, file=str(scenario), key="--engine")
        key = ("variants", i, "set", "engine") if name != "base" and "engine" in spec.variants[i].set else ("engine",)
        raise error_at(load_yaml(scenario)[1], key, reason, str(scenario))


DEFAULT_LIMIT = 1 << 30
"""trace.json size refused without a window (bytes): ``--trace-limit``'s default."""


def trace_window(value: str | None) -> TraceWindow | None:
    """``--trace-window START..END``: [start, end) in picoseconds, two simulated times with units."""
    if value is None:
        return None
    start, dots, end = value.partition("..")
    try:
        if not dots:
            raise UnitError("give two times as START..END, e.g. 2ms..2.5ms")
        window = parse_time(start.strip()), parse_time(end.strip())
    except UnitError as exc:
        raise typer.BadParameter(str(exc)) from None
    if window[1] <= window[0]:
        raise typer.BadParameter(f"{value}: the window ends before it starts")
    return window


TraceWindowOption = Annotated[Optional[str], typer.Option(
    "--trace-window", metavar="START..END", callback=trace_window, help="Trace only what happens between two "
    "simulated times as the trace counts them (from the start of the run, registrations included), e.g. "
    "2ms..2.5ms (implies --trace).")]


def trace_limit(value: str | None) -> int:
    """``--trace-limit SIZE`` in bytes (default :data:`DEFAULT_LIMIT`)."""
    return DEFAULT_LIMIT if value is None else _size(parse_size, value)


TraceLimitOption = Annotated[Optional[str], typer.Option(
    "--trace-limit", metavar="SIZE", callback=trace_limit, help="Refuse a --trace without a window whose "
    "trace.json is estimated above SIZE (default 1GiB).")]


def check_trace(file: str, operations: int | None, window: TraceWindow | None, limit: int) -> str:
    """The line saying how large trace.json will be; without a window, refuse (exit 2) above ``limit``. A run for
    a duration (``operations`` None) cannot be estimated before it runs: the line says so."""
    if operations is None:
        return (f"{file}: trace.json's size is not known before a run for a duration (only the run counts its "
                "work requests): --trace-window bounds it")
    about = format_size_about(operations * BYTES_PER_OPERATION)
    if window is None and operations * BYTES_PER_OPERATION > limit:
        typer.echo(f"{file}: --trace would write about {about} of trace.json for {operations:,} work requests, "
                   f"above --trace-limit {format_size_about(limit)}: trace a window of the run (--trace-window "
                   "START..END, e.g. 1ms..2ms) or raise --trace-limit", err=True)
        raise typer.Exit(2)
    if window is None:
        return f"{file}: trace.json of about {about} ({operations:,} work requests)"
    return (f"{file}: trace.json of at most about {about} ({operations:,} work requests): only what happens "
            f"from {window[0] / 1e6:g} to {window[1] / 1e6:g} µs is kept")

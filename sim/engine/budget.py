"""How much memory a run needs, estimated from its validated scenario before anything is simulated, and the
check that refuses a run that would not fit (the machine's available memory, or a budget the user gives).

The estimate is an upper bound built from per-operation and per-byte costs measured on this code (peak RSS
above the interpreter's after a warm-up run; each constant says what was measured). It counts what one
variant holds at its peak (the operations of its largest (workload, size) stream on the event engine, the
whole solve on the vectorized core when the scenario has events, a latency workload's samples, data-mode
buffer bytes, managed ranges' page tables) plus what every variant keeps until the results are written (its
in-memory operation rows, at most a Parquet row group each) and what the outputs read back (latencies for
the comparison table and the latency CDF).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sim.core.errors import ConfigError, SimError
from sim.core.units import UnitError, format_size_about, parse_size

if TYPE_CHECKING:
    from sim.scenario.schema import Scenario

# The estimate imports the schema and the operations table (pandas, pyarrow) where it reads them: parse_budget,
# which --memory-budget calls as the command line is parsed, needs neither.

EVENT_BYTES_PER_OP = 800
"""Event engine, per work request of the (workload, size) being simulated: its records and simpy state.
Measured (``bench/memory_costs.py``: peak RSS of the run and its write above the warm process) 377 B/op for
write_bw 4 KiB x 400k, 527 B/op for write_lat x 100k and 706 B/op for 64 QPs x 2000 iterations."""
HELD_SOLVE_BYTES_PER_OP = 200
"""Vectorized core with scenario events, per operation of the run: the whole solve (posts, completions,
marks) and the tables built from it. Measured 146 B/op (write_bw 4 KiB x 2M with a link flap)."""
LATENCY_BYTES_PER_OP = 150
"""A latency workload's samples of one size on the vectorized core (pieces, joined, sorted, in us).
Measured 97 B/op (write_lat x 4M)."""
ROW_BYTES = 160
"""An operation row held in memory (a run's table below one row group, with the copies joining makes).
Measured 125 B/row (fast write_bw x 1M, fixed costs included)."""
FIXED_BYTES = 400 * 2**20
"""A run's fixed cost beyond the interpreter: the row group being spooled, solver blocks, Parquet buffers.
Measured 284 MiB for a streamed write_bw 4 KiB x 20M (flat over the run)."""
COMPARISON_BYTES_PER_OP = 24
"""The comparison table's latencies per operation: the successful ones, their sorted copy and microseconds
(three 8-byte arrays; inside the link-flap measurement above)."""
LATENCY_CDF_BYTES_PER_OP = 800
"""The latency CDF figure per operation: latencies read back, the sorted curve, its CSV rows and the plotted
step paths. Measured 562 B/op (write_bw 4 KiB x 2M with the figure, the run's own costs included)."""
DATA_BYTES_PER_BYTE = 2
"""Data mode per buffer byte: its contents and one copy (a move's new generation, or the generator's).
Measured 1.02 B/byte (two 512 MiB buffers)."""
MANAGED_PAGE_BYTES, MANAGED_ACCESS_BYTES = 8, 16
"""A managed range per 4 KiB page: its state (residency flag, migration count), and per page and pass its
access sequence with the fault batches' temporaries. Measured 17 B/page (16 GiB, one pass)."""
MANAGED_PAGE = 4096
TRACE_BYTES_PER_OP = 12_000
"""``--trace``, per work request of the run: its trace events, kept until ``trace.json`` is written.
Measured 10.0 KiB/op (write_bw 4 KiB x 20k) and 9.2 KiB/op (x 80k), the run and its write included."""


@dataclass(frozen=True)
class Estimate:
    """What a run needs: bytes of memory, operations simulated, and the scenario key driving the bytes."""

    bytes: int
    operations: int
    key: tuple[str | int, ...]
    """Path of the key whose value contributes most (e.g. ``("workload", 0, "iterations")``)."""
    guarded: frozenset[str] = frozenset()
    """Variants (``engine: auto``) that fit only on the vectorized core's estimate: if the core hands one to the
    event engine at run time, :func:`check_fallback` checks the budget again first."""


def _driver(work, index: int) -> tuple[str | int, ...]:
    """The key that makes workload ``index`` large: its ``qps`` when above its iterations, else those (its
    ``duration`` for a run of a duration)."""
    if work.duration is not None:
        return ("workload", index, "duration")
    return ("workload", index, "qps" if work.qps > work.iterations else "iterations")


def _engines(scenario: Scenario) -> set[str]:
    """Engines the run may use: ``auto`` can hand a run to the event engine while solving it."""
    from sim.engine.planner.domain import outside_domain

    if scenario.engine == "event" or (scenario.engine == "auto" and outside_domain(scenario)):
        return {"event"}
    return {"fast"} if scenario.engine == "fast" else {"fast", "event"}


def _peak(scenario: Scenario, trace: bool, fast: bool = False) -> dict[tuple, int]:
    """Bytes one variant holds at its peak while it runs (``trace``: on the event engine, which records it;
    ``fast``: on the vectorized core alone), by the key that drives each part."""
    from sim.scenario.events import ManagedJobEvent
    from sim.scenario.horizon import workload_operations

    parts: dict[tuple, int] = {}

    def add(key: tuple, nbytes: int) -> None:
        parts[key] = parts.get(key, 0) + nbytes

    engines = {"event"} if trace else {"fast"} if fast else _engines(scenario)
    resolved = scenario.events or any(b.registration == "odp" for b in scenario.buffers)  # moves, faults: re-solves
    for i, work in enumerate(scenario.workload):
        stream = max(workload_operations(scenario, work))
        options = [0 if work.rule.streams else stream * LATENCY_BYTES_PER_OP]
        if "event" in engines:
            options.append(stream * EVENT_BYTES_PER_OP)
        if "fast" in engines and resolved:  # every workload's solve is held at once
            options.append(stream * len(work.size_list()) * HELD_SOLVE_BYTES_PER_OP)
        add(_driver(work, i), max(options))
    if scenario.data:
        for j, buffer in enumerate(scenario.buffers):
            add(("buffers", j, "size"), buffer.size * DATA_BYTES_PER_BYTE)
    for j, event in enumerate(scenario.events):
        if isinstance(event, ManagedJobEvent):
            pages = -(-event.size // MANAGED_PAGE)
            add(("events", j, "size"), pages * (MANAGED_PAGE_BYTES + MANAGED_ACCESS_BYTES * event.passes))
    return parts


def _kept(scenario: Scenario, compared: bool, trace: bool) -> dict[tuple, int]:
    """Bytes a finished variant keeps until the results are written (its trace with ``trace``), and what the
    outputs read back of it (``compared``: the results get a comparison table)."""
    from sim.scenario.horizon import workload_operations
    from sim.store.operations import ROW_GROUP_ROWS

    parts: dict[tuple, int] = {}
    reads = ((COMPARISON_BYTES_PER_OP if compared or scenario.events else 0)
             + (LATENCY_CDF_BYTES_PER_OP if "latency_cdf" in scenario.outputs else 0)
             + (TRACE_BYTES_PER_OP if trace else 0))
    for i, work in enumerate(scenario.workload):
        ops = sum(workload_operations(scenario, work))
        key = _driver(work, i)
        parts[key] = min(ops, ROW_GROUP_ROWS) * ROW_BYTES + ops * reads
    return parts


def estimate(variants: list[tuple[str, Scenario]], trace: bool = False,
             fast: frozenset[str] = frozenset()) -> Estimate:
    """The memory and work of running every variant and writing their results (see the module's text);
    ``trace``: the runs record a trace (``--trace``), kept for every variant until it is written; ``fast``: the
    variants counted on the vectorized core alone."""
    from sim.scenario.horizon import workload_operations

    peaks = [_peak(v, trace, name in fast) for name, v in variants]
    kept: dict[tuple, int] = {}
    for _, scenario in variants:
        for key, nbytes in _kept(scenario, len(variants) > 1, trace).items():
            kept[key] = kept.get(key, 0) + nbytes
    worst = max(peaks, key=lambda p: sum(p.values()))
    parts = {key: kept.get(key, 0) + worst.get(key, 0) for key in {*kept, *worst}}
    operations = sum(sum(workload_operations(v, w)) for _, v in variants for w in v.workload)
    key = max(parts, key=lambda k: (parts[k], k[0] == "workload")) if parts else ("workload",)
    return Estimate(FIXED_BYTES + sum(parts.values()), operations, key)


def available_memory() -> int:
    """Memory this machine can give a run now (bytes): ``MemAvailable`` from ``/proc/meminfo``, else free
    physical pages."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def parse_budget(text: str) -> int:
    """A ``--memory-budget`` value in bytes.

    :raises UnitError: not a size, or not a positive one.
    """
    nbytes = parse_size(text)
    if nbytes <= 0:
        raise UnitError(f"a memory budget must be positive, got {text!r}")
    return nbytes


def over_budget(need: Estimate, budget: int) -> str | None:
    """Why a run of estimate ``need`` does not fit ``budget`` bytes; None when it fits."""
    if need.bytes <= budget:
        return None
    return (f"run needs about {format_size_about(need.bytes)} (budget {format_size_about(budget)}) for "
            f"{need.operations:,} operations")


class OverBudget(SimError):
    """A run estimated to need more memory than it may use (a sweep stores it as a failed run)."""


def refuse_over_budget(variants: list[tuple[str, Scenario]], budget: int) -> None:
    """Refuse, before simulating, variants that would not fit ``budget`` bytes.

    :raises OverBudget: the estimate does not fit.
    """
    short = over_budget(estimate(variants), budget)
    if short:
        raise OverBudget(f"{short}: not run")


def check(file: str, variants: list[tuple[str, Scenario]], budget: int, trace: bool = False) -> Estimate:
    """The run's :class:`Estimate` (``trace``: see :func:`estimate`), when it fits ``budget`` bytes.

    :raises ConfigError: it does not fit, located at the key that drives the estimate.
    """
    need, short = admitted(variants, budget, trace)
    if short is None:
        return need
    from sim.scenario.yaml_reader import error_at, load_yaml

    reason = f"{short}; --memory-budget SIZE sets the budget"
    try:
        _, positions = load_yaml(file)
    except ConfigError:  # the file changed since it was validated: say where without a line
        raise ConfigError(reason, file=file, key=".".join(map(str, need.key))) from None
    raise error_at(positions, need.key, reason, file)


def admitted(variants: list[tuple[str, Scenario]], budget: int, trace: bool = False) -> tuple[Estimate, str | None]:
    """The run's :class:`Estimate` and why it does not fit ``budget`` bytes (None: it fits, where only on the
    vectorized core's estimate, the variants so admitted in :attr:`Estimate.guarded`)."""
    need = estimate(variants, trace)
    short = over_budget(need, budget)
    if short is None:
        return need, None
    lean = _on_the_vectorized_core(variants, budget, trace)
    return (lean, None) if lean is not None else (need, short)


def _on_the_vectorized_core(variants: list[tuple[str, Scenario]], budget: int, trace: bool) -> Estimate | None:
    """The estimate counting on the vectorized core the ``engine: auto`` variants it takes as far as it tells
    without solving (:func:`sim.engine.planner.plan.fast_refusal`), when that fits ``budget``; None otherwise."""
    from sim.engine.planner.plan import fast_refusal

    if trace:  # a trace is recorded by the event engine
        return None
    fast = frozenset(name for name, v in variants if v.engine == "auto" and fast_refusal(v) is None)
    lean = estimate(variants, fast=fast) if fast else None
    if lean is None or over_budget(lean, budget):
        return None
    return replace(lean, guarded=fast)


def check_fallback(name: str, variants: list[tuple[str, Scenario]], guarded: frozenset[str], budget: int) -> None:
    """Before variant ``name`` of ``variants``, admitted on the vectorized core's estimate (``guarded``:
    :attr:`Estimate.guarded`), runs on the event engine after all: check that the whole run, that variant on the
    event engine, still fits ``budget`` bytes (the variants finished before it are held until the results are
    written).

    :raises OverBudget: it does not.
    """
    short = over_budget(estimate(variants, fast=guarded - {name}), budget)
    if short:
        raise OverBudget(f"on the event engine the {short}; --memory-budget SIZE sets the budget")

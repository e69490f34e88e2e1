"""Write a run's results directory atomically: everything lands in a staging directory next to the target
(:mod:`sim.store.outdir`) that is published only once complete, so a failed run leaves no half-written directory.

Layout: ``metrics.parquet`` (one row per work request, all variants), ``summary.json`` (perftest rows,
registration costs, events, protocol counters, the library studies and, with several variants, the comparison
table),
``figures/*.png|pdf|csv``, ``trace.json`` with a trace, and ``manifest.json`` last (resolved scenario and
parameters, seed, scenario hash, package versions, the engine that ran each variant's workloads, and the SHA-256
of every other file it was written with).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path

import pandas as pd

from models.verbs.workload_kinds import BANDWIDTH_KINDS, LATENCY_KINDS
from sim import __version__
from sim.store import outdir
from sim.core.trace import write_chrome_trace
from sim.inspect.binned import cdf_curves
from sim.inspect.compare import bandwidth_timeline, comparison_table, event_times, post_latencies, size_spans
from sim.store.operations import READ_CACHE_BYTES, write_operations
from sim.plot import figures
from sim.inspect.rails import has_rails, rail_table
from sim.engine.tables import RunResult

PACKAGES = ("numpy", "simpy", "pandas", "pyarrow", "pydantic", "matplotlib", "networkx")


def package_versions() -> dict[str, str]:
    """Versions of rdmasim, Python and the packages that shape results."""
    versions = {"rdmasim": __version__, "python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = metadata.version(name)
    return versions


def run_parameters(result: RunResult) -> dict:
    """The resolved parameters of a run's testbed (:func:`testbed_parameters`)."""
    return testbed_parameters(result.testbed)


def testbed_parameters(bed) -> dict:
    """The resolved parameters of a :class:`sim.engine.build.Testbed`: fabric, each node's host, PCIe link and NIC, each
    GPU."""
    return {
        "fabric": dataclasses.asdict(bed.fabric.params),
        "nodes": {name: {"host": dataclasses.asdict(n.host.params), "pcie": dataclasses.asdict(n.pcie.params),
                         "nic": dataclasses.asdict(n.nic.params)} for name, n in bed.nodes.items()},
        "gpus": {name: {"vendor": g.vendor, "capacity": g.capacity} for name, g in bed.gpus.items()},
    }


def run_engines(result: RunResult) -> dict:
    """The engine a run asked for, the one that ran each workload (``event`` or ``fast``) and, when ``auto``
    fell back to the event engine, why."""
    return {"requested": result.scenario.engine, "fallback": result.fallback,
            "workloads": [{"workload": w.name or w.kind, "engine": result.engine} for w in result.scenario.workload]}


def manifest(results: list[RunResult], scenario_bytes: bytes | None) -> dict:
    """Everything needed to reproduce the run."""
    first = results[0]
    return {
        "rdmasim_manifest": 1,
        "scenario": first.scenario.model_dump(mode="json", by_alias=True),
        "scenario_sha256": hashlib.sha256(scenario_bytes).hexdigest() if scenario_bytes is not None else None,
        "scenario_text": scenario_bytes.decode("utf-8") if scenario_bytes is not None else None,
        "seed": first.seed,
        "variants": {r.variant: run_parameters(r) for r in results},
        "engines": {r.variant: run_engines(r) for r in results},
        "versions": package_versions(),
    }


REPRODUCIBLE = ("metrics.parquet", "summary.json")
"""Outputs whose bytes a re-run from the manifest must reproduce exactly."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read a buffer at a time)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def json_records(frame: pd.DataFrame) -> list[dict]:
    """A frame as JSON-ready records (floats to 15 significant digits)."""
    return json.loads(frame.to_json(orient="records", double_precision=15))


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True)


def write_results(results: RunResult | list[RunResult], out_dir: str | os.PathLike,
                  scenario_bytes: bytes | None = None, *, trace: bool = False, force: bool = False) -> Path:
    """Write every output of ``results`` (one per variant) into ``out_dir``, claimed by
    :func:`sim.store.outdir.claim` (``force``: replace an earlier results directory) and published only once
    complete; ``trace`` adds ``trace.json`` (runs made with ``trace=True``), one trace process per variant.

    :raises OutputError: ``out_dir`` may not be written, or writing failed (nothing is published).
    """
    results = [results] if isinstance(results, RunResult) else results
    with outdir.staged(out_dir, outdir.RUN, force=force) as (staging, target), ExitStack() as reading:
        if READ_AGAIN & set(results[0].scenario.outputs):
            for result in results:
                if result.table is not None:
                    reading.enter_context(result.table.reading(READ_CACHE_BYTES // len(results)))
        _write(results, staging, scenario_bytes)
        if trace:
            write_chrome_trace(str(staging / "trace.json"), [(r.variant, r.testbed.env.trace) for r in results])
        record = manifest(results, scenario_bytes)
        record["outputs_sha256"] = {name: file_sha256(staging / name) for name in REPRODUCIBLE}
        record["files_sha256"] = files_sha256(staging)
        (staging / MANIFEST).write_text(json.dumps(record, indent=1) + "\n")
    return target.path


READ_AGAIN = {"bw_over_time", "gpu_memory", "latency_cdf"}
"""Figures drawn from the operation tables: with one of them, each table is read several times (the event times
read it once for every run), so it keeps what it read (:meth:`sim.store.operations.OperationTable.reading`)."""
MANIFEST = "manifest.json"
"""The manifest's name inside a results directory."""


def files_sha256(directory: Path) -> dict[str, str]:
    """The SHA-256 of every file under ``directory`` but the manifest (and a staging directory's marker), by its
    path relative to it (``/``-separated, sorted): what the manifest lists and ``repro`` checks."""
    return {path.relative_to(directory).as_posix(): file_sha256(path) for path in sorted(directory.rglob("*"))
            if path.is_file() and path.name != MANIFEST and not path.name.startswith(outdir.STAGING_MARKER)}


def _write(results: list[RunResult], staging: Path, scenario_bytes: bytes | None) -> None:
    scenario = results[0].scenario
    summary_rows = _concat([r.summary for r in results])
    events = _concat([event_times(r) for r in results])
    write_operations([r.table for r in results], staging / "metrics.parquet")
    summary = {"scenario": scenario.name, "seed": results[0].seed, "results": json_records(summary_rows),
               "registrations": json_records(_concat([r.registrations for r in results])),
               "events": json_records(events),
               "counters": {r.variant: r.counters for r in results}}
    if scenario.library:
        summary["library"] = {r.variant: r.library for r in results}
    rails = _concat([rail_table(r) for r in results]) if has_rails(results[0].testbed) else None
    if rails is not None:
        summary["rails"] = json_records(rails)
    if len(results) > 1 or len(events):
        summary["comparison"] = json_records(comparison_table(results))
    (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    out = staging / "figures"
    kinds = summary_rows["kind"]
    line = [r.testbed.fabric.params.rate_Bps * 8 / 1e9 for r in results]
    if "bw_vs_size" in scenario.outputs and kinds.isin(BANDWIDTH_KINDS).any():
        figures.bw_vs_size(summary_rows, out, scenario.name, line)
    if "latency_vs_size" in scenario.outputs and kinds.isin(LATENCY_KINDS).any():
        figures.latency_vs_size(summary_rows, out, scenario.name)
    if {"bw_over_time", "gpu_memory"} & set(scenario.outputs) and kinds.isin(BANDWIDTH_KINDS).any():
        timeline = _concat([bandwidth_timeline(r) for r in results])  # one pass over the operations for both
        if "bw_over_time" in scenario.outputs:
            figures.bw_over_time(timeline, events, out, scenario.name, _concat([post_latencies(r) for r in results]),
                                 line, size_spans(results[0]) if len(results) == 1 else None)
        if "gpu_memory" in scenario.outputs:
            figures.gpu_memory(timeline, events, out, scenario.name, line)
    if "rail_bw" in scenario.outputs and rails is not None and len(rails):
        figures.rail_bw(rails, out, scenario.name, line)
    if "latency_cdf" in scenario.outputs:
        figures.latency_cdf(cdf_curves(r.table for r in results), out, scenario.name)

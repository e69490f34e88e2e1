"""``rdmasim report``: one self-contained HTML page of a run's results directory, for a lab report.

The page holds the scenario and its manifest (seed, hashes, versions, the recorded scenario text), the summary
tables (perftest rows, registrations, events, the comparison and the protocol counters), the figures the run
drew (PNG, embedded as data URIs) and, per variant, the timeline ``rdmasim explain`` prints and its sequence
diagram (SVG, embedded), re-run from the manifest with its seed. Nothing is fetched when it opens: no script,
no stylesheet or image from elsewhere. Same results directory, same bytes.

The page is written by the output rules of :mod:`sim.store.outdir` (:func:`~sim.store.outdir.write_file`): a new
path, or with ``force`` a page rdmasim wrote (its ``<meta name="generator">``), replaced atomically.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd

from sim import __version__
from sim.store import outdir
from sim.engine import budget
from sim.core.errors import SimError
from sim.engine.events import BOOKKEEPING_KINDS
from sim.engine.run import ENGINES
from sim.inspect.compare import COMPARED, comparison_view
from sim.inspect.tables import cell, header
from sim.results.repro import MANIFEST, Manifest, read_manifest, recorded_variants

REPORT = "report.html"
"""The page's name inside a results directory (the default ``--out``)."""
GENERATOR = "rdmasim report"
MARKER = f'<meta name="generator" content="{GENERATOR}">'.encode()
"""The bytes near the top of every page rdmasim wrote: how it recognises its own (see
:func:`sim.store.outdir.claim_file`)."""
TEMPLATE = "report.html.j2"
DIAGRAM_ZOOM = 1.25
"""A sequence diagram is drawn at its own size times this (its 7 pt labels at 11.7 CSS px), in a frame that
scrolls sideways: shrunk to the page's width, an 18-inch diagram's labels would be 7 px."""


class ReportError(SimError):
    """A directory ``report`` cannot read (exit code 2); the message names the path and why."""


@dataclass(frozen=True)
class Table:
    """A table of the page: its heading, column headers in words, cells as text in human units, and which
    columns hold prose (wrapped, so that the page keeps them in view)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    prose: list[bool]


@dataclass(frozen=True)
class Image:
    """An embedded image: its name (the figure's file, or the variant of a diagram) and its data URI."""

    name: str
    uri: str
    width: int | None = None
    """CSS pixels to draw it at (a diagram's: its own size, zoomed by :data:`DIAGRAM_ZOOM`); None: the page's."""


@dataclass(frozen=True)
class Variant:
    """One variant's protocol: the text ``rdmasim explain`` prints and its sequence diagram."""

    name: str
    timeline: str
    diagram: Image


PROSE = ("outcome", "modes", "allocation", "errors_by_status", "fallback")
"""Columns of text rather than numbers: wrapped within the page instead of widening the table past it."""
LEADING = ("variant", "buffer", "workload", "kind", "bytes", "time_ms", "target", "outcome")
"""Columns that name a row, or say what happened: first, in this order, where a table has them."""
HIDDEN = ("time_ps",)
"""Columns the page leaves out: ``time_ps`` is the run's own clock, ``time_ms`` (since the first post) says when."""


def table(title: str, records: list[dict], columns: list[str] | None = None) -> Table:
    """A :class:`Table` of JSON records: ``columns`` (default: the first record's, the naming ones first, the
    run's clock left out), headers in words and values in human units (:mod:`sim.inspect.tables`)."""
    if columns is None:
        given = [c for c in (records[0] if records else []) if c not in HIDDEN]
        columns = [c for c in dict.fromkeys(LEADING) if c in given] + [c for c in given if c not in LEADING]
    return Table(title, [header(c) for c in columns], [[cell(c, record.get(c)) for c in columns]
                                                        for record in records], [c in PROSE for c in columns])


def data_uri(mime: str, data: bytes) -> str:
    """``data`` as a ``data:`` URI (base64)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def svg_width(svg: bytes) -> int:
    """The CSS pixels a matplotlib SVG (``width="...pt"``) is drawn at, zoomed by :data:`DIAGRAM_ZOOM`."""
    points = float(re.search(rb'<svg[^>]*\swidth="([0-9.]+)pt"', svg)[1])
    return round(points * 96 / 72 * DIAGRAM_ZOOM)


def report_path(results: str | os.PathLike, out: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Check, before any work, that ``results`` is a run's results directory and that the page may be written at
    ``out`` (default ``RESULTS/report.html``); returns the page's path.

    :raises ReportError: ``results`` is not a run's results directory.
    :raises OutputError: the page's path is refused.
    """
    directory = Path(results)
    if not directory.is_dir():
        raise ReportError(f"{directory}: not a directory; name a results directory of `rdmasim run`")
    kind = outdir.owner(directory)
    if kind != outdir.RUN:
        held = f"holds {kind} output" if kind else "has no manifest.json"
        raise ReportError(f"{directory}: {held}; report reads a results directory of `rdmasim run`")
    return outdir.claim_file(directory / REPORT if out is None else out, MARKER, force=force)


def write_report(results: str | os.PathLike, out: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Write the page of the results directory ``results`` at ``out`` (default ``RESULTS/report.html``);
    returns its path.

    :raises ReportError: ``results`` is not a run's results directory, its summary is unreadable, or the traced
        re-runs would not fit the memory available now.
    :raises ConfigError: its manifest is malformed, or its scenario text no longer validates.
    :raises OutputError: the page's path is refused, or writing failed.
    """
    path = report_path(results, out, force=force)
    page = render(Path(results)).encode("utf-8")
    return outdir.write_file(path, MARKER, lambda temporary: temporary.write_bytes(page), force=force)


def render(directory: Path) -> str:
    """The page of the results directory ``directory``, as HTML text."""
    record = read_manifest(directory / MANIFEST)
    summary = _summary(directory / "summary.json")
    environment = jinja2.Environment(loader=jinja2.PackageLoader("sim", "templates"), autoescape=True,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return environment.get_template(TEMPLATE).render(
        generator=GENERATOR, version=__version__, name=summary.get("scenario", record.scenario.get("name")),
        record=record, tables=_tables(summary, record), figures=_figures(directory / "figures"),
        variants=_variants(record, directory / MANIFEST),
        manifest_text=json.dumps(record.model_dump(mode="json"), indent=1))


def _summary(path: Path) -> dict:
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: unreadable: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("results"), list):
        raise ReportError(f"{path}: not an rdmasim summary (no 'results' list)")
    return summary


def _tables(summary: dict, record: Manifest) -> list[Table]:
    events = [{("amount_bytes" if k == "bytes" else k): v for k, v in e.items()}  # what the event moved, not a size
              for e in summary.get("events", []) if e.get("kind") not in BOOKKEEPING_KINDS]  # as `run` prints them
    counters = [{"variant": name, **values} for name, values in summary.get("counters", {}).items()]
    parts = [table("Results (perftest rows)", summary["results"]),
             table("Registrations", summary.get("registrations", [])), table("Events", events)]
    if summary.get("comparison"):
        columns, records = comparison_view(pd.DataFrame(summary["comparison"]))
        keys, seen = columns[:3], [c for c in columns[3:] if c in COMPARED[:COMPARED.index("allocation") + 1]]
        parts += [table("Comparison of the variants, per workload and message size: what the workload saw", records,
                        keys + seen),
                  table("Comparison of the variants: what registration cost, what the protocol did", records,
                        keys + [c for c in columns[3:] if c not in seen])]
    parts += [table("Protocol counters", counters), table("Engines", _engines(record))]
    return [part for part in parts if part.rows]


def _engines(record: Manifest) -> list[dict]:
    """Per variant, the engine asked for, the one that ran its workloads and why ``auto`` fell back."""
    return [{"variant": name, "requested": engines.requested, "ran": ENGINES.get(engines.ran, engines.ran),
             "fallback": engines.fallback} for name, engines in (record.engines or {}).items()]


def _figures(directory: Path) -> list[Image]:
    if not directory.is_dir():
        return []
    return [Image(png.stem, data_uri("image/png", png.read_bytes()))
            for png in sorted(directory.glob("*.png")) if not png.is_symlink()]


def _variants(record: Manifest, manifest: Path) -> list[Variant]:
    """Each recorded variant run again, traced, as ``rdmasim explain`` runs it: its timeline and diagram.

    :raises ReportError: a traced run would not fit the memory available now.
    """
    import matplotlib.pyplot as plt

    from sim.inspect.diagram import SAVE, SVG_STYLE, draw
    from sim.inspect.explain import explain, first_accesses_only
    from sim.engine.run import run_scenario
    from sim.inspect.timeline import sections

    runs = [(name, first_accesses_only(scenario)) for name, scenario in recorded_variants(record, manifest)]
    limit = budget.available_memory()
    for run in runs:  # one traced run at a time, each checked before any runs
        short = budget.over_budget(budget.estimate([run], trace=True), limit)
        if short:
            raise ReportError(f"{manifest}: variant '{run[0]}' run again for its timeline: {short}")
    shown = []
    for name, scenario in runs:
        result = run_scenario(scenario, record.seed, trace=True, variant=name, notice=lambda _: None)
        fig = draw(result.testbed, sections(result.testbed), f"{scenario.name}, variant '{name}'")
        svg = io.BytesIO()
        try:
            with plt.rc_context(SVG_STYLE):
                fig.savefig(svg, format="svg", **SAVE[".svg"])
        finally:
            plt.close(fig)
        shown.append(Variant(name, explain(result), Image(name, data_uri("image/svg+xml", svg.getvalue()),
                                                          svg_width(svg.getvalue()))))
    return shown

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
import math
import os
from dataclasses import dataclass
from pathlib import Path

import jinja2

from sim import __version__
from sim.store import outdir
from sim.engine import budget
from sim.core.errors import SimError
from sim.engine.events import BOOKKEEPING_KINDS
from sim.results.repro import MANIFEST, Manifest, read_manifest, recorded_variants

REPORT = "report.html"
"""The page's name inside a results directory (the default ``--out``)."""
GENERATOR = "rdmasim report"
MARKER = f'<meta name="generator" content="{GENERATOR}">'.encode()
"""The bytes near the top of every page rdmasim wrote: how it recognises its own (see
:func:`sim.store.outdir.claim_file`)."""
TEMPLATE = "report.html.j2"


class ReportError(SimError):
    """A directory ``report`` cannot read (exit code 2); the message names the path and why."""


@dataclass(frozen=True)
class Table:
    """A table of the page: its heading, column names and cells as text."""

    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Image:
    """An embedded image: its name (the figure's file, or the variant of a diagram) and its data URI."""

    name: str
    uri: str


@dataclass(frozen=True)
class Variant:
    """One variant's protocol: the text ``rdmasim explain`` prints and its sequence diagram."""

    name: str
    timeline: str
    diagram: Image


def cell(value) -> str:
    """A table cell: floats to 6 significant digits, mappings as ``key: value`` pairs, nothing as an en dash."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return "–"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "–"
    return str(value)


def table(title: str, records: list[dict]) -> Table:
    """A :class:`Table` of JSON records (the columns of the first record, in its order)."""
    columns = list(records[0]) if records else []
    return Table(title, columns, [[cell(record.get(c)) for c in columns] for record in records])


def data_uri(mime: str, data: bytes) -> str:
    """``data`` as a ``data:`` URI (base64)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


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
        record=record, tables=_tables(summary), figures=_figures(directory / "figures"),
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


def _tables(summary: dict) -> list[Table]:
    events = [e for e in summary.get("events", []) if e.get("kind") not in BOOKKEEPING_KINDS]  # as `run` prints them
    counters = [{"variant": name, **values} for name, values in summary.get("counters", {}).items()]
    parts = [("Results (perftest rows)", summary["results"]), ("Registrations", summary.get("registrations", [])),
             ("Events", events), ("Comparison of the variants", summary.get("comparison", [])),
             ("Protocol counters", counters)]
    return [table(title, records) for title, records in parts if records]


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
        shown.append(Variant(name, explain(result), Image(name, data_uri("image/svg+xml", svg.getvalue()))))
    return shown

"""Figures by recipe from a results directory written by ``rdmasim run`` (``metrics.parquet`` and
``summary.json``) or by a sweep (``sweep.json`` and ``runs/``); each saved as PNG and PDF with its CSV.

Recipes (named as the scenario's ``outputs``): ``bw_vs_size``, ``latency_vs_size``, ``latency_cdf`` and
``bw_over_time`` (bandwidth over time with the scenario's events; the last two need per-operation metrics, so
``rdmasim run`` results), ``mode_comparison`` (bandwidth, p99.9 latency, registration time and pinned memory per
variant) and ``heatmap`` (a metric over two axes of a sweep).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from pyarrow import ArrowException

from models.verbs.workload_kinds import BANDWIDTH_KINDS, LATENCY_KINDS
from sim.store import outdir
from sim.inspect.binned import cdf_curves
from sim.inspect.compare import bandwidth_timeline, comparison_table, post_latencies, size_spans
from sim.core.units import format_size
from sim.store.operations import OperationTable
from sim.plot import figures
from sim.plot.figures import save
from sim.inspect.tables import axis_words, header
from sim.plot.request import RECIPES, RUN, RecipeError, check_request  # noqa: F401 (RECIPES: the API)
from sim.store.sweep_table import read_table

COMPARED = {"bw_avg_Gbps": "average bandwidth (Gb/s)", "p99_9_us": "p99.9 latency (µs)",
            "register_ms": "registration time (ms)", "pinned_GiB": "pinned memory (GiB)",
            "failed_allocations": "competing jobs' failed allocations"}
"""The mode comparison's panels: column -> axis label."""
PER_CASE = ("bw_avg_Gbps", "p99_9_us")
"""Panels drawn per workload kind and message size (the others are one number per variant)."""
PANEL_IN, BAR_IN = 3.4, 0.16
"""A mode comparison panel's width (inches), and the least a bar of a panel per case gets (its label's room)."""
STACKED_LABELS = 6
"""Up to this many cases a panel labels them in two lines side by side; more are labelled upright."""
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
"""Bar fills per variant, so that bars of equal height stay told apart in print."""


@dataclass(frozen=True)
class _RunDir:
    """Results of ``rdmasim run``."""

    title: str
    operations: pd.DataFrame
    summary: pd.DataFrame
    registrations: pd.DataFrame
    events: pd.DataFrame
    counters: dict
    link_Bps: dict
    """Per variant: the fabric's rate (bytes/s), from the manifest."""

    def variants(self) -> list[SimpleNamespace]:
        """Per variant, the fields of a :class:`sim.engine.tables.RunResult` that :mod:`sim.inspect.compare` reads."""
        pick = lambda frame, v: frame[frame["variant"] == v]  # noqa: E731
        return [SimpleNamespace(variant=v, table=OperationTable.of(pick(self.operations, v)),
                                summary=pick(self.summary, v),
                                registrations=pick(self.registrations, v), counters=c,
                                events=pick(self.events, v) if "variant" in self.events else self.events)
                for v, c in self.counters.items()]


@dataclass(frozen=True)
class _SweepDir:
    """Results of a sweep: its table (finished runs only) and its axes in order."""

    title: str
    table: pd.DataFrame
    axes: list[str]

    def ok(self, kinds: tuple[str, ...] = (), what: str = "") -> pd.DataFrame:
        """Rows of runs that did not fail, of workloads of ``kinds`` (``what`` they measure; all by default)."""
        table = self.table[self.table["status"] == "ok"]
        table = table[table["kind"].isin(kinds)] if len(table) and kinds else table
        if table.empty:
            what = f"run with a {what} workload" if kinds else "run"
            raise RecipeError(f"sweep '{self.title}': no {what} finished")
        return table


def _load(results_dir: Path, kind: str) -> _RunDir | _SweepDir:
    """Read a run's or a sweep's results directory (``kind``: :func:`sim.plot.request.results_kind`).

    :raises RecipeError: a file in it cannot be read as rdmasim wrote it (named).
    """
    if kind != RUN:
        with _unreadable(results_dir, "a sweep's results directory (sweep.json, runs/)"):
            record = json.loads((results_dir / "sweep.json").read_text())
            return _SweepDir(record["name"], read_table(results_dir), record["axes"])
    with _unreadable(results_dir / "summary.json", "the summary.json of `rdmasim run`"):
        summary = json.loads((results_dir / "summary.json").read_text())
        if "script" in summary and "scenario" not in summary:
            raise RecipeError(f"{results_dir}: the results of a Python script ({summary['script']}), whose figure "
                              "Testbed.write_results drew (figures/latency_cdf); recipes draw the results of "
                              "`rdmasim run` or `rdmasim sweep`")
        events = (pd.DataFrame(summary["events"]) if summary["events"]
                  else pd.DataFrame(columns=["kind", "time_ms"]))
        tables = [pd.DataFrame(summary[key]) for key in ("results", "registrations")]
        title, counters = str(summary["scenario"]), dict(summary["counters"])
    with _unreadable(results_dir / "metrics.parquet", "the metrics.parquet of `rdmasim run`"):
        operations = pd.read_parquet(results_dir / "metrics.parquet")
    with _unreadable(results_dir / "manifest.json", "the manifest.json of `rdmasim run`"):
        variants = json.loads((results_dir / "manifest.json").read_text())["variants"]
        link = {name: float(params["fabric"]["rate_Bps"]) for name, params in variants.items()}
    return _RunDir(title, operations, *tables, events, counters, link)


@contextmanager
def _unreadable(path: Path, what: str):
    """Report a file that cannot be read as ``what`` as a RecipeError naming it (and the missing key)."""
    try:
        yield
    except KeyError as exc:
        raise RecipeError(f"{path}: not {what}: no key {exc}") from None
    except (OSError, ValueError, TypeError, AttributeError, ArrowException) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecipeError(f"{path}: not {what}: {reason}") from None


def _restates_size(table: pd.DataFrame, column: str) -> bool:
    """Whether a column's values and the message sizes determine each other (e.g. the axis that sets it)."""
    return (table.groupby(column)["bytes"].nunique().max() == 1
            and table.groupby("bytes")[column].nunique().max() == 1)


def bw_vs_size(results: _RunDir | _SweepDir, out: Path) -> list[Path]:
    """Average bandwidth against message size; a sweep's runs averaged per series (its other axes)."""
    columns = ["bw_avg_Gbps", "bw_peak_Gbps"] + ([] if isinstance(results, _RunDir) else ["events"])
    data = _per_size(results, BANDWIDTH_KINDS, columns, "bandwidth")
    line = [rate * 8 / 1e9 for rate in results.link_Bps.values()] if isinstance(results, _RunDir) else []
    return figures.bw_vs_size(data, out, results.title, line)


def latency_vs_size(results: _RunDir | _SweepDir, out: Path) -> list[Path]:
    """Typical latency against message size with its min..p99.9 band; a sweep's runs averaged per series."""
    data = _per_size(results, LATENCY_KINDS, ["t_typical_us", "t_min_us", "p99_us", "p99_9_us"], "latency")
    return figures.latency_vs_size(data, out, results.title)


def _per_size(results: _RunDir | _SweepDir, kinds: tuple[str, ...], columns: list[str], what: str) -> pd.DataFrame:
    """Summary rows of the workloads of ``kinds`` (``what`` they measure): a run's one per variant, workload and size;
    a sweep's ``columns`` averaged per series (the axes that vary and do not restate the size) and size, where
    ``events`` is the share of the point's runs during which a scenario event came."""
    if isinstance(results, _RunDir):
        data = results.summary[results.summary["kind"].isin(kinds)]
    else:
        ok = results.ok(kinds, what)
        met = ok["window_from_ms"].notna() if "window_from_ms" in ok else pd.Series(False, index=ok.index)
        ok = ok.assign(events=met.astype(float))  # the share of a point's runs that met a scenario event
        series = [c for c in dict.fromkeys(["variant", *results.axes, "workload"])
                  if ok[c].nunique() > 1 and not _restates_size(ok, c)]
        label = ok[series].astype(str).agg(" / ".join, axis=1) if series else pd.Series("all", index=ok.index)
        data = (ok.assign(workload=label).groupby(["workload", "kind", "bytes"], sort=False)[columns].mean()
                .reset_index())
    if data.empty:
        raise RecipeError(f"{results.title}: no {what} workload to plot")
    return data


def latency_cdf(run: _RunDir, out: Path) -> list[Path]:
    """Per-operation latency CDF and tail per variant and workload."""
    return figures.latency_cdf(cdf_curves(v.table for v in run.variants()), out, run.title)


def bw_over_time(run: _RunDir, out: Path) -> list[Path]:
    """Delivered bandwidth over time per variant, the scenario's events marked."""
    curves = pd.concat([bandwidth_timeline(v, link_Bps=run.link_Bps[v.variant]) for v in run.variants()],
                       ignore_index=True)
    if curves.empty:
        raise RecipeError(f"{run.title}: no bandwidth workload to plot over time")
    variants = run.variants()
    latencies = pd.concat([post_latencies(v) for v in variants], ignore_index=True)
    return figures.bw_over_time(curves, run.events, out, run.title, latencies,
                                [rate * 8 / 1e9 for rate in run.link_Bps.values()],
                                size_spans(variants[0]) if len(variants) == 1 else None)


def mode_comparison(results: _RunDir | _SweepDir, out: Path, by: str = "variant") -> list[Path]:
    """Per variant (or per value of the sweep axis ``by``), like with like: bandwidth and p99.9 latency per
    workload kind and message size, then what each variant costs — registration time, pinned memory and the
    competing jobs' failed allocations; a sweep's runs are averaged per bar."""
    if isinstance(results, _RunDir):
        table = comparison_table(results.variants()).assign(run=0)
    else:
        table = results.ok()
    table = table.rename(columns={by: "series"}).astype({"series": str})
    data = (table.groupby(["series", "kind", "bytes"], sort=False)
            .agg(bw_avg_Gbps=("bw_avg_Gbps", "mean"), p99_9_us=("p99_9_us", "mean"),
                 register_us=("register_us", "mean"), pinned_bytes=("pinned_bytes", "mean"),
                 failed_allocations=("failed_allocations", "mean"), runs=("run", "nunique")).reset_index())
    data = pd.DataFrame({"variant": data["series"], "kind": data["kind"], "bytes": data["bytes"],
                         "bw_avg_Gbps": data["bw_avg_Gbps"].where(data["kind"].isin(BANDWIDTH_KINDS)),
                         "p99_9_us": data["p99_9_us"], "register_ms": data["register_us"] / 1e3,
                         "pinned_GiB": data["pinned_bytes"] / 2**30,
                         "failed_allocations": data["failed_allocations"], "runs": data["runs"]})
    bars = len(data)  # one per variant, workload kind and message size in the panels per case
    widths = [max(PANEL_IN, BAR_IN * bars) if column in PER_CASE else PANEL_IN for column in COMPARED]
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(sum(widths), 4.4), width_ratios=widths)
    for ax, (column, label) in zip(axes, COMPARED.items()):
        per_case = column in PER_CASE
        _grouped_bars(ax, data if per_case else data.drop_duplicates("variant"), column, per_case)
        ax.set_title(label, fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), fontsize=8, frameon=False)
    mean = " (mean over runs)" if isinstance(results, _SweepDir) else ""
    fig.suptitle(f"{results.title}: " + ("registration modes" if by == "variant" else f"by {by}") + mean)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save(fig, data, out, "mode_comparison")


def _grouped_bars(ax, data: pd.DataFrame, column: str, per_case: bool) -> None:
    """One bar per variant; per workload kind and message size when ``per_case``, else one group."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants = list(dict.fromkeys(data["variant"]))
    cases = list(dict.fromkeys(zip(data["kind"], data["bytes"]))) if per_case else [None]
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        mine = data[data["variant"] == variant]
        values = [mine[(mine["kind"] == k) & (mine["bytes"] == b)][column].mean() if per_case else
                  mine[column].iloc[0] for k, b in (cases if per_case else [(None, None)])]
        bars = ax.bar([c + (i - (len(variants) - 1) / 2) * width for c in range(len(cases))], values, width,
                      color=colors[i % len(colors)], label=variant, hatch=HATCHES[i % len(HATCHES)], ec="white")
        ax.bar_label(bars, fmt="%.4g", fontsize=6, rotation=90, padding=2)
    if per_case and len(cases) > STACKED_LABELS:  # side by side, two-line labels would overlap: one line, upright
        ax.set_xticks(range(len(cases)), [f"{k} {format_size(int(b))}" for k, b in cases], fontsize=7, rotation=90)
    elif per_case:
        ax.set_xticks(range(len(cases)), [f"{k}\n{format_size(int(b))}" for k, b in cases], fontsize=7)
    else:
        ax.set_xticks([])
    figures.measured([ax], data[column])
    ax.margins(y=0.25)
    ax.set_ylim(bottom=0)  # every compared quantity is a count, time or size: a panel of zeros has no negatives
    ax.grid(True, axis="y", alpha=0.3)


HEATMAP_MAX_IN = (16, 12)
"""Largest heatmap (inches, 1920 x 1440 px at the figures' 120 dpi): more axis values make narrower cells."""
CELL_TEXT_IN = (0.5, 0.2)
"""Smallest cell (inches) that has its value written in (8 pt, four digits); smaller cells show only colour."""
MAX_TICKS = 40
"""Most axis values labelled along a heatmap's side (every k-th beyond it)."""


def heatmap(results: _SweepDir, out: Path, metric: str | None = None, by: tuple[str, str] | None = None
            ) -> list[Path]:
    """Mean of ``metric`` (default: average bandwidth, else typical latency) over two sweep axes ``by``
    (default: the first two; :func:`sim.plot.request.check_request` has checked them) as a colour grid with the
    values written in; a cell averages its runs (repetitions, other axes)."""
    y, x = by or results.axes[:2]
    ok = results.ok()
    numeric = [c for c in ok.columns if pd.api.types.is_numeric_dtype(ok[c]) and c not in ("run", "seed")]
    metric = metric or next(m for m in ("bw_avg_Gbps", "t_typical_us", "p99_9_us") if m in numeric)
    if metric not in numeric:
        raise RecipeError(f"no metric '{metric}' (metrics: {', '.join(numeric)})")
    rows, cols = list(dict.fromkeys(ok[y])), list(dict.fromkeys(ok[x]))
    data = (ok.groupby([y, x], sort=False).agg(value=(metric, "mean"), runs=("run", "nunique"))
            .reset_index().rename(columns={"value": metric}))
    grid = np.full((len(rows), len(cols)), np.nan)
    row_of, col_of = {v: i for i, v in enumerate(rows)}, {v: j for j, v in enumerate(cols)}
    grid[[row_of[v] for v in data[y]], [col_of[v] for v in data[x]]] = data[metric].to_numpy()
    width, height = min(1.4 * len(cols) + 3, HEATMAP_MAX_IN[0]), min(0.6 * len(rows) + 2.2, HEATMAP_MAX_IN[1])
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    if (width - 3) / len(cols) >= CELL_TEXT_IN[0] and (height - 2.2) / len(rows) >= CELL_TEXT_IN[1]:
        middle = np.nanmean(grid)
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.4g}", ha="center", va="center", fontsize=8,
                        color="white" if value < middle else "black")
    for set_ticks, values, rotation in ((ax.set_xticks, cols, 30), (ax.set_yticks, rows, 0)):
        every = -(-len(values) // MAX_TICKS)
        set_ticks(range(0, len(values), every), [str(v) for v in values[::every]], rotation=rotation)
    ax.set(xlabel=axis_words(x), ylabel=axis_words(y), title=f"{results.title}: {header(metric)}")
    fig.colorbar(image, ax=ax, label=f"{header(metric)} ({UNITS.get(metric.rsplit('_', 1)[-1], 'mean')})")
    fig.tight_layout()
    return save(fig, data, out, f"heatmap_{metric}")


UNITS = {"Gbps": "Gb/s", "us": "µs", "ms": "ms", "bytes": "bytes", "pct": "%"}
"""A metric's unit from its name's suffix."""


def plot(results_dir: str | os.PathLike, recipe: str, out: str | os.PathLike | None = None, *,
         metric: str | None = None, by: Sequence[str] = (), force: bool = False) -> list[Path]:
    """Draw ``recipe`` from ``results_dir`` into ``out`` (default: ``results_dir/figures``); return the PNG,
    PDF and CSV paths. For a sweep, ``by`` names the axis a mode comparison groups by (default: variant) or
    the two axes of a heatmap (default: the first two), and ``metric`` a heatmap's column. ``out`` is claimed
    by :func:`sim.store.outdir.claim` (new, empty or rdmasim's figures); ``force`` replaces figures of the same name.

    :raises RecipeError: an unknown recipe (the message lists them), a directory that holds no results or a
        file in it that cannot be read, or a recipe that needs what the directory lacks.
    :raises OutputError: ``out`` may not be written, or holds a figure of the same name and ``force`` is not
        given (nothing is written).
    """
    by = [by] if isinstance(by, str) else list(by)
    results = _load(Path(results_dir), check_request(Path(results_dir), recipe, by, metric))
    target = Path(results_dir) / "figures" if out is None else out
    with (_unreadable(Path(results_dir), "results as rdmasim writes them"),  # e.g. a column missing
          outdir.staged(target, outdir.FIGURES, force=force) as (staging, claimed)):
        try:
            paths = _draw(results, recipe, staging, metric, by)
        except RecipeError as exc:  # what the recipe finds missing, said of the directory it read
            raise RecipeError(f"{results_dir}: {exc}") from None
    return [claimed.path / p.name for p in paths]


def _draw(results: _RunDir | _SweepDir, recipe: str, out: Path, metric: str | None, by: list[str]) -> list[Path]:
    if recipe == "heatmap":
        return heatmap(results, out, metric, tuple(by) or None)
    if recipe == "mode_comparison":
        return mode_comparison(results, out, *by)
    draw = {"bw_vs_size": bw_vs_size, "latency_vs_size": latency_vs_size, "latency_cdf": latency_cdf,
            "bw_over_time": bw_over_time}[recipe]
    return draw(results, out)

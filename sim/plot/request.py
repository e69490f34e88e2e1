"""What ``rdmasim plot`` can refuse before it reads any results: an unknown recipe, a recipe that does not apply to
the kind of results directory given (told by its files' names alone), options the recipe does not take, and a sweep
axis the sweep does not have (read from its small ``sweep.json``). Imports neither pandas nor matplotlib, so a
refusal answers at once whatever the size of the results."""

from __future__ import annotations

import json
from pathlib import Path

from sim.core.errors import SimError

RECIPES = ("bw_vs_size", "latency_vs_size", "latency_cdf", "bw_over_time", "mode_comparison", "heatmap")
PER_OPERATION = ("latency_cdf", "bw_over_time")
"""Recipes that need each operation's row: the results of ``rdmasim run``, not a sweep's one row per run."""
RUN, SWEEP = "run", "sweep"


class RecipeError(SimError):
    """A recipe that does not exist or does not apply to the results directory given."""


def results_kind(results_dir: Path) -> str:
    """:data:`RUN` or :data:`SWEEP`, from the files the directory holds.

    :raises RecipeError: it holds neither kind of results.
    """
    if (results_dir / "sweep.json").is_file():
        return SWEEP
    if (results_dir / "summary.json").is_file() and (results_dir / "metrics.parquet").is_file():
        return RUN
    raise RecipeError(f"{results_dir}: not a results directory (expected summary.json and metrics.parquet "
                      "from `rdmasim run`, or sweep.json from a sweep)")


def sweep_axes(results_dir: Path) -> tuple[str, list[str]]:
    """A sweep's name and its axes from its ``sweep.json``.

    :raises RecipeError: the file cannot be read as a sweep's record.
    """
    path = results_dir / "sweep.json"
    try:
        record = json.loads(path.read_text())
        return str(record["name"]), [str(axis) for axis in record["axes"]]
    except KeyError as exc:
        raise RecipeError(f"{path}: not a sweep's results directory (sweep.json, runs/): no key {exc}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise RecipeError(f"{path}: not a sweep's results directory (sweep.json, runs/): {exc}") from None


def run_variants(results_dir: Path) -> list[str]:
    """The variants a run's ``manifest.json`` names.

    :raises RecipeError: the manifest cannot be read as rdmasim wrote it.
    """
    path = results_dir / "manifest.json"
    try:
        return [str(name) for name in json.loads(path.read_text())["variants"]]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise RecipeError(f"{path}: not the manifest.json of `rdmasim run`: {exc}") from None


def check_axes(title: str, axes: list[str], names: list[str]) -> None:
    """Refuse an axis ``names`` holds that the sweep ``title`` (its ``axes``, and ``variant``) does not have."""
    known = list(dict.fromkeys(["variant", *axes]))
    for name in names:
        if name not in known:
            raise RecipeError(f"no axis '{name}' in sweep '{title}' (axes: {', '.join(known)})")


def check_request(results_dir: Path, recipe: str, by: list[str], metric: str | None) -> str:
    """Refuse what can be refused before loading ``results_dir``; return its kind (:func:`results_kind`).
    A refusal about the directory names it.

    :raises RecipeError: an unknown recipe, a directory of neither kind, a recipe that needs the other kind,
        options the recipe does not take, or an axis the sweep does not have.
    """
    if recipe not in RECIPES:
        raise RecipeError(f"unknown recipe {recipe!r} (recipes: {', '.join(RECIPES)})")
    kind = results_kind(results_dir)
    try:
        _check_options(results_dir, kind, recipe, by, metric)
    except RecipeError as exc:
        raise RecipeError(f"{results_dir}: {exc}") from None
    return kind


def _check_options(results_dir: Path, kind: str, recipe: str, by: list[str], metric: str | None) -> None:
    if recipe == "heatmap":
        if kind != SWEEP:
            raise RecipeError("recipe 'heatmap' needs the results of a sweep")
        if len(by) not in (0, 2):
            raise RecipeError("recipe 'heatmap' takes two axes")
        if len(by) == 2 and by[0] == by[1]:
            raise RecipeError(f"recipe 'heatmap' needs two different axes, got '{by[0]}' twice")
    elif recipe == "mode_comparison":
        if len(by) > 1:
            raise RecipeError("recipe 'mode_comparison' groups by one axis")
        if kind == RUN and by not in ([], ["variant"]):
            raise RecipeError(f"recipe 'mode_comparison' of a run groups by variant, not '{by[0]}'")
        if kind == RUN and len(names := run_variants(results_dir)) < 2:
            raise RecipeError(f"recipe 'mode_comparison' compares variants, and this run has one ({', '.join(names)})"
                              ": bw_vs_size and latency_vs_size draw it")
    elif by or metric:
        raise RecipeError(f"recipe '{recipe}' takes no axes and no metric")
    if recipe in PER_OPERATION and kind == SWEEP:
        raise RecipeError(f"recipe '{recipe}' needs per-operation metrics: plot the results of `rdmasim run`; "
                          "a sweep keeps one row per run")
    if kind == SWEEP and recipe in ("heatmap", "mode_comparison"):
        title, axes = sweep_axes(results_dir)
        if recipe == "heatmap" and not by and len(axes) < 2:
            raise RecipeError(f"sweep '{title}' has {len(axes)} axes: a heatmap needs two")
        check_axes(title, axes, by)

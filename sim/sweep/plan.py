"""Expand a sweep file into its runs before anything runs: every point validated, every seed fixed.

Runs are ordered point by point (grid axes in file order, then the zip group, then the random samples; the
base file's variants form the first axis unless the sweep names ``variant``), repetitions innermost. Run
seeds come from ``numpy.random.SeedSequence(sweep seed)``, one per repetition index, so every point of a
repetition shares its random streams (common random numbers: differences between points are the
parameters', not the noise's) and adding points to a sweep leaves the finished runs' seeds, and so their
results, valid. Random axes draw from a separate stream of the same seed.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim import __version__
from sim.core.errors import ConfigError, ConfigErrors
from sim.core.units import PS_PER_S
from sim.scenario.loader import validate
from sim.scenario.yaml_reader import KeyPath, PositionMap, error_at, format_path, parse_yaml, read_yaml_file
from sim.scenario.refs import check_references
from sim.scenario.scenario_file import SWEEP_KIND, load_scenario_variants
from sim.scenario.schema import Scenario, Variant
from sim.scenario.variants import step, apply_set
from sim.store.sweep_table import VARIANT
from sim.sweep.spec import Distribution, Sweep

RESERVED = frozenset({"run", "repetition", "seed", "key", "status", "error", "workload", "kind", "bytes",
                      "iterations", "errors", "modes", "variants"})
"""Paths an axis may not name: columns of the results table, and the seed (derived from the sweep's)."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep, resolved: the scenario to simulate, its seed and where it sits in the sweep."""

    index: int
    repetition: int
    variant: str
    axes: dict[str, Any]
    """Axis path -> value, as written in the sweep (``variant`` excluded)."""
    seed: int
    key: str
    """:func:`run_key`: names the run's result partition."""
    scenario: Scenario
    time_limit_s: float | None = None
    """Wall-clock seconds the run may take (the sweep's ``run_time_limit``); None: no limit."""


@dataclass(frozen=True)
class SweepPlan:
    """A loaded sweep: its spec, the axes in order and every run."""

    sweep: Sweep
    file: str
    base_file: str
    seed: int
    axes: list[str]
    """Axis paths in order, ``variant`` included where it is an axis."""
    runs: list[RunSpec]
    sweep_sha256: str
    base_sha256: str


@dataclass(frozen=True)
class _Value:
    path: str
    value: Any
    where: KeyPath
    """Position of the value in the sweep file."""

    @property
    def axis(self) -> KeyPath:
        """Position of the axis's key in the sweep file."""
        return self.where[:3] if self.where[0] == "random" else self.where[:2]


def run_seed(sweep_seed: int, repetition: int) -> int:
    """The seed of every run of repetition ``repetition`` (below 2**63, as scenario seeds are).

    >>> run_seed(7, 0) == run_seed(7, 0) != run_seed(7, 1)
    True
    """
    state = np.random.SeedSequence(sweep_seed, spawn_key=(0, repetition)).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def run_key(scenario: Scenario, variant: str) -> str:
    """Hash of a run's resolved parameters (the scenario holds the run's seed), its variant label and the
    rdmasim version (a release that changes the models invalidates stored runs)."""
    text = json.dumps({"scenario": scenario.model_dump(mode="json", by_alias=True), "variant": variant,
                       "rdmasim": __version__}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _sample(dist: Distribution, rng: np.random.Generator) -> Any:
    """One draw; quantities come back as the schema reads them ('<n>B', '<n>ps', '<x>B/s')."""
    if dist.choice is not None:
        return dist.choice[int(rng.integers(len(dist.choice)))]
    if dist.randint is not None:
        bounds = dist.randint
        value: float = int(rng.integers(int(bounds.low), int(bounds.high), endpoint=True))
    elif dist.uniform is not None:
        bounds = dist.uniform
        value = float(rng.uniform(bounds.low, bounds.high))
    else:
        bounds = dist.loguniform
        value = float(math.exp(rng.uniform(math.log(bounds.low), math.log(bounds.high))))
    units = {"size": "B", "time": "ps"}
    if bounds.kind in units:
        return f"{int(round(value))}{units[bounds.kind]}"
    return f"{value:.6g}B/s" if bounds.kind == "rate" else value


def _factors(swept: SweepFile) -> list[list[list[_Value]]]:
    """The sweep as a product of factors; each factor is a list of points, each point a list of values."""
    sweep, variants = swept.sweep, list(swept.prepared)
    positions, file = swept.files.positions, swept.files.file
    factors = [[[_Value(path, v, ("grid", path, i))] for i, v in enumerate(values)]
               for path, values in sweep.grid.items()]
    if sweep.zip:
        factors.append([[_Value(path, values[i], ("zip", path, i)) for path, values in sweep.zip.items()]
                        for i in range(len(next(iter(sweep.zip.values()))))])
    params = sweep.random.params if sweep.random else {}
    if params:
        rng = np.random.default_rng(np.random.SeedSequence(sweep.seed, spawn_key=(1,)))
        factors.append([[_Value(path, _sample(dist, rng), ("random", "params", path))
                         for path, dist in params.items()] for _ in range(sweep.random.samples)])
    if VARIANT not in {*sweep.grid, *sweep.zip, *params} and variants != ["base"]:
        factors.insert(0, [[_Value(VARIANT, name, ("base",))] for name in variants])
    for value in (v for factor in factors for point in factor for v in point if v.path == VARIANT):
        if value.value not in variants:
            known = f"variants: {', '.join(variants)}" if variants != ["base"] else "it has none"
            raise error_at(positions, value.where, f"no variant named {value.value!r} in the base scenario "
                           f"({known})", file)
    return factors


def _key_error(positions: PositionMap, where: KeyPath, reason: str, file: str) -> ConfigError:
    line, column = positions.locate_key(where)
    return ConfigError(reason, file=file, line=line, column=column, key=format_path(where))


def _joined(file: str, base: str) -> str:
    """``base`` as a path from the folder of ``file``, without ``..`` steps where dropping them names the same
    file (not through a symbolic link)."""
    joined = os.path.join(os.path.dirname(file), base)
    tidy = os.path.normpath(joined)
    return tidy if os.path.realpath(tidy) == os.path.realpath(joined) else joined


def _check_paths(sweep: Sweep, data: dict, positions: PositionMap, file: str) -> None:
    """Every path exists in the base scenario, is an axis once and is not reserved; reported at its key."""
    axes: set[str] = set()
    params = sweep.random.params if sweep.random else {}
    for block, paths in (("set", sweep.set), ("grid", sweep.grid), ("zip", sweep.zip), ("random", params)):
        for path in paths:
            where = ("random", "params", path) if block == "random" else (block, path)
            if path == "seed":
                raise _key_error(positions, where, "'seed' cannot be swept: run seeds derive from the sweep's "
                                 "seed (use repetitions)", file)
            if path in RESERVED:
                raise _key_error(positions, where, f"'{path}' cannot be swept: it is a results column", file)
            if path == VARIANT and block == "set":
                raise _key_error(positions, where, "'variant' is an axis: name it in grid, zip or random", file)
            if path != VARIANT:
                try:
                    _set(data, path, None)
                except KeyError as exc:
                    raise _key_error(positions, where, f"not a key path of the base scenario: {exc.args[0]}",
                                     file) from None
            if block != "set":
                if path in axes:
                    raise _key_error(positions, where, f"'{path}' is already an axis", file)
                axes.add(path)


def _set(data: dict, path: str, value: Any) -> dict:
    """:func:`~sim.scenario.variants.apply_set`, first creating the mappings on the path that the base file
    leaves out (``fabric.latency`` where it has no ``fabric``); the schema then judges the keys.

    :raises KeyError: a list item on the path does not exist.
    """
    data = copy.deepcopy(data)
    node = data
    for part in path.split(".")[:-1]:
        if not isinstance(node, (dict, list)):
            break
        if isinstance(node, dict) and part not in node:
            node[part] = {}
        node = node[step(node, part)]
    return apply_set(data, path, value)


def _concrete(data: dict, path: str) -> KeyPath:
    """The key path (list items by index) that a dotted path names in ``data``."""
    node, out = data, []
    for part in path.split("."):
        key = step(node, part)
        out.append(key)
        node = node[key] if isinstance(node, list) or key in node else {}
    return tuple(out)


def _inner_paths(value: Any) -> list[KeyPath]:
    """The key paths inside a YAML value, the value's own ``()`` first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [(), *((key, *inner) for key, item in items for inner in _inner_paths(item))]


def _written_in(key: str, data: dict, written: dict[KeyPath, tuple[str, Any]]) -> KeyPath | None:
    """Where in the sweep file the scenario key ``key`` (as an error names it) was written, given ``written``
    (position in the sweep file -> the dotted path and the value written there): the deepest position inside a
    value that holds it; None when no value does."""
    found: list[tuple[int, KeyPath]] = []
    for where, (path, value) in written.items():
        concrete = _concrete(data, path)
        for inner in _inner_paths(value):
            named = format_path(concrete + inner)
            if key == named or key.startswith((f"{named}.", f"{named}[")):
                found.append((len(concrete + inner), (*where, *inner)))
    return max(found, key=lambda depth_and_where: depth_and_where[0])[1] if found else None


@dataclass(frozen=True)
class _Files:
    """Where things are, to locate errors: the sweep file and the base scenario file."""

    file: str
    positions: PositionMap
    base_file: str
    base_positions: PositionMap

    def scenario(self, data: dict, where: KeyPath, label: str = "", axis: _Value | None = None,
                 written: dict[KeyPath, tuple[str, Any]] | None = None) -> Scenario:
        """``data`` as a Scenario, any problem reported at ``where`` in the sweep file (an unknown key that
        ``axis`` names at that axis's key; one in a value of ``written``, position in the sweep file -> dotted
        path and value, at that value, named by its full key path)."""
        try:
            scenario = validate(Scenario, data, self.base_positions, self.base_file)
        except ConfigError as exc:
            errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
            named = _concrete(data, axis.path) if axis else ()
            prefixes = {format_path(named[:n]) for n in range(1, len(named) + 1)}
            unknown = [e for e in errors if e.key in prefixes and e.reason.startswith("unknown key")]
            if unknown:
                raise _key_error(self.positions, axis.axis, f"not a key of the scenario: {unknown[0].reason}",
                                 self.file) from None
            located = []
            for e in errors:
                at = _written_in(e.key, data, written or {})
                locate = _key_error if e.reason.startswith("unknown key") else error_at
                located.append(locate(self.positions, at, f"{label}{e.reason}", self.file) if at
                               else error_at(self.positions, where, f"{label}{e.key}: {e.reason}", self.file))
            raise ConfigErrors(sorted(located, key=lambda e: (e.line, e.column))) from None
        problems = check_references(scenario)
        if problems:
            raise error_at(self.positions, where, f"{label}{problems[0][1]}", self.file)
        return scenario


def _prepared(sweep: Sweep, base: Scenario, data: dict, files: _Files) -> dict[str, dict]:
    """Per variant of the base file (``base`` when none), its data with the variant's and the sweep's ``set``
    applied, checked."""
    out = {}
    for variant in base.variants or [Variant(name="base", set={})]:
        varied = data
        for key, value in list(variant.set.items()) + list(sweep.set.items()):
            varied = _set(varied, key, value)
        label = f"with variant={variant.name}: " if base.variants else ""
        files.scenario(varied, ("set",), label, written={("set", path): (path, value)
                                                        for path, value in sweep.set.items()})
        out[variant.name] = varied
    return out


@dataclass(frozen=True)
class SweepFile:
    """A sweep file read and checked up to its expansion: the spec, its base and how many runs it makes."""

    sweep: Sweep
    """The spec, its seed resolved (the base scenario's where the sweep names none)."""
    files: _Files
    raw: bytes
    base_raw: bytes
    prepared: dict[str, dict]
    """Per variant of the base file, its data with the variant's and the sweep's ``set`` applied."""
    count: int
    """Runs the sweep expands to: points times repetitions."""
    shape: str
    """How ``count`` is made, e.g. ``1000 x 1000 points x 1 repetition``."""


def read_sweep(path: str | os.PathLike) -> SweepFile:
    """Read and validate a sweep file and its base scenario, and count its runs without building any.

    :raises ConfigError: any problem, located as FILE:LINE:COL key.path: in the sweep file (a bad path at the
        axis naming it; more runs than ``max_runs`` at ``max_runs`` or the longest axis), or in the base file.
    """
    file = os.fsdecode(path)
    raw = read_yaml_file(path)
    data, positions = parse_yaml(raw, file)
    if data.get("kind") != SWEEP_KIND and "nodes" in data:
        raise error_at(positions, (), f"a scenario file, not a sweep (it has no 'kind: {SWEEP_KIND}'): run it with "
                       f"`rdmasim run {file}`, or name it as the 'base' of a sweep file", file)
    sweep = validate(Sweep, data, positions, file)
    base_file = _joined(file, sweep.base)
    if not Path(base_file).is_file():
        raise error_at(positions, ("base",), f"no scenario file {base_file}", file)
    base, base_raw, _ = load_scenario_variants(base_file)
    base_data, base_positions = parse_yaml(base_raw, base_file)
    base_data.pop("variants", None)
    files = _Files(file, positions, base_file, base_positions)
    _check_paths(sweep, base_data, positions, file)
    sweep = sweep.model_copy(update={"seed": base.seed if sweep.seed is None else sweep.seed})
    sizes = _factor_sizes(sweep, [v.name for v in base.variants])
    count = math.prod(size for _, size in sizes) * sweep.repetitions
    points = " x ".join(str(size) for _, size in sizes) or "1"
    shape = f"{points} point{'s' * (count != sweep.repetitions)} x {sweep.repetitions} " \
            f"repetition{'s' * (sweep.repetitions > 1)}"
    if count > sweep.max_runs:
        longest = max(sizes, key=lambda size: size[1])[0] if sizes else ("repetitions",)
        where = ("max_runs",) if "max_runs" in data else longest
        raise _key_error(positions, where, f"the sweep expands to {count:,} runs ({shape}), more than max_runs "
                         f"({sweep.max_runs:,}): raise max_runs to run them all", file)
    return SweepFile(sweep, files, raw, base_raw, _prepared(sweep, base, base_data, files), count, shape)


def _factor_sizes(sweep: Sweep, variants: list[str]) -> list[tuple[KeyPath, int]]:
    """Where each factor of :func:`_factors` is written in the sweep file, and its number of points."""
    sizes: list[tuple[KeyPath, int]] = [(("grid", path), len(values)) for path, values in sweep.grid.items()]
    if sweep.zip:
        path, values = next(iter(sweep.zip.items()))
        sizes.append((("zip", path), len(values)))
    if sweep.random:
        sizes.append((("random", "samples"), sweep.random.samples))
    if VARIANT not in {*sweep.grid, *sweep.zip, *(sweep.random.params if sweep.random else {})} and variants:
        sizes.insert(0, (("base",), len(variants)))
    return sizes


def load_sweep(path: str | os.PathLike) -> SweepPlan:
    """Read and validate a sweep file and its base scenario (:func:`read_sweep`); resolve every run.

    :raises ConfigError: as :func:`read_sweep`, or a point the scenario schema rejects, located at its value.
    """
    swept = read_sweep(path)
    factors = _factors(swept)
    runs: list[RunSpec] = []
    seeds = [run_seed(swept.sweep.seed, r) for r in range(swept.sweep.repetitions)]
    limit = swept.sweep.run_time_limit
    for variant, axes, scenario in _points(swept, factors):
        for repetition, seed in enumerate(seeds):
            resolved = scenario.model_copy(update={"seed": seed})
            runs.append(RunSpec(len(runs), repetition, variant, axes, seed, run_key(resolved, variant), resolved,
                                None if limit is None else limit / PS_PER_S))
    return SweepPlan(swept.sweep, swept.files.file, swept.files.base_file, swept.sweep.seed, _axes(factors), runs,
                     hashlib.sha256(swept.raw).hexdigest(), hashlib.sha256(swept.base_raw).hexdigest())


def check_sweep(swept: SweepFile) -> list[str]:
    """Validate every point of a sweep file read by :func:`read_sweep` as :func:`load_sweep` does, one at a time
    and keeping none (memory stays that of one point); returns the axes.

    :raises ConfigError: as :func:`load_sweep`.
    """
    factors = _factors(swept)
    for _ in _points(swept, factors):
        pass
    return _axes(factors)


def _axes(factors: list[list[list[_Value]]]) -> list[str]:
    return [v.path for factor in factors for v in factor[0]]


def _points(swept: SweepFile, factors: list[list[list[_Value]]]) -> Iterator[tuple[str, dict[str, Any], Scenario]]:
    """Each point of the sweep in order: its variant, its axis values and its scenario (seed still the base's)."""
    files, prepared = swept.files, swept.prepared
    first = next(iter(prepared))
    checked: set[str] = set()
    for value in (v for factor in factors for point in factor for v in point if v.path != VARIANT):
        marker = json.dumps([value.path, value.value], sort_keys=True, default=str)
        if marker not in checked:  # each value alone first, so that a bad one is reported where it is written
            checked.add(marker)
            files.scenario(_set(prepared[first], value.path, value.value), value.where, axis=value,
                           written={value.where: (value.path, value.value)})
    for point in itertools.product(*factors):
        values = [v for part in point for v in part]
        variant = next((v.value for v in values if v.path == VARIANT), first)
        varied, axes = prepared[variant], {}
        for value in values:
            if value.path != VARIANT:
                varied = _set(varied, value.path, value.value)
                axes[value.path] = value.value
        label = ", ".join([f"variant={variant}"] + [f"{k}={v}" for k, v in axes.items()])
        where = next((v.where for v in values if v.path != VARIANT), values[0].where if values else ())
        yield variant, axes, files.scenario(varied, where, f"with {label}: ")

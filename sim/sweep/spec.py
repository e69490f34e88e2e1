"""The sweep file schema (pydantic, YAML boundary only): a base scenario, axes over its key paths, repetitions.

A sweep runs a base scenario file many times. Each axis names a dotted key path of the scenario (as a
variant's ``set`` does: list items by index or by ``name``) or ``variant`` (the base file's variants):

* ``grid``: ``{path: [values]}``; the cartesian product of every listed axis;
* ``zip``: ``{path: [values]}``; the lists advance together (one length for all);
* ``random``: ``samples`` points, each drawing every ``params`` path from a distribution with the sweep seed.

The three combine as a product (grid x zip x random); ``repetitions`` repeats each point with another seed.
A sweep that would expand to more than ``max_runs`` runs is refused before any point is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from sim.core.units import BoundError, UnitError, parse_rate, parse_size, parse_time
from sim.scenario.fields import Duration, Name, Seed, Strict

_PARSERS = {"size": parse_size, "time": parse_time, "rate": parse_rate}


@dataclass(frozen=True)
class Bounds:
    """A parsed ``[low, high]`` pair: plain numbers (``kind="number"``) or quantities in base units (bytes,
    picoseconds, bytes per second)."""

    kind: Literal["number", "size", "time", "rate"]
    low: float
    high: float


def _quantity(value: Any) -> tuple[str, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number", value
    for kind, parser in _PARSERS.items():
        try:
            return kind, parser(value)
        except BoundError as exc:
            raise ValueError(str(exc)) from None
        except UnitError:
            pass
    raise ValueError(f"expected a number or a size, duration or rate with a unit, got {value!r}")


def _bounds(pair: list[Any]) -> Bounds:
    (kind, low), (kind_high, high) = _quantity(pair[0]), _quantity(pair[1])
    if kind != kind_high:
        raise ValueError(f"bounds must be of one kind, got a {kind} and a {kind_high}")
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"expected finite [low, high] with low <= high, got {pair}")
    return Bounds(kind, low, high)


Range = Annotated[list[Any], Field(min_length=2, max_length=2), AfterValidator(_bounds)]


class Distribution(Strict):
    """Where a random axis draws its values: exactly one of the keys."""

    uniform: Range | None = None
    """[low, high]: uniform; sizes and durations are rounded to whole bytes / picoseconds."""
    loguniform: Range | None = None
    """[low, high], low > 0: uniform in log space (message sizes, rates)."""
    randint: Range | None = None
    """[low, high]: an integer, both ends included."""
    choice: Annotated[list[Any], Field(min_length=1)] | None = None
    """One of the listed values, equally likely."""

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("uniform", "loguniform", "randint", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform, loguniform, randint, choice")
        if self.loguniform is not None and self.loguniform.low <= 0:
            raise ValueError("loguniform needs low > 0")
        if self.randint is not None and (self.randint.kind == "rate" or any(
                v != int(v) for v in (self.randint.low, self.randint.high))):
            raise ValueError("randint needs whole-number bounds")
        return self


class RandomAxes(Strict):
    """Random points: every path drawn from its distribution, ``samples`` times."""

    samples: Annotated[int, Field(ge=1, le=1_000_000)]
    """Number of points drawn."""
    params: Annotated[dict[str, Distribution], Field(min_length=1)]
    """Key path -> distribution."""


Values = Annotated[list[Any], Field(min_length=1)]
DEFAULT_MAX_RUNS = 10_000
"""Runs a sweep may expand to unless it raises ``max_runs``: planning one takes milliseconds and kilobytes."""
MAX_RUNS_LIMIT = 100_000_000
"""The largest ``max_runs``: the count itself stays exact and the run indexes fit every column type."""


class Sweep(Strict):
    """A parameter sweep over a base scenario file."""

    schema_version: Literal[1] = Field(alias="schema")
    """Sweep format version: 1."""
    kind: Literal["sweep"]
    """Marks the file as a sweep (scenario files have no 'kind')."""
    name: Name
    """Sweep name (default results directory)."""
    description: str = ""
    base: Annotated[str, Field(min_length=1)]
    """The scenario file swept, relative to this file."""
    seed: Seed | None = None
    """Sweep seed (default: the base scenario's): random axes and every run's seed derive from it."""
    repetitions: Annotated[int, Field(ge=1, le=100_000)] = 1
    """Runs per point, each with its own seed."""
    set: dict[str, Any] = {}
    """Key path -> value applied to every run (after the variant, before the axes)."""
    grid: dict[str, Values] = {}
    """Key path -> values: every combination is run."""
    zip: dict[str, Values] = {}
    """Key path -> values: the lists advance together."""
    random: RandomAxes | None = None
    """Random points drawn with the sweep seed."""
    run_time_limit: Annotated[Duration, Field(gt=0)] | None = None
    """Wall-clock time one run may take (e.g. '10min'); a run past it is stored as failed and the sweep goes on.
    Enforced by the serial and processes executors (a dask worker runs tasks in threads, which cannot be
    interrupted)."""
    max_runs: Annotated[int, Field(ge=1, le=MAX_RUNS_LIMIT)] = DEFAULT_MAX_RUNS
    """Most runs the sweep may expand to (points x repetitions); a larger sweep is refused before it is built."""

    @field_validator("zip")
    @classmethod
    def _same_length(cls, value: dict[str, list]) -> dict[str, list]:
        lengths = {path: len(values) for path, values in value.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError("zip lists must all have one length, got "
                             + ", ".join(f"{p}: {n}" for p, n in lengths.items()))
        return value

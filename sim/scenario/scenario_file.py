"""Load a scenario file end to end: line-aware YAML, schema validation, cross-reference checks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.yaml_reader import error_at, parse_yaml, read_yaml_file

if TYPE_CHECKING:
    from sim.scenario.schema import Scenario


def load_scenario(path: str | os.PathLike) -> tuple[Scenario, bytes]:
    """Read and validate ``path``; return the scenario and the file's bytes (for the manifest hash).

    :raises ConfigError: any problem, located as FILE:LINE:COL key.path (ConfigErrors when several).
    """
    scenario, raw, _ = load_scenario_variants(path)
    return scenario, raw


SWEEP_KIND = "sweep"
"""The top-level ``kind`` of a sweep file; a scenario file has no ``kind``."""


class SweepFileGiven(ConfigError):
    """A sweep file was given where a scenario file is expected."""


def load_scenario_variants(path: str | os.PathLike) -> tuple[Scenario, bytes, list[tuple[str, Scenario]]]:
    """Like :func:`load_scenario`, also expanding the variants (``[("base", scenario)]`` when none).

    :raises ConfigError: as :func:`load_scenario`, or a variant that does not apply.
    :raises SweepFileGiven: ``path`` is a sweep file (``kind: sweep``).
    """
    file = str(path)
    raw = read_yaml_file(path)
    data, positions = parse_yaml(raw, file)
    if data.get("kind") == SWEEP_KIND:
        line, column = positions.locate(("kind",))
        raise SweepFileGiven(f"a sweep file, not a scenario: run it with `rdmasim sweep {file}`", file=file,
                             line=line, column=column, key="kind")
    # The schema imports pydantic: a file that is not YAML is refused without it. A file the schema refuses is refused
    # without the references' checks, whose checks that ask the models import them (numpy with them).
    from sim.scenario.loader import validate
    from sim.scenario.schema import Scenario

    scenario = validate(Scenario, data, positions, file)
    from sim.scenario.refs import check_references
    from sim.scenario.variants import expand

    problems = [error_at(positions, key, reason, file) for key, reason in check_references(scenario)]
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(sorted(problems, key=lambda e: (e.line or 0, e.column or 0)))
    return scenario, raw, expand(scenario, data, positions, file)

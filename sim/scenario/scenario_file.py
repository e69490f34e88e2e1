"""Load a scenario file end to end: line-aware YAML, schema validation, cross-reference checks."""

from __future__ import annotations

import os
from pathlib import Path

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.loader import error_at, load_yaml, validate
from sim.scenario.refs import check_references
from sim.scenario.schema import Scenario


def load_scenario(path: str | os.PathLike) -> tuple[Scenario, bytes]:
    """Read and validate ``path``; return the scenario and the file's bytes (for the manifest hash).

    :raises ConfigError: any problem, located as FILE:LINE:COL key.path (ConfigErrors when several).
    """
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read scenario: {exc.strerror}", file=file) from None
    data, positions = load_yaml(path)
    scenario = validate(Scenario, data, positions, file)
    problems = [error_at(positions, key, reason, file) for key, reason in check_references(scenario)]
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(sorted(problems, key=lambda e: (e.line or 0, e.column or 0)))
    return scenario, raw

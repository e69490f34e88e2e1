"""Scenario variants: the same file run several times with some keys replaced, for side-by-side comparison.

A variant's ``set`` maps dotted paths to values. A path walks mappings by key and lists by index or by the
``name`` of an item: ``buffers.src.register`` is the ``register`` key of the buffer named ``src``.
"""

from __future__ import annotations

import copy
from typing import Any

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.loader import validate
from sim.scenario.yaml_reader import PositionMap, error_at
from sim.scenario.refs import check_references
from sim.scenario.schema import Scenario


def step(node: Any, key: str) -> Any:
    """The child of ``node`` named by one path component, or KeyError."""
    if isinstance(node, list):
        if key.isdigit() and int(key) < len(node):
            return int(key)
        for index, item in enumerate(node):
            if isinstance(item, dict) and item.get("name") == key:
                return index
        raise KeyError(f"no list item named '{key}'")
    if isinstance(node, dict):
        return key
    raise KeyError(f"'{key}' goes inside a value that is not a mapping or list")


def apply_set(data: dict, path: str, value: Any) -> dict:
    """A deep copy of ``data`` with ``path`` set to ``value`` (missing final mapping keys are created).

    :raises KeyError: a component of the path does not exist.
    """
    out = copy.deepcopy(data)
    parts = path.split(".")
    node = out
    for part in parts[:-1]:
        index = step(node, part)
        if isinstance(node, dict) and index not in node:
            raise KeyError(f"no key '{part}'")
        node = node[index]
    node[step(node, parts[-1])] = copy.deepcopy(value)
    return out


def expand(base: Scenario, data: dict, positions: PositionMap, file: str) -> list[tuple[str, Scenario]]:
    """The scenario of every variant of ``base`` (``[("base", base)]`` when it has none).

    :raises ConfigError: a path that does not exist or a value the schema rejects, located at the variant.
    """
    if not base.variants:
        return [("base", base)]
    out = []
    for i, variant in enumerate(base.variants):
        varied = {k: v for k, v in data.items() if k != "variants"}
        where = ("variants", i, "set")
        for path, value in variant.set.items():
            try:
                varied = apply_set(varied, path, value)
            except KeyError as exc:
                raise error_at(positions, (*where, path), f"variant '{variant.name}': {exc.args[0]}", file) from None
        try:
            scenario = validate(Scenario, varied, positions, file)
        except ConfigError as exc:
            errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
            raise ConfigErrors([error_at(positions, where, f"variant '{variant.name}': {e.key}: {e.reason}", file)
                                for e in errors]) from None
        problems = check_references(scenario)
        if problems:
            key, reason = problems[0]
            raise error_at(positions, where, f"variant '{variant.name}': {reason}", file)
        out.append((variant.name, scenario))
    return out

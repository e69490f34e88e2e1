"""Validation of loaded YAML against a pydantic model, every error located in the file.

Examples
--------
>>> import pydantic, tempfile, os
>>> from sim.scenario.yaml_reader import load_yaml
>>> class Nic(pydantic.BaseModel):
...     model_config = pydantic.ConfigDict(extra="forbid")
...     preset: str
>>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
...     _ = f.write("preset: cx7\\nprest: cx7\\n")
>>> data, positions = load_yaml(f.name)
>>> try:
...     validate(Nic, data, positions, "nic.yaml")
... except ConfigError as e:
...     print(e)
nic.yaml:2:1 prest: unknown key 'prest' (did you mean 'preset'?)
>>> os.unlink(f.name)
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence, Set
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import pydantic

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.yaml_reader import KeyPath, PositionMap, error_at, format_path

_Model = TypeVar("_Model", bound=pydantic.BaseModel)


def validate(model_cls: type[_Model], data: Any, positions: PositionMap, file: str) -> _Model:
    """``model_cls.model_validate(data)`` with every error located in the file.

    Errors inside a union are reduced to those of its most plausible member (the one pydantic picked by
    discriminator, else see ``_collapse``).

    :raises ConfigErrors: all problems, sorted by position.
    """
    try:
        return model_cls.model_validate(data)
    except pydantic.ValidationError as exc:
        hits = [_trace(err, data, model_cls) for err in exc.errors(include_url=False)]
        errors = {}
        for hit in _collapse(hits):
            err = _to_config_error(hit, positions, file)
            errors.setdefault((err.line, err.column, err.key, err.reason), err)
        raise ConfigErrors(sorted(errors.values(), key=lambda e: (e.line, e.column))) from None


@dataclasses.dataclass
class _Hit:
    """One pydantic error traced through the data: its key path, the union members taken, the models
    that own the last key, and the value at the path."""

    error: dict
    path: KeyPath
    branches: list[tuple[KeyPath, Any]]
    owners: list[type[pydantic.BaseModel]]
    node: Any


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _members(tp: Any, disc: Any = None) -> list[tuple[Any, tuple]]:
    """The concrete types ``tp`` may validate as, each with the union tags pydantic puts in ``loc`` for it."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        disc = next((m.discriminator for m in meta if getattr(m, "discriminator", None) is not None), disc)
        return _members(base, disc)
    if origin not in (Union, UnionType):
        return [(tp, ())]
    args = [a for a in get_args(tp) if a is not type(None)]
    if len(args) == 1:  # Optional[X] is nullable X, without a tag
        return _members(args[0], disc)
    disc = getattr(disc, "discriminator", disc)  # Field(discriminator=Discriminator(...))
    return [(t, _tags(arg, disc) or own) for arg in args for t, own in _members(arg)]


def _tags(arg: Any, disc: Any) -> tuple:
    base, *meta = get_args(arg) if get_origin(arg) is Annotated else (arg,)
    tags = tuple(m.tag for m in meta if isinstance(m, pydantic.Tag))
    if tags or not _is_model(base):
        return tags
    field = base.model_fields.get(disc) if isinstance(disc, str) else None
    if field is not None and get_origin(field.annotation) is Literal:
        return tuple(str(getattr(v, "value", v)) for v in get_args(field.annotation))
    return (base.__name__,)


def _child_types(tp: Any, key: Any) -> list:
    if _is_model(tp):
        for name, field in tp.model_fields.items():
            if key in (name, field.alias, field.validation_alias):
                return [Annotated[field.annotation, field] if field.discriminator else field.annotation]
        return []
    origin, args = get_origin(tp), get_args(tp)
    if not isinstance(origin, type) or not args:
        return []
    if issubclass(origin, Mapping):
        return [args[-1]]
    if origin is tuple and args[-1] is not Ellipsis:
        return [args[key]] if isinstance(key, int) and 0 <= key < len(args) else []
    return [args[0]] if issubclass(origin, (Sequence, Set)) and isinstance(key, int) else []


def _has(node: Any, key: Any) -> bool:
    if isinstance(node, dict):
        return key in node
    return isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)


def _trace(error: dict, data: Any, model_cls: type[pydantic.BaseModel]) -> _Hit:
    """Walk ``error["loc"]`` through the data and the types together, telling keys from union tags."""
    loc, node, path, branches, owners = error["loc"], data, (), [], []
    types: list = [model_cls]
    for i, part in enumerate(loc):
        options = [option for tp in types for option in _members(tp)]
        picked = [tp for tp, tags in options if part in tags]
        if picked:
            branches.append((path, part))
            types = picked
        elif _has(node, part) or (i == len(loc) - 1 and error["type"] == "missing"):
            owners = [tp for tp, _ in options if _is_model(tp)]
            types = [child for tp, _ in options for child in _child_types(tp, part)]
            node = node[part] if _has(node, part) else None
            path += (part,)
        else:  # a tag of a type we cannot see through (e.g. `int` in `int | str`)
            branches.append((path, part))
    return _Hit(error, path, branches, owners, node)


def _collapse(hits: list[_Hit]) -> list[_Hit]:
    """Keep, at each union, only the errors of one member: prefer one that accepted the value's shape and
    whose ``Literal`` fields (its tag) matched, then the one with the fewest errors."""
    kept: list[_Hit] = []
    unions: dict[KeyPath, list[_Hit]] = {}
    for hit in hits:
        if hit.branches:
            unions.setdefault(hit.branches[0][0], []).append(hit)
        else:
            kept.append(hit)
    for at, group in unions.items():
        members: dict[Any, list[_Hit]] = {}
        for hit in group:
            members.setdefault(hit.branches[0][1], []).append(dataclasses.replace(hit, branches=hit.branches[1:]))
        merged = _no_member_takes_shape(at, group)
        if merged is not None:
            kept.append(merged)
            continue
        best = min(members.values(), key=lambda hs: (all(h.path == at for h in hs),
                                                    any(h.error["type"] == "literal_error" for h in hs), len(hs)))
        kept += _collapse(best)
    return kept


_MISMATCH = {"int_parsing": "an integer", "float_parsing": "a number", "bool_parsing": "a boolean"}


def _expected_shapes(error: dict) -> list[str] | None:
    """What a union member expected, when it refused the value for its type or word alone."""
    if error["type"] == "literal_error":
        return re.split(r", | or ", error["ctx"]["expected"])
    shape = _EXPECTED.get(error["type"]) or _MISMATCH.get(error["type"])
    return [shape] if shape else None


def _no_member_takes_shape(at: KeyPath, group: list[_Hit]) -> _Hit | None:
    """One error naming every member's words and shapes, when each member of the union at ``at`` refused the
    value itself for its type or word (no member is more plausible than another)."""
    if not all(h.path == at and len(h.branches) == 1 for h in group):
        return None
    expected: dict[str, None] = {}
    for hit in group:
        shapes = _expected_shapes(hit.error)
        if shapes is None:
            return None
        expected.update(dict.fromkeys(shapes))
    error = {"type": "union_no_member", "input": group[0].error["input"], "ctx": {"expected": list(expected)}}
    return _Hit(error, at, [], [], group[0].node)


_KIND = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
         list: "a list", dict: "a mapping"}
_EXPECTED = {"model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
             "list_type": "a list", "int_type": "an integer", "bool_type": "a boolean", "float_type": "a number",
             "string_type": "a string"}


_BOUNDS = {"less_than_equal": ("le", "is above the maximum of"),
           "greater_than_equal": ("ge", "is below the minimum of"),
           "less_than": ("lt", "must be less than"), "greater_than": ("gt", "must be more than")}
"""pydantic's bound errors: the bound's key in the error's context, and how the reason says it."""


def _number(value) -> str:
    """A number as a reason quotes it: integers with thousands separators."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _suggest(word: str, choices: list[str], label: str) -> str:
    return _did_you_mean(word, choices) or (f" ({label}: {', '.join(choices)})" if choices else "")


def _field_names(models: list[type[pydantic.BaseModel]]) -> list[str]:
    """The keys ``models`` take as a scenario spells them: a field's alias (``from``, ``schema``), not its Python
    name (``from_``, ``schema_version``)."""
    names: dict[str, None] = {}
    for model in models:
        for name, field in model.model_fields.items():
            spelled = next((n for n in (field.validation_alias, field.alias) if isinstance(n, str)), name)
            names[spelled] = None
    return list(names)


def _to_config_error(hit: _Hit, positions: PositionMap, file: str) -> ConfigError:
    kind, path, ctx = hit.error["type"], hit.path, hit.error.get("ctx") or {}
    if kind == "missing" and path:
        return error_at(positions, path[:-1], f"missing required key {path[-1]!r}", file)
    if kind == "extra_forbidden" and path:
        line, column = positions.locate_key(path)
        reason = f"unknown key {path[-1]!r}" + _suggest(str(path[-1]), _field_names(hit.owners), "valid keys")
        return ConfigError(reason, file=file, line=line, column=column, key=format_path(path))
    disc = re.fullmatch(r"'(.*)'", str(ctx.get("discriminator", "")))
    if disc and kind == "union_tag_not_found":
        return error_at(positions, path, f"missing required key {disc[1]!r}", file)
    if disc and kind == "union_tag_invalid":
        expected = re.findall(r"'([^']*)'", ctx["expected_tags"])
        reason = f"unknown {disc[1]} {ctx['tag']!r}" + _suggest(str(ctx["tag"]), expected, "expected one of")
        return error_at(positions, path + (disc[1],) if _has(hit.node, disc[1]) else path, reason, file)
    if kind == "union_no_member":
        *first, last = ctx["expected"]
        value = hit.error["input"]
        reason = f"expected {', '.join(first) + ' or ' if first else ''}{last}, not " + (
            repr(value) + _did_you_mean(value, [w[1:-1] for w in ctx["expected"] if w[0] == "'"])
            if isinstance(value, str) else _KIND.get(type(value), "a value"))
    elif kind == "too_short":
        reason = f"needs at least {ctx['min_length']} item(s), got {ctx['actual_length']}"
    elif kind in _EXPECTED:
        reason = f"expected {_EXPECTED[kind]}, not {_KIND.get(type(hit.error['input']), 'a value')}"
    elif kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        bound, says = _BOUNDS[kind]
        reason = f"{_number(hit.error['input'])} {says} {_number(ctx[bound])}"
    else:
        reason = re.sub(r"^(Value error|Assertion failed), ", "", hit.error["msg"])
        if kind == "literal_error" and isinstance(hit.error["input"], str):
            words = [w[1:-1] for w in _expected_shapes(hit.error) if w[:1] == "'"]
            reason += _did_you_mean(hit.error["input"], words)
    return error_at(positions, path, reason, file)

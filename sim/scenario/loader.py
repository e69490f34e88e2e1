"""Line-aware YAML loading: a file becomes plain data plus positions, then a validated pydantic model.

Every problem is raised as :class:`~sim.core.errors.ConfigError`, rendered ``FILE:LINE:COL key.path: reason``.
Values follow the YAML 1.2 core schema (mappings, lists, strings, integers, floats, booleans, null); timestamps
stay strings and any other tag is refused, so no object is ever built from the file. Mapping keys are strings
or integers. Anchors, aliases and ``<<`` merges work; a value reached through an alias is located at its
anchor.

Examples
--------
>>> import pydantic, tempfile, os
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
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence, Set
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import pydantic
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from sim.core.errors import ConfigError, ConfigErrors
from sim.core.units import UnitError, format_size, parse_size

MAX_DEPTH = 50
"""Deepest nesting of mappings and lists (a scenario needs five)."""
MAX_NODES = 100_000
"""Most values (keys included) in a file, counted while it is parsed and again as aliases are expanded: a
scenario of 1024 nodes with every key of every node set has 86,053 (in 700 KB)."""
SIZE_LIMIT_ENV = "RDMASIM_MAX_YAML_SIZE"
"""Environment variable that raises (or lowers) the file-size limit, e.g. ``RDMASIM_MAX_YAML_SIZE=16MiB``."""
DEFAULT_SIZE_LIMIT = 2**20
"""1 MiB: room for 1024 nodes with every key set, five hundred times the largest shipped scenario."""

KeyPath = tuple[str | int, ...]
Position = tuple[int, int]

_STD = "tag:yaml.org,2002:"
_Model = TypeVar("_Model", bound=pydantic.BaseModel)


@dataclasses.dataclass
class PositionMap:
    """1-based ``(line, column)`` of every key and value of a loaded file, by key path.

    ``values[("nodes", 0, "nic")]`` is where the value of ``nodes[0].nic`` starts; ``keys`` holds the position
    of the key token of each mapping entry (list items have none); ``aliases`` maps the path of an alias to
    the path of its anchor, so that places inside an alias are found in the anchor's text.
    """

    values: dict[KeyPath, Position] = dataclasses.field(default_factory=dict)
    keys: dict[KeyPath, Position] = dataclasses.field(default_factory=dict)
    aliases: dict[KeyPath, KeyPath] = dataclasses.field(default_factory=dict)

    def locate(self, path: Sequence[str | int]) -> Position:
        """Position of the value at ``path``, else of its longest recorded prefix (``(1, 1)`` at worst)."""
        path = self._through_aliases(tuple(path))
        while path and path not in self.values:
            path = path[:-1]
        return self.values.get(path, (1, 1))

    def locate_key(self, path: Sequence[str | int]) -> Position:
        """Position of the key token at ``path``, else :meth:`locate`."""
        path = tuple(path)
        return self.keys.get(path) or self.keys.get(self._through_aliases(path)) or self.locate(path)

    def _through_aliases(self, path: KeyPath) -> KeyPath:
        # Each step leaves a shorter suffix to resolve (anchors are never under an alias), so this ends.
        while prefix := next((path[:n] for n in range(len(path), 0, -1) if path[:n] in self.aliases), None):
            path = self.aliases[prefix] + path[len(prefix):]
        return path


def format_path(path: Sequence[str | int]) -> str:
    """Render a key path as users write it: ``("nodes", 0, "nic")`` -> ``nodes[0].nic``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def error_at(positions: PositionMap, path: Sequence[str | int], reason: str, file: str) -> ConfigError:
    """A :class:`ConfigError` located at the value under ``path`` (for checks made after validation)."""
    line, column = positions.locate(path)
    return ConfigError(reason, file=file, line=line, column=column, key=format_path(path))


# --------------------------------------------------------------------------------------------------- YAML


def load_yaml(path: str | os.PathLike) -> tuple[Any, PositionMap]:
    """Read a YAML file whose top level is a mapping; return plain dicts/lists/scalars and their positions.

    :raises ConfigError: as :func:`read_yaml_file` and :func:`parse_yaml`.
    """
    return parse_yaml(read_yaml_file(path), os.fsdecode(path))


def size_limit() -> int:
    """The largest YAML file read, in bytes: ``$RDMASIM_MAX_YAML_SIZE`` (a size such as '16MiB') or 1 MiB.

    :raises ConfigError: the variable is not a size.
    """
    text = os.environ.get(SIZE_LIMIT_ENV)
    if text is None:
        return DEFAULT_SIZE_LIMIT
    try:
        return parse_size(text)
    except UnitError as exc:
        raise ConfigError(str(exc), file=f"${SIZE_LIMIT_ENV}") from None


_FILE_KINDS = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device",
               stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}


def _check_regular(mode: int, size: int, limit: int, file: str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS.items() if test(mode)), "a special file")
        raise ConfigError(f"{kind}, not a regular file; rdmasim reads YAML only from regular files", file=file)
    if size > limit:
        raise ConfigError(f"file is {size:,} bytes, above the {format_size(limit)} limit for YAML files "
                          f"(raise it with {SIZE_LIMIT_ENV}, e.g. {SIZE_LIMIT_ENV}=16MiB)", file=file)


def read_yaml_file(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file of at most :func:`size_limit` bytes; anything else is refused unread.

    The path is checked with ``stat`` before it is opened (a FIFO or device is never opened) and again on the
    open descriptor, which is opened non-blocking (a file replaced by a FIFO in between cannot block).

    :raises ConfigError: the file is missing or unreadable, not a regular file, or larger than the limit.
    """
    file = os.fsdecode(path)
    limit = size_limit()
    try:
        info = os.stat(path)
        _check_regular(info.st_mode, info.st_size, limit, file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            _check_regular(info.st_mode, info.st_size, limit, file)
            raw = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=file) from None
    _check_regular(stat.S_IFREG, len(raw), limit, file)  # the file grew while it was read
    return raw


def parse_yaml(raw: bytes, file: str) -> tuple[Any, PositionMap]:
    """Parse the bytes of a YAML file (named ``file`` in errors) as :func:`load_yaml` does.

    :raises ConfigError: invalid UTF-8, YAML syntax, a non-standard tag, a duplicate key, an empty file or a
        top level that is not a mapping, nesting deeper than ``MAX_DEPTH`` or more than ``MAX_NODES`` values
        (counted while parsing, and again once aliases are expanded).
    """
    text = _decode(raw, file)
    yaml = YAML(typ="rt")
    try:
        _check_events(yaml.parse(text), file)
        root = yaml.compose(text)
    except ReaderError as exc:
        line, column = _line_col(text, exc.position)
        raise ConfigError(f"unacceptable character #x{exc.character:04x}: {exc.reason}",
                          file=file, line=line, column=column) from None
    except MarkedYAMLError as exc:
        raise _syntax_error(exc, file) from None
    except YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file, line=1, column=1) from None
    if root is None:
        raise ConfigError("file is empty; expected a mapping at the top level", file=file, line=1, column=1)
    if not isinstance(root, MappingNode):
        kind = "list" if isinstance(root, SequenceNode) else "scalar"
        raise _error(file, root, (), f"the top level must be a mapping, not a {kind}")
    builder = _Builder(file)
    return builder.value(root, (), 1, record=True), builder.positions


def _decode(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = raw[:exc.start].decode("utf-8")
        line, column = _line_col(prefix, len(prefix))
        raise ConfigError(f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                          file=file, line=line, column=column) from None


def _line_col(text: str, index: int) -> Position:
    """1-based line and column of character ``index`` in ``text``."""
    index = min(index, len(text))
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def _check_events(events, file: str) -> None:
    """Refuse deep nesting and too many values from the event stream, before anything is composed."""
    depth = count = 0
    for event in events:
        if isinstance(event, (CollectionStartEvent, ScalarEvent, AliasEvent)):
            count += 1
            if count > MAX_NODES:
                raise _event_error(event, f"more than {MAX_NODES:,} values", file)
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _event_error(event, f"nesting deeper than {MAX_DEPTH} levels", file)
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def _event_error(event, reason: str, file: str) -> ConfigError:
    mark = event.start_mark
    return ConfigError(reason, file=file, line=mark.line + 1, column=mark.column + 1)


def _syntax_error(exc: MarkedYAMLError, file: str) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    reason = exc.problem or exc.context or "invalid YAML"
    if exc.problem and exc.context:
        where = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        reason = f"{exc.context}{where}: {exc.problem}"
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return ConfigError(reason, file=file, line=line, column=column)


def _error(file: str, node: Node, path: KeyPath, reason: str) -> ConfigError:
    mark = node.start_mark
    return ConfigError(reason, file=file, line=mark.line + 1, column=mark.column + 1, key=format_path(path))


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


def _int(text: str) -> int:
    body = text.replace("_", "").lstrip("+-")
    base = {"0b": 2, "0o": 8, "0x": 16}.get(body[:2].lower(), 10)
    value = int(body if base == 10 else body[2:], base)
    return -value if text.startswith("-") else value


def _float(text: str) -> float:
    text = text.replace("_", "").lower()
    return {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}.get(text) or float(text)


_SCALARS = {_STD + "str": str, _STD + "timestamp": str, _STD + "null": lambda _: None,
            _STD + "bool": _bool, _STD + "int": _int, _STD + "float": _float}


class _Builder:
    """Turns composed nodes into plain values, counting them and recording where each one is."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.positions = PositionMap()
        self.count = 0
        self.anchors: dict[int, KeyPath | None] = {}  # anchored node -> path where it was recorded
        self.open: set[int] = set()  # collections being built, to catch an alias to an ancestor

    def value(self, node: Node, path: KeyPath, depth: int, record: bool) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _error(self.file, node, path, f"more than {MAX_NODES:,} values once aliases are expanded")
        if depth > MAX_DEPTH:
            raise _error(self.file, node, path, f"nesting deeper than {MAX_DEPTH} levels (through aliases)")
        if id(node) in self.open:
            raise _error(self.file, node, path, "an alias refers to a node that contains it")
        if record:
            self.positions.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if node.anchor is not None:
            anchor = self.anchors.setdefault(id(node), path if record else None)
            if anchor != path:  # an alias: what lies under it is recorded under the anchor
                if record and anchor is not None:
                    self.positions.aliases[path] = anchor
                record = False
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if node.tag != _STD + ("map" if isinstance(node, MappingNode) else "seq"):
            raise self.bad_tag(node, path)
        self.open.add(id(node))
        if isinstance(node, SequenceNode):
            out = [self.value(item, path + (i,), depth + 1, record) for i, item in enumerate(node.value)]
        else:
            out = self.mapping(node, path, depth, record)
        self.open.discard(id(node))
        return out

    def mapping(self, node: MappingNode, path: KeyPath, depth: int, record: bool) -> dict:
        out: dict = {}
        merges = []
        for key_node, value_node in node.value:
            if key_node.tag == _STD + "merge":
                merges.append(value_node)
                continue
            key = self.key(key_node, path)
            if key in out:
                raise _error(self.file, key_node, path + (key,), f"duplicate key {key!r}")
            if record:
                self.positions.keys[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.value(value_node, path + (key,), depth + 1, record)
        for merge in merges:  # explicit keys win, then earlier merged mappings
            merged = self.value(merge, path, depth, record=False)
            for source in merged if isinstance(merged, list) else [merged]:
                if not isinstance(source, dict):
                    raise _error(self.file, merge, path, "'<<' must merge a mapping or a list of mappings")
                for key, value in source.items():
                    out.setdefault(key, value)
        return out

    def key(self, node: Node, path: KeyPath) -> str | int:
        key = self.scalar(node, path) if isinstance(node, ScalarNode) else None
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise _error(self.file, node, path, "mapping keys must be strings or integers")
        return key

    def scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        convert = _SCALARS.get(node.tag)
        if convert is None:
            raise self.bad_tag(node, path)
        try:
            return convert(node.value)
        except ValueError:  # e.g. `!!int abc` or a plain `-_`: keep the text, the schema judges it
            return node.value

    def bad_tag(self, node: Node, path: KeyPath) -> ConfigError:
        tag = node.tag.replace(_STD, "!!", 1)
        return _error(self.file, node, path, f"tag '{tag}' is not allowed; only plain YAML values are")


# ------------------------------------------------------------------------------------------- validation


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
        best = min(members.values(), key=lambda hs: (all(h.path == at for h in hs),
                                                    any(h.error["type"] == "literal_error" for h in hs), len(hs)))
        kept += _collapse(best)
    return kept


_KIND = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
         list: "a list", dict: "a mapping"}
_EXPECTED = {"model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
             "list_type": "a list", "int_type": "an integer", "bool_type": "a boolean", "float_type": "a number",
             "string_type": "a string"}


def _suggest(word: str, choices: list[str], label: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" ({label}: {', '.join(choices)})" if choices else ""


def _field_names(models: list[type[pydantic.BaseModel]]) -> list[str]:
    names: dict[str, None] = {}
    for model in models:
        for name, field in model.model_fields.items():
            aliases = (name, field.alias, field.validation_alias)
            names.update(dict.fromkeys(n for n in aliases if isinstance(n, str)))
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
    if kind == "too_short":
        reason = f"needs at least {ctx['min_length']} item(s), got {ctx['actual_length']}"
    elif kind in _EXPECTED:
        reason = f"expected {_EXPECTED[kind]}, not {_KIND.get(type(hit.error['input']), 'a value')}"
    else:
        reason = re.sub(r"^(Value error|Assertion failed), ", "", hit.error["msg"])
    return error_at(positions, path, reason, file)

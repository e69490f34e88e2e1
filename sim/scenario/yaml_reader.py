"""Line-aware YAML reading: a file becomes plain data plus the position of every key and value.

Every problem is raised as :class:`~sim.core.errors.ConfigError`, rendered ``FILE:LINE:COL key.path: reason``.
Values follow the YAML 1.2 core schema (mappings, lists, strings, integers, floats, booleans, null); timestamps
stay strings and any other tag is refused, so no object is ever built from the file. Mapping keys are strings
or integers. Anchors, aliases and ``<<`` merges work; a value reached through an alias is located at its
anchor. Only regular files under a size limit are read, and the document's size is bounded while it is parsed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
from collections.abc import Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.parser import Parser
from ruamel.yaml.reader import ReaderError

from sim.core.errors import ConfigError
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


def _check_regular(mode: int, size: int, limit: int, file: str, adjustable: bool) -> None:
    """Refuse a file that is not regular or is larger than ``limit`` (``adjustable``: by the variable)."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS.items() if test(mode)), "a special file")
        raise ConfigError(f"{kind}, not a regular file; rdmasim reads YAML only from regular files", file=file)
    if size > limit:
        hint = f" (raise it with {SIZE_LIMIT_ENV}, e.g. {SIZE_LIMIT_ENV}=16MiB)" if adjustable else ""
        raise ConfigError(f"file is {size:,} bytes, above the {format_size(limit)} limit for "
                          f"{'YAML files' if adjustable else 'this file'}{hint}", file=file)


def read_yaml_file(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default :func:`size_limit`); anything else is
    refused unread.

    The path is checked with ``stat`` before it is opened (a FIFO or device is never opened) and again on the
    open descriptor, which is opened non-blocking (a file replaced by a FIFO in between cannot block).

    :raises ConfigError: the file is missing or unreadable, not a regular file, or larger than the limit.
    """
    file = os.fsdecode(path)
    adjustable, limit = limit is None, size_limit() if limit is None else limit
    try:
        info = os.stat(path)
        _check_regular(info.st_mode, info.st_size, limit, file, adjustable)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            _check_regular(info.st_mode, info.st_size, limit, file, adjustable)
            raw = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=file) from None
    _check_regular(stat.S_IFREG, len(raw), limit, file, adjustable)  # the file grew while it was read
    return raw


def parse_yaml(raw: bytes, file: str) -> tuple[Any, PositionMap]:
    """Parse the bytes of a YAML file (named ``file`` in errors) as :func:`load_yaml` does.

    :raises ConfigError: invalid UTF-8, YAML syntax, a non-standard tag, a duplicate key or anchor, an empty file or a
        top level that is not a mapping, nesting deeper than ``MAX_DEPTH`` or more than ``MAX_NODES`` values
        (counted while parsing, and again once aliases are expanded).
    """
    text = _decode(raw, file)
    yaml = YAML(typ="safe", pure=True)  # the round-trip scanner gathers comments in quadratic time
    yaml.Parser = _CheckedParser
    yaml.limits = _Limits(file)
    try:
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


class _Limits:
    """Deep nesting, too many values and an anchor defined twice, refused event by event as the document is
    composed (ruamel would only warn of the anchor, naming no file, and an alias after the second takes it)."""

    def __init__(self, file: str) -> None:
        self.file, self.depth, self.count = file, 0, 0
        self.anchors: dict[str, int] = {}

    def see(self, event) -> None:
        """:raises ConfigError: ``event`` crosses a limit."""
        anchor = getattr(event, "anchor", None) if not isinstance(event, AliasEvent) else None
        if anchor is not None:
            if anchor in self.anchors:
                raise _event_error(event, f"anchor '&{anchor}' is defined again (first at line "
                                          f"{self.anchors[anchor]}); give each anchor its own name", self.file)
            self.anchors[anchor] = event.start_mark.line + 1
        if isinstance(event, (CollectionStartEvent, ScalarEvent, AliasEvent)):
            self.count += 1
            if self.count > MAX_NODES:
                raise _event_error(event, f"more than {MAX_NODES:,} values", self.file)
        if isinstance(event, CollectionStartEvent):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _event_error(event, f"nesting deeper than {MAX_DEPTH} levels", self.file)
        elif isinstance(event, CollectionEndEvent):
            self.depth -= 1


class _CheckedParser(Parser):
    """ruamel's parser, each event it makes seen once by the loader's :class:`_Limits` as soon as it is made, before
    the composer looks at it (one pass: nothing past a limit is composed)."""

    _seen = None

    def _see(self, event):
        if event is not None and event is not self._seen:
            self._seen = event
            self.loader.limits.see(event)
        return event

    def check_event(self, *choices) -> bool:
        found = super().check_event(*choices)
        self._see(self.current_event)
        return found

    def peek_event(self):
        return self._see(super().peek_event())

    def get_event(self):
        return self._see(super().get_event())


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

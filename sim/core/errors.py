"""The exception hierarchy: one root, one subclass per kind of broken rule.

Every message says which rule was broken and where, so a user can act on it without a traceback.
"""

from __future__ import annotations

import errno as _errno


class SimError(Exception):
    """Root of every error rdmasim raises on purpose."""


class ConfigError(SimError):
    """A scenario file is invalid.

    Carries the file, 1-based line and column, and the dotted key path of the offending value; ``str()``
    renders ``FILE:LINE:COL key.path: reason`` like a compiler diagnostic. Its ``args`` rebuild it (simpy
    re-raises a process's exception as ``type(e)(*e.args)``).
    """

    def __init__(self, reason: str, file: str = "<scenario>", line: int | None = None,
                 column: int | None = None, key: str = "") -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.column = column
        self.key = key
        super().__init__(reason, file, line, column, key)

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where} {self.key}: {self.reason}" if self.key else f"{where}: {self.reason}"


class ConfigErrors(ConfigError):
    """Several scenario problems found in one pass; ``str()`` lists one per line."""

    def __init__(self, errors: list[ConfigError]) -> None:
        first = errors[0]
        super().__init__(first.reason, file=first.file, line=first.line, column=first.column, key=first.key)
        self.errors = errors
        self.args = (errors,)

    def render(self) -> str:  # noqa: D102 - see ConfigError.render
        return "\n".join(ConfigError.render(e) for e in self.errors)


class VerbsError(SimError):
    """A verbs call failed the way rdma-core reports it: ``errno`` holds the errno name (``"EINVAL"``).

    ``rule`` names the check that failed, e.g. ``"REMOTE_WRITE requires LOCAL_WRITE"``. Its ``args`` rebuild it
    (simpy re-raises a process's exception as ``type(e)(*e.args)``).
    """

    def __init__(self, errno: str, rule: str, call: str = "") -> None:
        if not hasattr(_errno, errno) and errno not in _EXTRA_ERRNOS:
            raise ValueError(f"unknown errno name {errno!r}")
        self.errno = errno
        self.rule = rule
        self.call = call
        super().__init__(errno, rule, call)

    def __str__(self) -> str:
        prefix = f"{self.call}: " if self.call else ""
        return f"{prefix}{self.errno}: {self.rule}"

    @property
    def errno_value(self) -> int:
        """The numeric errno on Linux (``ENOTSUPP`` = 524 is kernel-internal)."""
        return getattr(_errno, self.errno, None) or _EXTRA_ERRNOS[self.errno]


_EXTRA_ERRNOS = {"ENOTSUPP": 524}


class ProtocolError(SimError):
    """An illegal dma-buf or verbs call sequence (lock not held, map after revoke, use after free...)."""


class InvariantViolation(SimError):
    """The simulated hardware did something unsafe: DMA through a stale mapping, a pinned page moved, bytes lost."""


class DeadlockError(SimError):
    """A call would self-deadlock (taking a lock already held) or the simulation stopped with waiters left."""


class UnboundedWait(SimError):
    """A task would wait without bound: a callback or a wait that never returns (a blocked exporter op, an importer
    that never unmaps after promising revocation); the message names who waits, for whom and since when."""

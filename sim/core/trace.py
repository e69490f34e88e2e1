"""Trace recording: protocol calls as slices, invalidations and faults as instants, one track per component.

The recorder keeps plain tuples while the simulation runs and renders them at the end, either as the
Chrome/Perfetto JSON trace format (open in ui.perfetto.dev or chrome://tracing) or as a readable table.
Event names are past tense (``MappingInvalidated``) for instants and call names (``dma_buf_map_attachment``)
for slices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One recorded event: a slice (``dur_ps`` set) or an instant (``dur_ps`` None)."""

    time_ps: int
    component: str
    name: str
    dur_ps: int | None = None
    args: dict[str, Any] = field(default_factory=dict)


class NullTrace:
    """A recorder that records nothing: the default, so tracing costs one attribute check when off."""

    enabled = False

    def instant(self, component: str, name: str, **args: Any) -> None:
        """Ignore an instant event."""

    def slice(self, component: str, name: str, start_ps: int, end_ps: int, **args: Any) -> None:
        """Ignore a slice."""


class TraceRecorder(NullTrace):
    """Collects events stamped with the environment's clock."""

    enabled = True

    def __init__(self, env: Any) -> None:
        self._env = env
        self.events: list[TraceEvent] = []

    def instant(self, component: str, name: str, **args: Any) -> None:
        """Record ``name`` happening now on ``component``'s track."""
        self.events.append(TraceEvent(self._env.now, component, name, None, args))

    def slice(self, component: str, name: str, start_ps: int, end_ps: int, **args: Any) -> None:
        """Record ``name`` busy on ``component`` from ``start_ps`` to ``end_ps``."""
        self.events.append(TraceEvent(start_ps, component, name, end_ps - start_ps, args))

    def to_chrome(self) -> dict[str, Any]:
        """The trace in Chrome's JSON format (timestamps in microseconds), one thread per component."""
        tracks: dict[str, int] = {}
        out: list[dict[str, Any]] = []
        for event in sorted(self.events, key=lambda e: (e.time_ps, e.component)):
            tid = tracks.setdefault(event.component, len(tracks) + 1)
            record: dict[str, Any] = {"name": event.name, "pid": 1, "tid": tid, "ts": event.time_ps / 1e6,
                                      "args": _jsonable(event.args)}
            if event.dur_ps is None:
                record.update(ph="i", s="t")
            else:
                record.update(ph="X", dur=event.dur_ps / 1e6)
            out.append(record)
        meta = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
                for name, tid in tracks.items()]
        return {"traceEvents": meta + out, "displayTimeUnit": "ns"}

    def write_chrome(self, path: str) -> None:
        """Write :meth:`to_chrome` to ``path``."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_chrome(), handle, indent=None, separators=(",", ":"))


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for k, v in args.items()}

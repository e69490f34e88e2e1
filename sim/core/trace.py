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

    def instant(self, component: str, name: str, *, at_ps: int | None = None, **args: Any) -> None:
        """Ignore an instant event."""

    def slice(self, component: str, name: str, start_ps: int, end_ps: int, **args: Any) -> None:
        """Ignore a slice."""

    def begin(self, component: str, name: str, start_ps: int, **args: Any) -> int:
        """Ignore the start of a slice."""
        return -1

    def end(self, handle: int, end_ps: int) -> None:
        """Ignore the end of a slice."""


BYTES_PER_OPERATION = 1_600
"""trace.json bytes per simulated work request, to estimate a trace before it is recorded: 15 to 19 events of
about 87 bytes each (1.3 KB a WRITE of scenarios/pin_vs_dmabuf.yaml, 1.6 KB one of scenarios/quickstart.yaml)."""

TraceWindow = tuple[int, int]
"""[start, end) in simulated picoseconds: what a windowed trace keeps."""


class TraceRecorder(NullTrace):
    """Collects events stamped with the environment's clock; with a ``window``, only the instants inside it and
    the slices that overlap it (a protocol call opened with :meth:`begin` is always kept), so a trace of a long
    run holds what the window shows."""

    enabled = True

    def __init__(self, env: Any, window: TraceWindow | None = None) -> None:
        self._env = env
        self.events: list[TraceEvent] = []
        self.window = window

    def instant(self, component: str, name: str, *, at_ps: int | None = None, **args: Any) -> None:
        """Record ``name`` happening on ``component``'s track now (or at ``at_ps``)."""
        at = self._env.now if at_ps is None else at_ps
        if self.window is None or self.window[0] <= at < self.window[1]:
            self.events.append(TraceEvent(at, component, name, None, args))

    def slice(self, component: str, name: str, start_ps: int, end_ps: int, **args: Any) -> None:
        """Record ``name`` busy on ``component`` from ``start_ps`` to ``end_ps``."""
        if self.window is None or (start_ps < self.window[1] and end_ps > self.window[0]):
            self.events.append(TraceEvent(start_ps, component, name, end_ps - start_ps, args))

    def begin(self, component: str, name: str, start_ps: int, **args: Any) -> int:
        """Open a slice (so events inside it are recorded after it); :meth:`end` closes it."""
        self.events.append(TraceEvent(start_ps, component, name, 0, args))
        return len(self.events) - 1

    def end(self, handle: int, end_ps: int) -> None:
        """Close the slice opened as ``handle`` at ``end_ps``."""
        event = self.events[handle]
        self.events[handle] = TraceEvent(event.time_ps, event.component, event.name, end_ps - event.time_ps,
                                         event.args)

    def to_chrome(self, pid: int = 1, process: str = "rdmasim") -> list[dict[str, Any]]:
        """The events in Chrome's JSON trace format (timestamps in microseconds), one thread per component,
        all under process ``pid`` named ``process``."""
        tracks: dict[str, int] = {}
        out: list[dict[str, Any]] = []
        for event in sorted(self.events, key=lambda e: (e.time_ps, e.component)):
            tid = tracks.setdefault(event.component, len(tracks) + 1)
            record: dict[str, Any] = {"name": event.name, "pid": pid, "tid": tid, "ts": event.time_ps / 1e6,
                                      "args": _jsonable(event.args)}
            if event.dur_ps is None:
                record.update(ph="i", s="t")
            else:
                record.update(ph="X", dur=event.dur_ps / 1e6)
            out.append(record)
        meta = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
                 for name, tid in tracks.items()]
        return meta + out


def write_chrome_trace(path: str, recorders: list[tuple[str, TraceRecorder]]) -> None:
    """Write one Chrome/Perfetto trace file holding each ``(process name, recorder)`` as its own process."""
    events: list[dict[str, Any]] = []
    for pid, (process, recorder) in enumerate(recorders, start=1):
        events += recorder.to_chrome(pid, process)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, handle, separators=(",", ":"))


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for k, v in args.items()}

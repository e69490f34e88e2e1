"""The protocol timeline of a traced run, cut into sections: what ``rdmasim explain`` prints and draws.

One section per registered buffer, then the first memory event (pressure, a managed job's faults, a peer-memory
reclaim) with everything it set off until the NIC's translation was restored; when no memory event came, the
first accesses that faulted. Data-path slices (server busy times, work requests) stay in the trace file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.engine.build import Registration, Testbed
from sim.core.trace import TraceEvent

LOCK_EVENTS = ("LockAcquired", "LockReleased")
DATA_PATH = ("busy", "RDMA_WRITE", "RDMA_READ")
"""Per-resource and per-work-request slices: in the trace file, not in the protocol timeline."""
DISRUPTIONS = ("gpu_memory_pressure", "managed_memory_pressure", "PeerMemoryReclaimed", "vfio_pci_dma_buf_move",
               "FaultInjector.invalidate_and_hold")
LOSSES = ("PeerMemoryReclaimed", "KeyInvalidated", "PageFaulted", "AccessStalled", "RnrNakSent")
"""Events that say a NIC's translation is gone (besides a zap of a live mapping)."""
ACCESS_WAITS = {"AccessStalled": "until_ps", "RnrNakSent": "retry_at_ps"}
"""NIC accesses that found no valid translation, and the argument saying until when they wait."""
WINDOW_PS = 5_000_000_000
"""How long after the first disruption (or the first fault) to keep listing events when nothing restores the
mapping (5 ms)."""


@dataclass(frozen=True)
class Entry:
    """One line of the timeline: an event, or a run of identical instants on one track collapsed into one."""

    event: TraceEvent
    count: int = 1
    last_ps: int | None = None
    """Time of the last of ``count`` repeats (None for a single event)."""

    @property
    def queued(self) -> bool:
        """Several accesses waited for the same fault (the same ready time): they queued behind the first."""
        return self.count > 1 and self.event.name in ACCESS_WAITS


@dataclass(frozen=True)
class Section:
    """A titled part of the timeline."""

    title: str
    entries: list[Entry]
    registration: Registration | None = None
    """The buffer a registration section registers."""
    note: str = ""
    """A closing remark (why the section ends where it does)."""


def lost_translation(event: TraceEvent) -> bool:
    """Whether ``event`` took a NIC's translation away: a zap of a live mapping, a peer-memory reclaim, a key
    invalidated by a revocation, or an access that found none."""
    if event.name == "MappingInvalidated":
        return bool(event.args["live_mappings"])
    return event.name in LOSSES


def protocol_events(events: list[TraceEvent]) -> list[TraceEvent]:
    """The protocol events among traced ``events``, in time order (ties keep their causal order); a fence
    wait is placed where it ends, carrying ``waited_ps``."""
    out = []
    for event in events:
        if event.name in DATA_PATH:
            continue
        if event.name == "FencesWaited":
            end = max(event.args["until_ps"], event.time_ps)
            args = {k: v for k, v in event.args.items() if k != "until_ps"} | {"waited_ps": end - event.time_ps}
            event = replace(event, time_ps=end, args=args)
        out.append(event)
    return sorted(out, key=lambda e: e.time_ps)


def collapse(events: list[TraceEvent]) -> list[Entry]:
    """Runs of instants with the same name, track and arguments become one entry with a count; the same
    instant recorded by two layers at once (the allocator and the exporter) becomes one, with both's arguments."""
    out: list[Entry] = []
    for event in events:
        last = out[-1].event if out else None
        if not (last is not None and event.dur_ps is None and last.dur_ps is None and event.name == last.name
                and event.component == last.component and event.name not in LOCK_EVENTS):
            out.append(Entry(event))
        elif event.args == last.args:
            out[-1] = Entry(last, out[-1].count + 1, event.time_ps)
        elif event.time_ps == last.time_ps and out[-1].count == 1:
            out[-1] = Entry(replace(last, args=last.args | event.args))
        else:
            out.append(Entry(event))
    return out


def sections(bed: Testbed) -> list[Section]:
    """The registration sections (in registration order) and the run's section of a traced testbed: each
    registration's section holds what its calls recorded."""
    trace = bed.env.trace.events
    regs = list(bed.registrations.values())
    ends = [r.first_event for r in regs[1:]] + [bed.setup_events]
    out = [Section(f"Registration of '{reg.buffer}': {reg.mode} on {reg.node}.{reg.location}",
                   collapse(protocol_events(trace[reg.first_event:end])), reg) for reg, end in zip(regs, ends)]
    return out + [_run_section(protocol_events(trace[bed.setup_events:]))]


def _run_section(run: list[TraceEvent]) -> Section:
    first = next((e for e in run if e.name in DISRUPTIONS), None)
    if first is None:
        fault = next((e for e in run if e.name in ACCESS_WAITS or e.name == "PageFaulted"), None)
        if fault is None:
            return Section("No memory event disturbed the registrations, and no access faulted.", [])
        return Section(f"No memory event came; the first access that faulted, at {fault.time_ps / 1e6:.3f} µs",
                       collapse([e for e in run if fault.time_ps <= e.time_ps <= fault.time_ps + WINDOW_PS]))
    restored = next((e for e in run if e.time_ps > first.time_ps and e.name == "MappingRestored"), None)
    end = restored.time_ps if restored else first.time_ps + WINDOW_PS
    shown = [e for e in run if first.time_ps <= e.time_ps <= end]
    lost = "the translation was not restored in them" if any(map(lost_translation, shown)) else \
        "no translation was lost in them"
    note = "" if restored else f"(the first {WINDOW_PS / 1e9:.0f} ms; {lost})"
    return Section(f"First memory event at {first.time_ps / 1e6:.3f} µs: {first.name} on {first.component}",
                   collapse(shown), note=note)

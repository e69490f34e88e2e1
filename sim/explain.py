"""``rdmasim explain``: the protocol timeline of a run as a readable sequence.

Two sections: the registration of every buffer, and the first eviction (or other memory event) with the
accesses it disturbed, up to the moment the NIC's translation was restored. Each line gives the simulated time,
the acting component, the locks it holds, and the call (as a nested slice) or the event (past tense).
"""

from __future__ import annotations

from sim.core.trace import TraceEvent
from sim.tables import RunResult

LOCK_EVENTS = ("LockAcquired", "LockReleased")
DATA_PATH = ("busy", "RDMA_WRITE", "RDMA_READ")
"""Per-resource and per-work-request slices: in the trace file, not in the protocol timeline."""
DISRUPTIONS = ("gpu_memory_pressure", "managed_memory_pressure", "PeerMemoryReclaimed")
WINDOW_PS = 5_000_000_000
"""How long after the first disruption to keep listing events when nothing restores the mapping (5 ms)."""


def _describe(event: TraceEvent) -> str:
    args = ", ".join(f"{k}={v}" for k, v in event.args.items() if k != "lock")
    if event.dur_ps is None:
        return f"{event.name}" + (f" ({args})" if args else "")
    return f"{event.name}({args})  [{event.dur_ps / 1e6:.3f} us]"


def _collapse(events: list[TraceEvent]) -> list[tuple[TraceEvent, int]]:
    """Runs of the same instant on the same track become one entry with a count."""
    out: list[tuple[TraceEvent, int]] = []
    for event in events:
        last = out[-1][0] if out else None
        if (last is not None and event.dur_ps is None and last.dur_ps is None and event.name == last.name
                and event.component == last.component and event.name not in LOCK_EVENTS):
            out[-1] = (last, out[-1][1] + 1)
        else:
            out.append((event, 1))
    return out


def _render(events: list[TraceEvent], title: str) -> list[str]:
    lines = [title, "-" * len(title)]
    held: dict[str, set[str]] = {}
    open_slices: dict[str, list[int]] = {}
    for event, count in _collapse(events):
        if event.name in LOCK_EVENTS:
            locks = held.setdefault(event.component, set())
            (locks.add if event.name == "LockAcquired" else locks.discard)(event.args["lock"])
            lines.append(f"{event.time_ps / 1e6:12.3f} us  {event.component:<10} "
                         f"{'':<16} {'lock' if event.name == 'LockAcquired' else 'unlock'} {event.args['lock']}")
            continue
        stack = open_slices.setdefault(event.component, [])
        while stack and stack[-1] <= event.time_ps:
            stack.pop()
        holds = ",".join(sorted(held.get(event.component, ()))) or "-"
        repeat = f"  (x{count}: the accesses queued behind it)" if count > 1 else ""
        lines.append(f"{event.time_ps / 1e6:12.3f} us  {event.component:<10} holds {holds:<10} "
                     f"{'  ' * len(stack)}{_describe(event)}{repeat}")
        if event.dur_ps:
            stack.append(event.time_ps + event.dur_ps)
    return lines


def explain(result: RunResult) -> str:
    """The registration and first-disruption timelines of a traced run (``run_scenario(..., trace=True)``)."""
    bed = result.testbed
    events = sorted((e for e in bed.env.trace.events if e.name not in DATA_PATH),
                    key=lambda e: e.time_ps)  # stable: ties keep their causal order
    setup = [e for e in events if e.time_ps < bed.started_ps]
    regs = ", ".join(f"'{r.buffer}' ({r.mode} on {r.node}.{r.location})" for r in bed.registrations.values())
    lines = _render(setup, f"Registration of {regs}")
    first = next((e for e in events if e.time_ps >= bed.started_ps and e.name in DISRUPTIONS), None)
    if first is None:
        lines += ["", "No memory event disturbed the registrations during the run."]
        return "\n".join(lines)
    restored = next((e for e in events if e.time_ps > first.time_ps and e.name == "MappingRestored"), None)
    end = restored.time_ps if restored else first.time_ps + WINDOW_PS
    window = [e for e in events if first.time_ps <= e.time_ps <= end]
    lines += [""] + _render(window, f"First memory event at {first.time_ps / 1e6:.3f} us: {first.name} on "
                                   f"{first.component}")
    if restored is None:
        lines.append(f"(no re-map within {WINDOW_PS / 1e9:.0f} ms)")
    return "\n".join(lines)

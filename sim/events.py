"""Scenario events (memory pressure, host page migration, peer-memory reclaim) as simpy processes.

Each event fires at its ``at`` time counted from the start of the first workload and appends a row to the
event log: what happened, to what, and the outcome.
"""

from __future__ import annotations

from collections.abc import Generator

from models.peermem import peermem_reclaim
from sim.build import Testbed
from sim import faults
from sim.scenario.schema import (EvictionStormEvent, GpuJobGrowthEvent, GpuPressureEvent, HostPageMigrationEvent,
                                 LinkFlapEvent, NicResetEvent, PeerMemReclaimEvent, ProcessExitEvent, QpErrorEvent,
                                 Scenario)


def schedule_events(bed: Testbed, scenario: Scenario, start_ps: int, log: list[dict]) -> None:
    """Start one process per event of ``scenario``; rows go to ``log``."""
    for event in scenario.events:
        bed.env.process(_fire(bed, event, start_ps, log))


def _allocate(gpu, nbytes: int, row: dict, log: list[dict]) -> bool:
    """One competing allocation on ``gpu``; log it with the evictions it caused and the VRAM in use after."""
    evictions = gpu.evictions
    ok = gpu.pressure(nbytes)
    log.append(row | {"target": gpu.name, "bytes": nbytes, "evicted": gpu.evictions - evictions,
                      "outcome": "allocated" if ok else "failed: no evictable memory", "gpu_used": gpu.memory.used})
    return ok


def log_unreached(bed: Testbed, scenario: Scenario, start_ps: int, log: list[dict]) -> None:
    """Add a row for each event the run ended before (so it is never silently dropped)."""
    for event in scenario.events:
        if start_ps + event.at > bed.env.now:
            log.append({"time_ps": start_ps + event.at, "kind": event.kind,
                        "target": getattr(event, "on", None) or getattr(event, "buffer", None)
                        or getattr(event, "node", None), "bytes": 0,
                        "evicted": 0, "outcome": f"not reached: the workloads ended at "
                                                 f"{(bed.env.now - start_ps) / 1e6:.3f} us"})


def _fire(bed: Testbed, event, start_ps: int, log: list[dict]) -> Generator:
    env = bed.env
    yield env.timeout(max(0, start_ps + event.at - env.now))
    row = {"time_ps": env.now, "kind": event.kind}
    if isinstance(event, GpuPressureEvent):
        gpu = bed.gpus[event.on]
        ok = _allocate(gpu, event.allocate, row, log)
        if ok and event.hold is not None:
            yield env.timeout(event.hold)
            gpu.release_pressure()
            log.append({"time_ps": env.now, "kind": "gpu-memory-release", "target": event.on,
                        "bytes": event.allocate, "evicted": 0, "outcome": "freed", "gpu_used": gpu.memory.used})
    elif isinstance(event, GpuJobGrowthEvent):
        gpu = bed.gpus[event.on]
        for step in range(event.steps):
            if step:
                yield env.timeout(event.every)
            if not _allocate(gpu, event.step, {"time_ps": env.now, "kind": event.kind}, log):
                break
    elif isinstance(event, HostPageMigrationEvent):
        mr = bed.registrations[event.buffer].mr
        if mr.backing is not None and mr.backing.mode == "odp":
            mr.backing.invalidate(0, mr.length)
            outcome = "invalidated (ODP re-faults on next access)"
        else:
            outcome = "blocked: pages are pinned (long-term pin prevents migration)"
        log.append(row | {"target": event.buffer, "bytes": mr.length, "evicted": 0, "outcome": outcome})
    elif isinstance(event, (QpErrorEvent, NicResetEvent, ProcessExitEvent)):
        action = {"qp-error": faults.qp_error, "nic-reset": faults.nic_reset, "process-exit": faults.process_exit}
        log.append(row | {"target": event.node, "bytes": 0, "evicted": 0,
                          "outcome": action[event.kind](bed, event.node)})
    elif isinstance(event, LinkFlapEvent):
        log.append(row | {"target": event.node, "bytes": 0, "evicted": 0,
                          "outcome": faults.link_flap(bed, event.node, event.duration)})
    elif isinstance(event, EvictionStormEvent):
        yield from faults.eviction_storm(bed, event.on, event.count, event.every, lambda outcome: log.append(
            row | {"target": event.on, "bytes": 0, "evicted": 0, "outcome": outcome}))
    elif isinstance(event, PeerMemReclaimEvent):
        reg = bed.registrations[event.buffer]
        peermem_reclaim(reg.mr, env.now)
        log.append(row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0,
                          "outcome": "MR invalidated (later accesses fail)"})

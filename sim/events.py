"""Scenario events (memory pressure, managed-memory jobs, host page migration, peer-memory reclaim, faults) as
simpy processes.

Each event fires at its ``at`` time counted from the start of the first workload and appends a row to the
event log: what happened, to what, and the outcome.
"""

from __future__ import annotations

from collections.abc import Generator

from models.gpu import GpuOutOfMemory
from models.gpu.managed import UvmStats
from models.gpu.workloads import sequential
from models.host import ManagedAllocationFailed
from models.verbs.peermem import peermem_reclaim
from sim.build import Testbed
from sim import faults
from sim.core import PS_PER_MS, format_size
from sim.scenario.schema import (EvictionStormEvent, GpuJobGrowthEvent, GpuPressureEvent, HostPageMigrationEvent,
                                 LinkFlapEvent, ManagedJobEvent, NicResetEvent, PeerMemReclaimEvent, ProcessExitEvent,
                                 QpErrorEvent, Scenario)

BOOKKEEPING_KINDS = ("workloads-start", "managed-job-faults")
"""Event-log rows kept for the VRAM-over-time figure (the baseline, a managed job's progress), not outcomes."""


def event_failed(outcome: str) -> bool:
    """Whether an event-log outcome says the event could not do what it asked (``failed: ...``)."""
    return outcome.startswith("failed")


SWEEP_CHUNK = 16384
"""Pages a managed job touches between two steps of simulated time (64 MiB of 4 KiB pages)."""


def schedule_events(bed: Testbed, scenario: Scenario, start_ps: int, log: list[dict]) -> None:
    """Start one process per event of ``scenario``; rows go to ``log``."""
    for event in scenario.events:
        if isinstance(event, LinkFlapEvent):  # known in advance: the ports stall in that interval
            outcome = faults.link_flap(bed, event.node, start_ps + event.at, event.duration)
            bed.env.process(_log_at(bed, start_ps + event.at, {
                "kind": event.kind, "target": event.node, "bytes": 0, "evicted": 0, "outcome": outcome}, log))
        else:
            bed.env.process(_fire(bed, event, start_ps, log))


def _log_at(bed: Testbed, at_ps: int, row: dict, log: list[dict]) -> Generator:
    """Add ``row`` to the event log at ``at_ps``."""
    yield bed.env.timeout(max(0, at_ps - bed.env.now))
    log.append({"time_ps": bed.env.now, **row})


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


def _managed_job(bed: Testbed, event: ManagedJobEvent, row: dict, log: list[dict]) -> Generator:
    """Sweep a managed range on the GPU :data:`SWEEP_CHUNK` at a time, each piece taking the time its faults,
    migrations and evictions take (a progress row whenever VRAM in use changed); log the outcome, then free
    the range."""
    env, gpu = bed.env, bed.gpus[event.on]
    try:
        bed.nodes[event.on.split(".")[0]].host.back_managed(event.size, gpu.capacity)
    except ManagedAllocationFailed as exc:
        log.append(row | {"target": gpu.name, "bytes": event.size, "evicted": 0, "gpu_used": gpu.memory.used,
                          "outcome": f"failed: {exc}"})
        return
    mm, taken = gpu.managed(f"managed-job@{row['time_ps']}", event.size)
    evictions, totals = gpu.evictions, UvmStats()
    pages = sequential(mm.n_pages, repetitions=event.passes)
    entry = row | {"target": gpu.name, "bytes": event.size, "evicted": 0, "gpu_used": gpu.memory.used,
                   "outcome": "still running when the workloads ended"}
    log.append(entry)  # completed below when the job ends
    outcome, used = "done", gpu.memory.used
    for lo in range(0, len(pages), SWEEP_CHUNK):
        try:
            stats = mm.gpu_access(pages[lo:lo + SWEEP_CHUNK])
        except GpuOutOfMemory as exc:
            outcome = f"failed: {exc}"
            break
        totals.add(stats)
        if gpu.memory.used != used:  # VRAM in use over time (taken as this piece's faults begin), for figures
            used = gpu.memory.used
            log.append({"time_ps": env.now, "kind": "managed-job-faults", "target": gpu.name,
                        "bytes": totals.pages_to_gpu * mm.params.page_size, "evicted": gpu.evictions - evictions,
                        "outcome": "migrated so far", "gpu_used": gpu.memory.used})
        yield env.timeout(stats.total_ps)
    entry.update(evicted=gpu.evictions - evictions,
                 outcome=f"{outcome}: {event.passes} sweep(s) in {(env.now - row['time_ps']) / PS_PER_MS:.3f} ms, "
                         f"{format_size(totals.pages_to_gpu * mm.params.page_size)} migrated to the GPU, "
                         f"{format_size(totals.pages_evicted * mm.params.page_size)} of its own pages evicted")
    gpu.free_managed(taken)
    log.append({"time_ps": env.now, "kind": "managed-job-end", "target": gpu.name, "bytes": event.size,
                "evicted": 0, "outcome": "freed", "gpu_used": gpu.memory.used})


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
    elif isinstance(event, ManagedJobEvent):
        yield from _managed_job(bed, event, row, log)
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
    elif isinstance(event, EvictionStormEvent):
        yield from faults.eviction_storm(bed, event.on, event.count, event.every, lambda outcome: log.append(
            row | {"target": event.on, "bytes": 0, "evicted": 0, "outcome": outcome}))
    elif isinstance(event, PeerMemReclaimEvent):
        reg = bed.registrations[event.buffer]
        peermem_reclaim(reg.mr, env.now)
        log.append(row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0,
                          "outcome": "MR invalidated (later accesses fail)"})

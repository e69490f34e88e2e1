"""Scenario events (memory pressure, managed-memory jobs, host page migration, peer-memory reclaim, faults, dma-buf
revocation and faults injected into an exporter) as simpy processes.

Each event fires at its ``at`` time counted from the start of the first workload and appends a row to the
event log: what happened, to what, and the outcome. What an event does to the testbed is model code (the NIC,
the kernel, the GPU driver); this module only schedules it, through :data:`SCHEDULERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from models.dmabuf import Placement
from models.dmabuf.faults import FaultInjector
from models.dmabuf.revoke import Revocation, VfioExporter
from models.gpu import GpuOutOfMemory
from models.gpu.managed import UvmStats
from models.gpu.workloads import sequential
from models.host import ManagedAllocationFailed
from models.ib.mr_backing import migrate_pages
from models.nic.nic import flush_qps
from models.verbs.cleanup import uverbs_destroy_ufile_hw
from models.verbs.peermem import peermem_reclaim
from sim.engine.build import Testbed
from sim.core import PS_PER_MS, SimError, format_duration, format_size
from sim.core.units import format_time
from sim.scenario.events import (DmaBufRevokeEvent, EvictionStormEvent, ExporterFaultEvent, GpuJobGrowthEvent,
                                 GpuPressureEvent, HostPageMigrationEvent, LinkFlapEvent, ManagedJobEvent,
                                 NicResetEvent, PeerMemReclaimEvent, ProcessExitEvent, QpErrorEvent)
from sim.scenario.schema import Scenario

Scheduler = Callable[[Testbed, object, int, list[dict]], None]
"""Schedules one event of a scenario on a testbed: (testbed, event, start of the workloads (ps), event log)."""

BOOKKEEPING_KINDS = ("workloads-start", "managed-job-faults")
"""Event-log rows kept for the VRAM-over-time figure (the baseline, a managed job's progress), not outcomes."""


ALLOCATED = "allocated"
"""The outcome of a competing allocation that got its VRAM (evicting what it had to)."""
NOTHING_TO_EVICT = "failed: no evictable memory"
"""The outcome of an allocation that found VRAM full and nothing the exporter could move out of it."""


def event_failed(outcome: str) -> bool:
    """Whether an event-log outcome says the event could not do what it asked (``failed: ...``)."""
    return outcome.startswith("failed")


SWEEP_CHUNK = 16384
"""Pages a managed job touches between two steps of simulated time (64 MiB of 4 KiB pages)."""


def _log_at(bed: Testbed, at_ps: int, row: dict, log: list[dict]) -> Generator:
    """Add ``row`` to the event log at ``at_ps``."""
    yield bed.env.timeout(max(0, at_ps - bed.env.now))
    log.append({"time_ps": bed.env.now, **row})


def _allocate(gpu, nbytes: int, row: dict, log: list[dict]) -> bool:
    """One competing allocation on ``gpu``; log it with the evictions it caused and the VRAM in use after."""
    evictions = gpu.evictions
    ok = gpu.pressure(nbytes)
    log.append(row | {"target": gpu.name, "bytes": nbytes, "evicted": gpu.evictions - evictions,
                      "outcome": ALLOCATED if ok else NOTHING_TO_EVICT, "gpu_used": gpu.memory.used})
    return ok


def log_unreached(bed: Testbed, scenario: Scenario, start_ps: int, log: list[dict]) -> None:
    """Add a row for each event, or a growing job's steps, that the run ended before (so none is silently
    dropped)."""
    ran, ended = bed.env.now - start_ps, f"the workloads ended at {format_duration(bed.env.now - start_ps)}"
    for event in scenario.events:
        if event.at > ran:
            log.append({"time_ps": start_ps + event.at, "kind": event.kind,
                        "target": getattr(event, "on", None) or getattr(event, "buffer", None)
                        or getattr(event, "node", None), "bytes": 0, "evicted": 0, "outcome": f"not reached: {ended}"})
        elif isinstance(event, GpuJobGrowthEvent) and not _stopped_by_failure(event, start_ps, log):
            reached = min(event.steps, (ran - event.at) // event.every + 1)
            if reached < event.steps:
                log.append({"time_ps": start_ps + event.at + reached * event.every, "kind": event.kind,
                            "target": event.on, "bytes": 0, "evicted": 0,
                            "outcome": f"not reached: steps {reached + 1} to {event.steps} ({ended})"})


def _stopped_by_failure(event: GpuJobGrowthEvent, start_ps: int, log: list[dict]) -> bool:
    """Whether a growing job stopped early because one of its allocations failed."""
    return any(row["kind"] == event.kind and row["target"] == event.on and row["time_ps"] >= start_ps + event.at
               and event_failed(row["outcome"]) for row in log)


def _managed_job(bed: Testbed, event: ManagedJobEvent, row: dict, log: list[dict]) -> Generator:
    """Sweep a managed range on the GPU :data:`SWEEP_CHUNK` at a time, each piece a grid-stride kernel
    (``UvmParams.sweep_lanes``) taking the time its faults, migrations and evictions take (a progress row whenever
    VRAM in use changed); log the outcome, then free the range."""
    env, gpu = bed.env, bed.gpus[event.on]
    try:
        bed.nodes[event.on.split(".")[0]].host.back_managed(event.size, gpu.capacity)
    except ManagedAllocationFailed as exc:
        log.append(row | {"target": gpu.name, "bytes": event.size, "evicted": 0, "gpu_used": gpu.memory.used,
                          "outcome": f"failed: {exc}"})
        return
    mm, taken = gpu.managed(f"managed-job@{format_duration(row['time_ps'])}", event.size)  # at on the run's clock
    evictions, totals = gpu.evictions, UvmStats()
    pages = sequential(mm.n_pages, repetitions=event.passes)
    entry = row | {"target": gpu.name, "bytes": event.size, "evicted": 0, "gpu_used": gpu.memory.used,
                   "outcome": "still running when the workloads ended"}
    log.append(entry)  # completed below when the job ends
    outcome, used = "done", gpu.memory.used
    for lo in range(0, len(pages), SWEEP_CHUNK):
        try:
            stats = mm.gpu_access(pages[lo:lo + SWEEP_CHUNK], lanes=mm.params.sweep_lanes)
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


def _gpu_pressure(bed: Testbed, event: GpuPressureEvent, row: dict, log: list[dict]) -> Generator:
    """A competing allocation, freed after ``hold`` when given."""
    gpu = bed.gpus[event.on]
    if _allocate(gpu, event.allocate, row, log) and event.hold is not None:
        yield from gpu.release_pressure_after(event.hold)
        log.append({"time_ps": bed.env.now, "kind": "gpu-memory-release", "target": event.on,
                    "bytes": event.allocate, "evicted": 0, "outcome": "freed", "gpu_used": gpu.memory.used})


def _gpu_job_growth(bed: Testbed, event: GpuJobGrowthEvent, row: dict, log: list[dict]) -> Generator:
    """``steps`` allocations ``every`` apart, until one fails."""
    gpu = bed.gpus[event.on]
    for step in range(event.steps):
        if step:
            yield bed.env.timeout(event.every)
        if not _allocate(gpu, event.step, {"time_ps": bed.env.now, "kind": event.kind}, log):
            break


def _host_page_migration(bed: Testbed, event: HostPageMigrationEvent, row: dict, log: list[dict]) -> None:
    """The kernel migrates the buffer's host pages."""
    reg = bed.registrations[event.buffer]
    buf = bed.nodes[reg.node].host.buffers[event.buffer]
    log.append(row | {"target": event.buffer, "bytes": buf.size, "evicted": 0,
                      "outcome": migrate_pages(reg.mr, buf.addr, buf.size)})


def _node_qps(bed: Testbed, node: str) -> list:
    """The testbed's QPs on ``node``."""
    return [qp for qp in bed.qps if qp.node.name == node]


def _qp_error(bed: Testbed, event: QpErrorEvent, row: dict, log: list[dict]) -> None:
    """Every QP of the node moves to ERR."""
    log.append(row | {"target": event.node, "bytes": 0, "evicted": 0, "outcome": flush_qps(_node_qps(bed, event.node))})


def _nic_reset(bed: Testbed, event: NicResetEvent, row: dict, log: list[dict]) -> None:
    """The node's NIC hits a fatal error."""
    outcome = bed.nodes[event.node].nic.enter_error_state(_node_qps(bed, event.node))
    log.append(row | {"target": event.node, "bytes": 0, "evicted": 0, "outcome": outcome})


def _process_exit(bed: Testbed, event: ProcessExitEvent, row: dict, log: list[dict]) -> None:
    """The node's process exits holding its QPs and MRs."""
    mrs = [reg.mr for reg in bed.registrations.values() if reg.node == event.node]
    outcome = uverbs_destroy_ufile_hw(bed.nodes[event.node], _node_qps(bed, event.node), mrs)
    log.append(row | {"target": event.node, "bytes": 0, "evicted": 0, "outcome": outcome})


def _eviction_storm(bed: Testbed, event: EvictionStormEvent, row: dict, log: list[dict]) -> Generator:
    """Every movable exported buffer of the GPU moves ``count`` times, ``every`` apart. One row, brought up to
    date after every step, so that a storm the run ends before finishing says how far it got."""
    entry = row | {"target": event.on, "bytes": 0, "evicted": 0}
    log.append(entry)
    moved = refused = 0
    for step in range(event.count):
        if step:
            yield bed.env.timeout(event.every)
        moves, refusals = bed.gpus[event.on].swap_exported()
        moved, refused = moved + moves, refused + refusals
        unfinished = f" in {step + 1} of {event.count} steps (the run ended first)" if step + 1 < event.count else ""
        entry["outcome"] = f"{moved} moves, {refused} refused (pinned){unfinished}"


def _peermem_reclaim(bed: Testbed, event: PeerMemReclaimEvent, row: dict, log: list[dict]) -> None:
    """The GPU driver reclaims a peer-memory MR's pages."""
    reg = bed.registrations[event.buffer]
    log.append(row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0,
                      "outcome": peermem_reclaim(reg.mr, bed.env.now)})


def _dmabuf_revoke(bed: Testbed, event: DmaBufRevokeEvent, row: dict, log: list[dict]) -> Generator | None:
    """The buffer's exporter revokes its dma-buf; the row says when the importers let go, brought up to date when
    the exporter's wait ends (a wait the run ends before says so)."""
    reg = bed.registrations[event.buffer]
    exporter = reg.allocation.exporter
    entry = row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0}
    log.append(entry)
    if not isinstance(exporter, VfioExporter):
        entry["outcome"] = (f"failed: the {bed.gpus[f'{reg.node}.{reg.location}'].vendor} exporter of "
                            f"'{event.buffer}' cannot revoke (a GPU with exporter: vfio can)")
        return None
    revocation = exporter.start_revocation()
    entry["outcome"] = revocation_outcome(revocation, event.bound)
    return _revoked(exporter, revocation, event, entry)


def _revoked(exporter: VfioExporter, revocation: Revocation, event: DmaBufRevokeEvent, entry: dict) -> Generator:
    """The exporter's wait for the unmaps, the row brought up to date after each of its steps (the WARN too)."""
    for step in exporter.wait_unmapped(revocation, event.bound):
        entry["outcome"] = revocation_outcome(revocation, event.bound)
        yield step
    entry["outcome"] = revocation_outcome(revocation, event.bound)


def revocation_outcome(revocation: Revocation, bound_ps: int) -> str:
    """The event-log outcome of a revocation so far."""
    if revocation.left_mapped:
        return (f"revoked without waiting (before 7.1): {', '.join(revocation.left_mapped)} still mapped the buffer "
                "when the exporter returned")
    if revocation.done:
        waited = revocation.unmapped_ps - revocation.fences_done_ps
        late = f", past the {format_time(bound_ps)} bound (WARN)" if revocation.warned else ""
        return f"revoked: every importer unmapped {format_duration(waited)} after the fences{late}"
    if revocation.warned:
        return (f"revoking: WARN: {', '.join(revocation.warned)} still mapped the buffer {format_time(bound_ps)} "
                "after the invalidation; the exporter waits on (the run ended first)")
    return (f"revoking: waiting for {', '.join(revocation.waited_for)} to unmap (the exporter WARNs after "
            f"{format_time(bound_ps)}; the run ended first)")


INJECTED = {
    "delay-map": lambda inj, e: inj.delay_map(e.delay, e.count),
    "block-map": lambda inj, e: inj.block_map(e.count),
    "fail-map-after-invalidate": lambda inj, e: inj.fail_map_after_invalidate(e.errno, e.count),
    "invalidate-and-hold": lambda inj, e: inj.invalidate_and_hold(e.hold),
    "hold-lock": lambda inj, e: inj.hold_lock(e.hold),
    "move": lambda inj, e: inj.move(Placement.VRAM if e.to == "vram" else Placement.SYSTEM),
}
"""What each ``exporter-fault`` does to the buffer's :class:`~models.dmabuf.faults.FaultInjector`."""


def _exporter_fault(bed: Testbed, event: ExporterFaultEvent, row: dict, log: list[dict]) -> Generator | None:
    """Inject a fault into the buffer's exporter (one injector per buffer, made on its first fault); a held lock is
    released when the hold ends."""
    reg = bed.registrations[event.buffer]
    dmabuf = reg.allocation.exporter.dmabuf
    injector = bed.injectors.get(event.buffer)
    try:
        if injector is None or injector.dmabuf is not dmabuf:
            injector = bed.injectors[event.buffer] = FaultInjector(dmabuf)
        done = len(injector.injected)
        INJECTED[event.fault](injector, event)
        outcome = "; ".join(injector.injected[done:]) or f"armed {event.fault} for the next {event.count} map(s)"
    except SimError as exc:
        log.append(row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0, "outcome": f"failed: {exc}"})
        return None
    log.append(row | {"target": event.buffer, "bytes": reg.size_bytes, "evicted": 0, "outcome": outcome})
    if event.fault in ("invalidate-and-hold", "hold-lock") and event.hold is not None:
        return _wake_after(bed, injector, event.hold)
    return None


def _wake_after(bed: Testbed, injector: FaultInjector, hold_ps: int) -> Generator:
    yield bed.env.timeout(hold_ps)
    injector.wake()


def _when_due(act: Callable[[Testbed, object, dict, list[dict]], Generator | None]) -> Scheduler:
    """A scheduler starting a process that waits for the event's time, then runs ``act`` with the event's row
    (``act`` returns the steps that take simulated time, or None when it acts at once)."""
    def schedule(bed: Testbed, event, start_ps: int, log: list[dict]) -> None:
        bed.env.process(_fire(bed, event, start_ps, log, act))
    return schedule


def _fire(bed: Testbed, event, start_ps: int, log: list[dict], act) -> Generator:
    """Wait for the event's time, then run ``act``."""
    yield bed.env.timeout(max(0, start_ps + event.at - bed.env.now))
    steps = act(bed, event, {"time_ps": bed.env.now, "kind": event.kind}, log)
    if steps is not None:
        yield from steps


def _link_flap(bed: Testbed, event: LinkFlapEvent, start_ps: int, log: list[dict]) -> None:
    """Known in advance: the link loses (or its ports hold) frames in that interval from now on; the row is logged
    at the event's time."""
    outcome = bed.nodes[event.node].nic.link_down(start_ps + event.at, event.duration, held=event.frames == "held")
    bed.env.process(_log_at(bed, start_ps + event.at, {
        "kind": event.kind, "target": event.node, "bytes": 0, "evicted": 0, "outcome": outcome}, log))


SCHEDULERS: dict[type, Scheduler] = {
    GpuPressureEvent: _when_due(_gpu_pressure),
    GpuJobGrowthEvent: _when_due(_gpu_job_growth),
    ManagedJobEvent: _when_due(_managed_job),
    HostPageMigrationEvent: _when_due(_host_page_migration),
    QpErrorEvent: _when_due(_qp_error),
    NicResetEvent: _when_due(_nic_reset),
    ProcessExitEvent: _when_due(_process_exit),
    EvictionStormEvent: _when_due(_eviction_storm),
    PeerMemReclaimEvent: _when_due(_peermem_reclaim),
    LinkFlapEvent: _link_flap,
    DmaBufRevokeEvent: _when_due(_dmabuf_revoke),
    ExporterFaultEvent: _when_due(_exporter_fault),
}
"""The scheduler of each event class of the scenario schema."""


def schedule_events(bed: Testbed, scenario: Scenario, start_ps: int, log: list[dict]) -> None:
    """Schedule every event of ``scenario`` in order; rows go to ``log``."""
    for event in scenario.events:
        SCHEDULERS[type(event)](bed, event, start_ps, log)

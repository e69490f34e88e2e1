"""Run a scenario: build the testbed, run each workload size by size, collect tidy tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from models.nic.wqe import WC_STATUS_NAMES, Opcode, WcStatus
from models.verbs.verbs import ibv_create_cq, ibv_create_qp
from models.verbs.workloads import (PERFTEST_WRITE_LAT_INLINE, Endpoint, bandwidth, concurrent, read_latency,
                                    write_latency)
from sim.build import Testbed, build
from sim.events import log_unreached, schedule_events
from sim.core.errors import DeadlockError, InvariantViolation
from sim.core.metrics import OpColumns, OpSpool, bandwidth_of, latency_summary
from sim.core.units import ps_to_us
from sim.operations import OperationTable, scratch_dir, spool_finalizer
from sim.scenario.schema import Scenario, WorkloadSpec

Progress = Callable[[int], None]
"""Called with the number of operations just simulated."""

SUMMARY_COLUMNS = {
    "bw": ["bytes", "iterations", "bw_peak_Gbps", "bw_avg_Gbps", "bw_avg_MiBps", "msg_rate_Mpps"],
    "lat": ["bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us",
            "p99_9_us"],
}
"""perftest's columns for bandwidth and latency tests, in its order."""


@dataclass
class RunResult:
    """Tables produced by one run."""

    scenario: Scenario
    seed: int
    table: OperationTable
    """One row per work request (times in ps), spooled to disk beyond a row group."""
    summary: pd.DataFrame
    """One row per (workload, size): perftest's columns."""
    registrations: pd.DataFrame
    """One row per buffer: registration mode and cost."""
    testbed: Testbed
    variant: str = "base"
    events: pd.DataFrame | None = None
    """One row per scenario event: time, target, outcome."""
    counters: dict | None = None
    """Protocol activity: invalidations, re-faults, RNR NAKs, evictions, failed allocations, violations."""

    @property
    def operations(self) -> pd.DataFrame:
        """The per-operation table as one frame (read from its spool file when large)."""
        return self.table.frame()


def pinned_bytes(reg) -> int:
    """Bytes a registration keeps pinned: host pages for ``pinned``, GPU pages for ``peermem``,
    ``dmabuf-pinned`` (and ``dmabuf`` pinned on map), nothing for ``odp``."""
    backing = reg.mr.backing
    return reg.size_bytes if backing is None else backing.pinned_bytes


def total_operations(scenario: Scenario) -> int:
    """Work requests the scenario will simulate (for progress bars)."""
    return sum(len(w.size_list()) * w.iterations * w.qps for w in scenario.workload)


def _endpoints(bed: Testbed, work: WorkloadSpec) -> list[tuple[Endpoint, Endpoint]]:
    """The workload's ``qps`` connected QP pairs (requester end, responder end), each with its own CQs."""
    src, dst = bed.registrations[work.from_], bed.registrations[work.to]
    depth = max(work.tx_depth, 2)
    pairs = []
    for _ in range(work.qps):
        ends = []
        for reg in (src, dst):
            ctx, pd_ = bed.contexts[reg.node], bed.pds[reg.node]
            cq = ibv_create_cq(ctx, 2 * depth)
            ends.append(Endpoint(ibv_create_qp(pd_, cq, depth), reg.mr))
        ends[0].qp.connect(ends[1].qp)
        bed.qps.extend(e.qp for e in ends)
        pairs.append((ends[0], ends[1]))
    return pairs


def inline_threshold(work: WorkloadSpec) -> int:
    """The largest WRITE the workload posts inline (bytes): its ``inline``, else perftest's default (only
    ``ib_write_lat`` inlines by default)."""
    if work.inline is not None:
        return work.inline
    return PERFTEST_WRITE_LAT_INLINE if work.kind == "write_lat" else 0


def _process(env, work: WorkloadSpec, pairs: list[tuple[Endpoint, Endpoint]], size: int):
    inline = inline_threshold(work)
    if work.kind.endswith("_bw"):
        opcode = Opcode.RDMA_WRITE if work.kind == "write_bw" else Opcode.RDMA_READ
        streams = [bandwidth(env, opcode, src, dst, size, work.iterations, work.tx_depth, inline)
                   for src, dst in pairs]
        return streams[0] if len(streams) == 1 else concurrent(env, streams)
    ((src, dst),) = pairs
    if work.kind == "write_lat":
        return write_latency(env, src, dst, size, work.iterations, inline)
    return read_latency(env, src, dst, size, work.iterations)


def run_scenario(scenario: Scenario, seed: int | None = None, progress: Progress | None = None,
                 *, trace: bool = False, variant: str = "base",
                 notice: Callable[[str], None] | None = None) -> RunResult:
    """Simulate every workload of ``scenario`` (with its events) and return its tables.

    ``scenario.engine`` picks the engine: ``fast`` and ``auto`` hand the run to :mod:`sim.fast_plan`; when
    ``auto`` cannot use it, ``notice`` (default: a line on stderr) is told why and the event engine runs.

    :raises sim.build.RegistrationFailed: a buffer could not be registered.
    """
    seed = scenario.seed if seed is None else seed
    if scenario.engine != "event":
        from sim.fast_plan import run_fast

        result = run_fast(scenario, seed, progress, trace=trace, variant=variant, notice=notice)
        if result is not None:
            return result
    bed, started, event_log = setup_run(scenario, seed, trace)
    env = bed.env
    table, summaries = OperationTable(), []
    for work in scenario.workload:
        label = work.name or work.kind
        pairs = _endpoints(bed, work)
        for size in work.size_list():
            proc = env.process(_process(env, work, pairs, size))
            records = _run_until(env, proc, bed, f"workload '{label}' at {size} bytes")
            frame, row = workload_tables(work, size, records, variant)
            table.append(frame)
            summaries.append(row)
            if progress:
                progress(work.iterations * work.qps)
    return finish_run(scenario, seed, bed, variant, started, event_log, table, summaries)


def setup_run(scenario: Scenario, seed: int, trace: bool = False) -> tuple[Testbed, int, list[dict]]:
    """Build the testbed and start the scenario's events; returns it, the workloads' start and the event log."""
    bed = build(scenario, seed, trace=trace)
    event_log: list[dict] = []
    started = bed.env.now
    for gpu in bed.gpus.values():
        event_log.append({"time_ps": started, "kind": "workloads-start", "target": gpu.name, "bytes": 0,
                          "evicted": 0, "outcome": "baseline", "gpu_used": gpu.memory.used})
    schedule_events(bed, scenario, started, event_log)
    return bed, started, event_log


def workload_tables(work: WorkloadSpec, size: int, records, variant: str) -> tuple[pd.DataFrame, dict]:
    """The per-operation rows and the perftest summary row of one (workload, size) (see :func:`operation_rows`
    and :func:`summary_row`)."""
    stats = records.latency_ps[records.ok]
    if work.kind.endswith("_bw"):
        order = np.argsort(records.posted_ps, kind="stable")  # every QP's operations in posting order
        stats = OpColumns(records.posted_ps[order], records.completed_ps[order], records.ok[order])
    return (operation_rows(work, size, records, variant),
            summary_row(work, size, variant, status_counts(records), stats))


def operation_rows(work: WorkloadSpec, size: int, records, variant: str, first: int = 0) -> pd.DataFrame:
    """The per-operation rows of ``records`` of one (workload, size); ``first`` is the first record's
    iteration (a piece of a stream). Each row's ``status`` is its completion's ``ibv_wc_status`` name (``ok``:
    it is IBV_WC_SUCCESS)."""
    label, rows = work.name or work.kind, len(records.status)
    qp = np.zeros(rows, dtype=np.int64) if records.qp is None else records.qp
    return pd.DataFrame({
        "variant": _label(variant, rows), "workload": _label(label, rows), "kind": _label(work.kind, rows),
        "bytes": size, "qp": qp, "iteration": np.tile(np.arange(first, first + rows // work.qps), work.qps),
        "posted_ps": records.posted_ps, "completed_ps": records.completed_ps, "latency_ps": records.latency_ps,
        "ok": records.ok, "status": pd.Categorical.from_codes(records.status, categories=WC_STATUS_NAMES)})


def status_counts(records) -> np.ndarray:
    """How many of ``records`` completed with each ``ibv_wc_status`` value."""
    return np.bincount(records.status, minlength=len(WC_STATUS_NAMES))


def summary_row(work: WorkloadSpec, size: int, variant: str, counts: np.ndarray, stats) -> dict:
    """perftest's summary of one (workload, size) whose completions have :func:`status_counts` ``counts``:
    ``stats`` holds its operations in posting order (:class:`~sim.core.metrics.OpColumns` or
    :class:`~sim.core.metrics.OpSpool`) for a bandwidth workload, the latencies (ps) of those that succeeded
    for a latency workload. The row counts the ``errors`` and, in ``errors_by_status``, how many completed
    with each error status. Only work requests that succeeded are measured (a row where none did has NaN in
    perftest's columns)."""
    success = WcStatus.SUCCESS.value
    row = {"variant": variant, "workload": work.name or work.kind, "kind": work.kind, "bytes": size,
           "iterations": work.iterations, "errors": int(counts.sum() - counts[success]),
           "errors_by_status": {WC_STATUS_NAMES[v]: int(n) for v, n in enumerate(counts) if n and v != success}}
    if work.kind.endswith("_bw"):
        return row | bandwidth_of(size, stats, work.tx_depth * work.qps)
    return row | latency_summary(stats)


@dataclass
class _Stream:
    """The records of one (workload, size) added so far."""

    work: WorkloadSpec
    size: int
    spool: OpSpool | None
    latencies: list[np.ndarray]
    counts: np.ndarray


class StreamedSummaries:
    """perftest summaries of (workload, size) streams whose records arrive piece by piece in posting order,
    one stream after the other; a bandwidth stream's operations are spooled to disk for its peak rate."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.rows: list[dict] = []
        self._open: _Stream | None = None

    def add(self, work: WorkloadSpec, size: int, records) -> None:
        """Records of ``work`` at ``size`` following the ones added for it (a new stream ends the last one)."""
        if self._open is None or self._open.work is not work or self._open.size != size:
            self.finish()
            spool = None
            if work.kind.endswith("_bw"):
                directory = scratch_dir("bandwidth")
                spool = OpSpool(directory)
                spool_finalizer(spool, directory)
            self._open = _Stream(work, size, spool, [], np.zeros(len(WC_STATUS_NAMES), dtype=np.int64))
        stream = self._open
        if stream.spool is not None:
            stream.spool.add(records.posted_ps, records.completed_ps, records.ok)
        else:
            stream.latencies.append(records.latency_ps[records.ok])
        stream.counts += status_counts(records)

    def finish(self) -> list[dict]:
        """End the current stream: its summary row joins :attr:`rows`; returns them."""
        stream, self._open = self._open, None
        if stream is not None:
            stats = stream.spool if stream.spool is not None else np.concatenate(stream.latencies)
            self.rows.append(summary_row(stream.work, stream.size, self.variant, stream.counts, stats))
            if stream.spool is not None:
                stream.spool.close()
        return self.rows


def finish_run(scenario: Scenario, seed: int, bed: Testbed, variant: str, started: int, event_log: list[dict],
               table: OperationTable, summaries: list[dict]) -> RunResult:
    """Registrations, end-of-run checks, counters and the event table: the run's :class:`RunResult`."""
    registrations = pd.DataFrame([{
        "variant": variant, "buffer": r.buffer, "node": r.node, "location": r.location, "bytes": r.size_bytes,
        "mode": r.mode, "register_us": ps_to_us(r.mr.reg_ps), "pinned_bytes": pinned_bytes(r),
    } for r in bed.registrations.values()])
    drain(bed)
    log_unreached(bed, scenario, started, event_log)
    check_completions(bed)
    counters = protocol_counters(bed)
    if scenario.data:
        counters |= verify_data(bed, scenario)
    events = pd.DataFrame(event_log, columns=["time_ps", "kind", "target", "bytes", "evicted", "outcome", "gpu_used"])
    events.insert(0, "variant", variant)
    return RunResult(scenario, seed, table.close(), pd.DataFrame(summaries),
                     registrations, bed, variant, events, counters)


def _label(text: str, rows: int) -> pd.Categorical:
    """A constant text column stored as a category (one byte per row, not one string object)."""
    return pd.Categorical.from_codes(np.zeros(rows, dtype=np.int8), categories=[text])


def _run_until(env, proc, bed: Testbed, what: str):
    """Run until ``proc`` ends; a simulation that runs out of events first is a deadlock, reported with the
    components still waiting."""
    try:
        return env.run(until=proc)
    except RuntimeError as exc:
        if "No scheduled events left" not in str(exc):
            raise
        waiting = [f"QP {qp.qp_num} on {qp.node.name} ({qp.outstanding} work requests outstanding, "
                   f"{len(qp.send_cq.entries)} completions unpolled)" for qp in bed.qps if qp.outstanding]
        raise DeadlockError(f"{what}: the simulation has nothing left to do but the workload still waits; "
                            f"waiting: {'; '.join(waiting) or 'the workload process only'}") from None


def drain(bed: Testbed) -> None:
    """Let work requests still in flight when the last workload returned complete (a ping-pong's last write
    is acknowledged after its data landed)."""
    env = bed.env
    while any(qp.outstanding for qp in bed.qps) and env.peek() != float("inf"):
        env.step()


def check_completions(bed: Testbed) -> None:
    """Every posted work request yielded exactly one completion, in order.

    :raises InvariantViolation: a QP has work requests without a completion.
    """
    for qp in bed.qps:
        if qp.next_completion != qp.posted_count or qp.outstanding:
            raise InvariantViolation(f"QP {qp.qp_num} on {qp.node.name}: {qp.posted_count} work requests posted, "
                                     f"{qp.next_completion} completed, {qp.outstanding} outstanding at the end")


def verify_data(bed: Testbed, scenario: Scenario) -> dict[str, int]:
    """Data mode: compare every workload's destination bytes with its source's (the largest message's span).

    WRITE workloads copy ``from`` into ``to``, READ workloads ``to`` into ``from``.
    """
    checked = mismatched = 0
    for work in scenario.workload:
        span = max(work.size_list())
        src, dst = bed.registrations[work.from_], bed.registrations[work.to]
        if work.kind.startswith("read"):
            src, dst = dst, src
        expected, got = src.current_bytes()[:span], dst.current_bytes()[:span]
        checked += span
        mismatched += int(np.count_nonzero(expected != got))
    return {"data_checked_bytes": checked, "data_mismatched_bytes": mismatched}


def protocol_counters(bed: Testbed) -> dict[str, int]:
    """What the registration protocol did during the run, summed over MRs, QPs and GPUs."""
    mrs = [r.mr for r in bed.registrations.values()]
    backings = [mr.backing for mr in mrs if mr.backing is not None]
    return {
        "invalidations": sum(getattr(b, "invalidations", 0) for b in backings),
        "refaults": sum(getattr(b, "faults", 0) for b in backings),
        "rnr_naks": sum(qp.rnr_naks for qp in bed.qps),
        "evictions": sum(g.evictions for g in bed.gpus.values()),
        "failed_allocations": sum(g.failed_allocations for g in bed.gpus.values()),
        "invariant_violations": sum(len(getattr(b, "violations", ())) for b in backings),
        "kernel_warnings": sum(len(n.kernel.warnings) for n in bed.nodes.values()),
    }

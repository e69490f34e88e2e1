"""A run's tables, whichever engine simulated it: per-operation rows, perftest summary rows (whole or streamed
piece by piece), the registrations table, and the :class:`RunResult` that holds them. A result keeps its summary,
registration and event rows as they were made and makes pandas frames of them when first asked (a command that
prints perftest's report from the rows never imports pandas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np

from models.nic.wqe import WC_STATUS_NAMES, WcStatus
from sim.engine.build import Registration, Testbed
from sim.core.metrics import CHUNK, OpColumns, OpSpool, average_columns, bandwidth_of, latency_summary
from sim.core.units import PS_PER_S, ps_to_us
from sim.store.operations import OperationTable, RowBlock, owned_scratch_dir
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec

if TYPE_CHECKING:
    import pandas as pd

EVENT_COLUMNS = ["time_ps", "kind", "target", "bytes", "evicted", "outcome", "gpu_used"]
"""The event table's columns after ``variant`` (:attr:`RunResult.events`)."""


@dataclass
class RunResult:
    """Tables produced by one run."""

    scenario: Scenario
    seed: int
    table: OperationTable | None
    """One row per work request (times in ps), spooled to disk beyond a row group; None where the run was asked to
    keep none (:func:`sim.engine.run.run_scenario`'s ``operations``)."""
    summary_rows: list[dict]
    """One row per (workload, size): perftest's columns, then the RNR NAKs the case's requests got and the frames
    of theirs a link lost (``rnr_naks``, ``frames_lost``; ``counters`` holds the run's totals)."""
    registration_rows: list[dict]
    """One row per buffer: registration mode and cost (:func:`registration_rows`)."""
    testbed: Testbed
    variant: str = "base"
    event_rows: list = field(default_factory=list)
    """One row per scenario event, as :data:`EVENT_COLUMNS`: time, target, outcome."""
    counters: dict | None = None
    """Protocol activity: invalidations, re-faults, RNR NAKs, evictions, failed allocations, violations."""
    library: list[dict] | None = None
    """The scenario's library studies (:func:`sim.engine.library.run_library`), run after the workloads."""
    rails: pd.DataFrame | None = None
    """Rails nodes: the per-stream rail table (:func:`sim.inspect.rails.rail_table`), kept once worked out."""
    engine: str = "event"
    """The engine that ran the workloads: ``event`` (simpy) or ``fast`` (the vectorized core)."""
    fallback: str | None = None
    """Why ``engine: auto`` ran the event engine (None: it did not fall back)."""

    @cached_property
    def summary(self) -> pd.DataFrame:
        """:attr:`summary_rows` as a frame."""
        import pandas as pd

        return pd.DataFrame(self.summary_rows)

    @cached_property
    def registrations(self) -> pd.DataFrame:
        """:attr:`registration_rows` as a frame."""
        import pandas as pd

        return pd.DataFrame(self.registration_rows)

    @cached_property
    def events(self) -> pd.DataFrame:
        """:attr:`event_rows` as a frame, the run's variant first."""
        import pandas as pd

        events = pd.DataFrame(self.event_rows, columns=EVENT_COLUMNS)
        events.insert(0, "variant", self.variant)
        return events

    @property
    def operations(self) -> pd.DataFrame:
        """The per-operation table as one frame (read from its spool file when large).

        :raises ValueError: the run kept no per-operation rows."""
        if self.table is None:
            raise ValueError(f"run {self.scenario.name} ({self.variant}) kept no per-operation rows")
        return self.table.frame()


def pinned_bytes(reg: Registration) -> int:
    """Bytes a registration keeps pinned: host pages for ``pinned``, GPU pages for ``peermem``,
    ``dmabuf-pinned`` (and ``dmabuf`` pinned on map), nothing for ``odp``."""
    backing = reg.mr.backing
    return reg.size_bytes if backing is None else backing.pinned_bytes


def vram_pinned_bytes(reg: Registration, now_ps: int) -> int:
    """Bytes of GPU memory (VRAM) a registration keeps pinned at ``now_ps``: its pinned bytes while the NIC
    reaches them in the GPU, none once the pin put them in system memory (amdgpu's pin into GTT)."""
    backing = reg.mr.backing
    if backing is None or not backing.pinned_bytes:
        return 0
    return backing.pinned_bytes if backing.target(now_ps) != "mem0" else 0


def bar1_bytes(reg: Registration) -> int:
    """Bytes of its GPU's BAR1 aperture a registration's mapping holds (peer memory, NVIDIA dma-buf)."""
    backing = reg.mr.backing
    return 0 if backing is None else backing.bar1_bytes


def registration_rows(bed: Testbed, variant: str) -> list[dict]:
    """One row per buffer of ``bed``: where it is, its registration mode, cost (us), pinned bytes (all, and those
    in VRAM), translation entries and their page size, and the BAR1 bytes it holds."""
    return [{
        "variant": variant, "buffer": r.buffer, "node": r.node, "location": r.location, "bytes": r.size_bytes,
        "mode": r.mode, "register_us": ps_to_us(r.register_ps), "pinned_bytes": pinned_bytes(r),
        "vram_pinned_bytes": vram_pinned_bytes(r, bed.env.now), "mtt_entries": r.mr.mtt_entries,
        "mtt_page_bytes": r.mr.page_size, "bar1_bytes": bar1_bytes(r),
    } for r in bed.registrations.values()]


def workload_tables(work: WorkloadSpec, size: int, records, variant: str, table: OperationTable | None) -> dict:
    """The perftest summary row of one (workload, size) (:func:`summary_row`); its per-operation rows
    (:func:`operation_rows`) go to ``table`` (None: the run keeps none)."""
    stats = records.latency_ps[records.ok]
    if work.rule.streams:
        order = np.argsort(records.posted_ps, kind="stable")  # every QP's operations in posting order
        stats = OpColumns(records.posted_ps[order], records.completed_ps[order], records.ok[order])
    if table is not None:
        table.append(operation_rows(work, size, records, variant))
    measured = Measured.of(work)
    if measured is not None:
        measured.add(records)
    return summary_row(work, size, variant, status_counts(records), stats, measured)


def operation_rows(work: WorkloadSpec, size: int, records, variant: str, first: int = 0) -> RowBlock:
    """The per-operation rows of ``records`` of one (workload, size); ``first`` is the first record's
    iteration (a piece of a stream). Each row's ``status`` is its completion's ``ibv_wc_status`` name (``ok``:
    it is IBV_WC_SUCCESS)."""
    rows = len(records.status)
    qp = np.zeros(rows, dtype=np.int64) if records.qp is None else records.qp
    iteration = first + np.arange(rows) - np.searchsorted(qp, qp)  # each stream's records follow each other
    return RowBlock(rows, {
        "variant": variant, "workload": work.name or work.kind, "kind": work.kind, "bytes": size, "qp": qp,
        "iteration": iteration, "posted_ps": records.posted_ps, "completed_ps": records.completed_ps,
        "latency_ps": records.latency_ps, "ok": records.ok, "status": records.status}, {"status": WC_STATUS_NAMES})


def status_counts(records) -> np.ndarray:
    """How many of ``records`` completed with each ``ibv_wc_status`` value."""
    return np.bincount(records.status, minlength=len(WC_STATUS_NAMES))


class Measured:
    """What perftest -D measures of a workload that runs for a duration: the work requests (or ping-pong
    iterations) that complete successfully between ``margin`` after its first post and ``margin`` before its
    duration ends (perftest's SAMPLE_STATE, ``catch_alarm``), of every QP, counted as their records come."""

    def __init__(self, duration_ps: int, margin_ps: int, local: int | None = None) -> None:
        self.duration_ps, self.margin_ps, self.local = duration_ps, margin_ps, local
        self.start: int | None = None
        """The first post (ps)."""
        self.count = 0
        """Measured work requests of both sides."""
        self.own = 0
        """Measured work requests of the client's QPs: those numbered below ``local`` where given (a bidirectional
        test's first half of streams: each side of perftest -b counts its own), else all."""

    @classmethod
    def of(cls, work: WorkloadSpec) -> Measured | None:
        """The measurement of ``work`` (None: it runs for a number of iterations)."""
        local = work.streams() // 2 if work.bidirectional else None
        return None if work.duration is None else cls(work.duration, work.margin or 0, local)

    def add(self, records) -> None:
        """Count ``records`` (tagged with their streams' indices where the test is bidirectional); the first ones
        given hold the first post."""
        if self.start is None:
            self.start = int(records.posted_ps.min())
        done = records.completed_ps
        sampled = records.ok & (done >= self.start + self.margin_ps) & (done < self.start + self.duration_ps
                                                                        - self.margin_ps)
        self.count += int(np.count_nonzero(sampled))
        self.own += int(np.count_nonzero(sampled if self.local is None else sampled & (records.qp < self.local)))

    @property
    def seconds(self) -> float:
        """How long is measured: the duration less the margin at each end (s)."""
        return (self.duration_ps - 2 * self.margin_ps) / PS_PER_S

    def rates(self, size: int) -> dict[str, float]:
        """perftest's average columns over the measured time: ``size`` bytes per operation counted."""
        return average_columns(size * self.count / self.seconds, self.count / 1e6 / self.seconds)


def summary_row(work: WorkloadSpec, size: int, variant: str, counts: np.ndarray, stats,
                measured: Measured | None = None) -> dict:
    """perftest's summary of one (workload, size) whose completions have :func:`status_counts` ``counts``:
    ``stats`` holds its operations in posting order (:class:`~sim.core.metrics.OpColumns` or
    :class:`~sim.core.metrics.OpSpool`) for a bandwidth workload, the latencies (ps) of those that succeeded
    for a latency workload. The row counts the ``errors`` and, in ``errors_by_status``, how many completed
    with each error status. Only work requests that succeeded are measured (a row where none did has NaN in
    perftest's columns). A workload that runs for a duration reports, as perftest -D does, the operations
    ``measured`` counts as its iterations (every QP's of the client's side), and its average rates over the measured
    time (both sides')."""
    success = WcStatus.SUCCESS.value
    row = {"variant": variant, "workload": work.name or work.kind, "kind": work.kind, "bytes": size,
           "iterations": work.iterations if measured is None else measured.own,
           "errors": int(counts.sum() - counts[success]),
           "errors_by_status": {WC_STATUS_NAMES[v]: int(n) for v, n in enumerate(counts) if n and v != success}}
    if work.rule.streams:
        row |= bandwidth_of(size, stats, work.tx_depth * work.streams())
        if measured is not None and counts[success]:  # (perftest measures no peak then: never below the average)
            row |= measured.rates(size)
            row["bw_peak_Gbps"] = max(row["bw_peak_Gbps"], row["bw_avg_Gbps"])
        return row
    return row | latency_summary(stats)


@dataclass
class _Stream:
    """The records of one (workload, size) added so far."""

    work: WorkloadSpec
    size: int
    spool: OpSpool | None
    latencies: list[np.ndarray]
    counts: np.ndarray
    measured: Measured | None


class StreamedSummaries:
    """perftest summaries of (workload, size) streams whose records arrive piece by piece in posting order,
    one stream after the other; a bandwidth stream's operations are kept for its peak rate (spooled to disk past a
    chunk of :func:`~sim.core.metrics.bandwidth_of`'s reads)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.rows: list[dict] = []
        self._open: _Stream | None = None

    def add(self, work: WorkloadSpec, size: int, records) -> None:
        """Records of ``work`` at ``size`` following the ones added for it (a new stream ends the last one)."""
        if self._open is None or self._open.work is not work or self._open.size != size:
            self.finish()
            spool = OpSpool(partial(owned_scratch_dir, what="bandwidth"), hold=CHUNK) if work.rule.streams else None
            self._open = _Stream(work, size, spool, [], np.zeros(len(WC_STATUS_NAMES), dtype=np.int64),
                                 Measured.of(work))
        stream = self._open
        if stream.measured is not None:
            stream.measured.add(records)
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
            self.rows.append(summary_row(stream.work, stream.size, self.variant, stream.counts, stats,
                                         stream.measured))
            if stream.spool is not None:
                stream.spool.close()
        return self.rows

"""Solved pieces straight into a run's operation table and summaries, as the vectorized core yields them, so
that memory stays bounded whatever the iterations (:func:`sim.engine.planner.plan.run_fast`, where nothing makes
the run be solved again).

A workload of one QP yields its pieces in posting order, and they go straight on. The parallel streams of a
workload of several QPs (``qps``, ``bidirectional``, ``pairs``) are solved together, a piece of each per block.
Their rows follow each other QP by QP in the table, as the event engine records them
(:func:`models.verbs.workloads.tagged`): the QPs' records wait in raw files (:class:`HeldRecords`) until the
(workload, size) ends (in memory up to a row group). Their summary reads them in posting order, as
:func:`sim.engine.tables.workload_tables` sorts them whole (stably: QP by QP within one picosecond), which
:class:`PostOrder` gives as they come.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from models.verbs.workloads import OpRecords, succeeded, tagged
from sim.core.raw_columns import RawColumns
from sim.engine.planner.errors import Failure
from sim.engine.planner.moderation import Covers
from sim.engine.planner.streams import Stream, by_workload
from sim.engine.tables import StreamedSummaries, operation_rows
from sim.fast import Finished
from sim.scenario.workloads import WorkloadSpec
from sim.store.operations import ROW_GROUP_ROWS, OperationTable, owned_scratch_dir

FIELDS = {"posted_ps": np.int64, "completed_ps": np.int64, "latency_ps": np.int64, "status": np.uint8}
"""The per-operation arrays of :class:`~models.verbs.workloads.OpRecords`, with their types."""


def records(work: WorkloadSpec, post: np.ndarray, done: np.ndarray, failure: Failure | None = None,
            size: int = 0) -> OpRecords:
    """The records of operations at message ``size`` solved with posts ``post`` and completions ``done`` (all
    succeed but where ``failure`` says; a ping-pong iteration's latency is half its round trip)."""
    return OpRecords(post, done, work.rule.latency_ps(post, done),
                     succeeded(len(post)) if failure is None else failure.statuses(len(post), size))


class PostOrder:
    """The operations of a case's parallel streams, given piece by piece per stream (each stream's in posting
    order), released in the order of a stable sort by post of all of them stream by stream, each tagged with its
    stream's index (:attr:`~models.verbs.workloads.OpRecords.qp`): an operation is released once every stream that
    may still post has posted after it, so none that comes later sorts before it."""

    def __init__(self, streams: int) -> None:
        self.held: list[list[OpRecords]] = [[] for _ in range(streams)]
        self.latest: list[int | None] = [None] * streams
        """Per stream: its latest post so far (ps; None before its first piece)."""
        self.ended = [False] * streams

    def add(self, stream: int, piece: OpRecords, ended: bool) -> OpRecords | None:
        """``piece``, the next operations of ``stream`` (its last when ``ended``); returns those now released
        (None: none)."""
        self.held[stream].append(piece)
        self.latest[stream], self.ended[stream] = int(piece.posted_ps[-1]), ended
        posting = [latest for latest, done in zip(self.latest, self.ended) if not done]
        if None in posting:
            return None
        return self._release(min(posting, default=None))

    def flush(self) -> OpRecords | None:
        """Every operation still held (the case has ended)."""
        return self._release(None)

    def _release(self, horizon: int | None) -> OpRecords | None:
        """The held operations posted before ``horizon`` (ps; None: all of them), in order."""
        released = []
        for stream, held in enumerate(self.held):
            joined = [np.concatenate([getattr(r, name) for r in held] or [np.empty(0, kind)])
                      for name, kind in FIELDS.items()]
            n = len(joined[0]) if horizon is None else int(np.searchsorted(joined[0], horizon))
            released.append(OpRecords(*(a[:n] for a in joined)))
            self.held[stream] = [OpRecords(*(a[n:] for a in joined))] if n < len(joined[0]) else []
        merged = tagged(released)  # (each stream's tag its index: every stream gives a part, empty or not)
        if not len(merged.status):
            return None
        order = np.argsort(merged.posted_ps, kind="stable")
        return OpRecords(*(getattr(merged, name)[order] for name in (*FIELDS, "qp")))


class HeldRecords:
    """The records of a (workload, size)'s QPs, appended piece by piece as they come to one set of columns (in
    memory up to a row group, then in raw files under a scratch directory removed with them:
    :class:`~sim.core.raw_columns.RawColumns`), and read back QP by QP, a row group at a time: memory stays bounded
    however many operations there are, and the files open do not grow with the QPs."""

    def __init__(self) -> None:
        self.columns = RawColumns(FIELDS, partial(owned_scratch_dir, what="rows"), ROW_GROUP_ROWS)
        self.pieces: dict[int, list[tuple[int, int]]] = {}
        """Per QP index: where each of its pieces starts in the columns and how many records it holds."""
        self.n = 0

    def add(self, qp: int, records: OpRecords) -> None:
        """Append QP ``qp``'s next operations' records."""
        for name in FIELDS:
            self.columns.append(name, getattr(records, name))
        self.pieces.setdefault(qp, []).append((self.n, len(records.status)))
        self.n += len(records.status)

    def chunks(self, qp: int, rows: int = ROW_GROUP_ROWS):
        """QP ``qp``'s records in order, in chunks of whole pieces that reach ``rows`` (the last may hold fewer), each
        tagged with ``qp``: (its first operation, records)."""
        lo, parts = 0, []
        for start, count in self.pieces.get(qp, []):
            parts.append([self.columns.read(name, start, start + count) for name in FIELDS])
            if sum(len(p[0]) for p in parts) >= rows:
                lo = yield from self._emit(qp, lo, parts)
                parts = []
        if parts:
            yield from self._emit(qp, lo, parts)

    @staticmethod
    def _emit(qp: int, lo: int, parts: list):
        """Yield ``parts`` (per piece, its arrays) as one chunk from operation ``lo``; returns the next's first."""
        arrays = [np.concatenate([p[i] for p in parts]) for i in range(len(FIELDS))]
        yield lo, OpRecords(*arrays, np.full(len(arrays[0]), qp, np.int64))
        return lo + len(arrays[0])

    def close(self) -> None:
        """Close the files (the directory goes with the columns)."""
        self.columns.close()


class Rows:
    """Solved pieces into a run's operation table (None: the run keeps none) and summaries (``sink``), one
    (workload, size) after the other."""

    def __init__(self, ends: list[Stream], table: OperationTable | None, sink: StreamedSummaries) -> None:
        self.ends, self.table, self.sink = ends, table, sink
        workloads = by_workload(ends)
        self.qp = {k: index for mine in workloads for index, k in enumerate(mine)}
        """Each stream's QP index within its workload."""
        self.first = {k: mine[0] for mine in workloads for k in mine}
        """Each stream's workload, by its first stream."""
        self.case: tuple[int, int] | None = None
        """The (workload, size) of several QPs being solved: its first stream, and the size."""
        self.order: PostOrder | None = None
        """The open case's operations, released in posting order to its summary."""
        self.held: HeldRecords | None = None
        """The open case's records (None where the run keeps no table)."""
        self.covers: dict[tuple[int, int], Covers] = {}
        """Per moderated stream and size: its operations held until a completion covers them."""

    def __call__(self, k: int, size: int, piece: Finished, ended: bool) -> None:
        """Stream ``k``'s next ``piece`` at ``size`` (its last when ``ended``)."""
        work = self.ends[k].work
        if work.cq_mod > 1:  # (one stream: Covers)
            piece = self.covers.setdefault((k, size), Covers(work)).add(piece)
            if piece is None:
                return
        done = records(work, piece.post, piece.done)
        if work.streams() == 1:
            self._close()
            if self.table is not None:
                self.table.append(operation_rows(work, size, done, self.sink.variant, piece.lo))
            self.sink.add(work, size, done)
            return
        first = self.first[k]
        if self.case != (first, size):
            self._close()
            self.case, self.order = (first, size), PostOrder(work.streams())
            self.held = HeldRecords() if self.table is not None else None
        qp = self.qp[k]
        if self.held is not None:
            self.held.add(qp, done)
        released = self.order.add(qp, done, ended)
        if released is not None:
            self.sink.add(work, size, released)

    def finish(self) -> list[dict]:
        """The solve has ended: the summary rows of every (workload, size)."""
        self._close()
        return self.sink.finish()

    def _close(self) -> None:
        """End the open case of several QPs: the rest of its operations to the summary, its rows to the table."""
        if self.case is None:
            return
        work = self.ends[self.case[0]].work
        rest = self.order.flush()
        if rest is not None:
            self.sink.add(work, self.case[1], rest)
        if self.held is not None:
            for qp in range(work.streams()):
                for lo, chunk in self.held.chunks(qp):
                    self.table.append(operation_rows(work, self.case[1], chunk, self.sink.variant, lo))
            self.held.close()
        self.case, self.order, self.held = None, None, None

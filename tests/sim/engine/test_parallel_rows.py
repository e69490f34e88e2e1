"""The vectorized core's pieces of several QPs straight into a run's tables (sim/engine/planner/rows.py): the
summary reads the operations in the order :func:`sim.engine.tables.workload_tables` sorts them whole (a stable sort
by post of every QP's records, QP by QP), and the rows follow each other QP by QP, so that the results directory
holds the event engine's bytes, spooled or not, while memory no longer grows with the operations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.store.operations
from models.verbs.workloads import OpRecords
from sim.engine.planner.rows import HeldRecords, PostOrder
from sim.engine.run import run_scenario
from sim.results.write import write_results
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.properties import examples


def _stream(draw, n: int) -> OpRecords:
    """``n`` operations posted in order over a few picoseconds (so that streams tie), completing at random."""
    posts = np.cumsum(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    done = posts + np.asarray(draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), np.int64)
    status = np.asarray(draw(st.lists(st.sampled_from([0, 0, 0, 5]), min_size=n, max_size=n)), np.uint8)
    return OpRecords(posts, done, done - posts, status)


@st.composite
def _interleaved(draw):
    """Streams of operations, each cut into pieces, and the pieces in an order that keeps each stream's in order:
    (stream, piece, whether it is the stream's last)."""
    streams = [_stream(draw, draw(st.integers(1, 12))) for _ in range(draw(st.integers(2, 4)))]
    queues = []
    for records in streams:
        n = len(records.status)
        cuts = [0, *sorted(set(draw(st.lists(st.integers(1, n - 1), max_size=3))) if n > 1 else []), n]
        queues.append([(OpRecords(*(getattr(records, f)[lo:hi] for f in ("posted_ps", "completed_ps", "latency_ps",
                                                                             "status"))), hi == n)
                       for lo, hi in zip(cuts, cuts[1:])])
    arrivals = []
    while any(queues):
        k = draw(st.sampled_from([k for k, queue in enumerate(queues) if queue]))
        arrivals.append((k, *queues[k].pop(0)))
    return streams, arrivals


@settings(max_examples=examples(100))
@given(_interleaved())
def test_parallel_streams_are_released_in_the_order_of_a_stable_sort_by_post(case):
    streams, arrivals = case
    order = PostOrder(len(streams))
    released = [order.add(k, piece, ended) for k, piece, ended in arrivals] + [order.flush()]
    got = [r for r in released if r is not None]
    whole = {f: np.concatenate([getattr(r, f) for r in streams]) for f in ("posted_ps", "completed_ps", "status")}
    sort = np.argsort(whole["posted_ps"], kind="stable")
    for field, values in whole.items():
        np.testing.assert_array_equal(np.concatenate([getattr(r, field) for r in got]), values[sort])


def test_held_records_read_back_each_qps_in_order_a_few_pieces_at_a_time():
    """Two QPs' pieces interleaved in one set of files: each QP's come back in its own order, in chunks of whole
    pieces that reach the row count asked, numbered from its first operation."""
    held = HeldRecords()
    pieces = {0: [], 1: []}
    for qp, lo, n in ((0, 0, 5), (1, 0, 3), (0, 5, 1), (1, 3, 4), (0, 6, 4)):
        part = OpRecords(np.arange(lo, lo + n, dtype=np.int64) + 100 * qp, np.arange(lo, lo + n, dtype=np.int64) + 7,
                         np.full(n, 7, np.int64), np.full(n, (lo + qp) % 3, np.uint8))
        held.add(qp, part)
        pieces[qp].append(part)
    chunks = {qp: list(held.chunks(qp, rows=4)) for qp in (0, 1)}
    held.close()
    assert [(lo, len(c.status)) for lo, c in chunks[0]] == [(0, 5), (5, 5)]
    assert [(lo, len(c.status)) for lo, c in chunks[1]] == [(0, 7)]
    for qp in (0, 1):
        for field in ("posted_ps", "completed_ps", "status"):
            np.testing.assert_array_equal(np.concatenate([getattr(c, field) for _, c in chunks[qp]]),
                                          np.concatenate([getattr(p, field) for p in pieces[qp]]))
        assert all((c.qp == qp).all() and c.status.dtype == np.uint8 for _, c in chunks[qp])


@pytest.mark.parametrize("row_group", [200, 1 << 20])
def test_several_qps_write_the_event_engines_bytes_spooled_or_not(monkeypatch, tmp_path, row_group):
    """Three QPs and a pair of buffers on another path, two sizes: the fast run's results directory holds the
    event engine's files byte for byte, with row groups of a few hundred rows as with whole ones."""
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", row_group)
    buffers = [{"name": n, "on": f"{node}.host", "size": "1MiB"} for n, node in
               (("src", "a"), ("dst", "b"), ("src2", "a"), ("dst2", "b"))]
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB"], "iterations": 300,
             "qps": 3, "pairs": [{"from": "src2", "to": "dst2"}]},
            {"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["8KiB"], "iterations": 200, "qps": 2}]
    data = scenario_dict(seed=3, buffers=buffers, workload=work)
    results = {engine: run_scenario(Scenario.model_validate({**data, "engine": engine}), notice=lambda _: None)
               for engine in ("event", "fast")}
    assert results["fast"].engine == "fast" and results["fast"].table.spooled == (row_group == 200)
    pd.testing.assert_frame_equal(results["fast"].summary, results["event"].summary)
    written = {engine: write_results(result, tmp_path / engine) for engine, result in results.items()}
    for name in ("metrics.parquet", "summary.json", "figures/bw_vs_size.csv"):
        assert (written["fast"] / name).read_bytes() == (written["event"] / name).read_bytes(), name

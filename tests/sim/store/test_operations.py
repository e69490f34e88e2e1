"""The per-operation table spooled to Parquet row groups: the same rows, summaries and results as in memory."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import sim.store.operations
from sim.core.metrics import OpSpool, bandwidth_of, bandwidth_summary
from sim.results.write import write_results
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario, load_scenario_variants
from tests.properties import examples


def _quickstart(engine: str, iterations: int = 700):
    scenario, _ = load_scenario("scenarios/quickstart.yaml")
    work = [w.model_copy(update={"sizes": [4096, 65536], "iterations": iterations}) for w in scenario.workload]
    return scenario.model_copy(update={"workload": work, "engine": engine})


@pytest.mark.parametrize("engine", ["event", "fast"])
def test_spooled_run_has_the_rows_and_results_of_an_in_memory_run(engine, monkeypatch, tmp_path):
    scenario = _quickstart(engine)
    whole = run_scenario(scenario)
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", 300)
    spooled = run_scenario(scenario)
    assert spooled.table.spooled and not whole.table.spooled
    pd.testing.assert_frame_equal(spooled.operations, whole.operations)
    pd.testing.assert_frame_equal(spooled.summary, whole.summary)
    a, b = write_results(whole, tmp_path / "whole"), write_results(spooled, tmp_path / "spooled")
    pd.testing.assert_frame_equal(pd.read_parquet(b / "metrics.parquet"), pd.read_parquet(a / "metrics.parquet"))
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    assert (a / "figures" / "bw_vs_size.csv").read_bytes() == (b / "figures" / "bw_vs_size.csv").read_bytes()


def test_small_run_writes_the_bytes_of_a_one_shot_write(tmp_path):
    result = run_scenario(_quickstart("fast", 50))
    out = write_results(result, tmp_path / "run")
    result.operations.to_parquet(tmp_path / "one_shot.parquet", index=False)
    assert (out / "metrics.parquet").read_bytes() == (tmp_path / "one_shot.parquet").read_bytes()


def test_spooled_variants_are_written_in_order_with_their_figures(monkeypatch, tmp_path):
    _, raw, variants = load_scenario_variants("scenarios/pin_vs_dmabuf.yaml")
    small = [(name, v.model_copy(update={"workload": [w.model_copy(update={"iterations": 400})
                                                      for w in v.workload]})) for name, v in variants]
    whole = [run_scenario(v, variant=name) for name, v in small]
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", 150)
    spooled = [run_scenario(v, variant=name) for name, v in small]
    assert all(r.table.spooled for r in spooled)
    a, b = write_results(whole, tmp_path / "whole", raw), write_results(spooled, tmp_path / "spooled", raw)
    expected = pd.read_parquet(a / "metrics.parquet")
    got = pd.read_parquet(b / "metrics.parquet")
    pd.testing.assert_frame_equal(got.astype({"variant": str}), expected.astype({"variant": str}),
                                  check_categorical=False)
    assert json.loads((a / "summary.json").read_text()) == json.loads((b / "summary.json").read_text())
    for name in ("bw_over_time.csv", "latency_cdf.csv"):
        assert (a / "figures" / name).read_bytes() == (b / "figures" / name).read_bytes()


def test_spooled_bandwidth_equals_the_in_memory_one(tmp_path):
    rng = np.random.default_rng(3)
    posted = np.sort(rng.integers(0, 10**9, 2000))
    done = posted + rng.integers(10**5, 10**7, 2000)
    ok = rng.random(2000) > 0.1
    spool = OpSpool(str(tmp_path))
    for lo in range(0, 2000, 333):
        spool.add(posted[lo:lo + 333], done[lo:lo + 333], ok[lo:lo + 333])
    assert bandwidth_of(4096, spool, 16, chunk=77) == bandwidth_summary(4096, posted, done, 16, ok)
    spool.close()


def test_spool_refuses_operations_out_of_posting_order(tmp_path):
    spool = OpSpool(str(tmp_path))
    spool.add(np.array([10, 20]), np.array([30, 40]), np.ones(2, bool))
    with pytest.raises(ValueError, match="posting order"):
        spool.add(np.array([15]), np.array([50]), np.ones(1, bool))
    spool.close()


def test_a_spooled_run_writes_the_same_bytes_twice(monkeypatch, tmp_path):
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", 250)
    scenario = _quickstart("fast", 400)
    first = write_results(run_scenario(scenario), tmp_path / "first")
    second = write_results(run_scenario(scenario), tmp_path / "second")
    assert (first / "metrics.parquet").read_bytes() == (second / "metrics.parquet").read_bytes()
    assert pd.read_parquet(first / "metrics.parquet")["iteration"].tolist() == [*range(400)] * 4


def test_a_killed_runs_spool_is_removed_by_the_next_spool_and_nothing_else(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    from sim.store.operations import scratch_dir

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(gone.stdout), os.getpid()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in (f"rdmasim-spool-operations-{dead}-x1", f"rdmasim-spool-bandwidth-{alive}-x2", "rdmasim-spool-notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data").write_bytes(b"kept?")
    (tmp_path / "mine.txt").write_text("a user's file\n")
    made = Path(scratch_dir("operations"))
    assert made.parent == tmp_path and made.name.startswith(f"rdmasim-spool-operations-{alive}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [made.name, f"rdmasim-spool-bandwidth-{alive}-x2", "rdmasim-spool-notes", "mine.txt"])


def _latest_schedule(operations: pd.DataFrame, rate_Bps: float, edges: np.ndarray) -> np.ndarray:
    """Bytes delivered between consecutive ``edges``, operation by operation: in completion order, each ends at
    its completion or when the next one's bytes must start, whichever is first, and its bytes cross the wire at
    the link's rate before that."""
    ok = operations[operations["ok"] & operations["kind"].str.endswith("_bw")].sort_values("completed_ps",
                                                                                         kind="stable")
    done, nbytes = ok["completed_ps"].to_numpy(dtype=float), ok["bytes"].to_numpy(dtype=float)
    finish, delivered = done.copy(), np.zeros(len(edges) - 1)
    for i in range(len(done) - 2, -1, -1):
        finish[i] = min(done[i], finish[i + 1] - nbytes[i + 1] / rate_Bps * 1e12)
    for end, size in zip(finish, nbytes):
        begin = end - size / rate_Bps * 1e12
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], begin), 0, None)
        delivered += size * overlap / (end - begin)
    return delivered


@pytest.mark.parametrize("qps", [1, 3])
@pytest.mark.parametrize("row_group", [150, 1 << 20])
def test_bandwidth_over_time_read_a_row_group_at_a_time_is_the_latest_schedule(monkeypatch, qps, row_group):
    from sim.inspect.compare import bandwidth_span, bandwidth_timeline

    scenario = _quickstart("fast", 500)
    work = scenario.workload[0].model_copy(update={"sizes": [4096, 65536], "qps": qps})
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", row_group)
    result = run_scenario(scenario.model_copy(update={"workload": [work]}))
    assert result.table.spooled == (row_group == 150)
    start, end = bandwidth_span(result)
    edges = np.linspace(start, end + 1, 101)
    rate = result.testbed.fabric.params.rate_Bps
    expected = _latest_schedule(result.table.frame(), rate, edges) * 8 / ((edges[1] - edges[0]) / 1e12) / 1e9
    np.testing.assert_allclose(bandwidth_timeline(result)["bw_Gbps"], expected, rtol=1e-9, atol=1e-6)
    assert expected.max() <= rate * 8 / 1e9 * (1 + 1e-9)


@st.composite
def _blocks(draw):
    """Row blocks of one table: labels drawn from a few texts, some blocks empty."""
    blocks = []
    for _ in range(draw(st.integers(1, 6))):
        rows = draw(st.integers(0, 40))
        blocks.append(sim.store.operations.RowBlock(rows, {
            "variant": draw(st.sampled_from(["base", "b-2"])), "workload": draw(st.sampled_from(["w", "lat", "a"])),
            "bytes": draw(st.integers(1, 1 << 23)), "posted_ps": np.arange(rows, dtype=np.int64) * 7,
            "ok": np.arange(rows) % 3 > 0, "status": (np.arange(rows) % 4).astype(np.uint8)},
            {"status": ["success", "loc_len_err", "loc_qp_op_err", "loc_prot_err"]}))
    return blocks


def _frame_of(block) -> pd.DataFrame:
    """A block as pandas builds it column by column: constant texts as columns of their one category."""
    columns = {name: pd.Categorical([value] * block.rows, categories=[value]) if isinstance(value, str) else value
               for name, value in block.columns.items()}
    columns["status"] = pd.Categorical.from_codes(block.columns["status"], categories=block.categories["status"])
    return pd.DataFrame(columns, index=range(block.rows))


def _empty(workload: str):
    return sim.store.operations.RowBlock(0, {"variant": "base", "workload": workload, "bytes": 1,
                                             "posted_ps": np.zeros(0, np.int64), "ok": np.zeros(0, bool),
                                             "status": np.zeros(0, np.uint8)}, {"status": ["success"]})


@settings(max_examples=examples(60), deadline=None)
@given(_blocks(), st.integers(1, 50))
@example([_empty("w"), _empty("lat")], 1)  # labels that differ on no rows: categories of none, as pandas types them
def test_row_blocks_make_the_frame_pandas_joins_and_spool_alike(tmp_path_factory, blocks, row_group):
    """The frame of a table of row blocks is pandas' concatenation of one frame per block with its labels made
    categories again; spooled a few rows at a time (row groups cutting blocks), the file holds the same rows."""
    expected = pd.concat([_frame_of(b) for b in blocks], ignore_index=True)
    for column in ("variant", "workload"):
        expected[column] = expected[column].astype("category")
    whole = sim.store.operations.OperationTable()
    for block in blocks:
        whole.append(block)
    pd.testing.assert_frame_equal(whole.close().frame(), expected)
    spooled = sim.store.operations.OperationTable()
    original = sim.store.operations.ROW_GROUP_ROWS
    sim.store.operations.ROW_GROUP_ROWS = row_group
    try:
        for block in blocks:
            spooled.append(block)
        spooled.close()
    finally:
        sim.store.operations.ROW_GROUP_ROWS = original
    if sum(b.rows for b in blocks) >= row_group:
        assert spooled.spooled
        got = spooled.frame()
        for column in ("variant", "workload", "status"):
            assert got[column].astype(str).tolist() == expected[column].astype(str).tolist()
        pd.testing.assert_frame_equal(got.drop(columns=["variant", "workload", "status"]),
                                      expected.drop(columns=["variant", "workload", "status"]))


def test_a_spool_holds_operations_in_memory_until_they_pass_its_hold(tmp_path):
    """Below ``hold`` operations no directory is made (a run of many small cases makes none); past it every
    operation goes to the files, and the reads are the same either way."""
    rng = np.random.default_rng(5)
    posted = np.sort(rng.integers(0, 10**9, 900))
    done = posted + rng.integers(10**5, 10**7, 900)
    ok = rng.random(900) > 0.2
    made = []

    def directory(spool):
        made.append(spool)
        return str(tmp_path)

    for hold, spooled in ((900, False), (899, True)):
        spool = OpSpool(directory, hold=hold)
        for lo in range(0, 900, 300):
            spool.add(posted[lo:lo + 300], done[lo:lo + 300], ok[lo:lo + 300])
        assert bool(made) == spooled and (tmp_path / "posted.raw").exists() == spooled
        assert bandwidth_of(4096, spool, 16, chunk=77) == bandwidth_summary(4096, posted, done, 16, ok)
        spool.close()


def test_a_table_read_several_times_reads_each_column_of_a_row_group_once_within_its_room(monkeypatch):
    """While :meth:`OperationTable.reading` is on, a spooled table keeps what it read and asks the file only for
    the columns it does not hold; the frames are those read from the file. A column is kept only where all of it
    fits in the room left: a room too small for one column keeps nothing, one for a single column keeps the first
    read, and a table too long for a whole column of times keeps not even its small columns."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", 300)
    table = run_scenario(_quickstart("fast")).table
    assert table.spooled
    asked = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self, group, columns=None, **kwargs):
        asked.append((group, tuple(columns or ())))
        return read_row_group(self, group, columns=columns, **kwargs)

    first, second = ["kind", "posted_ps", "completed_ps"], ["completed_ps", "bytes", "ok"]
    expected = [list(table.batches(columns)) for columns in (first, second, None)]
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    groups = len(expected[0])
    with table.reading():
        got = [list(table.batches(columns)) for columns in (first, second, None)]
        again = list(table.batches(first, backwards=True))
    for frames, wanted in zip(got, expected):
        for frame, other in zip(frames, wanted):
            pd.testing.assert_frame_equal(frame, other)
    for frame, other in zip(again, reversed(expected[0])):
        pd.testing.assert_frame_equal(frame, other)
    rest = tuple(c for c in expected[2][0].columns if c not in first + second)
    assert asked == ([(g, tuple(first)) for g in range(groups)] + [(g, ("bytes", "ok")) for g in range(groups)]
                     + [(g, rest) for g in range(groups)])
    asked.clear()
    with table.reading(room=100):  # less than one column of a row group
        list(table.batches(first))
        list(table.batches(first))
    assert asked == [(g, tuple(first)) for g in range(groups)] * 2
    asked.clear()
    with table.reading(room=8 * table.rows):  # room for one column of int64 times, whole
        list(table.batches(["posted_ps"]))
        list(table.batches(["completed_ps"]))
        asked.clear()
        both = [list(table.batches(["posted_ps", "completed_ps"])) for _ in range(2)]
    assert asked == [(g, ("completed_ps",)) for g in range(groups)] * 2
    for frames in both:
        for frame, other in zip(frames, expected[0]):
            pd.testing.assert_frame_equal(frame, other[["posted_ps", "completed_ps"]])
    asked.clear()
    with table.reading(room=8 * table.rows - 1):  # too long a table for a column of times: nothing is kept
        list(table.batches(["kind"]))
        list(table.batches(["kind"]))
    assert asked == [(g, ("kind",)) for g in range(groups)] * 2
    asked.clear()
    list(table.batches(first))  # outside: read as before
    assert asked == [(g, tuple(first)) for g in range(groups)]


def test_a_row_group_the_spool_failed_to_write_fails_the_table(monkeypatch):
    """Row groups are written while the run goes on; a write that fails (a full disk) raises at the table's next
    row group or its close, never passes unseen."""
    import pyarrow.parquet as pq

    rows = run_scenario(_quickstart("fast", 50)).operations
    monkeypatch.setattr(sim.store.operations, "ROW_GROUP_ROWS", 30)

    def full(self, table, row_group_size=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    for parts in ([rows.iloc[:30]], [rows.iloc[:30], rows.iloc[30:60]]):
        table = sim.store.operations.OperationTable()
        with pytest.raises(OSError, match="No space left"):
            for part in parts:
                table.append(part)
            table.close()

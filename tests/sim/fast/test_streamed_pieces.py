"""A run whose pieces go straight to its tables keeps only each block's last operation, in arrays of its own: a
view of it would keep the whole block alive, and memory would grow with the run's operations."""

from __future__ import annotations

from sim.engine.harness import setup_run
from sim.engine.tables import StreamedSummaries
from sim.engine.planner.plan import _pieces, pipelines
from sim.engine.planner.rows import Rows
from sim.engine.planner.streams import streams
from sim.scenario.schema import Scenario
from sim.store.operations import OperationTable
from tests.conftest import scenario_dict


def test_a_streamed_piece_holds_its_last_operation_in_arrays_of_its_own():
    scenario = Scenario.model_validate(scenario_dict(workload=[{"kind": "write_bw", "from": "src", "to": "dst",
                                                                "sizes": ["4KiB"], "iterations": 40_000}]))
    bed, started, _ = setup_run(scenario, 3, False)
    ends = streams(scenario, bed)
    pipes = pipelines(ends)
    rows = Rows(ends, OperationTable(), StreamedSummaries("base"))
    pieces = [piece for _, piece in _pieces(pipes, started, None, {}, rows=rows)]
    assert len(pieces) > 1  # several blocks
    for piece in pieces:
        arrays = [piece.post, piece.done, *piece.marks.values()]
        assert all(len(a) == 1 and a.base is None for a in arrays)

"""A run asked to keep no per-operation table (``run_scenario(..., operations=False)``, what ``rdmasim perftest``
asks without ``--out``, -U, -H or --report-both) gives the same summaries and counters as one that keeps it, on
either engine and whichever way its rows are built (streamed piece by piece, or whole where a workload has
several QPs)."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.engine.run import run_scenario

WORKLOADS = {
    "streamed": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64B", "64KiB"], "iterations": 300},
                 {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["8B"], "iterations": 200}],
    "several QPs": [{"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 200,
                     "qps": 3}],
}


@pytest.mark.parametrize("engine", ["event", "fast"])
@pytest.mark.parametrize("shape", list(WORKLOADS))
def test_a_run_without_its_operation_table_summarises_the_same(make_scenario, engine, shape):
    scenario = make_scenario(workload=WORKLOADS[shape], engine=engine)
    kept = run_scenario(scenario, notice=lambda _: None)
    alone = run_scenario(scenario, notice=lambda _: None, operations=False)
    assert kept.engine == alone.engine == engine
    assert kept.table is not None and kept.table.rows == sum(w["iterations"] * len(w["sizes"]) * w.get("qps", 1)
                                                             for w in WORKLOADS[shape])
    assert alone.table is None
    pd.testing.assert_frame_equal(alone.summary, kept.summary)
    assert alone.counters == kept.counters


def test_asking_a_run_without_its_table_for_its_operations_names_the_run(make_scenario):
    scenario = make_scenario(workload=WORKLOADS["streamed"])
    result = run_scenario(scenario, notice=lambda _: None, operations=False)
    with pytest.raises(ValueError, match=f"run {scenario.name} \\(base\\) kept no per-operation rows"):
        result.operations

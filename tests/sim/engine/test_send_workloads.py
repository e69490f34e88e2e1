"""The SEND workloads in scenario files: ``rx_depth`` only where receives are posted, one QP for send_lat, several
for send_bw (each pair with its own receives), data mode's real bytes for both, and the RNR NAK counter."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.engine.run import run_scenario
from sim.inspect.compare import comparison_table
from sim.results.write import write_results
from tests.conftest import tiny_yaml


@pytest.mark.parametrize("item, key, words", [
    ("{kind: write_bw, from: src, to: dst, sizes: [4KiB], rx_depth: 64}", "rx_depth",
     "write_bw posts no receives; rx_depth is for send_bw and send_lat"),
    ("{kind: send_lat, from: src, to: dst, sizes: [4KiB], qps: 2}", "qps",
     "send_lat measures one QP"),
    ("{kind: send_bw, from: src, to: dst, sizes: [4KiB], rx_depth: 0}", "rx_depth",
     "0 is below the minimum of 1"),
])
def test_bad_send_workloads_are_refused_naming_file_line_and_key(tmp_path, item, key, words):
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml(item))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    column = len("  - ") + item.index(f"{key}: ") + len(f"{key}: ") + 1  # the value, on line 11 of tiny_yaml's text
    assert result.output.startswith(f"{path}:11:{column} workload[0].{key}: ") and words in result.output


def test_send_bw_on_several_qps_gives_each_pair_its_receives(make_scenario):
    scn = make_scenario(engine="event", workload=[{"kind": "send_bw", "from": "src", "to": "dst",
                                                   "sizes": ["4KiB"], "iterations": 300, "tx_depth": 16, "rx_depth": 32,
                                                   "qps": 3}])
    result = run_scenario(scn)
    ops = result.operations
    assert ops["ok"].all() and sorted(ops["qp"].unique()) == [0, 1, 2] and len(ops) == 900
    responders = result.testbed.qps[1::2]
    assert [qp.rq.consumed for qp in responders] == [300] * 3 and result.counters["rnr_naks"] == 0


@pytest.mark.parametrize("kind", ["send_bw", "send_lat"])
def test_send_workloads_move_real_bytes_in_data_mode(make_scenario, kind):
    scn = make_scenario(data=True, workload=[{"kind": kind, "from": "src", "to": "dst", "sizes": ["100B", "64KiB"],
                                              "iterations": 20}])
    result = run_scenario(scn)
    assert result.operations["ok"].all()
    assert result.counters["data_checked_bytes"] == 65536 and result.counters["data_mismatched_bytes"] == 0


@pytest.mark.parametrize("kind", ["send_bw", "send_lat"])
@pytest.mark.parametrize("node", ["a", "b"])
def test_a_qp_error_mid_run_fails_the_rest_and_every_iteration_is_counted(make_scenario, kind, node):
    scn = make_scenario(engine="event", events=[{"at": "20us", "kind": "qp-error", "node": node}],
                        workload=[{"kind": kind, "from": "src", "to": "dst", "sizes": ["4KiB", "8KiB"],
                                   "iterations": 400}])
    summary = run_scenario(scn).summary
    first, second = summary["errors"]
    assert 0 < first < 400 and second == 400  # the QP stays in ERR: the next size fails whole
    assert all(sum(counts.values()) == errors for counts, errors in zip(summary["errors_by_status"], summary["errors"]))


def test_send_bw_on_several_qps_runs_size_after_size(make_scenario):
    # A QP whose stream ends first sees its last receive completions land while the others still run: their
    # slots stay held until the next size's server polls them, so its top-up and reposts never overfill the queue.
    scn = make_scenario(engine="event", workload=[{"kind": "send_bw", "from": "src", "to": "dst",
                                                   "sizes": ["256B", "512B", "1KiB"], "iterations": 2000,
                                                   "qps": 4}])
    result = run_scenario(scn)
    assert result.operations["ok"].all() and len(result.operations) == 3 * 4 * 2000
    responders = result.testbed.qps[1::2]
    assert [qp.rq.consumed for qp in responders] == [3 * 2000] * 4
    assert all(0 <= qp.rq.held <= qp.rq.depth for qp in responders)


def test_each_case_counts_its_own_rnr_naks(make_scenario, tmp_path):
    # 64 B SENDs outrun 16 receives reposted a poll after each completion; 4 KiB ones do not (send_rnr.yaml's rx16).
    # An RNR NAK holds its request (and, go-back-N, those behind it) for the responder's min_rnr_timer, perftest's
    # 640 us: a case whose completions never pause that long got none, a case that got one paused at least that long.
    scn = make_scenario(engine="event", nodes=[{"name": "a"}, {"name": "b", "host": {"poll_period": "1us"}}],
                        workload=[{"kind": "send_bw", "name": "stream", "from": "src", "to": "dst",
                                   "sizes": ["64B", "4KiB"], "iterations": 2000, "tx_depth": 64, "rx_depth": 16}])
    result = run_scenario(scn)
    rows = {row["bytes"]: row for row in comparison_table([result]).to_dict("records")}
    assert result.summary["rnr_naks"].sum() == result.counters["rnr_naks"] > 0
    for size, row in rows.items():
        assert (row["rnr_naks"] > 0) == (row["stall_us"] >= 640), (size, row["rnr_naks"], row["stall_us"])
    assert rows[4096]["rnr_naks"] == 0 < rows[64]["rnr_naks"]
    # summary.json's perftest rows carry each case's own count, one variant or several
    written = json.loads((write_results(result, tmp_path / "out") / "summary.json").read_text())
    assert {row["bytes"]: row["rnr_naks"] for row in written["results"]} == \
        {size: row["rnr_naks"] for size, row in rows.items()}

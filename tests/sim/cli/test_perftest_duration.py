"""perftest -D measures the middle of its run (perftest_parameters.c, ``print_report_bw`` and
``print_report_lat_duration``; perftest_resources.c, ``catch_alarm``): the first and the last ``margin`` seconds
(-f; by default a quarter of -D, in whole seconds) are not measured; #iterations counts the work requests of every
QP that complete in between, and the rates are those over the measured seconds (so #iterations over -D is half the
message rate for -D 60, as perftest issue #273 found). A latency test run for a duration prints its own row:
the measured seconds over its iterations (halved for a ping-pong) and the iterations a second."""

from __future__ import annotations

import pytest

from sim.cli.perftest import perftest_scenario
from sim.cli.perftest_report import LAT_DURATION_HEADER
from sim.core.units import PS_PER_S
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import perftest_streams, scenario_dict
from tests.sim.fast.test_differential import same_runs, two_nodes


@pytest.mark.parametrize("argv, margin_s", [(["-D", "4"], 1), (["-D", "3"], 0), (["-D", "9"], 2),
                                            (["-D", "5", "-f", "2"], 2), (["-D", "8", "-f", "0"], 0)])
def test_the_margin_is_a_quarter_of_the_duration_in_whole_seconds_or_f(argv, margin_s):
    work = perftest_scenario(["ib_write_bw", *argv]).workload[0]
    assert (work.margin or 0) == margin_s * PS_PER_S and work.duration == int(argv[1]) * PS_PER_S


@pytest.mark.parametrize("argv", [["-D", "4", "-f", "2"], ["-D", "1", "-f", "1"]])
def test_a_margin_of_half_the_duration_or_more_is_refused_as_perftest_refuses_it(argv):
    code, report, notes = perftest_streams(["ib_write_bw", *argv])
    assert code == 2 and report == "" and "please check that DURATION > 2*MARGIN" in notes


def test_a_bandwidth_run_counts_and_rates_the_measured_seconds_only():
    """-D 4 of 8 MiB WRITEs over 4 QPs: 2 s measured, so #iterations is about half the run's completions, every
    QP's together, and the message rate is #iterations over those 2 s."""
    code, report, _ = perftest_streams(["ib_write_bw", "-D", "4", "-s", "8M", "-q", "4", "--report_gbits"])
    (row,) = [line.split() for line in report.splitlines() if line.split()[:1] == ["8388608"]]
    iterations, gbits, mpps = int(row[1]), float(row[3]), float(row[4])
    assert code == 0 and mpps == pytest.approx(iterations / 2 / 1e6, abs=5e-7)  # (as printed: %.6f)
    assert gbits == pytest.approx(iterations * 8388608 * 8 / 2 / 1e9, abs=0.005)  # (as printed: %.2f)
    scenario = perftest_scenario(["ib_write_bw", "-D", "4", "-s", "8M", "-q", "4"])
    ops = run_scenario(scenario, notice=lambda _: None).operations
    done = ops["completed_ps"] - ops["posted_ps"].min()
    assert iterations == ((done >= PS_PER_S) & (done < 3 * PS_PER_S) & ops["ok"]).sum()
    assert 0.45 < iterations / len(ops) < 0.55


def test_a_latency_run_prints_perftests_duration_row():
    code, report, _ = perftest_streams(["ib_write_lat", "-D", "4", "-s", "8M"])
    lines = report.splitlines()
    header = lines.index(LAT_DURATION_HEADER)
    size, iterations, t_avg, tps = lines[header + 1].split()
    assert code == 0 and size == "8388608" and int(iterations) > 1000
    assert float(t_avg) == pytest.approx(2e6 / 2 / int(iterations), abs=0.005)  # halved: a ping-pong
    assert float(tps) == pytest.approx(int(iterations) / 2, abs=0.005)


def test_a_scenarios_margin_is_measured_alike_on_both_engines():
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "duration": "40us",
             "margin": "10us", "tx_depth": 32},
            {"kind": "read_lat", "from": "src", "to": "dst", "sizes": ["64B"], "duration": "30us", "margin": "5us"}]
    event, fast = same_runs(scenario_dict(seed=4, workload=work, **two_nodes("cx7-gen5-400G")))
    for row, (lo, hi) in zip(fast.summary.itertuples(), ((10, 30), (5, 25))):
        ops = fast.operations[fast.operations["workload"] == row.workload]
        done = (ops["completed_ps"] - ops["posted_ps"].min()) / 1e6
        assert row.iterations == ((done >= lo) & (done < hi) & ops["ok"]).sum() > 0
    first = fast.summary.iloc[0]
    assert first["msg_rate_Mpps"] == pytest.approx(first["iterations"] / 20, rel=1e-9)
    assert first["bw_peak_Gbps"] >= first["bw_avg_Gbps"]  # a peak is never below the average


def test_a_margin_needs_a_duration_twice_as_long():
    for extra in ({"iterations": 100, "margin": "1us"}, {"duration": "10us", "margin": "5us"}):
        work = {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], **extra}
        with pytest.raises(ValueError, match="DURATION > 2\\*MARGIN"):
            Scenario.model_validate(scenario_dict(workload=[work]))


def test_a_bidirectional_run_counts_its_own_side_and_rates_both():
    """perftest -b -D: each side counts the completions of its own QPs (the iterations it prints) and the report
    adds the remote side's rate to its own (print_full_bw_report)."""
    argv = ["ib_write_bw", "-b", "-D", "4", "-s", "8M", "--report_gbits"]
    code, report, _ = perftest_streams(argv)
    (row,) = [line.split() for line in report.splitlines() if line.split()[:1] == ["8388608"]]
    ops = run_scenario(perftest_scenario(argv[:-1]), notice=lambda _: None).operations
    done = ops["completed_ps"] - ops["posted_ps"].min()
    measured = (done >= PS_PER_S) & (done < 3 * PS_PER_S) & ops["ok"]
    assert code == 0 and int(row[1]) == (measured & (ops["qp"] == 0)).sum() < measured.sum()
    assert float(row[3]) == pytest.approx(measured.sum() * 8388608 * 8 / 2 / 1e9, abs=0.005)


def test_output_latency_of_a_duration_run_is_the_measured_seconds_over_the_iterations():
    """print_report_lat_duration prints that latency alone with --output=latency (READ: no halving)."""
    code, value, _ = perftest_streams(["ib_read_lat", "-D", "4", "-s", "4M", "--output=latency"])
    _, report, _ = perftest_streams(["ib_read_lat", "-D", "4", "-s", "4M"])
    lines = report.splitlines()
    iterations = int(lines[lines.index(LAT_DURATION_HEADER) + 1].split()[1])
    assert code == 0 and float(value) == pytest.approx(2e6 / iterations, abs=1e-6)

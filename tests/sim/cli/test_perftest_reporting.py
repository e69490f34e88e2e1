"""perftest's report options (-N, --output, -H/-U, -C, --report-both, -V), the options a simulation accepts but does
not model (-e, -O, -M, --ipv6, --tclass, -j, -k, --bind_source_ip) and the two it maps onto the model
(--mr_per_qp, --data_validation): their output, checks and messages."""

from __future__ import annotations

import pytest

from sim import __version__
from sim.cli.perftest import perftest_scenario, run_perftest
from sim.cli.perftest_report import BW_HEADER, LAT_HEADER, RULE
from sim.engine.run import run_scenario
from tests.conftest import perftest_streams

BW = ["ib_write_bw", "-s", "4K", "-n", "200", "--report_gbits"]
LAT = ["ib_read_lat", "-n", "20"]


def _rows(report: str, size: int) -> list[list[float]]:
    return [[float(x) for x in line.split()] for line in report.splitlines() if line.split()[:1] == [str(size)]]


def test_no_peak_prints_a_zero_peak_and_the_same_average():
    (_, plain), (code, text) = run_perftest(BW), run_perftest([*BW, "-N"])
    (peaked,), (unpeaked,) = _rows(plain, 4096), _rows(text, 4096)
    assert code == 0 and peaked[2] > 0 and unpeaked[2] == 0.0 and unpeaked[3] == peaked[3]


@pytest.mark.parametrize("flags", [["-n", "20001"], ["-D", "1", "-s", "8M"]])
def test_perftest_measures_no_peak_above_20000_iterations_or_for_a_duration(flags):
    code, report, notes = perftest_streams(["ib_write_bw", "-s", "64", *flags])
    assert code == 0 and " WARNING: BW peak won't be measured in this run." in notes
    assert _rows(report, int(flags[-1].rstrip("M")) * 2**20 if "-D" in flags else 64)[0][2] == 0.0


@pytest.mark.parametrize("output, column", [("bandwidth", "bw_avg_Gbps"), ("message_rate", "msg_rate_Mpps")])
def test_output_prints_only_the_chosen_average_of_each_size(output, column):
    argv = ["ib_write_bw", "-a", "-n", "50", "--report_gbits"]
    code, text = run_perftest([*argv, f"--output={output}"])
    summary = run_scenario(perftest_scenario(argv), notice=lambda _: None).summary
    assert code == 0 and text.splitlines() == [f"{value:f}" for value in summary[column]]


def test_output_latency_prints_the_average_latency():
    code, text = run_perftest([*LAT, "--output", "latency"])
    average = run_scenario(perftest_scenario(LAT), notice=lambda _: None).summary["t_avg_us"].iloc[0]
    assert code == 0 and text == f"{average:f}"


def _latencies_us(argv: list[str]) -> list[float]:
    ops = run_scenario(perftest_scenario(argv), notice=lambda _: None).operations
    return [float(f"{v / 1e6:g}") for v in ops["latency_ps"]]


@pytest.mark.parametrize("flag, order", [("-H", sorted), ("--report-histogrm", sorted), ("-U", list)])
def test_histogram_and_unsorted_print_every_iterations_latency_then_the_header_again(flag, order):
    code, report = run_perftest([*LAT, flag])
    lines = report.splitlines()
    start = lines.index("#, usec")
    listed = [line.split(", ") for line in lines[start + 1:start + 21]]
    assert code == 0 and [int(k) for k, _ in listed] == list(range(1, 21))
    assert [float(v) for _, v in listed] == order(_latencies_us(LAT))
    assert lines[start + 21:start + 23] == [RULE, LAT_HEADER] and lines[start + 23].split()[:2] == ["2", "20"]


def test_unsorted_and_histogram_together_print_both_lists_and_output_keeps_them():
    code, report = run_perftest([*LAT, "-U", "-H", "--output=latency"])
    lines = report.splitlines()
    assert code == 0 and lines.count("#, usec") == 2 and len(lines) == 2 * 21 + 1 and LAT_HEADER not in lines


def test_histogram_of_a_duration_run_is_said_to_be_ignored(monkeypatch):
    def short(scenario, **given):  # -D's least second: 20 us
        work = scenario.workload[0].model_copy(update={"duration": 20 * 10**6})
        return run_scenario(scenario.model_copy(update={"workload": [work]}), **given)

    monkeypatch.setattr("sim.engine.run.run_scenario", short)
    code, report, notes = perftest_streams(["ib_write_lat", "-D", "1", "-H"])
    assert code == 0 and "#, usec" not in report and "-H/-U ignored" in notes


def test_report_both_adds_each_direction_of_a_bidirectional_test():
    code, report = run_perftest([*BW, "-b", "--report-both"])
    (both, local, remote) = _rows(report, 4096)
    assert code == 0 and " Local results: write_bw" in report and " Remote results: write_bw" in report
    assert report.count(BW_HEADER) == 3
    assert local[3] + remote[3] == pytest.approx(both[3], rel=0.01)
    assert local[3] == pytest.approx(remote[3], rel=0.01)


def test_each_side_of_report_both_counts_its_qps_work_requests():
    """perftest's print_report_bw on each side: -n times that side's QPs (num_of_calculated_iters *= num_of_qps)."""
    code, report = run_perftest(["ib_write_bw", "-s", "4096", "-n", "300", "-q", "2", "-b", "--report-both"])
    assert code == 0 and [row[1] for row in _rows(report, 4096)] == [600, 600, 600]


@pytest.mark.parametrize("flags, why", [([], "bidirectional test (-b)"), (["-b", "-a"], "single size only"),
                                        (["-b", "--output=bandwidth"], "--output prints only")])
def test_report_both_says_why_it_adds_nothing(flags, why):
    argv = ["ib_write_bw", "-n", "20", *flags, "--report-both"] if "-a" in flags else [*BW, *flags, "--report-both"]
    code, report, notes = perftest_streams(argv)
    assert code == 0 and "Local results" not in report and why in notes, notes


def test_version_names_rdmasim_not_perftest():
    code, text, notes = perftest_streams(["ib_send_lat", "-s", "64", "-V"])
    assert (code, notes) == (0, "") and text == (f"Version: rdmasim {__version__} (the simulator's front end to "
                                                 "perftest's ib_send_lat; not perftest's binary)")


@pytest.mark.parametrize("argv, message", [
    (["ib_write_lat", "-N"], "-N/--noPeak: NoPeak only valid for BW tests"),
    (["ib_write_bw", "-H"], "-H/--report-histogram: Available only on Latency tests"),
    (["ib_write_bw", "-U"], "-U/--report-unsorted: is Available only on Latency tests"),
    (["ib_write_bw", "-C"], "-C/--report-cycles: Available only on Latency tests"),
    (["ib_write_lat", "-C"], "the simulated CPU has no clock whose cycles to count"),
    (["ib_write_bw", "--output=latency"], "Output verbosity level for BW can be: bandwidth, message_rate"),
    (["ib_send_lat", "--output=bandwidth"], "Output verbosity level for LAT can be: latency"),
    (["ib_write_bw", "--output=bw"], "Invalid verbosity level output flag. Please use bandwidth, latency, "
                                     "message_rate"),
    (["ib_write_bw", "-e"], "-e/--events: Events feature not available on WRITE verb"),
    (["ib_write_lat", "-e"], "Events feature not available on WRITE verb"),
    (["ib_send_bw", "-e", "-D", "2"], "Duration mode doesn't work with events."),
    (["ib_read_lat", "-O"], "Dual-port mode only supports BW tests."),
    (["ib_write_bw", "-O", "-R"], "Perftest still doesn't support Dual Port with rdma_cm"),
    (["ib_write_bw", "-j", "10.0.0"], "Invalid client IP address"),
    (["ib_write_bw", "-k", "80x"], "Client Port argument 80x should be int"),
    (["ib_write_bw", "--tclass", "high"], "traffic class argument high should be int"),
])
def test_perftests_checks_of_the_report_and_unmodelled_options(argv, message):
    code, report, said = perftest_streams(argv)
    assert (code, report) == (2, "") and message in said and len(said.splitlines()) == 1, said


@pytest.mark.parametrize("test, flags, said", [
    ("ib_send_bw", ["-e"], "-e/--events ignored: the simulated CPU polls its CQs"),
    ("ib_read_lat", ["--events"], "-e/--events ignored"),
    ("ib_write_bw", ["-O"], "-O/--dualport ignored: the simulated NIC has one port"),
    ("ib_send_lat", ["-M", "255:1:0:0:0:0:0:0:0:0:0:0:0:0:0:1"], "-M/--MGID ignored"),
    ("ib_write_bw", ["--ipv6"], "--ipv6 ignored: the simulated fabric needs no GID"),
    ("ib_write_bw", ["--tclass=106"], "--tclass ignored"),
    ("ib_write_bw", ["-j", "10.0.0.2", "-k", "5000"], "-k/--source_port ignored"),
    ("ib_write_bw", ["--bind_source_ip=10.0.0.2"], "--bind_source_ip ignored"),
])
def test_options_the_simulation_does_not_model_are_accepted_and_said_to_be_ignored(test, flags, said):
    argv = [test, "-n", "20", *flags]
    code, report, notes = perftest_streams(argv)
    assert code == 0 and report.startswith(RULE) and said in notes, notes


def test_mr_per_qp_gives_each_qp_buffers_and_mrs_of_its_own():
    argv = ["ib_write_bw", "-s", "4K", "-n", "100", "-q", "3", "--mr_per_qp"]
    scenario = perftest_scenario(argv)
    work = scenario.workload[0]
    assert (work.qps, work.buffer_pairs()) == (1, [("local", "remote"), ("local1", "remote1"), ("local2", "remote2")])
    assert perftest_scenario(argv[:-1]).workload[0].buffer_pairs() == [("local", "remote")]
    result = run_scenario(scenario, notice=lambda _: None)
    assert len(result.registrations) == 6 and result.operations["qp"].nunique() == 3
    code, report = run_perftest(argv)
    assert code == 0 and "the first of 3 MRs (one per QP)" in report and "Number of qps   : 3" in report


def test_data_validation_runs_in_data_mode_and_reports_the_bytes_compared():
    argv = ["ib_read_bw", "-s", "16K", "-n", "50", "--data_validation"]
    assert perftest_scenario(argv).data and not perftest_scenario(argv[:-1]).data
    code, report, notes = perftest_streams(argv)
    assert code == 0 and report.endswith("\nVALIDATION: PASSED - 16384 bytes") and "data mode" in notes
    code, report = run_perftest([*argv, "--output=bandwidth"])
    assert code == 0 and len(report.splitlines()) == 2 and report.endswith("\nVALIDATION: PASSED - 16384 bytes")


def test_data_validation_fails_the_run_when_bytes_differ(monkeypatch):
    monkeypatch.setattr("sim.engine.harness.verify_data", lambda bed, scenario: {"data_checked_bytes": 4096,
                                                                           "data_mismatched_bytes": 7})
    code, report, notes = perftest_streams(["ib_write_bw", "-s", "4K", "-n", "50", "--data_validation"])
    assert code == 1 and "VALIDATION" not in report
    assert "VALIDATION: FAILED - 7 byte(s) of 4096 differ from their source" in notes


@pytest.mark.parametrize("flags, message", [
    (["ib_send_bw"], "--data_validation is only supported with WRITE or READ verb"),
    (["ib_write_lat"], "--data_validation is only supported in bandwidth tests"),
    (["ib_write_bw", "-l", "2"], "--data_validation is incompatible with --post_list > 1"),
    (["ib_write_bw", "-c", "UC"], "--data_validation requires RC connection type"),
    (["ib_write_bw", "-q", "2", "--mr_per_qp"], "--data_validation is incompatible with --mr_per_qp"),
    (["ib_read_bw", "-a"], "--data_validation is incompatible with -a (run all sizes)"),
    (["ib_write_bw", "-t", "16"], "--data_validation requires tx_depth >= 32 (use -t)"),
    (["ib_write_bw", "--use_rocm", "--use_rocm_dmabuf"], "--data_validation requires --use_cuda or host memory"),
    (["ib_write_bw", "-b"], "--data_validation with -b: rdmasim's two directions move bytes between the same two "
                            "buffers, so neither ends a copy of the other to compare (perftest keeps a send and a "
                            "receive half in each); run without -b"),
])
def test_data_validation_is_refused_where_perftest_refuses_it(flags, message):
    code, _, said = perftest_streams([*flags, "--data_validation"])
    assert code == 2 and said == f"rdmasim perftest: {message}", said

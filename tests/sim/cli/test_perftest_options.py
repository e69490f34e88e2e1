"""perftest's posting, duration, connection and reporting options: each front-end flag against the equivalent
scenario, the values perftest refuses, the options a simulation ignores."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sim.core.errors import ConfigError
from sim.cli.perftest import TESTS, cq_moderation, perftest_cq_moderation, perftest_scenario, run_perftest
from sim.cli.perftest_args import parser
from sim.cli.perftest_report import BW_HEADER, BW_HEADER_MIB, GBPS_TO_MIBPS, RULE
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario
from sim.scenario.workloads import WorkloadSpec
from tests.conftest import perftest_streams


def _row(text: str, size: int) -> list[float]:
    row = next(line for line in text.splitlines() if line.split()[:1] == [str(size)])
    return [float(x) for x in row.split()]


def _summary(argv: list[str], **work):
    """The summary of the scenario the base command line ``argv`` stands for, its workload updated by ``work``."""
    scenario = perftest_scenario(argv)
    updated = scenario.workload[0].model_copy(update=work)
    return run_scenario(scenario.model_copy(update={"workload": [updated]}), notice=lambda _: None).summary


SMALL = {"ib_write_bw": ["-s", "4K", "-n", "400"], "ib_read_bw": ["-s", "4K", "-n", "400"],
         "ib_send_bw": ["-s", "4K", "-n", "400"], "ib_atomic_bw": ["-n", "400"],
         "ib_write_lat": ["-n", "100"], "ib_read_lat": ["-n", "100"], "ib_send_lat": ["-n", "100"],
         "ib_atomic_lat": ["-n", "100"]}


@pytest.mark.parametrize("test", list(TESTS))
def test_each_tool_prints_its_equivalent_scenarios_numbers(test):
    argv = [test, *SMALL[test], "--report_gbits"]
    code, text = run_perftest(argv)
    assert code == 0, text
    (row,) = run_scenario(perftest_scenario(argv), notice=lambda _: None).summary.to_dict("records")
    printed = _row(text, row["bytes"])
    if test.endswith("_bw"):
        assert printed[1:4] == [row["iterations"], round(row["bw_peak_Gbps"], 2), round(row["bw_avg_Gbps"], 2)]
    else:
        assert printed[1:5] == [row["iterations"], round(row["t_min_us"], 2), round(row["t_max_us"], 2),
                                round(row["t_typical_us"], 2)]


@pytest.mark.parametrize("flags, work", [
    (["-b"], {"bidirectional": True}),
    (["-Q", "16"], {"cq_mod": 16}),
    (["-l", "8"], {"post_list": 8, "cq_mod": 8}),  # perftest: CQ moderation follows the post list
    (["-l", "8", "-Q", "4"], {"post_list": 8, "cq_mod": 4}),
    (["-Q", "512", "-t", "64"], {"cq_mod": 64, "tx_depth": 64}),  # perftest caps -Q at the tx depth
])
def test_posting_flags_become_the_workloads_keys_and_run_as_it(flags, work):
    base = ["ib_write_bw", "-s", "4K", "-n", "800", "--report_gbits"]
    got = perftest_scenario([*base, *flags]).workload[0]
    assert {key: getattr(got, key) for key in work} == work
    code, text = run_perftest([*base, *flags])
    assert code == 0, text
    expected = _summary(base, **work)["bw_avg_Gbps"].iloc[0]
    assert _row(text, 4096)[3] == round(expected, 2)


def test_bidirectional_doubles_a_link_bound_write_stream():
    one, both = (_summary(["ib_write_bw", "-s", "64K", "-n", "300"], bidirectional=b)["bw_avg_Gbps"].iloc[0]
                 for b in (False, True))
    assert 1.8 < both / one <= 2.0


def test_cq_moderation_gives_unsignaled_work_requests_their_signaled_completion():
    scenario = perftest_scenario(["ib_write_bw", "-s", "4K", "-n", "64", "-Q", "8"])
    ops = run_scenario(scenario, notice=lambda _: None).operations
    groups = ops["completed_ps"].to_numpy().reshape(8, 8)
    assert (groups == groups[:, -1:]).all() and (groups[1:, 0] > groups[:-1, 0]).all()


@pytest.mark.parametrize(("argv", "theirs"), [
    (["ib_write_bw"], 1),  # 64 KiB, above MSG_SIZE_CQ_MOD_LIMIT: every work request signaled
    (["ib_write_bw", "-s", "8192"], 100),  # DEF_CQ_MOD up to 8 KiB
    (["ib_write_bw", "-s", "8193"], 1),
    (["ib_write_bw", "-a"], 100),  # not disabled for RUN_ALL
    (["ib_send_bw", "-e"], 100),  # nor with use_event
    (["ib_read_bw", "-s", "64", "-t", "32"], 32),  # capped at the tx depth
    (["ib_write_bw", "-l", "8"], 8),  # "Post List requested - CQ moderation will be the size of the post list"
    (["ib_write_bw", "-s", "64", "-Q", "16"], 16),
])
def test_perftest_s_own_cq_moderation_is_said_where_rdmasim_signals_every_work_request(argv, theirs):
    """perftest_parameters.c: ``cq_mod = DEF_CQ_MOD`` (100); ``force_dependecies`` sets 1 above
    ``MSG_SIZE_CQ_MOD_LIMIT`` (8192) unless -Q, UD, -a or -e, caps it at the tx depth, and takes the post list's
    size with -l and no -Q. rdmasim signals every work request unless -Q or -l says otherwise, and says so where
    perftest would not."""
    args = parser(argv[0]).parse_args(argv[1:])
    assert perftest_cq_moderation(args) == theirs
    code, _, said = perftest_streams([*argv, "-n", "16"])
    said = [line for line in said.splitlines() if "CQ moderation" in line]
    ours = cq_moderation(args)
    assert code == 0 and bool(said) == (ours != theirs)
    assert all(f"CQ moderation {ours} " in line and f"-Q {theirs} follows it" in line for line in said)


def test_outstanding_reads_cap_read_bandwidth():
    one, many = (_summary(["ib_read_bw", "-s", "4K", "-n", "400"], max_rd_atomic=k)["bw_avg_Gbps"].iloc[0]
                 for k in (1, 16))
    assert perftest_scenario(["ib_read_bw", "-o", "1"]).workload[0].max_rd_atomic == 1
    assert one < many / 4
    code, text, said = perftest_streams(["ib_read_lat", "-o", "64", "-n", "20"])
    assert code == 0 and "above max = 16" in said and "Outstand reads  : 16" in text
    assert perftest_scenario(["ib_read_lat", "-o", "64"]).workload[0].max_rd_atomic == 16


def test_duration_posts_until_the_simulated_time_has_passed():
    work = perftest_scenario(["ib_write_bw", "-s", "8M", "-D", "1"]).workload[0]
    assert work.duration == 10**12 and "iterations" not in work.model_fields_set
    row = _summary(["ib_write_bw", "-s", "1M", "-n", "5"], duration=200 * 10**6, iterations=1000).iloc[0]
    rate = _summary(["ib_write_bw", "-s", "1M", "-n", "400"])["bw_avg_Gbps"].iloc[0]
    expected = 200e-6 * rate * 1e9 / 8 / 2**20  # messages that fit in 200 us at the streaming rate
    assert expected * 0.9 < row["iterations"] < expected + 128 + 2  # plus those in flight when posting stops


def test_mib_per_second_by_default_and_gbits_with_report_gbits():
    argv = ["ib_write_bw", "-s", "64K", "-n", "300"]
    (_, mib), (_, gbit) = run_perftest(argv), run_perftest([*argv, "--report_gbits"])
    assert BW_HEADER_MIB in mib and BW_HEADER in gbit
    assert _row(mib, 65536)[3] == pytest.approx(_row(gbit, 65536)[3] * GBPS_TO_MIBPS, rel=1e-4)


@pytest.mark.parametrize("sizes, limit, code", [
    (["-s", "64K"], "10", 0), (["-s", "64K"], "100000000", 1),
    (["-a"], "40000", 0),  # perftest passes when any size reaches the limit (small ones here do not)
])
def test_limit_bw_fails_the_run_below_it(sizes, limit, code):
    got, report, errors = perftest_streams(["ib_write_bw", *sizes, "-n", "100", "-w", limit])
    assert got == code and ("Error: BW result is below bw limit" in errors) == bool(code) and BW_HEADER_MIB in report


def test_engine_is_the_scenarios_and_auto_by_default():
    assert perftest_scenario(["ib_write_bw"]).engine == "auto"
    assert perftest_scenario(["ib_write_bw", "--engine", "event"]).engine == "event"


def test_options_without_meaning_are_each_reported_once_as_ignored():
    code, report, notes = perftest_streams(["ib_write_bw", "-s", "4K", "-n", "50", "-x", "3", "-F", "-R",
                                            "--cpu_util", "-p", "18515", "10.0.0.1"])
    assert code == 0 and " ignored: " not in report and report.startswith(RULE), notes  # stdout is the report
    ignored = [line for line in notes.splitlines() if " ignored: " in line]
    assert [line.split()[2] for line in ignored] == ["-x/--gid-index", "-F/--CPU-freq", "-R/--rdma_cm",
                                                     "--cpu_util", "-p/--port", "server"]


def test_rocm_dmabuf_places_the_buffer_on_an_amd_gpu():
    scenario = perftest_scenario(["ib_write_bw", "--use_rocm=1", "--use_rocm_dmabuf"])
    local = next(b for b in scenario.buffers if b.name == "local")
    assert (local.on, local.registration, scenario.nodes[0].gpus[0].preset) == ("a.gpu1", "dmabuf", "mi300x")


@pytest.mark.parametrize("argv, message", [
    (["ib_write_lat", "-c", "XRC"], "-c XRC: ib_write_lat answers each message from the same QP it receives on"),
    (["ib_write_bw", "-c", "DC"], "-c DC: rdmasim simulates RC, UC, UD and XRC QPs"),
    (["ib_send_bw", "-c", "UD", "-s", "8K"], "Max message size in UD cannot be greater than MTU (4096)"),
    (["ib_send_bw", "-c", "UD", "-s", "2048", "-m", "1024"], "Max message size in UD cannot be greater than MTU"),
    (["ib_read_bw", "-c", "UC"], "UC connection not possible in READ/ATOMIC verbs"),
    (["ib_write_bw", "-c", "UD"], "UD connection only possible in SEND verb"),
    (["ib_write_bw", "-c", "XYZ"], "Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}"),
    (["ib_write_bw", "-n", "1000", "-l", "3"], "Number of iterations must be a multiple of post list size"),
    (["ib_write_bw", "-l", "8", "-Q", "3"], "Post list size must be a multiple of CQ moderation"),
    (["ib_write_bw", "-Q", "0"], "CQ moderation should be between 1 and 1024"),
    (["ib_write_bw", "-l", "0"], "Send Post List size must be positive"),
    (["ib_write_bw", "-l", "x"], "Send Post List size argument x should be int"),
    (["ib_write_lat", "-b"], "Bidirectional is only available in BW test"),
    (["ib_write_lat", "--use_cuda=0"], "Perftest supports CUDA latency tests with read/send verbs only"),
    (["ib_send_bw", "--use_cuda=0", "-s", "64", "-I", "64"], "Perftest doesn't support CUDA tests with inline messages"),
    (["ib_send_lat", "-A", "CMP_AND_SWAP"], "You are not running the atomic_lat/bw test!"),
    (["ib_write_lat", "-l", "2"], "-l is not supported"),
    (["ib_write_bw", "-o", "4"], "Setting Outstanding reads only available on READ verb"),
    (["ib_send_lat", "-o", "4"], "Setting Outstanding reads only available on READ verb"),
    (["ib_write_bw", "-w", "-1"], "Invalid Minimum BW Limit"),
    (["ib_write_bw", "-D", "x"], "Duration period argument x should be int"),
    (["ib_write_lat", "-D", "1", "-a"], "Duration mode currently doesn't support running on all sizes"),
    (["ib_write_bw", "--use_rocm"], "through dma-buf only"),
    (["ib_write_bw", "--use_rocm_dmabuf"], "ROCm DMA-BUF cannot be used without ROCm"),
    (["ib_write_bw", "--use_rocm", "--use_rocm_dmabuf", "--use_cuda"], "Can't use multiple memory types"),
    (["ib_write_bw", "--engine", "warp"], "invalid choice"),
])
def test_values_perftest_refuses_exit_2_with_its_message(argv, message):
    code, _, text = perftest_streams(argv)
    assert code == 2 and message in text, text


@pytest.mark.parametrize("extra, message", [
    ("post_list: 2", "post_list: write_lat is a latency test"),
    ("duration: 1ms", "give iterations or duration, not both"),
    ("cq_mod: 4", "cq_mod: write_lat is a latency test"),
    ("max_rd_atomic: 4", "max_rd_atomic: write_lat posts no READs or atomics"),
])
def test_scenario_keys_are_checked_with_file_and_line(tmp_path, extra, message):
    path = tmp_path / "s.yaml"
    text = run_perftest(["ib_write_lat", "--dump-scenario"])[1]
    path.write_text(text.replace("  iterations: 1000", f"  iterations: 1000\n  {extra}"))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert str(path) in str(info.value) and message in str(info.value)


@pytest.mark.parametrize("work, message", [
    ({"cq_mod": 200}, "cq_mod: 200 is more than tx_depth 128"),
    ({"post_list": 3, "iterations": 1000}, "iterations 1000 must be a multiple of post_list 3"),
    ({"post_list": 8, "cq_mod": 3}, "post_list 8 must be a multiple of cq_mod 3"),
])
def test_bandwidth_posting_keys_must_fit_together(work, message):
    with pytest.raises(ValueError, match=message):
        WorkloadSpec.model_validate({"kind": "write_bw", "from": "a", "to": "b", "sizes": ["4KiB"], **work})


README_LINES = [shlex.split(line)[3:] for line in (Path(__file__).resolve().parents[3] / "README.md").read_text()
                .splitlines() if line.startswith("$ rdmasim perftest ")]


@pytest.mark.parametrize(("tool", "every"), [("ib_write_bw", 100), ("ib_send_bw", 10), ("ib_read_bw", 48)])
def test_a_moderated_duration_run_ends_between_two_signaled_work_requests(tool, every):
    """perftest's duration loop (run_iter_bw) stops posting when the time is up, wherever that falls; only every
    cq_mod-th work request is signaled, so those posted after the last signaled one never get a completion. The run
    ends without one for them (it is no error), counts the work requests the completions cover, and those are the
    ones an unmoderated run of the same duration completes, to within one moderation period and the window."""
    argv = [tool, "-s", "4K", "-n", "16"]
    moderated = _summary(argv, duration=50 * 10**6, cq_mod=every).iloc[0]["iterations"]
    signaled = _summary(argv, duration=50 * 10**6).iloc[0]["iterations"]
    tx_depth = perftest_scenario(argv).workload[0].tx_depth
    assert moderated % every == 0 and tx_depth % every  # ends on a signaled one, with unsignaled ones after it
    assert signaled - tx_depth - every < moderated <= signaled + tx_depth


@pytest.mark.parametrize("argv", README_LINES, ids=" ".join)
def test_the_readmes_perftest_lines_run_as_written(argv):
    code, text = run_perftest(argv)
    assert code == 0, text
    assert f"\n {argv[0]}: {TESTS[argv[0]].name}\n" in text  # its block of rows


@pytest.mark.parametrize("kind", ["write_lat", "read_lat", "send_lat", "atomic_lat", "send_bw", "atomic_bw"])
def test_every_loop_runs_for_a_duration(kind):
    scenario = perftest_scenario([f"ib_{kind}"])
    turn = run_scenario(scenario, notice=lambda _: None).summary.iloc[0]
    row = _summary([f"ib_{kind}"], duration=50 * 10**6).iloc[0]
    if kind.endswith("_lat"):  # one at a time: iterations started in 50 us, each taking t_avg (a round trip's half)
        per_us = 1 / (turn["t_avg_us"] * (2 if kind in ("write_lat", "send_lat") else 1))
        assert row["iterations"] == pytest.approx(50 * per_us, abs=2)
    else:
        assert row["iterations"] == pytest.approx(50 * turn["msg_rate_Mpps"], rel=0.1, abs=130)


def test_a_post_list_is_one_call_whose_wqes_the_nic_fetches():
    single = _summary(["ib_write_bw", "-s", "64", "-n", "4000"])["msg_rate_Mpps"].iloc[0]
    listed = _summary(["ib_write_bw", "-s", "64", "-n", "4000"], post_list=16, cq_mod=16)["msg_rate_Mpps"].iloc[0]
    moderated = _summary(["ib_write_bw", "-s", "64", "-n", "4000"], cq_mod=16)["msg_rate_Mpps"].iloc[0]
    assert listed < 0.9 * single  # each WQE of a list is fetched by DMA; a single post is written by BlueFlame
    assert moderated == pytest.approx(single, rel=0.05)


def test_a_list_is_posted_up_to_its_first_bad_work_request():
    from models.nic.wqe import Opcode, SendWR
    from models.verbs.qp import ibv_post_send
    from sim.engine.build import build
    from sim.core.errors import VerbsError
    from sim.engine.harness import endpoints

    scenario = perftest_scenario(["ib_write_bw", "-s", "4K", "-n", "8"])
    ((src, dst),) = endpoints(build(scenario, scenario.seed), scenario.workload[0])
    good, too_long_inline = (SendWR(k, Opcode.RDMA_WRITE, src.iova, 4096, src.mr.lkey, dst.iova, dst.mr.rkey,
                                    inline=bool(k)) for k in range(2))
    with pytest.raises(VerbsError) as info:
        ibv_post_send(src.qp, [good, too_long_inline])
    assert info.value.errno == "ENOMEM" and src.qp.outstanding == 1


def test_outstanding_reads_give_the_same_answer_on_both_engines():
    rows = [run_scenario(perftest_scenario(["ib_read_bw", "-s", "4K", "-n", "1000", "-o", "4", "--engine", engine]))
            .summary[["bw_avg_Gbps", "bw_peak_Gbps"]].iloc[0].tolist() for engine in ("fast", "event")]
    assert rows[0] == rows[1]


@pytest.mark.parametrize("text, size", [
    ("4K", 4096), ("2M", 2**21), ("5G", 5), ("64k", 64), ("1.5K", 1024), ("0x10", 16), ("010", 8), (" 12", 12),
    ("2047M", 2047 * 2**20), ("2147483647", 2**31 - 1),
])
def test_s_reads_its_number_as_perftests_strtol_does(text, size):
    """perftest reads -s with strtol (base 0, what follows the number ignored) after taking off a last K or M."""
    assert perftest_scenario(["ib_write_bw", "-s", text]).workload[0].size_list() == [size]


@pytest.mark.parametrize("text", ["big", "0", "-5", "2048M", "2147483648", "K"])
def test_s_outside_perftests_range_is_refused_with_its_message(text):
    code, _, said = perftest_streams(["ib_write_bw", "-s", text])
    assert code == 2 and said.endswith("Message Size should be between 1 and 2147483647"), said


@pytest.mark.parametrize("text, iterations", [("010", 8), ("0x20", 32), (" 100", 100)])
def test_integer_options_read_c_notation_as_strtol_does(text, iterations):
    assert perftest_scenario(["ib_write_bw", "-n", text]).workload[0].iterations == iterations


@pytest.mark.parametrize("text", ["1_000", "100 ", "1e3", "12abc"])
def test_integer_options_refuse_what_strtol_leaves_unread(text):
    code, _, said = perftest_streams(["ib_write_bw", "-n", text])
    assert code == 2 and f"Iteration num argument {text} should be int" in said, said


@pytest.mark.parametrize("flags, said", [
    (["--pin_cores=0-3,8"], "--pin_cores ignored"), (["--numa_node=1"], "--numa_node ignored"),
    (["--disable_numa"], "--disable_numa ignored"), (["-S", "3"], "-S/--sl ignored"),
    (["-R", "--tos=32"], "-T/--tos ignored"),
    (["-z"], "-z/--comm_rdma_cm ignored"),
])
def test_perftests_placement_and_addressing_options_are_accepted_and_said_to_be_ignored(flags, said):
    """The placement lines of perftest's README run: a simulation has no host CPUs or NUMA nodes to place on,
    nor service levels, traffic classes or rdma_cm to address its QPs with."""
    code, report, notes = perftest_streams(["ib_write_bw", "-d", "mlx5_0", "-s", "4K", "-n", "20", *flags])
    assert code == 0 and said in notes and BW_HEADER_MIB in report, notes


@pytest.mark.parametrize("flags, message", [
    (["--numa_node=-1"], "numa_node must be non-negative int"),
    (["--numa_node=1", "--pin_cores=2"], "--numa_node and --pin_cores cannot be used together"),
    (["-S", "16"], "Only 15 Service levels"), (["-T", "256"], "TOS should be between 0 and 255"),
    (["-T", "32"], "TOS only valid for rdma_cm based QP"),
])
def test_perftests_placement_and_addressing_checks_hold(flags, message):
    code, _, said = perftest_streams(["ib_write_bw", *flags])
    assert code == 2 and message in said, said

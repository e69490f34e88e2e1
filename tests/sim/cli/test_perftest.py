"""The perftest front end: flags map to scenario fields, perftest's checks, its report layout, --dump-scenario."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.cli.perftest import UsageError, perftest_scenario, run_perftest
from sim.cli.perftest_report import BW_HEADER, LAT_HEADER
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario
from tests.conftest import perftest_streams

ROOT = Path(__file__).resolve().parents[3]


def _work(argv):
    scenario = perftest_scenario(argv)
    return scenario, scenario.workload[0], {b.name: b for b in scenario.buffers}


@pytest.mark.parametrize("argv, kind, size, iters, tx_depth, inline", [
    (["ib_write_bw"], "write_bw", 65536, 5000, 128, 0),
    (["ib_read_bw"], "read_bw", 65536, 1000, 128, None),
    (["ib_write_lat"], "write_lat", 2, 1000, 128, 220),  # latency tests leave the schema's unused tx_depth
    (["ib_read_lat"], "read_lat", 2, 1000, 128, None),
    (["ib_write_lat", "-d", "efa_0"], "write_lat", 2, 1000, 128, 32),
])
def test_defaults_follow_perftest(argv, kind, size, iters, tx_depth, inline):
    scenario, work, bufs = _work(argv)
    assert (work.kind, work.size_list(), work.iterations, work.tx_depth, work.inline) == (
        kind, [size], iters, tx_depth, inline)
    assert (bufs["local"].on, bufs["local"].registration) == ("a.host", "pinned")
    assert (bufs["remote"].on, bufs["remote"].registration) == ("b.host", "pinned")
    assert work.from_ == "local" and work.to == "remote" and scenario.fabric.mtu == 4096


def test_flags_map_to_scenario_fields():
    scenario, work, bufs = _work(["ib_write_bw", "-s", "4K", "-n", "300", "-t", "64", "-I", "128", "-m", "2048",
                                  "-d", "mlx5_3", "-x", "3", "-F", "--report_gbits", "10.0.0.1"])
    assert (work.size_list(), work.iterations, work.tx_depth, work.inline) == ([4096], 300, 64, 128)
    assert scenario.fabric.mtu == 2048 and [n.nic.preset for n in scenario.nodes] == ["connectx7"] * 2
    assert bufs["local"].size >= 4096
    assert perftest_scenario(["ib_write_bw", "--size=1M"]).workload[0].size_list() == [2**20]
    assert perftest_scenario(["ib_read_bw", "-q", "4"]).workload[0].qps == 4
    # perftest's workaround for an odd rx depth in a SEND test of one size: it posts one receive more
    assert [perftest_scenario(["ib_send_bw", "-r", "15", *extra]).workload[0].rx_depth
            for extra in ((), ("-a",))] == [16, 15]
    # perftest refuses -I on READ and atomic tests only (perftest_parameters.c): SENDs go inline too; it takes -r
    # on WRITE tests, which post no receives, and -r 1 on READ tests
    for argv in (["ib_write_bw", "-r", "8"], ["ib_write_lat", "-r", "16"], ["ib_read_bw", "-r", "1"]):
        same = [perftest_scenario(line).model_dump(exclude={"description"}) for line in (argv, argv[:1])]
        assert same[0] == same[1]
    assert [perftest_scenario([test, "-I", size]).workload[0].inline
            for test, size in (("ib_send_bw", "64"), ("ib_send_lat", "0"))] == [64, 0]


def test_several_qps_report_their_count_and_share_the_nic():
    code, text = run_perftest(["ib_write_bw", "-s", "64", "-n", "3000", "-q", "3", "--report_gbits"])
    assert code == 0, text
    assert "Number of qps   : 3" in text
    bytes_, iters, _, average, _ = _numbers(text, 64)
    code, one = run_perftest(["ib_write_bw", "-s", "64", "-n", "3000", "--report_gbits"])
    # perftest's print_report_bw counts every QP's work requests: num_of_calculated_iters *= num_of_qps
    assert (bytes_, iters) == (64, 9000) and average > _numbers(one, 64)[3]
    assert _numbers(one, 64)[1] == 3000


def test_gpu_topology_places_the_gpu_and_halves_the_bandwidth_through_the_root_complex():
    assert perftest_scenario(["ib_write_bw", "--use_cuda", "--gpu-topology", "cross_socket"]).nodes[0].topology == \
        "cross_socket"
    rates = {}
    for place in ("switch", "root_complex"):
        code, text = run_perftest(["ib_write_bw", "-s", "1M", "-n", "200", "--use_cuda", "--gpu-topology", place])
        assert code == 0 and f"(a.gpu0, h200, {place})" in text, text
        rates[place] = _numbers(text, 1 << 20)[3]
    assert 0.4 < rates["root_complex"] / rates["switch"] < 0.55


@pytest.mark.parametrize("flag", ["-a", "--all"])
def test_all_sizes_are_2_to_8mib(flag):
    _, work, bufs = _work(["ib_write_lat", flag, "-s", "64"])
    assert work.size_list() == [2**i for i in range(1, 24)] and work.size_list()[-1] == 8388608
    assert bufs["local"].size >= 8388608 and bufs["remote"].size >= 8388608


@pytest.mark.parametrize("flags, on, mode", [
    (["--use_cuda"], "a.gpu0", "peermem"),
    (["--use_cuda=1", "--use_cuda_dmabuf"], "a.gpu1", "dmabuf"),
    (["--use_cuda", "0", "--use_cuda_dmabuf", "--use_data_direct", "--nic", "connectx8"], "a.gpu0", "dmabuf-pinned"),
    (["--mmap=/no/such/file"], "a.host", "pinned"),
    (["--odp"], "a.host", "odp"),
])
def test_memory_flags_pick_placement_and_registration(flags, on, mode):
    scenario, work, bufs = _work(["ib_send_lat", *flags])  # (perftest runs no CUDA write latency test)
    assert (bufs["local"].on, bufs["local"].registration) == (on, mode)
    assert (bufs["remote"].on, bufs["remote"].registration) == ("b.host", "pinned")
    gpus = [g.name for g in scenario.nodes[0].gpus]
    assert gpus == ([on.split(".")[1]] if on != "a.host" else []) and not scenario.nodes[1].gpus
    if on != "a.host":
        assert work.inline == 0  # perftest: no default inline with CUDA memory
        assert bufs["local"].size % 2**16 == 0


@pytest.mark.parametrize("argv, named", [
    (["ib_write_bw", "--use_cuda_dmabuf"], "CUDA DMA-BUF cannot be used without CUDA"),
    (["ib_write_bw", "--use_cuda", "--use_data_direct"], "--use_data_direct"),
    (["ib_write_bw", "--use_cuda", "--use_cuda_dmabuf", "--use_data_direct"],
     "Data Direct is not supported on mlx5_0 (connectx7)"),  # mlx5_data_direct_pci_table: ConnectX-8 only
    (["ib_write_bw", "-d", "efa_0", "--nic", "connectx8"], "efa_0 is not one"),
    (["ib_write_bw", "--use_cuda", "--mmap=f"], "multiple memory types"),
    (["ib_write_bw", "--run_infinitely"], "--run_infinitely is not supported by rdmasim perftest"),
    (["ib_write_bw", "--cqe_poll=4", "--out_json"], "--cqe_poll, --out_json are not supported"),
    (["ib_write_lat", "--qp=2"], "bandwidth tests only"),
    (["ib_write_bw", "--gpu-topology", "root_complex"], "add --use_cuda"),
    (["ib_read_bw", "-q", "2000"], "num of Qps"),
    (["ib_write_bw", "-D", "0"], "Duration period must be positive"),
    (["ib_write_bw", "-d", "mlx4_0"], "known devices: mlx5_<N> (connectx7)"),
    (["ib_read_bw", "-I", "64"], "Inline feature not available on READ"),
    (["ib_write_lat", "-I", "512"], "at most 220 B inline"),
    (["ib_write_bw", "-d", "efa_0", "-t", "9000"], "-t/--tx-depth: tx_depth 9000"),
    (["ib_write_bw", "-D", "100000"], "-D/--duration: duration '100000s' is above the maximum of 86400s"),
    (["ib_write_bw", "-n", "3"], "Iteration num should be between 5"),
    (["ib_write_bw", "-s", "big"], "Message Size should be between 1 and 2147483647"),
    (["ib_unknown_bw"], "ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat, ib_send_bw, ib_send_lat"),
    (["ib_read_bw", "-r", "8"], "On RDMA verbs rx depth can be only 1"),
    (["ib_atomic_lat", "-r", "2"], "On RDMA verbs rx depth can be only 1"),
    (["ib_send_bw", "-d", "efa_0", "-r", "9000"], "-r/--rx-depth: rx_depth 9000"),
    (["ib_send_lat", "-r", "0"], "Rx depth should be between 1"),
    ([], "no test given"),
    (["ib_write_bw", "--force"], "--force: replaces earlier results at --out"),
    (["ib_write_bw", "--dump-scenario", "--out", "res"], "--dump-scenario with --out"),
])
def test_command_lines_rdmasim_cannot_run_exit_2_naming_the_flag(argv, named):
    code, report, text = perftest_streams(argv)
    assert code == 2 and named in text and report == "", text
    if argv:
        with pytest.raises(UsageError):
            perftest_scenario(argv)


def test_depths_up_to_perftests_limit_run_on_a_nic_that_takes_them():
    """perftest takes -t up to 15000 and a ConnectX-7 queue 32768 work requests."""
    code, text = run_perftest(["ib_send_bw", "-t", "15000", "-r", "15000", "-l", "10000", "-n", "20000", "-s", "64"])
    assert code == 0, text
    assert " TX depth        : 15000" in text and " RX depth        : 15000" in text


def test_help_names_the_flags_and_says_what_has_no_effect():
    code, text = run_perftest(["ib_write_bw", "--help"])
    assert code == 0 and "--use_cuda_dmabuf" in text and "--dump-scenario" in text
    assert re.search(r"--gid-index \S+\s+Accepted, ignored", text)
    assert run_perftest(["-h"])[0] == 0


def _numbers(text: str, size: int) -> list[float]:
    row = next(line for line in text.splitlines() if line.split()[:1] == [str(size)])
    return [float(x) for x in row.split()]


def test_write_bw_report_has_perftest_layout_and_matches_quickstart():
    code, text = run_perftest(["ib_write_bw", "-s", "65536", "-n", "2000", "10.0.0.1", "--report_gbits"])
    assert code == 0, text
    for line in ("RDMA_Write BW Test", "Device         : mlx5_0", "Number of qps   : 1", "Transport type : IB",
                 "Connection type : RC", "TX depth        : 128", "Mtu             : 4096[B]", "Link type       : IB",
                 "Max inline data : 0[B]", "rdma_cm QPs\t : OFF", "Data ex. method : Ethernet",
                 "Registration    : pinned (ibv_reg_mr", BW_HEADER):
        assert line in text
    quick, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    work = quick.workload[0].model_copy(update={"sizes": [65536]})
    expected = run_scenario(quick.model_copy(update={"workload": [work]})).summary["bw_avg_Gbps"].iloc[0]
    bytes_, iters, _, average, _ = _numbers(text, 65536)
    assert (bytes_, iters) == (65536, 2000) and average == pytest.approx(expected, rel=0.02)


def test_gpu_dmabuf_latency_report():
    code, text = run_perftest(["ib_read_lat", "--use_cuda=0", "--use_cuda_dmabuf", "-n", "100", "-s", "4K"])
    assert code == 0, text
    assert "RDMA_Read Latency Test" in text and "Outstand reads  : 16" in text and LAT_HEADER in text
    assert "ibv_reg_dmabuf_mr" in text and "CUDA device 0 (a.gpu0, h200, switch)" in text
    t_min, t_typical = _numbers(text, 4096)[2], _numbers(text, 4096)[4]
    assert 0 < t_min <= t_typical


@pytest.mark.parametrize("argv", [
    ["ib_write_bw", "-a", "-n", "50", "--use_cuda=1", "--use_cuda_dmabuf", "-t", "32"],
    ["ib_read_lat", "-s", "3", "--odp", "-m", "1024", "-d", "efa_0"],
    ["ib_write_lat", "--mmap=/tmp/file", "-I", "64"],
])
def test_dump_scenario_loads_through_the_real_loader(argv, tmp_path):
    code, text = run_perftest([*argv, "--dump-scenario"])
    assert code == 0 and text.startswith("# Equivalent of: rdmasim perftest")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    loaded, _ = load_scenario(path)
    assert loaded == perftest_scenario(argv)


def test_a_command_line_over_the_memory_available_is_refused_before_running(monkeypatch):
    import sim.engine.budget

    monkeypatch.setattr(sim.engine.budget, "available_memory", lambda: 2**28)  # below even the core's fixed cost
    code, _, text = perftest_streams(["ib_write_bw", "-a", "-n", "10000000"])
    assert code == 2 and text.startswith("rdmasim perftest: -n/-a/-q: the run needs about")
    assert "(budget 256.0MiB) for 230,000,000 operations" in text
    monkeypatch.setattr(sim.engine.budget, "available_memory", lambda: 2**30)
    assert run_perftest(["ib_write_bw", "-s", "4K", "-n", "20"])[0] == 0


def test_a_command_line_that_fits_only_on_the_vectorized_core_is_admitted_as_run_admits_its_scenario(monkeypatch):
    """`rdmasim run` admits an ``engine: auto`` run on the vectorized core's estimate, which holds fewer bytes per
    operation, and checks again should the run fall back; perftest's front end admits the same runs (it refused
    ``ib_write_bw -q 4 -s 4096 -D 5`` on a 24 GiB machine, on the event engine's estimate)."""
    import sim.engine.budget as budget
    from sim.cli.perftest_args import UsageError

    argv = ["ib_write_bw", "-q", "4", "-s", "4096", "-D", "5"]
    monkeypatch.setattr(budget, "available_memory", lambda: 1 << 50)
    variants = [("base", perftest_scenario(argv))]
    full, lean = budget.estimate(variants), budget.estimate(variants, fast=frozenset({"base"}))
    assert lean.bytes < full.bytes
    monkeypatch.setattr(budget, "available_memory", lambda: (lean.bytes + full.bytes) // 2)
    assert perftest_scenario(argv) == variants[0][1]
    monkeypatch.setattr(budget, "available_memory", lambda: lean.bytes - 1)
    with pytest.raises(UsageError, match="-D/--duration: the run needs about"):
        perftest_scenario(argv)


def test_perftests_readme_line_with_an_ib_port_runs_and_another_port_is_refused():
    code, text = run_perftest(["ib_write_bw", "-d", "mlx5_0", "-i", "1", "-F", "--report_gbits", "-s", "64K",
                               "-n", "20"])
    assert code == 0 and BW_HEADER in text
    code, _, text = perftest_streams(["ib_write_bw", "-i", "2"])
    assert code == 2 and "-i/--ib-port" in text and "one port" in text


@pytest.mark.parametrize("argv, kind, atomic", [
    (["ib_atomic_bw"], "atomic_bw", "FETCH_AND_ADD"),
    (["ib_atomic_lat", "-A", "CMP_AND_SWAP"], "atomic_lat", "CMP_AND_SWAP"),
])
def test_atomic_tests_become_atomic_workloads_on_buffers_with_remote_atomic(argv, kind, atomic):
    scenario = perftest_scenario(argv)
    (work,) = scenario.workload
    assert (work.kind, work.atomic, work.size_list()) == (kind, atomic, [8])
    assert all("remote_atomic" in b.access for b in scenario.buffers)


@pytest.mark.parametrize("argv, words", [
    (["ib_atomic_bw", "-s", "16"], "Message size cannot be changed for Atomic tests"),
    (["ib_atomic_lat", "-a"], "Message size cannot be changed for Atomic tests"),
    (["ib_atomic_bw", "-I", "8"], "Inline feature not available"),
    (["ib_atomic_bw", "-A", "SWAP"], "invalid choice"),
    (["ib_write_bw", "-A", "FETCH_AND_ADD"], "you must run one of the atomic tests"),
])
def test_atomic_test_options_perftest_refuses(argv, words):
    code, _, text = perftest_streams(argv)
    assert code == 2 and words in text


def test_ib_atomic_bw_reports_the_atomic_units_rate():
    code, text = run_perftest(["ib_atomic_bw", "-n", "1000"])
    row = text.strip().splitlines()[-2].split()
    assert code == 0 and row[0] == "8" and float(row[-1]) == pytest.approx(8.0, rel=0.02)

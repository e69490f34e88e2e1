"""perftest's standard output for a simulated run: its header block, its table (or --output's numbers),
--report-both's tables and --data_validation's line, its notes on the report options, and the checks of the report
that decide the exit code (-w, --data_validation). ``cmd`` is the parsed command line
(:class:`sim.cli.perftest._Command`)."""

from __future__ import annotations

import argparse

from models.presets import NIC_PCIE, NIC_RATE
from models.verbs.workload_kinds import WorkloadKind
from sim.cli.perftest_args import TESTS

REGISTRATION = {
    "pinned": "ibv_reg_mr, pages pinned",
    "odp": "ibv_reg_mr with IBV_ACCESS_ON_DEMAND, nothing pinned",
    "peermem": "ibv_reg_mr through nvidia-peermem, GPU pages pinned",
    "dmabuf": "cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr",
    "dmabuf-pinned": "cuMemGetHandleForAddressRange + mlx5dv_reg_dmabuf_mr(DATA_DIRECT)",
}
"""How the client's buffer is registered in each scenario mode, in verbs calls."""


def header(cmd, result) -> str:
    """perftest's header block: the test's title and parameters, then the simulated memory, registration and NIC."""
    from sim.cli.perftest_report import RULE

    args, kind = cmd.args, TESTS[cmd.test]
    buf, work = cmd.data["buffers"][0], cmd.data["workload"][0]
    qp = result.testbed.qps[0]
    bw = kind.streams
    verb = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send", "atomic": "Atomic"}[kind.verb]
    title = " ".join([verb, *([args.atomic_type] if verb == "Atomic" else []),
                      *(["Bidirectional"] if bw and args.bidirectional else []),
                      *(["Post List"] if bw and args.post_list > 1 else []), "BW" if bw else "Latency", "Test"])
    gpu = args.use_cuda if args.use_rocm is None else args.use_rocm
    memory = (f"{'CUDA' if args.use_rocm is None else 'ROCm'} device {gpu} ({buf['on']}, "
              f"{cmd.data['nodes'][0]['gpus'][0]['preset']}, {args.gpu_topology})" if gpu is not None
              else f"mmap'd file {args.mmap} (host)" if args.mmap else "host")
    reg_us = next(r["register_us"] for r in result.registration_rows if r["buffer"] == "local")
    mrs = sum(b["on"] == buf["on"] for b in cmd.data["buffers"])  # --mr_per_qp: one client MR a QP
    preset = cmd.data["nodes"][0]["nic"]["preset"]
    return "\n".join([
        RULE, f"                    {title}",
        f" Dual-port       : OFF\t\tDevice         : {args.ib_dev}",
        f" Number of qps   : {args.qp}\t\tTransport type : IB",
        f" Connection type : {args.connection}\t\tUsing SRQ      : {'ON' if args.connection == 'XRC' else 'OFF'}",
        f" TX depth        : {args.tx_depth}",
        *([f" Post List       : {args.post_list}"] if bw and args.post_list > 1 else []),
        *([f" RX depth        : {work['rx_depth']}"] if verb == "Send" else []),
        *([f" CQ Moderation   : {work.get('cq_mod', 1)}"] if bw else []),
        f" Mtu             : {args.mtu}[B]",
        " Link type       : IB",
        f" Max inline data : {work['inline']}[B]" if verb in ("RDMA_Write", "Send")
        else f" Outstand reads  : {qp.attr.max_rd_atomic}",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        *([f" Duration        : {args.duration}[sec] (simulated)"] if args.duration is not None else []),
        f" Memory type     : {memory}",
        f" Registration    : {buf['register']} ({REGISTRATION[buf['register']]}): {reg_us:.2f}[usec]"
        + (f", the first of {mrs} MRs (one per QP)" if mrs > 1 else ""),
        f" Simulated NIC   : {preset}, {NIC_RATE[preset]}, PCIe {NIC_PCIE[preset]}",
        RULE])


PEAK_ITERATIONS = 20000
"""perftest measures no peak bandwidth above this many iterations (nor with -D or -N)."""


def no_peak(args: argparse.Namespace, kind: WorkloadKind) -> bool:
    """Whether the peak column reads 0.00 (-N, -D, or above :data:`PEAK_ITERATIONS`)."""
    return kind.streams and (args.noPeak or args.duration is not None or args.iters > PEAK_ITERATIONS)


def both_ways(args: argparse.Namespace) -> str | None:
    """Why --report-both prints no per-direction tables (None: it does)."""
    return ("it reports the two directions of a bidirectional test (-b)" if not args.bidirectional else
            "perftest reports each direction for a single size only (not with -a)" if args.all else
            "--output prints only the average of both directions" if args.output is not None else None)


def report_notices(args: argparse.Namespace, kind: WorkloadKind) -> list[str]:
    """perftest's notes on the report options, and why rdmasim leaves one of them without effect."""
    lines = []
    if no_peak(args, kind) and not args.noPeak:
        lines.append(" WARNING: BW peak won't be measured in this run.")
    if args.report_both and both_ways(args):
        lines.append(f"rdmasim perftest: --report-both ignored: {both_ways(args)}")
    if (args.histogram or args.unsorted) and args.duration is not None:
        lines.append("rdmasim perftest: -H/-U ignored: perftest prints no per-iteration latencies with -D")
    if args.data_validation:
        lines.append("rdmasim perftest: --data_validation: data mode: RDMA moves real bytes, and the destination is "
                     "compared with its source once, at the end of the run (perftest checks each chunk as it lands)")
    return lines


def counted(args, kind, summary: list[dict]) -> list[dict]:
    """``summary`` rows with perftest's #iterations: a bandwidth test of -n counts every QP of its side
    (``print_report_bw``: ``num_of_calculated_iters *= num_of_qps``); a -D run's summary counts them already."""
    if args.duration is not None or not kind.streams:
        return summary
    return [row | {"iterations": row["iterations"] * args.qp} for row in summary]


def measured_s(result) -> float | None:
    """How long the run's -D is measured (s; None without -D): :attr:`sim.engine.tables.Measured.seconds`."""
    from sim.engine.tables import Measured

    measured = Measured.of(result.scenario.workload[0])
    return None if measured is None else measured.seconds


def reads_operations(cmd) -> bool:
    """Whether the command reads the run's per-operation table: to write it (``--out``), for -U/-H's lists or for
    --report-both's one-way tables; perftest's table itself comes from the summaries."""
    args = cmd.args
    return args.out is not None or lists_iterations(args) or (args.report_both and not both_ways(args))


def lists_iterations(args) -> bool:
    """-U or -H asked for, which a -D run does not list."""
    return bool(args.histogram or args.unsorted) and args.duration is None


def iteration_lists(cmd, result) -> dict[int, list[str]] | None:
    """perftest's -U/-H lists of a latency test, by message size (None: not asked for, or a -D run)."""
    args = cmd.args
    if not lists_iterations(args):
        return None
    from sim.cli.perftest_report import iteration_lines

    ops = result.table.frame(columns=["bytes", "latency_ps", "ok"])
    return {size: iteration_lines(rows.loc[rows["ok"], "latency_ps"].to_numpy(), args.unsorted, args.histogram)
            for size, rows in ops.groupby("bytes", sort=False)}


def report(cmd, result) -> str:
    """perftest's standard output for the run: the header and table (or --output's numbers), --report-both's
    tables and --data_validation's line."""
    from sim.cli.perftest_report import format_summary, format_values, one_way

    args, kind = cmd.args, TESTS[cmd.test]
    lists = iteration_lists(cmd, result)
    layout = {"gbits": args.report_gbits, "no_peak": no_peak(args, kind)}
    summary = result.summary_rows
    parts = ([format_values(summary, args.output, args.report_gbits, lists, measured_s(result))]
             if args.output is not None else
             [header(cmd, result), format_summary(counted(args, kind, summary), iterations=lists,
                                                   measured_s=measured_s(result), **layout)])
    if args.report_both and not both_ways(args):
        columns = ["bytes", "qp", "posted_ps", "completed_ps", "ok"]
        ways = one_way(result.table.frame(columns=columns), summary, args.tx_depth * args.qp)
        for name, rows in zip(("Local results", "Remote results"), ways):
            parts.append(format_summary(counted(args, kind, [row | {"workload": name} for row in rows]), **layout))
    if args.data_validation and not validation_failed(cmd, result):
        parts.append(f"VALIDATION: PASSED - {result.counters['data_checked_bytes']} bytes")
    return "\n".join(parts)


def validation_failed(cmd, result) -> str | None:
    """--data_validation's line on stderr when the destination differs from its source."""
    if not cmd.args.data_validation or not result.counters["data_mismatched_bytes"]:
        return None
    return (f"VALIDATION: FAILED - {result.counters['data_mismatched_bytes']} byte(s) of "
            f"{result.counters['data_checked_bytes']} differ from their source")


def below_limit(cmd, summary: list[dict]) -> bool:
    """perftest's -w check: no size's average bandwidth (in the report's unit) reached the limit (perftest ORs
    each size's pass into ``is_bw_limit_passed``)."""
    from sim.cli.perftest_report import bandwidth_column

    limit = getattr(cmd.args, "limit_bw", None)
    if limit is None:
        return False
    return not any(row[bandwidth_column(cmd.args.report_gbits)] >= limit for row in summary)

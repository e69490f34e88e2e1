"""``rdmasim perftest``: run a perftest command line (ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat,
ib_send_bw, ib_send_lat, ib_atomic_bw, ib_atomic_lat) in the simulator.

The command line is parsed with perftest's option names, defaults and checks (linux-rdma/perftest
``src/perftest_parameters.c``), turned into the equivalent two-node scenario -- client ``a`` posts, server ``b``
responds from pinned host memory -- and reported in perftest's layout (MiB/sec, or Gb/sec with
``--report_gbits``; -N, --output, -H/-U and --report-both shape it as perftest does). Options that mean nothing
in a simulation, or whose effect it does not model (:data:`sim.cli.perftest_args.IGNORED`, the server address), are
accepted with perftest's checks and each said to be ignored; --mr_per_qp and --data_validation map onto buffer
pairs and data mode; ``--engine`` picks the scenario's engine (``auto`` by default).
``--dump-scenario`` prints that scenario as YAML instead of running it.
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from models.nic.transport import qp_type_of, receive_overhead
from models.presets import NIC_PRESETS, NIC_RATE
from sim import __version__
from sim.core.errors import ConfigError, SimError
from sim.core.units import format_size
from sim.cli.perftest_args import IGNORED, MLX5_GENERATIONS, TESTS, UsageError, check, margin, parser
from sim.cli.perftest_output import below_limit, reads_operations, report, report_notices, validation_failed

if TYPE_CHECKING:
    from sim.cli.progress import Display
    from models.nic.nic import NicParams
    from sim.scenario.schema import Scenario

# The NIC model (numpy), the schema (pydantic), pandas and the YAML writer are imported where a command line
# that parses needs them: one perftest refuses starts without them.

NUMBER = r"\d+"
DEVICES = {f"mlx5_{NUMBER}": "connectx7", f"efa_{NUMBER}": "efa"}
"""perftest ``-d`` device names (regular expressions) and the NIC preset simulated for them."""
MAX_SIZE = 2**23
"""Largest size of ``-a`` (perftest's MAX_SIZE)."""
LAT_WRITE_INLINE = {**dict.fromkeys(MLX5_GENERATIONS, 220), "efa": 32}
"""perftest's default inline size of ib_write_lat by device (DEF_INLINE_WRITE for mlx5; 32 for EFA); ib_send_lat
uses it too (perftest's DEF_INLINE_SEND_RC_UC, 236, is more than the presets' max_inline)."""


@dataclass(frozen=True)
class _Command:
    test: str
    args: argparse.Namespace
    data: dict
    """The equivalent scenario, as YAML-ready data."""


def _test(argv: list[str]) -> str:
    if not argv or argv[0] not in TESTS:
        given = f"unknown test '{argv[0]}'" if argv else "no test given"
        raise UsageError(f"{given}; rdmasim perftest runs {', '.join(TESTS)}")
    return argv[0]


def _parse(argv: list[str]) -> _Command:
    test = _test(argv)
    args, extra = parser(test).parse_known_args(argv[1:])
    flags = [a.split("=")[0] for a in extra if a.startswith("-")]
    if flags:
        raise UsageError(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} not supported by rdmasim "
                         f"perftest (see rdmasim perftest {test} --help)")
    if extra:
        raise UsageError(f"unexpected argument(s): {' '.join(extra)}")
    return _Command(test, args, _scenario_data(test, args, _without_rdmasim_output(argv)))


OUTPUT_OPTIONS = ("--dump-scenario", "--out", "--force")
"""rdmasim's options that choose where results go; they leave the scenario alone."""


def _without_rdmasim_output(argv: list[str]) -> list[str]:
    """``argv`` less the output options (``--out DIR`` or ``--out=DIR``), as the scenario's description."""
    kept, value_next = [], False
    for arg in argv:
        if not value_next and arg.split("=")[0] not in OUTPUT_OPTIONS:
            kept.append(arg)
        value_next = not value_next and arg == "--out"
    return kept


def _nic_preset(device: str, generation: str | None) -> str:
    """The NIC preset device ``device`` simulates: ``generation`` (``--nic``) for an mlx5 device, else DEVICES'."""
    for pattern, preset in DEVICES.items():
        if re.fullmatch(pattern, device):
            if generation is None:
                return preset
            if preset not in MLX5_GENERATIONS:
                raise UsageError(f"--nic {generation}: chooses the ConnectX an mlx5_<N> device simulates, "
                                 f"and {device} is not one")
            return generation
    known = ", ".join(f"{pattern.replace(NUMBER, '<N>')} ({preset})" for pattern, preset in DEVICES.items())
    raise UsageError(f"-d/--ib-dev: unknown device '{device}'; known devices: {known}")


def _nic(preset: str) -> NicParams:
    """The simulated NIC's parameters (its model imports numpy: not before the device is known)."""
    from models.nic.nic import NicParams

    return NicParams(**NIC_PRESETS[preset])


PERFTEST_CQ_MOD = 100
"""perftest's ``DEF_CQ_MOD``: its CQ moderation where the command line gives none."""
PERFTEST_CQ_MOD_LIMIT = 8192
"""perftest's ``MSG_SIZE_CQ_MOD_LIMIT``: above this message size it signals every work request."""


def perftest_cq_moderation(args: argparse.Namespace) -> int:
    """The CQ moderation perftest itself runs a bandwidth command line with (``force_dependecies``): -Q, else
    ``DEF_CQ_MOD`` (100), but 1 for messages above ``MSG_SIZE_CQ_MOD_LIMIT`` (8 KiB) unless -a, -e or UD; at most
    the tx depth; the post list's size where one is given without -Q."""
    cq_mod = PERFTEST_CQ_MOD if args.cq_mod is None else args.cq_mod
    if (args.cq_mod is None and args.size > PERFTEST_CQ_MOD_LIMIT and args.connection != "UD" and not args.all
            and not args.events):
        cq_mod = 1
    cq_mod = min(cq_mod, args.tx_depth)
    return args.post_list if args.post_list > 1 and args.cq_mod is None else cq_mod


def cq_moderation(args: argparse.Namespace) -> int:
    """The CQ moderation a bandwidth command line runs with: perftest's (:func:`perftest_cq_moderation`) where -Q or
    -l sets it, else 1: every work request signaled."""
    return perftest_cq_moderation(args) if args.cq_mod is not None or args.post_list > 1 else 1


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def _scenario_data(test: str, args: argparse.Namespace, argv: list[str]) -> dict:
    kind = TESTS[test]
    preset = _nic_preset(args.ib_dev, args.nic)
    check(args, kind, preset, lambda: _nic(preset))
    from sim.scenario.workloads import WorkloadSpec  # pydantic, once the options pass perftest's own checks

    client = {"name": "a", "nic": {"preset": preset}}
    if args.use_cuda is None and args.use_rocm is None:
        place, mode, page = "a.host", "odp" if args.odp else "pinned", 4096
    else:
        gpu = f"gpu{args.use_cuda if args.use_rocm is None else args.use_rocm}"
        client["gpus"] = [{"name": gpu, "preset": "h200" if args.use_rocm is None else "mi300x"}
                          | ({"coherent": True} if args.coherent_gpu else {})]
        client["topology"] = args.gpu_topology
        place, page = f"a.{gpu}", 2**16  # perftest rounds cuMemAlloc to ACCEL_PAGE_SIZE (64 KiB)
        mode = ("dmabuf-pinned" if args.use_data_direct else
                "dmabuf" if args.use_cuda_dmabuf or args.use_rocm_dmabuf else "peermem")
    largest = ud_largest(args, argv) if args.connection == "UD" else MAX_SIZE if args.all else args.size
    # perftest's SIZE(): a UD buffer holds the GRH before the message
    size = format_size(_round_up(largest + receive_overhead(qp_type_of(args.connection)), page))
    # perftest's --mr_per_qp: each QP its own buffer and MR on both sides, one buffer pair a QP
    suffixes = [""] + [str(k) for k in range(1, args.qp if args.mr_per_qp else 1)]
    work = {"kind": kind.name, "name": test, "from": "local", "to": "remote",
            "sizes": {"from": "2B", "to": format_size(largest)} if args.all else [format_size(largest)],
            **({"iterations": args.iters} if args.duration is None else
               {"duration": f"{args.duration}s"} | ({"margin": f"{margin(args)}s"} if margin(args) else {})),
            **({"transport": args.connection.lower()} if args.connection != "RC" else {})}
    if kind.streams:
        work["tx_depth"] = args.tx_depth
        work["qps"] = 1 if args.mr_per_qp else args.qp
        work |= {"pairs": [{"from": f"local{k}", "to": f"remote{k}"} for k in suffixes[1:]]} if suffixes[1:] else {}
        work |= {"bidirectional": True} if args.bidirectional else {}
        work |= {key: value for key, value in (("post_list", args.post_list), ("cq_mod", cq_moderation(args)))
                 if value != 1}
    if args.qp_timeout != WorkloadSpec.model_fields["qp_timeout"].default:
        work["qp_timeout"] = args.qp_timeout
    if args.outs is not None:  # (check refuses -o on the tests that do not read remote memory)
        work["max_rd_atomic"] = outstanding_reads(args.outs, _nic(preset).max_rd_atomic)
    access = {}
    if kind.verb == "atomic":  # perftest registers with IBV_ACCESS_REMOTE_ATOMIC for atomic tests
        work["atomic"] = args.atomic_type
        access = {"access": ["local_write", "remote_write", "remote_read", "remote_atomic"]}
    if kind.receives:  # perftest makes an odd rx depth even in a SEND test of one size (force_dependecies)
        work["rx_depth"] = args.rx_depth + (args.rx_depth % 2 if not args.all else 0)
    if kind.verb in ("write", "send"):  # perftest: no default inline for GPU memory or bandwidth tests
        host = args.use_cuda is None and args.use_rocm is None
        default = LAT_WRITE_INLINE[preset] if not kind.streams and host else 0
        work["inline"] = default if args.inline_size is None else args.inline_size
    mapping = {"export_mapping": "pcie"} if args.use_cuda_pcie_mapping or args.use_data_direct else {}
    return {
        "schema": 1, "name": test, "description": f"rdmasim perftest {shlex.join(argv)}",
        "nodes": [client, {"name": "b", "nic": {"preset": preset}}],
        "fabric": {"rate": NIC_RATE[preset], "mtu": args.mtu, "transport": "ib"},
        "buffers": [buffer for k in suffixes for buffer in (
            {"name": f"local{k}", "on": place, "size": size, "register": mode, **access, **mapping},
            {"name": f"remote{k}", "on": "b.host", "size": size, "register": "pinned", **access})],
        "workload": [work],
        "outputs": ["bw_vs_size" if kind.streams else "latency_vs_size"],
        "engine": args.engine,
        **({"data": True} if args.data_validation else {}),
    }


def ud_largest(args: argparse.Namespace, argv: list[str]) -> int:
    """The largest message of a UD run: perftest lowers -a's sizes, or a size it chose, to the MTU; a larger -s it
    refuses.

    :raises UsageError: -s above the MTU.
    """
    largest = MAX_SIZE if args.all else args.size
    if largest <= args.mtu:
        return largest
    if not args.all and any(a == "--size" or a.startswith(("--size=", "-s")) for a in argv[1:]):
        raise UsageError(f"-s {args.size}: Max message size in UD cannot be greater than MTU ({args.mtu})")
    return args.mtu


def outstanding_reads(requested: int, device_max: int) -> int:
    """perftest's ``ctx_set_out_reads``: -o above the device's max, or not positive, becomes the max."""
    return device_max if requested <= 0 or requested > device_max else requested


def perftest_scenario(argv: list[str]) -> Scenario:
    """The scenario a perftest command line (``["ib_write_bw", "-s", "4K", ...]``) stands for.

    :raises UsageError: unknown test or device, an unsupported option, or options perftest rejects.
    """
    return _scenario(_parse(argv))[0]


OPTION_OF_KEY = {"tx_depth": "-t/--tx-depth", "rx_depth": "-r/--rx-depth", "duration": "-D/--duration",
                 "transport": "-c/--connection"}
"""The option that sets a workload key the scenario's checks may refuse (others: -n/-s/-q)."""


def _refused(key: str, reason: str) -> UsageError:
    return UsageError(f"{OPTION_OF_KEY.get(key, '-n/-s/-q')}: {reason}")


def _scenario(cmd: _Command) -> tuple[Scenario, Callable[[], None] | None]:
    """The command's scenario, checked as a scenario file is (the options' product must fit the schema's bounds,
    the run and the memory available, on the vectorized core's estimate where ``auto`` gives it the run), and the
    check to make should ``auto`` hand the run to the event engine after all (:func:`sim.engine.budget.check_fallback`;
    None: none is needed)."""
    from sim.engine import budget
    from sim.scenario.loader import validate
    from sim.scenario.refs import check_references
    from sim.scenario.schema import Scenario
    from sim.scenario.yaml_reader import PositionMap

    try:
        scenario = validate(Scenario, cmd.data, PositionMap(), cmd.data["name"])
    except ConfigError as exc:
        raise _refused(re.split(r"[.\[]", exc.key)[-1], exc.reason) from None
    problems = check_references(scenario)
    if problems:
        (*_, key), reason = problems[0]
        raise _refused(key, reason)
    variants, limit = [("base", scenario)], budget.available_memory()
    need, short = budget.admitted(variants, limit)
    if short:
        option = "-D/--duration" if need.key[-1] == "duration" else "-n/-a/-q"
        raise UsageError(f"{option}: the {short}, the memory available now; ask for fewer exchanges or sizes")
    return scenario, (partial(budget.check_fallback, "base", variants, need.guarded, limit) if need.guarded else None)


def _dump(cmd: _Command) -> str:
    return (f"# Equivalent of: {cmd.data['description']}\n# Run it with: rdmasim run FILE\n"
            + _yaml_text(cmd.data))


def _yaml_text(data: dict) -> str:
    """``data`` as YAML 1.2 (what the scenario loader reads), nested mappings of scalars in flow style."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style, yaml.width = None, 120
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _notices(cmd: _Command) -> list[str]:
    """One line per option given that has no meaning in a simulation, and perftest's own adjustments."""
    lines = [f"rdmasim perftest: {'/'.join(flags)} ignored: {why}"
             for flags, _, why in IGNORED if getattr(cmd.args, flags[-1].lstrip("-")) not in (None, False)]
    if cmd.args.server is not None:
        lines.append(f"rdmasim perftest: server address {cmd.args.server} ignored: rdmasim simulates both sides")
    outs = getattr(cmd.args, "outs", None)
    device_max = _nic(cmd.data["nodes"][0]["nic"]["preset"]).max_rd_atomic
    if outs is not None and outs > device_max:
        lines.append(f" Number of outstanding reads is above max = {device_max}\n Changing to that max value")
    if cmd.args.connection == "UD" and (cmd.args.all or cmd.args.size > cmd.args.mtu):
        lines.append(f" Max msg size in UD is MTU {cmd.args.mtu}\n Changing to this MTU")
    if TESTS[cmd.test].streams:  # (-Q and -l are bandwidth tests' options)
        ours, theirs = cq_moderation(cmd.args), perftest_cq_moderation(cmd.args)
        if ours != theirs:
            lines.append(f"rdmasim perftest: CQ moderation {ours} (every work request signaled); perftest's default "
                         f"here is {theirs}: -Q {theirs} follows it")
    return lines + report_notices(cmd.args, TESTS[cmd.test])


def run_perftest(argv: list[str], notice: Callable[[str], None] | None = None,
                 display: Display | None = None) -> tuple[int, str]:
    """Run a perftest command line in the simulator; return the exit code and the report, perftest's standard
    output (its header block and table, ``--help``, or ``--dump-scenario``'s YAML).

    ``notice`` (default: a line on stderr) gets every other line, as perftest writes them to stderr: the options
    ignored and perftest's own adjustments, the engine's fallback, the results written, and why the command line
    is refused or the run failed. ``display`` (default: none) shows the simulation's progress
    (:func:`sim.cli.progress.progress_bar`).

    Exit codes: 0 success (or ``--help``), 1 the simulation failed, work requests completed in error or ``-w``'s
    limit was not reached, 2 the command line is not one rdmasim can run (the notice says why).

    Examples
    --------
    >>> run_perftest(["ib_write_bw", "-s", "64K", "--run_infinitely"], notice=print)
    rdmasim perftest: --run_infinitely is not supported by rdmasim perftest (see ...)
    (2, '')
    """
    from sim.store import outdir

    notice = notice or (lambda line: print(line, file=sys.stderr))
    try:
        if argv[:1] in (["-h"], ["--help"]):
            return 0, f"usage: rdmasim perftest {{{','.join(TESTS)}}} [options]  (TEST --help for the options)"
        if any(a in ("-h", "--help") for a in argv[1:]):
            return 0, parser(_test(argv)).format_help()
        if any(a in ("-V", "--version") for a in argv[1:]):
            return 0, (f"Version: rdmasim {__version__} (the simulator's front end to perftest's {_test(argv)}; "
                       "not perftest's binary)")
        cmd = _parse(argv)
        scenario, guard = _scenario(cmd)
    except UsageError as exc:
        notice(f"rdmasim perftest: {exc}")
        return 2, ""
    if cmd.args.dump_scenario:
        return 0, _dump(cmd)
    from sim.engine.run import progress_totals, run_scenario

    try:
        if cmd.args.out is not None:
            outdir.claim(cmd.args.out, outdir.RUN, force=cmd.args.force)
        for line in _notices(cmd):
            notice(line)
        with (display or (lambda *_: nullcontext(None)))(cmd.test, *progress_totals([scenario])) as advance:
            result = run_scenario(scenario, notice=notice, progress=advance, before_fallback=guard,
                                  simulated=advance and advance.simulated, running=advance and advance.running,
                                  operations=reads_operations(cmd))
        text = report(cmd, result)
        if cmd.args.out is not None:
            from sim.results.write import write_results

            notice(f"wrote {write_results(result, cmd.args.out, _dump(cmd).encode('utf-8'), force=cmd.args.force)}")
    except outdir.OutputError as exc:
        notice(f"rdmasim perftest: {exc}")
        return 2, ""
    except SimError as exc:
        notice(f"rdmasim perftest: run failed: {exc}")
        return 1, ""
    failed = validation_failed(cmd, result)
    if failed:
        notice(failed)
        return 1, text
    if below_limit(cmd, result.summary_rows):
        notice("Error: BW result is below bw limit")
        return 1, text
    return int(any(row["errors"] for row in result.summary_rows)), text

"""``rdmasim perftest``: run a perftest command line (ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat,
ib_send_bw, ib_send_lat, ib_atomic_bw, ib_atomic_lat) in the simulator.

The command line is parsed with perftest's option names, defaults and checks (linux-rdma/perftest
``src/perftest_parameters.c``), turned into the equivalent two-node scenario -- client ``a`` posts, server ``b``
responds from pinned host memory -- and reported in perftest's layout (MiB/sec, or Gb/sec with
``--report_gbits``; -N, --output, -H/-U and --report-both shape it as perftest does). Options that mean nothing
in a simulation, or whose effect it does not model (:data:`IGNORED`, the server address), are accepted with
perftest's checks and each said to be ignored; --mr_per_qp and --data_validation map onto buffer pairs and data
mode; ``--engine`` picks the scenario's engine (``auto`` by default).
``--dump-scenario`` prints that scenario as YAML instead of running it.
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ruamel.yaml import YAML

from models.nic.device import PORT_NUM
from models.nic.nic import NicParams
from models.nic.transport import QpType, receive_overhead
from models.nic.wqe import ATOMIC_BYTES
from models.presets import NIC_PCIE, NIC_PRESETS, NIC_RATE
from sim import __version__, budget, outdir
from sim.core.errors import ConfigError, SimError
from sim.core.units import format_size
from sim.perftest_report import (BW_HEADER, BW_HEADER_MIB, OUTPUTS, RULE, bandwidth_column, format_summary,
                                 format_values, iteration_lines, one_way)
from sim.scenario.loader import validate
from sim.scenario.refs import check_references
from sim.scenario.schema import Scenario, WorkloadSpec
from sim.scenario.yaml_reader import PositionMap

TESTS = {"ib_write_bw": "write_bw", "ib_read_bw": "read_bw", "ib_write_lat": "write_lat", "ib_read_lat": "read_lat",
         "ib_send_bw": "send_bw", "ib_send_lat": "send_lat",
         "ib_atomic_bw": "atomic_bw", "ib_atomic_lat": "atomic_lat"}
"""perftest binaries rdmasim runs, and the workload kind each becomes."""
NUMBER = r"\d+"
DEVICES = {f"mlx5_{NUMBER}": "connectx7", f"efa_{NUMBER}": "efa"}
"""perftest ``-d`` device names (regular expressions) and the NIC preset simulated for them."""
MAX_SIZE = 2**23
"""Largest size of ``-a`` (perftest's MAX_SIZE)."""
LAT_WRITE_INLINE = {"connectx7": 220, "efa": 32}
"""perftest's default inline size of ib_write_lat by device (DEF_INLINE_WRITE for mlx5; 32 for EFA); ib_send_lat
uses it too (perftest's DEF_INLINE_SEND_RC_UC, 236, is more than the presets' max_inline)."""
DEF_RX_SEND = 512
"""perftest's default -r/--rx-depth of the SEND tests."""
REGISTRATION = {
    "pinned": "ibv_reg_mr, pages pinned",
    "odp": "ibv_reg_mr with IBV_ACCESS_ON_DEMAND, nothing pinned",
    "peermem": "ibv_reg_mr through nvidia-peermem, GPU pages pinned",
    "dmabuf": "cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr",
    "dmabuf-pinned": "cuMemGetHandleForAddressRange + mlx5dv_reg_dmabuf_mr(DATA_DIRECT)",
}
"""How the client's buffer is registered in each scenario mode, in verbs calls."""


class UsageError(SimError):
    """A perftest command line rdmasim cannot run (exit code 2); the message names the option."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))")
LONG_MAX = 2**63 - 1
"""strtol's result on a 64-bit Linux saturates at LONG_MAX (and LONG_MIN = -LONG_MAX - 1)."""


def _strtol(text: str) -> tuple[int, str]:
    """C's ``strtol(text, &end, 0)``: the integer at the start of ``text`` (leading white space, a sign, ``0x``
    hexadecimal, ``0`` octal, else decimal; 0 when there is none) and the text it leaves unread."""
    found = _STRTOL.match(text)
    if found is None:
        return 0, text
    sign, hexadecimal, octal, decimal = found.groups()
    value = int(hexadecimal, 16) if hexadecimal else int(octal, 8) if octal else int(decimal)
    value = min(value, LONG_MAX + (sign == "-"))
    return -value if sign == "-" else value, text[found.end():]


def _integer(what: str):
    """perftest's CHECK_VALUE: an integer in C notation that strtol reads to the end, else its message."""
    def parse(text: str) -> int:
        value, unread = _strtol(text)
        if unread:
            raise argparse.ArgumentTypeError(f"{what} argument {text} should be int")
        return value
    return parse


def _ranged(low: int, high: int, what: str):
    """perftest's CHECK_VALUE_IN_RANGE: an integer from ``low`` to ``high``, else its messages."""
    def parse(text: str) -> int:
        value = _integer(what)(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} should be between {low} and {high}")
        return value
    return parse


def _positive(what: str):
    """perftest's CHECK_VALUE_POSITIVE: an integer above 0, else its messages."""
    def parse(text: str) -> int:
        value = _integer(what)(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be positive")
        return value
    return parse


def _non_negative(what: str):
    """perftest's CHECK_VALUE_NON_NEGATIVE for an int: an integer of at least 0, else its messages."""
    def parse(text: str) -> int:
        value = _integer(what)(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{what} must be non-negative int")
        return value
    return parse


def _service_level(text: str) -> int:
    """perftest's ``-S``: an integer kept as a uint8_t, at most MAX_SL (15)."""
    level = _integer("Service Level")(text) % 2**8
    if level > 15:
        raise argparse.ArgumentTypeError("Only 15 Service levels")
    return level


def _limit(text: str) -> float:
    """perftest's ``-w``: a non-negative bandwidth."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Minimum BW Limit argument {text} should be a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError("Invalid Minimum BW Limit")
    return value


def _client_ip(text: str) -> str:
    """perftest's ``-j``: an IPv4 address as ``inet_pton(AF_INET)`` reads it."""
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError("Invalid client IP address") from None
    return text


def _output(text: str) -> str:
    """perftest's ``--output``: one of its three verbosity levels."""
    if text not in OUTPUTS:
        raise argparse.ArgumentTypeError("Invalid verbosity level output flag. Please use bandwidth, latency, "
                                         "message_rate")
    return text


IGNORED = [
    (("-x", "--gid-index"), _ranged(0, 64, "Gid index"), "the simulated fabric needs no GID"),
    (("-F", "--CPU-freq"), None, "a simulation has no CPU frequency"),
    (("-R", "--rdma_cm"), None, "the simulated QPs are connected directly, without rdma_cm"),
    (("--cpu_util",), None, "a simulation uses no CPU time to report"),
    (("-p", "--port"), _ranged(0, 65535, "Port"), "rdmasim exchanges no connection data over TCP"),
    (("-S", "--sl"), _service_level, "the simulated fabric has one service level"),
    (("-T", "--tos"), _ranged(0, 255, "TOS"), "the simulated fabric carries no traffic classes"),
    (("-z", "--comm_rdma_cm"), None, "rdmasim exchanges no connection data over rdma_cm"),
    (("--pin_cores",), str, "a simulation runs on no host CPUs to pin"),
    (("--numa_node",), _non_negative("numa_node"), "a simulation has no NUMA nodes"),
    (("--disable_numa",), None, "a simulation has no NUMA nodes"),
    (("-e", "--events"), None, "the simulated CPU polls its CQs: completion events (ibv_req_notify_cq, "
                               "ibv_get_cq_event) and their interrupt's latency are not modelled"),
    (("-O", "--dualport"), None, "the simulated NIC has one port, so the test runs on port 1 alone (perftest runs "
                                 "twice the QPs, half of them on port 2)"),
    (("-M", "--MGID"), str, "perftest uses the MGID only for multicast (-g), which rdmasim does not simulate"),
    (("--ipv6",), None, "the simulated fabric needs no GID (perftest picks an IPv6 GID with it)"),
    (("--tclass",), _integer("traffic class"), "the simulated fabric carries no traffic classes (perftest puts it "
                                               "in the GRH)"),
    (("-j", "--source_ip"), _client_ip, "an IP header field of perftest's raw Ethernet tests, which rdmasim does "
                                        "not run"),
    (("-k", "--source_port"), _integer("Client Port"), "a UDP header field of perftest's raw Ethernet tests, which "
                                                       "rdmasim does not run"),
    (("--bind_source_ip",), str, "rdmasim exchanges no connection data over TCP"),
]
"""Options with no meaning in a simulation: accepted, each reported once as ignored (flags, type or None for a
switch, why)."""


MAX_MESSAGE_ARG = (2**32 - 1) // 2
"""Largest ``-s`` perftest takes (UINT_MAX / 2)."""


def _size(text: str) -> int:
    """perftest's ``-s``: a last K or M taken off (times 2^10 or 2^20), the rest read by strtol, which stops at
    the first character that is not part of the number (so ``5G`` is 5 bytes, as in perftest), as a uint64_t,
    from 1 to UINT_MAX / 2."""
    factor = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
    size = _strtol(text[:-1] if factor > 1 else text)[0] * factor % 2**64
    if not 1 <= size <= MAX_MESSAGE_ARG:
        raise argparse.ArgumentTypeError(f"Message Size should be between 1 and {MAX_MESSAGE_ARG}")
    return size


def _parser(test: str) -> argparse.ArgumentParser:
    bw, atomic = TESTS[test].endswith("_bw"), TESTS[test].startswith("atomic")
    p = _Parser(prog=f"rdmasim perftest {test}", add_help=False, allow_abbrev=False,
                description=f"Simulate perftest's {test}: client a posts to server b (pinned host memory).")
    add = p.add_argument
    add("server", nargs="?", help="Server address: accepted, ignored (rdmasim simulates both sides).")
    add("-h", "--help", action="store_true", help="Show this help.")
    size = ATOMIC_BYTES if atomic else 65536 if bw else 2
    add("-s", "--size", type=_size, default=size,
        help=f"Size of message to exchange, K/M suffixes allowed (default {size}"
             f"{'; atomics move 8 bytes' if atomic else ''}).")
    if atomic:
        add("-A", "--atomic_type", choices=["CMP_AND_SWAP", "FETCH_AND_ADD"], default="FETCH_AND_ADD",
            help="Type of atomic operation (default FETCH_AND_ADD).")
    add("-n", "--iters", type=_ranged(5, 100_000_000, "Iteration num"),
        default=5000 if test == "ib_write_bw" else 1000,
        help=f"Number of exchanges (at least 5, default {5000 if test == 'ib_write_bw' else 1000}).")
    add("-a", "--all", action="store_true", help="Run sizes from 2 till 2^23.")
    add("-d", "--ib-dev", default="mlx5_0", metavar="DEV",
        help="Use IB device DEV (default mlx5_0): mlx5_<N> simulates a connectx7, efa_<N> an EFA-like NIC.")
    add("-i", "--ib-port", type=_ranged(PORT_NUM, PORT_NUM, "IB port (the simulated NIC has one port)"),
        default=PORT_NUM,
        metavar="PORT", help="Use port PORT of the IB device (default 1, the simulated NIC's only port).")
    for flags, kind, why in IGNORED:
        add(*flags, **({"action": "store_true"} if kind is None else {"type": kind}), dest=flags[-1].lstrip("-"),
            help=f"Accepted, ignored: {why}.")
    add("-q", "--qp", type=_ranged(1, 1024, "num of Qps"), default=1,
        help="Number of QPs streaming at once, each with its own tx depth and -n exchanges (bandwidth tests).")
    add("-t", "--tx-depth", type=_ranged(1, 15000, "Tx depth"), default=128 if bw else 1,
        help=f"Size of tx queue (default {128 if bw else 1}; latency tests keep one message in flight).")
    add("-I", "--inline_size", type=_ranged(0, 1024, "Max inline"), metavar="SIZE",
        help="Max size of message to be sent inline (default: 220 for ib_write_lat and ib_send_lat on mlx5, else 0).")
    if TESTS[test].startswith("send"):
        add("-r", "--rx-depth", type=_ranged(1, 32768, "Rx depth"), default=DEF_RX_SEND,
            help=f"Receives the receiving side keeps posted (default {DEF_RX_SEND}, at most the iterations).")
    add("-m", "--mtu", type=int, choices=[256, 512, 1024, 2048, 4096], default=4096, help="MTU size (default 4096).")
    add("-D", "--duration", type=_positive("Duration period"),
        help="Run for this many simulated seconds per size, as many iterations as fit (instead of -n).")
    add("-c", "--connection", default="RC",
        help="Connection type RC/UC/UD (default RC; rdmasim simulates RC, UC and UD QPs).")
    if bw:
        add("-b", "--bidirectional", action="store_true",
            help="Measure bidirectional bandwidth: both sides post at once (default unidirectional).")
        add("-l", "--post_list", type=_positive("Send Post List size"), default=1,
            help="Post list of send WQEs of this size per ibv_post_send call (instead of single post).")
        add("-Q", "--cq-mod", type=_ranged(1, 1024, "CQ moderation"),
            help="Generate a CQE only every N work requests (default: -l's size, else every one; perftest's "
                 "own default is 100 for messages up to 8 KiB).")
        add("-w", "--limit_bw", type=_limit, metavar="VALUE",
            help="Fail (exit 1) when the average bandwidth is below VALUE (in the report's unit).")
    if TESTS[test].startswith(("read", "atomic")):
        add("-o", "--outs", type=_integer("Outstanding Reads"),
            help="Number of outstanding READs/atomics (default: the device's max_qp_rd_atom).")
    add("-u", "--qp-timeout", type=_ranged(0, 31, "QP Timeout"), default=14, metavar="TIMEOUT",
        help="QP timeout, timeout value is 4 usec * 2 ^(timeout), default 14: how long RC waits for an "
             "acknowledgement before it sends a lost frame again (0: never; rdmasim takes IB's 5-bit range).")
    add("--report_gbits", action="store_true", help="Report bandwidth in Gbit/sec (instead of MiB/sec).")
    add("-N", "--noPeak", action="store_true",
        help="Bandwidth tests: cancel peak-bw calculation, the peak column reads 0.00 (as with -D or more than "
             "20000 iterations).")
    add("--report-both", action="store_true",
        help="Bidirectional bandwidth tests (-b): also report each direction, local (client a's sends) and remote "
             "(server b's).")
    add("-H", "--report-histogram", "--report-histogrm", dest="histogram", action="store_true",
        help="Latency tests: print every iteration's latency, sorted, before the summary row (perftest's binary "
             "spells the long name --report-histogrm).")
    add("-U", "--report-unsorted", dest="unsorted", action="store_true",
        help="Latency tests: print every iteration's latency in the order measured.")
    add("-C", "--report-cycles", dest="cycles", action="store_true",
        help="Refused: the simulated CPU has no clock whose cycles to count (latencies are in usec).")
    add("--output", type=_output, metavar="UNITS",
        help="Print only the average, one number a size: bandwidth or message_rate (bandwidth tests), latency "
             "(latency tests).")
    add("-V", "--version", action="store_true", help="Print rdmasim's version and exit.")
    add("--data_validation", action="store_true",
        help="Run in data mode: RDMA moves real bytes and the destination is compared with its source at the end "
             "(WRITE and READ bandwidth tests).")
    add("--mr_per_qp", action="store_true",
        help="Create memory region for each qp: each of -q's QPs streams between buffers of its own.")
    add("--engine", choices=["auto", "fast", "event"], default="auto",
        help="rdmasim only: the simulation engine (default auto: the vectorized core where it applies).")
    add("--use_cuda", nargs="?", const=0, type=_ranged(0, 15, "CUDA device"), metavar="ID",
        help="Client buffer in GPU ID's memory (default 0), registered through legacy peer memory "
             "(nvidia-peermem) unless --use_cuda_dmabuf.")
    add("--use_cuda_dmabuf", action="store_true",
        help="Export the GPU buffer with cuMemGetHandleForAddressRange and register it with ibv_reg_dmabuf_mr "
             "(requires --use_cuda).")
    add("--use_cuda_pcie_mapping", action="store_true",
        help="Use CUDA DMABUF handle mapping via PCIe BAR1: export with CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE "
             "(requires --use_cuda_dmabuf), which the driver accepts on coherent platforms only (--coherent-gpu).")
    add("--use_data_direct", action="store_true",
        help="Register the dma-buf with mlx5dv_reg_dmabuf_mr(DATA_DIRECT): a pinned importer "
             "(requires --use_cuda_dmabuf; implies --use_cuda_pcie_mapping, as perftest does).")
    add("--coherent-gpu", action="store_true",
        help="rdmasim only: the --use_cuda GPU is on a coherent platform (Grace Hopper, NVLink-C2C): dma-buf maps "
             "hand out its pages, and the PCIe mapping type is accepted.")
    add("--use_rocm", nargs="?", const=0, type=_ranged(0, 15, "ROCm device"), metavar="ID",
        help="Client buffer in AMD GPU ID's memory (an mi300x, default 0); needs --use_rocm_dmabuf.")
    add("--use_rocm_dmabuf", action="store_true",
        help="Export the ROCm buffer as a dma-buf and register it with ibv_reg_dmabuf_mr (requires --use_rocm).")
    add("--gpu-topology", choices=["switch", "root_complex", "cross_socket"], default="switch",
        help="rdmasim only: where the --use_cuda GPU sits relative to the NIC: under one PCIe switch (nvidia-smi "
             "topo PIX, default), on another root port of the CPU (PHB/NODE) or on the other socket (SYS).")
    add("--mmap", metavar="FILE", help="Client buffer from an mmap'd file (host memory, plain ibv_reg_mr); "
                                       "the file is not opened.")
    add("--odp", action="store_true", help="Register the client's host buffer with On Demand Paging.")
    add("--dump-scenario", action="store_true", help="Print the equivalent scenario YAML instead of running it.")
    add("--out", metavar="DIR", help="rdmasim only: also write the results directory of the equivalent scenario "
                                      "(as rdmasim run does): a new or empty directory, or earlier results with "
                                      "--force.")
    add("--force", action="store_true", help="rdmasim only: let --out replace earlier rdmasim results.")
    return p


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
    args, extra = _parser(test).parse_known_args(argv[1:])
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


def _nic_preset(device: str) -> str:
    for pattern, preset in DEVICES.items():
        if re.fullmatch(pattern, device):
            return preset
    known = ", ".join(f"{pattern.replace(NUMBER, '<N>')} ({preset})" for pattern, preset in DEVICES.items())
    raise UsageError(f"-d/--ib-dev: unknown device '{device}'; known devices: {known}")


def _check(args: argparse.Namespace, kind: str, preset: str, nic: NicParams) -> None:
    """perftest's cross-option checks, and the limits of what rdmasim models."""
    _check_connection(args.connection, kind)
    if args.duration is not None and args.all:
        raise UsageError("-D with -a: Duration mode currently doesn't support running on all sizes.")
    if args.qp != 1 and not kind.endswith("_bw"):
        raise UsageError(f"-q/--qp {args.qp}: multiple QPs are available in bandwidth tests only")
    if args.use_cuda_dmabuf and args.use_cuda is None:
        raise UsageError("--use_cuda_dmabuf: CUDA DMA-BUF cannot be used without CUDA (add --use_cuda)")
    if args.use_data_direct and not args.use_cuda_dmabuf:
        raise UsageError("--use_data_direct: DMABUF must be enabled in order to use Data Direct "
                         "(add --use_cuda_dmabuf)")
    if args.use_cuda_pcie_mapping and not args.use_cuda_dmabuf:
        raise UsageError("--use_cuda_pcie_mapping: CUDA PCIe mapping requires DMA-BUF (add --use_cuda_dmabuf)")
    if args.coherent_gpu and args.use_cuda is None:
        raise UsageError("--coherent-gpu: describes the --use_cuda GPU's platform (add --use_cuda)")
    if args.use_data_direct and preset != "connectx7":
        raise UsageError(f"--use_data_direct: Data Direct is not supported on {args.ib_dev} ({preset})")
    if args.use_rocm_dmabuf and args.use_rocm is None:
        raise UsageError("--use_rocm_dmabuf: ROCm DMA-BUF cannot be used without ROCm (add --use_rocm)")
    if args.use_rocm is not None and not args.use_rocm_dmabuf:
        raise UsageError("--use_rocm: rdmasim registers AMD GPU memory through dma-buf only (add "
                         "--use_rocm_dmabuf); ROCm's peer-memory ibv_reg_mr is not simulated")
    if sum(x is not None and x is not False for x in (args.use_cuda, args.use_rocm, args.mmap)) > 1:
        raise UsageError("--use_cuda, --use_rocm, --mmap: Can't use multiple memory types")
    if args.use_cuda is not None and args.mmap:
        raise UsageError("--use_cuda with --mmap: Can't use multiple memory types")
    if args.numa_node is not None and args.pin_cores is not None:
        raise UsageError("--numa_node, --pin_cores: --numa_node and --pin_cores cannot be used together")
    if args.gpu_topology != "switch" and args.use_cuda is None and args.use_rocm is None:
        raise UsageError("--gpu-topology: places the --use_cuda GPU; add --use_cuda")
    if (args.use_cuda is not None or args.use_rocm is not None) and args.odp:
        raise UsageError("--odp with --use_cuda: rdmasim registers GPU memory only through peer memory or dma-buf")
    if kind.startswith("atomic") and (args.size != ATOMIC_BYTES or args.all):
        raise UsageError("-s/-a: Message size cannot be changed for Atomic tests (8 bytes)")
    if args.inline_size is not None and not kind.startswith("write"):
        raise UsageError("-I/--inline_size: Inline feature not available on READ/Atomic verbs")
    if args.inline_size is not None and args.inline_size > nic.max_inline:
        raise UsageError(f"-I/--inline_size {args.inline_size}: the simulated {preset} carries at most "
                         f"{nic.max_inline} B inline (perftest would fail to create the QP)")
    if kind.endswith("_bw"):
        _check_posting(args)
    _check_reporting(args, kind)
    _check_unmodelled(args, kind)
    if args.data_validation:
        _check_validation(args, kind)


def _check_reporting(args: argparse.Namespace, kind: str) -> None:
    """perftest's checks of the options that shape its report, then the one rdmasim adds: -C's cycles."""
    bw = kind.endswith("_bw")
    if args.noPeak and not bw:
        raise UsageError("-N/--noPeak: NoPeak only valid for BW tests")
    for given, flag, available in ((args.histogram, "-H/--report-histogram:", "Available"),
                                   (args.unsorted, "-U/--report-unsorted", "is Available"),
                                   (args.cycles, "-C/--report-cycles:", "Available")):
        if given and bw:
            raise UsageError(f"{flag} {available} only on Latency tests")
    if args.cycles:
        raise UsageError("-C/--report-cycles: the simulated CPU has no clock whose cycles to count (perftest reads "
                         "the CPU's time-stamp counter); rdmasim reports latencies in usec only, so drop -C")
    if args.output is not None and not kind.endswith(OUTPUTS[args.output]):
        levels = "bandwidth, message_rate" if bw else "latency"
        raise UsageError(f"--output={args.output}: Output verbosity level for {'BW' if bw else 'LAT'} can be: "
                         f"{levels}")


def _check_unmodelled(args: argparse.Namespace, kind: str) -> None:
    """perftest's checks of the options rdmasim accepts and ignores (:data:`IGNORED`)."""
    if args.events and kind.startswith("write"):
        raise UsageError("-e/--events: Events feature not available on WRITE verb")
    if args.events and args.duration is not None:
        raise UsageError("-e with -D: Duration mode doesn't work with events.")
    if args.dualport and not kind.endswith("_bw"):
        raise UsageError("-O/--dualport: Dual-port mode only supports BW tests.")
    if args.dualport and args.rdma_cm:
        raise UsageError("-O with -R: Perftest still doesn't support Dual Port with rdma_cm")


VALIDATION_MIN_TX = 32
"""perftest's least tx depth for --data_validation."""


def _check_validation(args: argparse.Namespace, kind: str) -> None:
    """perftest's --data_validation checks (``force_dependecies``), in its order."""
    refusal = ("requires --use_cuda or host memory" if args.use_rocm is not None or args.mmap else
               "is only supported with WRITE or READ verb" if not kind.startswith(("write", "read")) else
               "is only supported in bandwidth tests" if not kind.endswith("_bw") else
               "is incompatible with --post_list > 1" if args.post_list > 1 else
               "requires RC connection type" if args.connection != "RC" else
               "is incompatible with --mr_per_qp" if args.mr_per_qp else
               "is incompatible with -a (run all sizes)" if args.all else
               f"requires tx_depth >= {VALIDATION_MIN_TX} (use -t)" if args.tx_depth < VALIDATION_MIN_TX else None)
    if refusal:
        raise UsageError(f"--data_validation {refusal}")


CONNECTIONS = ("RC", "UC", "UD", "XRC", "DC", "SRD")
"""perftest's ``-c`` names (its connStr order, less RawEth)."""


def _check_connection(connection: str, kind: str) -> None:
    """perftest's ``change_conn_type`` checks, then the one rdmasim adds: its QPs are RC, UC or UD QPs."""
    verb = kind.split("_")[0]
    if connection not in CONNECTIONS:
        raise UsageError(f"-c {connection}: Invalid Connection type. Please choose from {{{','.join(CONNECTIONS)}}}")
    if connection == "UC" and verb in ("read", "atomic"):
        raise UsageError("-c UC: UC connection not possible in READ/ATOMIC verbs")
    if connection == "UD" and verb != "send":
        raise UsageError("-c UD: UD connection only possible in SEND verb")
    if connection not in ("RC", "UC", "UD"):
        raise UsageError(f"-c {connection}: rdmasim simulates RC, UC and UD QPs; {connection} QPs are not modelled "
                         "(run with -c RC)")


def _check_posting(args: argparse.Namespace) -> None:
    """perftest's post-list and CQ-moderation checks (``force_dependecies``)."""
    if args.post_list > 1 and args.duration is None and args.iters % args.post_list:
        raise UsageError("-l/--post_list: Number of iterations must be a multiple of post list size")
    if args.post_list > 1 and args.cq_mod is not None and args.post_list % args.cq_mod:
        raise UsageError("-l/-Q: Post list size must be a multiple of CQ moderation")
    if args.post_list > args.tx_depth:
        raise UsageError(f"-l/--post_list {args.post_list}: more than the tx depth {args.tx_depth}")


def cq_moderation(args: argparse.Namespace) -> int:
    """The CQ moderation a bandwidth command line runs with: -Q (at most the tx depth, as perftest caps it), else
    the post list's size."""
    return min(args.cq_mod, args.tx_depth) if args.cq_mod is not None else args.post_list


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def _scenario_data(test: str, args: argparse.Namespace, argv: list[str]) -> dict:
    kind = TESTS[test]
    preset = _nic_preset(args.ib_dev)
    _check(args, kind, preset, NicParams(**NIC_PRESETS[preset]))
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
    size = format_size(_round_up(largest + receive_overhead(QpType(args.connection)), page))
    # perftest's --mr_per_qp: each QP its own buffer and MR on both sides, one buffer pair a QP
    suffixes = [""] + [str(k) for k in range(1, args.qp if args.mr_per_qp else 1)]
    work = {"kind": kind, "name": test, "from": "local", "to": "remote",
            "sizes": {"from": "2B", "to": format_size(largest)} if args.all else [format_size(largest)],
            **({"iterations": args.iters} if args.duration is None else {"duration": f"{args.duration}s"}),
            **({"transport": args.connection.lower()} if args.connection != "RC" else {})}
    if kind.endswith("_bw"):
        work["tx_depth"] = args.tx_depth
        work["qps"] = 1 if args.mr_per_qp else args.qp
        work |= {"pairs": [{"from": f"local{k}", "to": f"remote{k}"} for k in suffixes[1:]]} if suffixes[1:] else {}
        work |= {"bidirectional": True} if args.bidirectional else {}
        work |= {key: value for key, value in (("post_list", args.post_list), ("cq_mod", cq_moderation(args)))
                 if value != 1}
    if args.qp_timeout != WorkloadSpec.model_fields["qp_timeout"].default:
        work["qp_timeout"] = args.qp_timeout
    if kind.startswith(("read", "atomic")) and args.outs is not None:
        work["max_rd_atomic"] = outstanding_reads(args.outs, NicParams(**NIC_PRESETS[preset]).max_rd_atomic)
    access = {}
    if kind.startswith("atomic"):  # perftest registers with IBV_ACCESS_REMOTE_ATOMIC for atomic tests
        work["atomic"] = args.atomic_type
        access = {"access": ["local_write", "remote_write", "remote_read", "remote_atomic"]}
    if kind.startswith("send"):
        work["rx_depth"] = args.rx_depth
    if kind.startswith(("write", "send")):  # perftest: no default inline for GPU memory or bandwidth tests
        host = args.use_cuda is None and args.use_rocm is None
        default = LAT_WRITE_INLINE[preset] if kind.endswith("_lat") and host else 0
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
        "outputs": ["bw_vs_size" if kind.endswith("_bw") else "latency_vs_size"],
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
    return _scenario(_parse(argv))


OPTION_OF_KEY = {"tx_depth": "-t/--tx-depth", "rx_depth": "-r/--rx-depth", "duration": "-D/--duration"}
"""The option that sets a workload key the scenario's checks may refuse (others: -n/-s/-q)."""


def _refused(key: str, reason: str) -> UsageError:
    return UsageError(f"{OPTION_OF_KEY.get(key, '-n/-s/-q')}: {reason}")


def _scenario(cmd: _Command) -> Scenario:
    """The command's scenario, checked as a scenario file is (the options' product must fit the schema's bounds,
    the run and the memory available)."""
    try:
        scenario = validate(Scenario, cmd.data, PositionMap(), cmd.data["name"])
    except ConfigError as exc:
        raise _refused(re.split(r"[.\[]", exc.key)[-1], exc.reason) from None
    problems = check_references(scenario)
    if problems:
        (*_, key), reason = problems[0]
        raise _refused(key, reason)
    short = budget.over_budget(budget.estimate([("base", scenario)]), budget.available_memory())
    if short:
        raise UsageError(f"-n/-a/-q: the {short}, the memory available now; ask for fewer exchanges or sizes")
    return scenario


def _dump(cmd: _Command) -> str:
    return (f"# Equivalent of: {cmd.data['description']}\n# Run it with: rdmasim run FILE\n"
            + _yaml_text(cmd.data))


def _yaml_text(data: dict) -> str:
    """``data`` as YAML 1.2 (what the scenario loader reads), nested mappings of scalars in flow style."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style, yaml.width = None, 120
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _header(cmd: _Command, result) -> str:
    args, kind = cmd.args, TESTS[cmd.test]
    buf, work = cmd.data["buffers"][0], cmd.data["workload"][0]
    qp = result.testbed.qps[0]
    bw = kind.endswith("_bw")
    verb = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send", "atomic": "Atomic"}[kind.split("_")[0]]
    title = " ".join([verb, *([args.atomic_type] if verb == "Atomic" else []),
                      *(["Bidirectional"] if bw and args.bidirectional else []),
                      *(["Post List"] if bw and args.post_list > 1 else []), "BW" if bw else "Latency", "Test"])
    gpu = args.use_cuda if args.use_rocm is None else args.use_rocm
    memory = (f"{'CUDA' if args.use_rocm is None else 'ROCm'} device {gpu} ({buf['on']}, "
              f"{cmd.data['nodes'][0]['gpus'][0]['preset']}, {args.gpu_topology})" if gpu is not None
              else f"mmap'd file {args.mmap} (host)" if args.mmap else "host")
    reg_us = result.registrations.set_index("buffer").loc["local", "register_us"]
    mrs = sum(b["on"] == buf["on"] for b in cmd.data["buffers"])  # --mr_per_qp: one client MR a QP
    preset = cmd.data["nodes"][0]["nic"]["preset"]
    return "\n".join([
        RULE, f"                    {title}",
        f" Dual-port       : OFF\t\tDevice         : {args.ib_dev}",
        f" Number of qps   : {args.qp}\t\tTransport type : IB",
        f" Connection type : {args.connection}\t\tUsing SRQ      : OFF",
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


def _notices(cmd: _Command) -> list[str]:
    """One line per option given that has no meaning in a simulation, and perftest's own adjustments."""
    lines = [f"rdmasim perftest: {'/'.join(flags)} ignored: {why}"
             for flags, _, why in IGNORED if getattr(cmd.args, flags[-1].lstrip("-")) not in (None, False)]
    if cmd.args.server is not None:
        lines.append(f"rdmasim perftest: server address {cmd.args.server} ignored: rdmasim simulates both sides")
    outs = getattr(cmd.args, "outs", None)
    device_max = NicParams(**NIC_PRESETS[cmd.data["nodes"][0]["nic"]["preset"]]).max_rd_atomic
    if outs is not None and outs > device_max:
        lines.append(f" Number of outstanding reads is above max = {device_max}\n Changing to that max value")
    if cmd.args.connection == "UD" and (cmd.args.all or cmd.args.size > cmd.args.mtu):
        lines.append(f" Max msg size in UD is MTU {cmd.args.mtu}\n Changing to this MTU")
    return lines + _report_notices(cmd.args, TESTS[cmd.test])


PEAK_ITERATIONS = 20000
"""perftest measures no peak bandwidth above this many iterations (nor with -D or -N)."""


def _no_peak(args: argparse.Namespace, kind: str) -> bool:
    return kind.endswith("_bw") and (args.noPeak or args.duration is not None or args.iters > PEAK_ITERATIONS)


def _both_ways(args: argparse.Namespace) -> str | None:
    """Why --report-both prints no per-direction tables (None: it does)."""
    bidirectional = getattr(args, "bidirectional", False)  # latency tests have no -b
    return ("it reports the two directions of a bidirectional test (-b)" if not bidirectional else
            "perftest reports each direction for a single size only (not with -a)" if args.all else
            "--output prints only the average of both directions" if args.output is not None else None)


def _report_notices(args: argparse.Namespace, kind: str) -> list[str]:
    """perftest's notes on the report options, and why rdmasim leaves one of them without effect."""
    lines = []
    if _no_peak(args, kind) and not args.noPeak:
        lines.append(" WARNING: BW peak won't be measured in this run.")
    if args.report_both and _both_ways(args):
        lines.append(f"rdmasim perftest: --report-both ignored: {_both_ways(args)}")
    if (args.histogram or args.unsorted) and args.duration is not None:
        lines.append("rdmasim perftest: -H/-U ignored: perftest prints no per-iteration latencies with -D")
    if args.data_validation:
        lines.append("rdmasim perftest: --data_validation: data mode: RDMA moves real bytes, and the destination is "
                     "compared with its source once, at the end of the run (perftest checks each chunk as it lands)")
    return lines


def _iteration_lists(cmd: _Command, result) -> dict[int, list[str]] | None:
    """perftest's -U/-H lists of a latency test, by message size (None: not asked for, or a -D run)."""
    args = cmd.args
    if not (args.histogram or args.unsorted) or args.duration is not None:
        return None
    ops = result.table.frame(columns=["bytes", "latency_ps", "ok"])
    return {size: iteration_lines(rows.loc[rows["ok"], "latency_ps"].to_numpy(), args.unsorted, args.histogram)
            for size, rows in ops.groupby("bytes", sort=False)}


def _report(cmd: _Command, result) -> str:
    """perftest's standard output for the run: the header and table (or --output's numbers), --report-both's
    tables and --data_validation's line."""
    args, kind = cmd.args, TESTS[cmd.test]
    lists = _iteration_lists(cmd, result)
    if args.output is not None:
        return format_values(result.summary, args.output, args.report_gbits, lists)
    parts = [_header(cmd, result),
             format_summary(result.summary, args.report_gbits, _no_peak(args, kind), lists)]
    if args.report_both and not _both_ways(args):
        columns = ["bytes", "qp", "posted_ps", "completed_ps", "ok"]
        ways = one_way(result.table.frame(columns=columns), result.summary, args.tx_depth * args.qp)
        for name, rows in zip(("Local results", "Remote results"), ways):
            parts.append(format_summary(rows.assign(workload=name), args.report_gbits, _no_peak(args, kind)))
    if args.data_validation and not _validation_failed(cmd, result):
        parts.append(f"VALIDATION: PASSED - {result.counters['data_checked_bytes']} bytes")
    return "\n".join(parts)


def _validation_failed(cmd: _Command, result) -> str | None:
    """--data_validation's line on stderr when the destination differs from its source."""
    if not cmd.args.data_validation or not result.counters["data_mismatched_bytes"]:
        return None
    return (f"VALIDATION: FAILED - {result.counters['data_mismatched_bytes']} byte(s) of "
            f"{result.counters['data_checked_bytes']} differ from their source")


def _below_limit(cmd: _Command, summary) -> bool:
    """perftest's -w check: no size's average bandwidth (in the report's unit) reached the limit (perftest ORs
    each size's pass into ``is_bw_limit_passed``)."""
    limit = getattr(cmd.args, "limit_bw", None)
    if limit is None:
        return False
    return not bool((summary[bandwidth_column(cmd.args.report_gbits)] >= limit).any())


def run_perftest(argv: list[str], notice: Callable[[str], None] | None = None) -> tuple[int, str]:
    """Run a perftest command line in the simulator; return the exit code and the report, perftest's standard
    output (its header block and table, ``--help``, or ``--dump-scenario``'s YAML).

    ``notice`` (default: a line on stderr) gets every other line, as perftest writes them to stderr: the options
    ignored and perftest's own adjustments, the engine's fallback, the results written, and why the command line
    is refused or the run failed.

    Exit codes: 0 success (or ``--help``), 1 the simulation failed, work requests completed in error or ``-w``'s
    limit was not reached, 2 the command line is not one rdmasim can run (the notice says why).

    Examples
    --------
    >>> run_perftest(["ib_write_bw", "-s", "64K", "--run_infinitely"], notice=print)
    rdmasim perftest: --run_infinitely is not supported by rdmasim perftest (see ...)
    (2, '')
    """
    from sim.results import write_results
    from sim.run import run_scenario

    notice = notice or (lambda line: print(line, file=sys.stderr))
    try:
        if argv[:1] in (["-h"], ["--help"]):
            return 0, f"usage: rdmasim perftest {{{','.join(TESTS)}}} [options]  (TEST --help for the options)"
        if any(a in ("-h", "--help") for a in argv[1:]):
            return 0, _parser(_test(argv)).format_help()
        if any(a in ("-V", "--version") for a in argv[1:]):
            return 0, (f"Version: rdmasim {__version__} (the simulator's front end to perftest's {_test(argv)}; "
                       "not perftest's binary)")
        cmd = _parse(argv)
        scenario = _scenario(cmd)
    except UsageError as exc:
        notice(f"rdmasim perftest: {exc}")
        return 2, ""
    if cmd.args.dump_scenario:
        return 0, _dump(cmd)
    try:
        if cmd.args.out is not None:
            outdir.claim(cmd.args.out, outdir.RUN, force=cmd.args.force)
        for line in _notices(cmd):
            notice(line)
        result = run_scenario(scenario, notice=notice)
        report = _report(cmd, result)
        if cmd.args.out is not None:
            notice(f"wrote {write_results(result, cmd.args.out, _dump(cmd).encode('utf-8'), force=cmd.args.force)}")
    except outdir.OutputError as exc:
        notice(f"rdmasim perftest: {exc}")
        return 2, ""
    except SimError as exc:
        notice(f"rdmasim perftest: run failed: {exc}")
        return 1, ""
    failed = _validation_failed(cmd, result)
    if failed:
        notice(failed)
        return 1, report
    if _below_limit(cmd, result.summary):
        notice("Error: BW result is below bw limit")
        return 1, report
    return int(result.summary["errors"].any()), report

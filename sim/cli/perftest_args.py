"""perftest's command line as ``rdmasim perftest`` reads it: the option names, value parsers and messages of
linux-rdma/perftest ``src/perftest_parameters.c`` (its ``parser`` and ``force_dependecies``), and the options a
simulation accepts without modelling (:data:`IGNORED`)."""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from models.nic.device import PORT_NUM
from models.nic.wqe import ATOMIC_BYTES
from models.verbs.workload_kinds import KINDS, WorkloadKind, measures_between_margins
from sim.core.errors import SimError

if TYPE_CHECKING:
    from models.nic.nic import NicParams

TESTS: dict[str, WorkloadKind] = {kind.test: kind for kind in KINDS.values()}
"""perftest binaries rdmasim runs, and the workload kind each becomes."""
MLX5_GENERATIONS = ("connectx8", "connectx7", "connectx6", "connectx5")
"""The NIC presets an mlx5_<N> device may simulate (``--nic``)."""
DEF_RX_SEND = 512
"""perftest's default -r/--rx-depth of the SEND tests."""

OUTPUTS = {"bandwidth": True, "message_rate": True, "latency": False}
"""perftest's --output values and whether the bandwidth tests (True) or the latency tests take each."""


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


def _checked(what: str, ok, message: str):
    """An integer option whose value ``ok`` accepts, else perftest's ``message`` after ``what`` (its CHECK_VALUE_*
    macros)."""
    def parse(text: str) -> int:
        value = _integer(what)(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{what} {message}")
        return value
    return parse


def _ranged(low: int, high: int, what: str):
    """perftest's CHECK_VALUE_IN_RANGE: an integer from ``low`` to ``high``."""
    return _checked(what, lambda value: low <= value <= high, f"should be between {low} and {high}")


def margin(args) -> int:
    """perftest's margin of a -D run (s): -f, or a quarter of the duration in whole seconds."""
    return args.margin if args.margin is not None else args.duration // 4


def _positive(what: str):
    """perftest's CHECK_VALUE_POSITIVE: an integer above 0."""
    return _checked(what, lambda value: value > 0, "must be positive")


def _non_negative(what: str):
    """perftest's CHECK_VALUE_NON_NEGATIVE for an int: an integer of at least 0."""
    return _checked(what, lambda value: value >= 0, "must be non-negative int")


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


def parser(test: str) -> argparse.ArgumentParser:
    bw, atomic = TESTS[test].streams, TESTS[test].verb == "atomic"
    p = _Parser(prog=f"rdmasim perftest {test}", add_help=False, allow_abbrev=False,
                description=f"Simulate perftest's {test}: client a posts to server b (pinned host memory).")
    add = p.add_argument
    add("server", nargs="?", help="Server address: accepted, ignored (rdmasim simulates both sides).")
    add("-h", "--help", action="store_true", help="Show this help.")
    size = ATOMIC_BYTES if atomic else 65536 if bw else 2
    add("-s", "--size", type=_size, default=size,
        help=f"Size of message to exchange, K/M suffixes allowed (default {size}"
             f"{'; atomics move 8 bytes' if atomic else ''}).")
    add("-A", "--atomic_type", choices=["CMP_AND_SWAP", "FETCH_AND_ADD"], default="FETCH_AND_ADD" if atomic else None,
        help="Type of atomic operation (default FETCH_AND_ADD; atomic tests).")
    add("-n", "--iters", type=_ranged(5, 100_000_000, "Iteration num"),
        default=5000 if test == "ib_write_bw" else 1000,
        help=f"Number of exchanges (at least 5, default {5000 if test == 'ib_write_bw' else 1000}).")
    add("-a", "--all", action="store_true", help="Run sizes from 2 till 2^23.")
    add("-d", "--ib-dev", default="mlx5_0", metavar="DEV",
        help="Use IB device DEV (default mlx5_0): mlx5_<N> simulates a connectx7 (another with --nic), efa_<N> an "
             "EFA-like NIC.")
    add("--nic", choices=MLX5_GENERATIONS, metavar="CONNECTX",
        help=f"rdmasim only: the ConnectX an mlx5_<N> device simulates ({', '.join(MLX5_GENERATIONS)}; default "
             "connectx7). Data Direct (--use_data_direct) needs a connectx8.")
    add("-i", "--ib-port", type=_ranged(PORT_NUM, PORT_NUM, "IB port (the simulated NIC has one port)"),
        default=PORT_NUM,
        metavar="PORT", help="Use port PORT of the IB device (default 1, the simulated NIC's only port).")
    for flags, kind, why in IGNORED:
        add(*flags, **({"action": "store_true"} if kind is None else {"type": kind}), dest=flags[-1].lstrip("-"),
            help=f"Accepted, ignored: {why}.")
    add("-q", "--qp", type=_ranged(1, 1024, "num of Qps (perftest takes up to 16384, rdmasim simulates 1024)"),
        default=1,
        help="Number of QPs streaming at once, each with its own tx depth and -n exchanges (bandwidth tests).")
    add("-t", "--tx-depth", type=_ranged(1, 15000, "Tx depth"), default=128 if bw else 1,
        help=f"Size of tx queue (default {128 if bw else 1}; latency tests keep one message in flight).")
    add("-I", "--inline_size", type=_ranged(0, 1024, "Max inline"), metavar="SIZE",
        help="Max size of message to be sent inline (default: 220 for ib_write_lat and ib_send_lat on mlx5, else 0).")
    receives = TESTS[test].receives
    add("-r", "--rx-depth", type=_ranged(1, 32768, "Rx depth"), default=DEF_RX_SEND if receives else None,
        help=f"Receives the receiving side keeps posted (default {DEF_RX_SEND}, at most the iterations)" if receives
        else "Accepted, no effect on WRITE tests (they post no receives); READ and atomic tests take only 1.")
    add("-m", "--mtu", type=int, choices=[256, 512, 1024, 2048, 4096], default=4096, help="MTU size (default 4096).")
    add("-D", "--duration", type=_positive("Duration period"),
        help="Run for this many simulated seconds per size, as many iterations as fit (instead of -n); what "
             "completes between the margins is measured.")
    add("-f", "--margin", type=_non_negative("Margin"), default=None,
        help="With -D: seconds at its start and at its end not measured (default a quarter of -D, in whole seconds).")
    add("-c", "--connection", default="RC",
        help="Connection type RC/UC/UD/XRC (default RC; rdmasim simulates RC, UC, UD and XRC QPs).")
    add("-b", "--bidirectional", action="store_true",
        help="Measure bidirectional bandwidth: both sides post at once (default unidirectional; bandwidth tests).")
    if bw:
        add("-l", "--post_list", type=_positive("Send Post List size"), default=1,
            help="Post list of send WQEs of this size per ibv_post_send call (instead of single post).")
        add("-Q", "--cq-mod", type=_ranged(1, 1024, "CQ moderation"),
            help="Generate a CQE only every N work requests (default: -l's size, else every one; perftest's "
                 "own default is 100 for messages up to 8 KiB).")
        add("-w", "--limit_bw", type=_limit, metavar="VALUE",
            help="Fail (exit 1) when the average bandwidth is below VALUE (in the report's unit).")
    add("-o", "--outs", type=_integer("Outstanding Reads"),
        help="Number of outstanding READs/atomics (default: the device's max_qp_rd_atom; READ and atomic tests).")
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


def check(args: argparse.Namespace, kind: WorkloadKind, preset: str, nic: Callable[[], NicParams]) -> None:
    """perftest's cross-option checks, and the limits of what rdmasim models; ``nic`` gives the simulated NIC's
    parameters, asked for only by a check that needs them (the NIC's model imports numpy).

    :raises UsageError: the first check the command line fails.
    """
    _check_connection(args.connection, kind)
    _check_output(args)
    if args.duration is not None and args.all:
        raise UsageError("-D with -a: Duration mode currently doesn't support running on all sizes.")
    if args.duration is not None and not measures_between_margins(args.duration, margin(args)):
        raise UsageError(f"-D {args.duration} -f {margin(args)}: please check that DURATION > 2*MARGIN")
    if args.qp != 1 and not kind.streams:
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
    if args.use_data_direct and not nic().data_direct:
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
    if kind.verb == "atomic" and (args.size != ATOMIC_BYTES or args.all):
        raise UsageError("-s/-a: Message size cannot be changed for Atomic tests (8 bytes)")
    if args.inline_size is not None and kind.reads_remote:
        raise UsageError("-I/--inline_size: Inline feature not available on READ/Atomic verbs")
    if args.atomic_type is not None and kind.verb != "atomic":
        raise UsageError("-A/--atomic_type: You are not running the atomic_lat/bw test! To change the atomic action "
                         "type, you must run one of the atomic tests")
    if args.bidirectional and not kind.streams:
        raise UsageError("-b/--bidirectional: Bidirectional is only available in BW test")
    if args.outs is not None and not kind.reads_remote:
        raise UsageError("-o/--outs: Setting Outstanding reads only available on READ verb")
    if args.rx_depth is not None and kind.reads_remote and args.rx_depth > 1:
        raise UsageError("-r/--rx-depth: On RDMA verbs rx depth can be only 1")
    if args.use_cuda is not None and kind.verb == "write" and not kind.streams:
        raise UsageError("--use_cuda with ib_write_lat: Perftest supports CUDA latency tests with read/send verbs only")
    if args.use_cuda is not None and args.inline_size is not None and not args.all and args.size <= args.inline_size:
        raise UsageError("-I/--inline_size with --use_cuda: Perftest doesn't support CUDA tests with inline messages")
    if args.inline_size is not None and args.inline_size > nic().max_inline:
        raise UsageError(f"-I/--inline_size {args.inline_size}: the simulated {preset} carries at most "
                         f"{nic().max_inline} B inline (perftest would fail to create the QP)")
    if kind.streams:
        _check_posting(args)
    _check_reporting(args, kind)
    _check_unmodelled(args, kind)
    if args.data_validation:
        _check_validation(args, kind)


def _check_output(args: argparse.Namespace) -> None:
    """rdmasim's output options: --out writes a run's results, so it needs a run, and --force needs --out."""
    if args.dump_scenario and args.out is not None:
        raise UsageError("--dump-scenario with --out: --dump-scenario prints the scenario and runs nothing, so "
                         "there are no results to write")
    if args.force and args.out is None:
        raise UsageError("--force: replaces earlier results at --out, and nothing is written without it (add --out)")


LATENCY_ONLY = {"histogram": ("-H/--report-histogram", "Available only on Latency tests"),
                "unsorted": ("-U/--report-unsorted", "is Available only on Latency tests"),
                "cycles": ("-C/--report-cycles", "Available only on Latency tests")}
"""perftest's report options of latency tests, and its message for each in a bandwidth test (-U's starts 'is')."""


def _check_reporting(args: argparse.Namespace, kind: WorkloadKind) -> None:
    """perftest's checks of the options that shape its report, then the one rdmasim adds: -C's cycles."""
    bw = kind.streams
    if args.noPeak and not bw:
        raise UsageError("-N/--noPeak: NoPeak only valid for BW tests")
    for dest, (flag, message) in LATENCY_ONLY.items():
        if bw and getattr(args, dest):
            raise UsageError(f"{flag}: {message}")
    if args.cycles:
        raise UsageError("-C/--report-cycles: the simulated CPU has no clock whose cycles to count (perftest reads "
                         "the CPU's time-stamp counter); rdmasim reports latencies in usec only, so drop -C")
    if args.output is not None and OUTPUTS[args.output] != bw:
        levels = "bandwidth, message_rate" if bw else "latency"
        raise UsageError(f"--output={args.output}: Output verbosity level for {'BW' if bw else 'LAT'} can be: "
                         f"{levels}")


def _check_unmodelled(args: argparse.Namespace, kind: WorkloadKind) -> None:
    """perftest's checks of the options rdmasim accepts and ignores (:data:`IGNORED`)."""
    if args.events and kind.verb == "write":
        raise UsageError("-e/--events: Events feature not available on WRITE verb")
    if args.events and args.duration is not None:
        raise UsageError("-e with -D: Duration mode doesn't work with events.")
    if args.dualport and not kind.streams:
        raise UsageError("-O/--dualport: Dual-port mode only supports BW tests.")
    if args.dualport and args.rdma_cm:
        raise UsageError("-O with -R: Perftest still doesn't support Dual Port with rdma_cm")
    if args.tos is not None and not args.rdma_cm:
        raise UsageError("-T/--tos without -R: TOS only valid for rdma_cm based QP and RawEth QP")


VALIDATION_MIN_TX = 32
"""perftest's least tx depth for --data_validation."""


def _check_validation(args: argparse.Namespace, kind: WorkloadKind) -> None:
    """perftest's --data_validation checks (``force_dependecies``), in its order, then the one rdmasim adds."""
    refusal = ("requires --use_cuda or host memory" if args.use_rocm is not None or args.mmap else
               "is only supported with WRITE or READ verb" if kind.verb not in ("write", "read") else
               "is only supported in bandwidth tests" if not kind.streams else
               "is incompatible with --post_list > 1" if args.post_list > 1 else
               "requires RC connection type" if args.connection != "RC" else
               "is incompatible with --mr_per_qp" if args.mr_per_qp else
               "is incompatible with -a (run all sizes)" if args.all else
               f"requires tx_depth >= {VALIDATION_MIN_TX} (use -t)" if args.tx_depth < VALIDATION_MIN_TX else None)
    if refusal:
        raise UsageError(f"--data_validation {refusal}")
    if args.bidirectional:
        raise UsageError("--data_validation with -b: rdmasim's two directions move bytes between the same two "
                         "buffers, so neither ends a copy of the other to compare (perftest keeps a send and a receive "
                         "half in each); run without -b")


CONNECTIONS = ("RC", "UC", "UD", "XRC", "DC", "SRD")
"""perftest's ``-c`` names (its connStr order, less RawEth)."""


def _check_connection(connection: str, kind: WorkloadKind) -> None:
    """perftest's ``change_conn_type`` checks, then rdmasim's: its QPs are RC, UC, UD or XRC QPs, and an XRC
    ping-pong would need both kinds of XRC QP on each side."""
    verb = kind.verb
    if connection not in CONNECTIONS:
        raise UsageError(f"-c {connection}: Invalid Connection type. Please choose from {{{','.join(CONNECTIONS)}}}")
    if connection == "UC" and verb in ("read", "atomic"):
        raise UsageError("-c UC: UC connection not possible in READ/ATOMIC verbs")
    if connection == "UD" and verb != "send":
        raise UsageError("-c UD: UD connection only possible in SEND verb")
    if connection == "XRC" and kind.ping_pong:
        raise UsageError(f"-c XRC: {kind.test} answers each message from the same QP it receives on, and an XRC QP is "
                         "an initiator or a target, not both (rdmasim gives each side one QP; run with -c RC)")
    if connection not in ("RC", "UC", "UD", "XRC"):
        raise UsageError(f"-c {connection}: rdmasim simulates RC, UC, UD and XRC QPs; {connection} QPs are not "
                         "modelled (run with -c RC)")


def _check_posting(args: argparse.Namespace) -> None:
    """perftest's post-list and CQ-moderation checks (``force_dependecies``)."""
    if args.post_list > 1 and args.duration is None and args.iters % args.post_list:
        raise UsageError("-l/--post_list: Number of iterations must be a multiple of post list size")
    if args.post_list > 1 and args.cq_mod is not None and args.post_list % args.cq_mod:
        raise UsageError("-l/-Q: Post list size must be a multiple of CQ moderation")
    if args.post_list > args.tx_depth:
        raise UsageError(f"-l/--post_list {args.post_list}: more than the tx depth {args.tx_depth}")

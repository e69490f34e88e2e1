"""The scenario file schema (pydantic, YAML boundary only): unknown keys are errors, units are parsed here.

Field docstrings become the JSON Schema descriptions that ``rdmasim schema`` prints for editors.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError,
                      WithJsonSchema, field_validator, model_validator)

from models.libs.fallback import POLICIES
from models.nic.port_rates import PORT_RATES
from models.nic.translation import RegMode
from models.nic.wqe import ATOMIC_BYTES
from models.pcie.server import RAIL_POLICIES, RailLayout
from models.presets import GPU_VENDOR
from models.versions import DEFAULT_KERNEL, Version
from sim.core.units import (PS_PER_S, RATE_PATTERN, SIZE_PATTERN, TIME_PATTERN, UnitError, format_size, format_time,
                            parse_rate, parse_size, parse_time)


def _unit(parser):
    def parse(value):
        try:
            return parser(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
    return BeforeValidator(parse)


def _at_most(limit: int, render, why: str):
    """A per-key upper bound tighter than its dimension's (``render`` writes a value with its unit, ``why``
    says what the key cannot exceed)."""
    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"{render(value)} is above the maximum of {render(limit)}: {why}")
        return value
    return AfterValidator(check)


def _quantity(pattern: str, *examples: str) -> WithJsonSchema:
    """Editors see a quantity as what the file holds: a string with a unit, matching the parser's ``pattern``."""
    return WithJsonSchema({"type": "string", "pattern": pattern, "examples": list(examples)})


Size = Annotated[int, _unit(parse_size), _quantity(SIZE_PATTERN, "4KiB", "64KB", "4096B")]
Duration = Annotated[int, _unit(parse_time), _quantity(TIME_PATTERN, "600ns", "1.5us")]
Rate = Annotated[float, _unit(parse_rate), _quantity(RATE_PATTERN, "400Gb/s", "55GB/s")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=64)]
Latency = Annotated[Duration, _at_most(PS_PER_S, format_time, "no hardware latency comes near a second")]
"""A latency of the hardware (a one-way flight, a pipeline stage, a poll)."""
MAX_MESSAGE_B = 2**31
"""InfiniBand's largest message (2^31 bytes; what ibv_query_port reports as max_msg_sz on mlx5)."""
SEED_LIMIT = 2**63
"""Seeds are below 2**63: numpy's SeedSequence and the manifests store them as signed 64-bit integers."""
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]


def check_seed(value: int) -> int:
    """``value`` if it is a :data:`Seed` (for seeds given on a command line), else ValueError."""
    try:
        return TypeAdapter(Seed).validate_python(value, strict=True)
    except ValidationError:
        raise ValueError(f"a seed is an integer with 0 <= seed < 2**63, got {value!r}") from None


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")
    return value


PositiveSize = Annotated[Size, AfterValidator(_positive)]
MessageSize = Annotated[PositiveSize, _at_most(MAX_MESSAGE_B, format_size,
                                                     "an RDMA message is at most 2^31 bytes")]


class Strict(BaseModel):
    """Base of every schema object: unknown keys are rejected, objects are immutable."""

    # strict: a count is an integer, never a boolean, a float or a numeric string
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True,
                              strict=True)


class HostSpec(Strict):
    """The host process whose memory is registered."""

    memory: PositiveSize | None = None
    """The node's physical memory for buffers (default 2TiB, a DGX H200's); pinning or filling beyond it
    fails with ENOMEM."""
    memlock_limit: PositiveSize | Literal["unlimited"] = "unlimited"
    """RLIMIT_MEMLOCK (e.g. '64MiB'); 'unlimited' also stands for CAP_IPC_LOCK."""
    prefaulted: bool = True
    """Buffers are touched before registration (pinning then finds pages present)."""
    pages: Literal["4k", "thp", "hugetlb"] = "4k"
    """Page backing of host buffers: 4 KiB base pages, transparent huge pages or hugetlbfs (2 MiB). Sets what
    pinning costs (measured per backing on an H200 host) and how many MTT entries a pinned MR needs."""
    poll_period: Latency | None = None
    """One pass of the CPU's completion-polling loop (default 40ns)."""


class PcieSpec(Strict):
    """The NIC's PCIe link; a preset plus key-by-key overrides."""

    preset: Literal["gen5x16", "gen4x16", "gen3x16", "gen3x8", "nfp6000"] | None = None
    """Link preset; default: the one the NIC preset ships with. ``nfp6000``: pcie-bench's Gen3 x8 device with
    its DMA engine's write issue spacing, read latency by size and 35 read tags."""
    gen: Annotated[int, Field(ge=1, le=6)] | None = None
    """PCIe generation 1..6."""
    lanes: Literal[1, 2, 4, 8, 16] | None = None
    """Link width."""
    mps: Literal[128, 256, 512, 1024, 2048, 4096] = 256
    """Max payload size in bytes."""
    mrrs: Literal[128, 256, 512, 1024, 2048, 4096] = 512
    """Max read request size in bytes."""
    ecrc: bool = False
    """End-to-end CRC on every TLP."""
    read_latency: Latency | None = None
    """DMA read round trip (default 550ns)."""
    write_latency: Latency | None = None
    """Posted write flight to memory visibility (default 150ns)."""
    write_issue: Latency | None = None
    """Least spacing between two posted DMA writes of the NIC's engine (default 0ns: the link alone limits
    writes; nfp6000: 21.097ns)."""
    read_latency_per_byte: Latency | None = None
    """What each byte of a DMA read adds to its latency beyond its completions' link time (default 0ns;
    nfp6000: 0.149ns)."""
    read_tags: Annotated[int, Field(ge=1, le=1024)] | Literal["unlimited"] | None = None
    """Outstanding DMA read requests the NIC may have (default 256, 8-bit extended tags; PCIe Gen4+ 10-bit
    tags allow 768; 'unlimited' as pcie-model assumes): read bandwidth <= tags x request size / round trip."""


class NicSpec(Strict):
    """The RDMA NIC; a preset plus key-by-key overrides."""

    preset: Literal["connectx7", "connectx6", "connectx5", "efa"] = "connectx7"
    """NIC preset (sets message rate, PCIe link, port rate, ODP and dma-buf support)."""
    port: Literal[tuple(PORT_RATES)] | None = None
    """Port generation: edr, hdr, ndr, xdr (InfiniBand) or 100gbe, 200gbe, 400gbe, 800gbe (RoCEv2). Sets the
    fabric's default rate (the slowest port's) and, for Ethernet ports, its RoCE headers (default: the preset's
    port: connectx7 ndr, connectx6 hdr, connectx5 edr, efa 100gbe)."""
    doorbell: Latency | None = None
    """CPU doorbell / BlueFlame write until the NIC sees it."""
    tx_process: Latency | None = None
    """Per-WQE send processing (1 / message rate)."""
    tx_latency: Latency | None = None
    """Send pipeline latency."""
    rx_process: Latency | None = None
    """Per-message receive processing."""
    rx_latency: Latency | None = None
    """Receive pipeline latency."""
    tx_engines: Annotated[int, Field(ge=1, le=256)] | None = None
    """Send processing engines, each taking 'tx_process' per WQE; a QP is bound to one (default 1)."""
    rx_engines: Annotated[int, Field(ge=1, le=256)] | None = None
    """Receive processing engines, each taking 'rx_process' per message; a QP is bound to one (default 1)."""
    blueflame: bool | None = None
    """WQEs written with the doorbell (no WQE fetch by DMA)."""
    max_rd_atomic: Annotated[int, Field(ge=1, le=256)] | None = None
    """Outstanding RDMA READs and atomics per QP."""
    atomic: Latency | None = None
    """The responder's atomic unit per atomic (1 / the NIC's atomic rate; default 125ns, unvalidated)."""
    translation_cache: bool = False
    """Model the NIC's MPT/MTT translation caches (misses cost PCIe reads; an MR of more than 2^20 entries, 4 GiB
    of 4 KiB pages, is beyond the MTT cache's reach: each page the NIC writes into it waits on a read of its
    entry, the large-MR cliff)."""
    max_translations: Annotated[int, Field(ge=1)] | None = None
    """Translation entries (each of its MR's page size) the NIC holds over all MRs; registrations past it fail
    with ENOMEM."""
    ignore_move_notify: bool = False
    """Teaching only: a deliberately broken dma-buf importer that keeps its translations after move_notify.
    Combine with 'invariants: record' and 'data: true' to see the stale bytes it delivers."""
    dmabuf_revocable: bool = False
    """A pinned dma-buf importer (preset efa) that accepts revocation, as irdma does from kernel 7.1
    (ib_umem_dmabuf_get_pinned_revocable_and_lock): revoking exporters (VFIO) admit it, and a revocation
    invalidates its key in hardware (later accesses complete in error)."""


class GpuSpec(Strict):
    """A GPU whose memory can be registered (peer-memory or dma-buf)."""

    name: Name | None = None
    """GPU name in references such as 'a.gpu0' (default gpu<index>)."""
    preset: Literal["h200", "h100", "mi300x"] = "h200"
    """GPU model (memory capacity, copy bandwidth)."""
    exporter: Literal["nvidia", "amd", "vfio"] | None = None
    """dma-buf exporter behaviour: 'nvidia' (static, never moves memory), 'amd' (dynamic, evicts unpinned
    buffers to system memory under pressure) or 'vfio' (the GPU bound to vfio-pci exports its BAR: never moves,
    revocable with a 'dmabuf-revoke' event); default by preset vendor."""
    memory: PositiveSize | None = None
    """Usable device memory (default: the preset's)."""
    bar1: PositiveSize | None = None
    """BAR1 aperture, the window peers reach device memory through (default: the preset's): peer-memory MRs and
    NVIDIA dma-buf maps hold it; past it ibv_reg_dmabuf_mr fails with ENOMEM and peer memory with EFAULT (NVIDIA
    only: the AMD profile's BAR is taken to cover VRAM)."""
    driver: VersionText = "580"
    """GPU driver version. NVIDIA: dma-buf export needs the open kernel modules 515+; from 580 nv_dma_buf_attach
    refuses a peer it cannot serve (ENOTSUPP), before the map does (the core reports ENOMEM)."""
    coherent: bool = False
    """NVIDIA only: a coherent platform (Grace Hopper, NVLink-C2C): GPU memory has struct pages, dma-buf maps hand
    out its pages instead of BAR1 (peer MMIO) addresses, and nv_dma_buf_attach skips its PCI-topology and
    peer2peer checks."""
    chipset_p2p: bool = True
    """NVIDIA only: the driver knows the chipset forwards PCIe peer-to-peer. False: the driver flags the chipset
    (NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET) and from 580 nv_dma_buf_attach refuses (ENOTSUPP) a NIC that shares no
    PCIe switch with the GPU (a node topology other than 'switch'), unless the platform is coherent."""

    topology_check_override: Literal["default", "allow", "deny"] = "default"
    """NVIDIA only: NVreg_GrdmaPciTopoCheckOverride, which decides which peers may attach to an export of the PCIe
    mapping type (buffers' export_mapping: pcie) on a coherent platform: default (a peer in the GPU's IOMMU group,
    which the model takes as one under the GPU's PCIe switch), allow (any peer) or deny (none)."""

    @field_validator("coherent", "chipset_p2p", "topology_check_override", "bar1")
    @classmethod
    def _nvidia_only(cls, value, info):
        exporter = info.data.get("exporter") or GPU_VENDOR.get(info.data.get("preset"))
        default = cls.model_fields[info.field_name].default
        if value != default and exporter not in (None, "nvidia"):
            raise ValueError(f"describes the NVIDIA driver's dma-buf export; this GPU's exporter is '{exporter}': "
                             f"drop '{info.field_name}' or use exporter: nvidia")
        return value


def _version(value):
    try:
        Version.parse(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    return str(value)


VersionText = Annotated[str, BeforeValidator(_version)]


class KernelSpec(Strict):
    """Kernel version and build options of a node."""

    version: VersionText = DEFAULT_KERNEL
    """Linux version (e.g. '5.15', '6.8'); dates dma-buf and RDMA behaviours (see `rdmasim explain`)."""
    dmabuf_move_notify: bool | None = None
    """CONFIG_DMABUF_MOVE_NOTIFY: off pins dynamic importers' buffers on map. Default: off before 7.1, where it
    became unconditional."""
    on_demand_paging: bool = True
    """CONFIG_INFINIBAND_ON_DEMAND_PAGING (distribution kernels set it): off, mlx5 refuses dma-buf MRs and
    IBV_ACCESS_ON_DEMAND registrations with EOPNOTSUPP, whatever the device's ODP capability."""


class RailLayoutSpec(Strict):
    """A rail server: sockets, PCIe switches per socket, GPUs per switch, NICs per GPU (under the same switch)."""

    sockets: Annotated[int, Field(ge=1, le=8)] = 2
    switches_per_socket: Annotated[int, Field(ge=1, le=16)] = 2
    gpus_per_switch: Annotated[int, Field(ge=1, le=8)] = 2
    nics_per_gpu: Annotated[int, Field(ge=1, le=8)] = 1

    def layout(self) -> RailLayout:
        """The server this describes (:class:`models.pcie.server.RailLayout`)."""
        return RailLayout(**self.model_dump())


class NodeSpec(Strict):
    """One server: a NIC on a PCIe link, a host process, optional GPUs; or, with ``rails``, several of each."""

    name: Name
    """Node name, used in references such as 'a.host'."""
    nic: NicSpec = NicSpec()
    pcie: PcieSpec = PcieSpec()
    host: HostSpec = HostSpec()
    gpus: list[GpuSpec] = []
    """The node's GPU (at most one without ``rails``); with ``rails``, up to the layout's GPUs, the ones not
    listed taking the defaults (GPU ``i`` sits at ``gpu<i>`` of the layout)."""
    topology: Literal["switch", "root_complex", "cross_socket"] = "switch"
    """Where the GPU sits relative to the NIC: under one PCIe switch, on another root port of the same socket
    (peer-to-peer through the CPU root complex), or on the other socket."""
    rails: RailLayoutSpec | None = None
    """A rail server (nvidia-smi topo -m prints its matrix): GPUs and NICs under PCIe switches on the sockets,
    each NIC ('nic0', 'nic1', ...) with its own PCIe link, ports, queues and keys, all of the 'nic' preset;
    replaces 'topology'."""
    kernel: KernelSpec = KernelSpec()
    iommu: Literal["off", "vtd", "vtd_superpages"] = "off"
    """The host IOMMU: off, VT-d with 4 KiB pages (an IO-TLB of 256 KiB reach), or with 2 MiB superpages."""
    rdma_core: VersionText = "57"
    """rdma-core (libibverbs) version: ibv_reg_dmabuf_mr needs v34+, mlx5dv_reg_dmabuf_mr v55+."""

    def gpu_names(self) -> list[str]:
        """Each GPU's name in references ('a.gpu0'): its own name, or ``gpu<i>`` by its position."""
        return [g.name or f"gpu{i}" for i, g in enumerate(self.gpus)]

    def vertex(self, place: str) -> str | None:
        """The PCIe topology vertex of memory ``place`` ('host': ``mem0``; a GPU: ``gpu<i>`` by its position, as
        the layout places it); None for no such memory."""
        if place == "host":
            return "mem0"
        names = self.gpu_names()
        return f"gpu{names.index(place)}" if place in names else None

    @model_validator(mode="after")
    def _gpus_fit(self):
        room = 1 if self.rails is None else self.rails.layout().gpus
        if len(self.gpus) > room:
            raise ValueError(f"gpus: {len(self.gpus)} listed; this node has room for {room}"
                             + (" (give it 'rails' for several)" if self.rails is None else " (the rails layout's)"))
        if self.rails is not None and "topology" in self.model_fields_set:
            raise ValueError("topology: a rails node places its GPUs and NICs by its layout; drop 'topology'")
        if self.rails is not None and len(self.gpus) < room:
            return self.model_copy(update={"gpus": [*self.gpus, *(GpuSpec() for _ in range(room - len(self.gpus)))]})
        return self


class FabricSpec(Strict):
    """The network between the nodes, seen as one hop."""

    rate: Rate | None = None
    """Line rate per direction (default: the slowest NIC port's data rate)."""
    latency: Latency = Field("300ns", validate_default=True)
    """One-way latency: PHY, FEC, cable, switch (e.g. '300ns')."""
    mtu: Literal[256, 512, 1024, 2048, 4096] = 4096
    """Path MTU in bytes."""
    transport: Literal["ib", "roce"] = "ib"
    """InfiniBand or RoCEv2 (sets per-packet header bytes; default: roce when the nodes name Ethernet ports)."""


Access = Literal["local_write", "remote_write", "remote_read", "remote_atomic", "relaxed_ordering"]
RegisterMode = RegMode


class AdviseSpec(Strict):
    """ibv_advise_mr over the whole buffer, right after it is registered (ODP MRs only)."""

    advice: Literal["prefetch", "prefetch_write", "prefetch_no_fault"] = "prefetch_write"
    """IBV_ADVISE_MR_ADVICE_*: prefetch (fault pages in, read access), prefetch_write (read and write),
    prefetch_no_fault (map only the pages the CPU already has)."""
    flush: bool = True
    """IBV_ADVISE_MR_FLAG_FLUSH: return once the translations are in the NIC (the setup waits for the fault
    path); false queues the work, returns after the ioctl and maps the pages in the background."""


class BufferSpec(Strict):
    """A buffer in a node's memory and how it is registered."""

    name: Name
    """Buffer name, used by workloads."""
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """Where it lives: '<node>.host' or '<node>.<gpu>' (e.g. 'a.gpu0')."""
    size: PositiveSize
    """Size (e.g. '8MiB')."""
    registration: RegisterMode = Field("pinned", alias="register")
    """How it is registered: pinned (ibv_reg_mr), odp (ON_DEMAND), peermem (legacy nvidia-peermem),
    dmabuf (ibv_reg_dmabuf_mr, dynamic), dmabuf-pinned (ibv_reg_dmabuf_mr, pinned importer)."""
    access: list[Access] = ["local_write", "remote_write", "remote_read"]
    """ibv_access_flags of the MR."""
    implicit: bool = False
    """register: odp through the node's implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND), one per node
    and access) instead of an MR of its own: faults create 1 GiB child MRs as mlx5 does."""
    advise: AdviseSpec | None = None
    """Prefetch the buffer's pages into the NIC with ibv_advise_mr after registering it (register: odp)."""
    export_mapping: Literal["default", "pcie"] = "default"
    """register: dmabuf or dmabuf-pinned of NVIDIA GPU memory: the mapping type the export asks for. pcie passes
    CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (CUDA 12.8+, as perftest's --use_cuda_pcie_mapping and NCCL's
    data-direct path do): BAR1 mappings on a coherent platform, refused (CUDA_ERROR_NOT_SUPPORTED) on others."""
    nics: Literal["rail", "all"] | Annotated[list[Name], Field(min_length=1)] = "rail"
    """The NICs of a rails node it is registered on, one MR per NIC (each NIC's own PD and keys), their costs
    added up: 'rail' (a GPU buffer: the GPU's rail NICs; host memory: the NICs of its socket), 'all' (every
    NIC: the fan-out of a library that registers everywhere) or a list such as [nic0, nic4]. A node with one
    NIC registers on it."""

    @field_validator("nics")
    @classmethod
    def _nics_once(cls, nics):
        if isinstance(nics, list):
            twice = sorted({n for n in nics if nics.count(n) > 1})
            if twice:
                raise ValueError(f"{', '.join(twice)} listed twice: a buffer is registered once per NIC")
        return nics

    @field_validator("implicit")
    @classmethod
    def _implicit_odp(cls, implicit, info):
        mode = info.data.get("registration")
        if implicit and mode is not None and mode != "odp":
            raise ValueError(f"an implicit MR is an ODP MR (ibv_reg_mr with IBV_ACCESS_ON_DEMAND); this buffer is "
                             f"registered '{mode}': use register: odp or drop 'implicit'")
        return implicit

    @field_validator("export_mapping")
    @classmethod
    def _export_mapping_dmabuf(cls, mapping, info):
        mode = info.data.get("registration")
        if mapping != "default" and mode is not None and not str(mode).startswith("dmabuf"):
            raise ValueError(f"the mapping type is a flag of the dma-buf export; this buffer is registered '{mode}': "
                             "use register: dmabuf or dmabuf-pinned, or drop 'export_mapping'")
        return mapping

    @field_validator("advise")
    @classmethod
    def _advise_odp(cls, advise, info):
        mode = info.data.get("registration")
        if advise is not None and mode is not None and mode != "odp":
            raise ValueError(f"ibv_advise_mr prefetches ODP MRs only (mlx5: ENOENT for any other lkey); this buffer "
                             f"is registered '{mode}': use register: odp or drop 'advise'")
        return advise


class SizeRange(Strict):
    """Powers of two from ``from`` to ``to`` inclusive, like perftest's -a."""

    from_: MessageSize = Field(alias="from")
    to: MessageSize

    @field_validator("to")
    @classmethod
    def _ordered(cls, to: int, info):
        start = info.data.get("from_")
        if start is not None and start > to:
            raise ValueError(f"the range ends below its start ('from' is {format_size(start)}, 'to' "
                             f"{format_size(to)})")
        return to

    def sizes(self) -> list[int]:
        """The sizes in the range."""
        out, size = [], self.from_
        while size <= self.to:
            out.append(size)
            size *= 2
        return out


class BufferPair(Strict):
    """A requester buffer and the responder buffer it streams to."""

    from_: Name = Field(alias="from")
    to: Name


class WorkloadSpec(Strict):
    """A perftest-like measurement between two buffers."""

    kind: Literal["write_bw", "read_bw", "write_lat", "read_lat", "send_bw", "send_lat", "atomic_bw", "atomic_lat"]
    """ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw or ib_atomic_lat."""
    name: Name | None = None
    """Label in the results (default: the kind)."""
    from_: Name = Field(alias="from")
    """Buffer on the requester (the node that posts)."""
    to: Name
    """Buffer on the responder."""
    sizes: Annotated[list[MessageSize], Field(min_length=1)] | SizeRange
    """Message sizes: a list, or {from: 2B, to: 8MiB} for powers of two (atomics: [8B], their only size)."""
    iterations: Annotated[int, Field(ge=1, le=100_000_000)] = 1000
    """Operations per size (perftest -n)."""
    tx_depth: Annotated[int, Field(ge=1, le=32768)] = 128
    """Outstanding work requests for bandwidth tests (perftest -t); at most both NICs' max_qp_wr."""
    inline: Annotated[int, Field(ge=0, le=1024)] | None = None
    """Largest message sent inline (default: 220 for write_lat and send_lat, else 0)."""
    rx_depth: Annotated[int, Field(ge=1, le=32768)] = 512
    """Receives posted ahead by each receiving side of a SEND test, at most the iterations and both NICs' max_qp_wr
    (perftest -r)."""
    qps: Annotated[int, Field(ge=1, le=1024)] = 1
    """QP pairs streaming at once, each with its own tx_depth window and 'iterations' operations per size
    (perftest -q; bandwidth tests only)."""
    atomic: Literal["FETCH_AND_ADD", "CMP_AND_SWAP"] = "FETCH_AND_ADD"
    """Atomic workloads: the operation (perftest -A), all on the responder buffer's first 8 bytes."""
    duration: Annotated[Duration, Field(gt=0)] | None = None
    """Post for this long per size, as many operations as fit, instead of ``iterations`` (perftest -D, e.g. '1ms')."""
    bidirectional: bool = False
    """Bandwidth tests: the responder streams the same work requests back on the same QPs at once (perftest -b);
    the rates are those of both directions together."""
    post_list: Annotated[int, Field(ge=1, le=32768)] = 1
    """Bandwidth tests: work requests handed to each ibv_post_send call, posted once that many send-queue slots are
    free (perftest -l); iterations must be a multiple of it."""
    cq_mod: Annotated[int, Field(ge=1, le=32768)] = 1
    """Bandwidth tests: every cq_mod-th work request is signaled (IBV_SEND_SIGNALED, the QPs without sq_sig_all),
    so the unsignaled ones before it free their slots with its completion (perftest -Q); at most tx_depth."""
    max_rd_atomic: Annotated[int, Field(ge=1, le=255)] | None = None
    """READ and atomic workloads: the QPs' max_rd_atomic and max_dest_rd_atomic (perftest -o; default the NIC's
    max_rd_atomic)."""
    pairs: list[BufferPair] = []
    """Bandwidth tests: more requester-to-responder buffer pairs streaming at the same time as from-to, each with
    its own 'qps' QP pairs (one flow per GPU of a rails node, say)."""
    rails: Literal[RAIL_POLICIES] = "aligned"
    """Which NIC of a rails node each QP uses: 'aligned' (the rail NICs of its buffer's GPU, or of its host
    memory's socket, by PCIe distance), 'cross' (the NIC at the same place on the other socket) or 'all' (QP k
    on NIC k, round the node's NICs). A node with one NIC uses it."""
    qp_timeout: Annotated[int, Field(ge=0, le=31)] = 14
    """The QPs' ACK timeout, IB's encoding: 4.096 us * 2**qp_timeout before a lost frame is sent again, 0 for never
    (perftest -u, default 14: 67 ms)."""
    transport: Literal["rc", "uc", "ud"] = "rc"
    """The QPs' service (perftest -c): rc; uc (unacknowledged: write and send workloads); ud (datagrams: send
    workloads, each message one packet of at most the fabric's MTU, each receive 40 bytes more for the GRH)."""

    @field_validator("transport")
    @classmethod
    def _transport_carries_the_kind(cls, transport: str, info):
        kind = info.data.get("kind") or ""
        if transport == "uc" and kind.startswith(("read", "atomic")):
            raise ValueError(f"{kind}: UC carries RDMA WRITE and SEND only (perftest: UC connection not possible in "
                             "READ/ATOMIC verbs)")
        if transport == "ud" and not kind.startswith("send"):
            raise ValueError(f"{kind}: UD carries SEND only (perftest: UD connection only possible in SEND verb)")
        return transport

    @field_validator("qps")
    @classmethod
    def _qps_stream_bandwidth(cls, qps: int, info):
        kind = info.data.get("kind")
        if qps > 1 and not kind.endswith("_bw"):
            raise ValueError(f"{kind} measures one QP (perftest's latency tests have no -q); qps must be 1")
        return qps

    @field_validator("sizes")
    @classmethod
    def _atomics_are_8_bytes(cls, sizes, info):
        kind = info.data.get("kind") or ""
        got = sizes.sizes() if isinstance(sizes, SizeRange) else list(sizes)
        if kind.startswith("atomic") and got != [ATOMIC_BYTES]:
            raise ValueError(f"{kind} moves 8 bytes per atomic; sizes must be [8B], got "
                             f"[{', '.join(format_size(s) for s in got)}]")
        return sizes

    @field_validator("rx_depth")
    @classmethod
    def _rx_depth_for_send_tests(cls, rx_depth: int, info):
        kind = info.data.get("kind")
        if kind is not None and not kind.startswith("send"):
            raise ValueError(f"{kind} posts no receives; rx_depth is for send_bw and send_lat")
        return rx_depth

    @model_validator(mode="after")
    def _perftest_options_fit(self):
        bw, fields = self.kind.endswith("_bw"), self.model_fields_set
        if self.pairs and not bw:
            raise ValueError(f"pairs: {self.kind} is a latency test; pairs stream at once in bandwidth tests")
        listed = self.buffer_pairs()
        for k, pair in enumerate(listed[1:]):
            if pair in listed[:k + 1]:
                raise ValueError(f"pairs: {pair[0]} -> {pair[1]} is listed twice (give more streams with qps)")
        for key in ("bidirectional", "post_list", "cq_mod"):
            if key in fields and not bw and getattr(self, key) != WorkloadSpec.model_fields[key].default:
                raise ValueError(f"{key}: {self.kind} is a latency test; {key} is for bandwidth tests")
        if self.duration is not None and "iterations" in fields:
            raise ValueError("give iterations or duration, not both")
        if self.duration is None and self.iterations % self.post_list:
            raise ValueError(f"post_list: iterations {self.iterations} must be a multiple of post_list "
                             f"{self.post_list}")
        if self.post_list > 1 and self.post_list % self.cq_mod:
            raise ValueError(f"cq_mod: post_list {self.post_list} must be a multiple of cq_mod {self.cq_mod}")
        if self.cq_mod > self.tx_depth:
            raise ValueError(f"cq_mod: {self.cq_mod} is more than tx_depth {self.tx_depth}")
        if self.post_list > self.tx_depth:
            raise ValueError(f"post_list: {self.post_list} is more than tx_depth {self.tx_depth}")
        if self.max_rd_atomic is not None and not self.kind.startswith(("read", "atomic")):
            raise ValueError(f"max_rd_atomic: {self.kind} posts no READs or atomics")
        return self

    def streams(self) -> int:
        """Work-request streams of each size: one per QP of each buffer pair, twice as many when bidirectional."""
        return self.qps * (1 + len(self.pairs)) * (2 if self.bidirectional else 1)

    def buffer_pairs(self) -> list[tuple[str, str]]:
        """Every (requester buffer, responder buffer) pair: from-to first, then ``pairs``."""
        return [(self.from_, self.to), *((p.from_, p.to) for p in self.pairs)]

    def size_list(self) -> list[int]:
        """The message sizes, in order."""
        return self.sizes.sizes() if isinstance(self.sizes, SizeRange) else list(self.sizes)


class EventBase(Strict):
    at: Duration
    """When it happens, counted from the start of the first workload (e.g. '2ms')."""

    def last_ps(self) -> int:
        """When its last scheduled action happens (ps after the first workload starts)."""
        return self.at


class GpuPressureEvent(EventBase):
    """Another job allocates GPU memory: the exporter must make room (evict) or the allocation fails."""

    kind: Literal["gpu-memory-pressure"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    allocate: PositiveSize
    """Bytes the other job allocates."""
    hold: Duration | None = None
    """Free the allocation again after this long (default: keep it)."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + (self.hold or 0)


class GpuJobGrowthEvent(EventBase):
    """A training-like job on the GPU grows its working set step by step (each step a new allocation)."""

    kind: Literal["gpu-job-grows"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    step: PositiveSize
    """Bytes added at each step."""
    every: Duration
    """Time between steps."""
    steps: Annotated[int, Field(ge=1, le=10_000)]
    """Number of steps."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.every * self.steps


class ManagedJobEvent(EventBase):
    """A job on the GPU sweeps a cudaMallocManaged range: its page faults take VRAM as they go (evicting
    movable dma-buf buffers on a dynamic exporter; on nvidia only free memory, then it evicts its own
    pages), and the job frees the range when it ends."""

    kind: Literal["managed-job"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    size: PositiveSize
    """Bytes of the managed range."""
    passes: Annotated[int, Field(ge=1, le=1000)] = 1
    """Sequential sweeps over the whole range (each page touched once per sweep)."""


class HostPageMigrationEvent(EventBase):
    """The kernel migrates a buffer's host pages (compaction, NUMA balancing): ODP MRs are invalidated,
    pinned pages cannot move."""

    kind: Literal["host-page-migration"]
    buffer: Name
    """The host buffer whose pages move."""


class PeerMemReclaimEvent(EventBase):
    """The GPU driver reclaims memory registered through peer-memory (cudaFree, process exit)."""

    kind: Literal["peermem-reclaim"]
    buffer: Name


NodeRef = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")]


class QpErrorEvent(EventBase):
    """Every QP of a node moves to the error state: outstanding and later work requests are flushed."""

    kind: Literal["qp-error"]
    node: NodeRef


class NicResetEvent(EventBase):
    """The node's NIC resets (fatal error): its QPs fail and every MR's hardware key is lost."""

    kind: Literal["nic-reset"]
    node: NodeRef


class ProcessExitEvent(EventBase):
    """The process on a node exits without deregistering: the kernel tears its MRs down (for dma-buf MRs:
    revoke, unmap, detach, put) and its QPs die."""

    kind: Literal["process-exit"]
    node: NodeRef


class EvictionStormEvent(EventBase):
    """The GPU's exporter moves every movable dma-buf back and forth ``count`` times, every ``every``."""

    kind: Literal["eviction-storm"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    count: Annotated[int, Field(ge=1, le=100_000)]
    every: Duration

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.every * self.count


class LinkFlapEvent(EventBase):
    """The node's network link goes down for ``duration``: its ports carry nothing meanwhile. ``frames: lost``
    (the default): frames on the link then are lost and RC's transport timer sends their requests again
    (``timeout``, ``retry_cnt``); ``held``: they wait for the link, as a lossless fabric's pause holds them."""

    kind: Literal["link-flap"]
    node: NodeRef
    duration: Duration
    frames: Literal["lost", "held"] = "lost"

    @field_validator("duration")
    @classmethod
    def _link_goes_down(cls, duration):
        if duration <= 0:
            raise ValueError("a link-flap takes the link down for some time: give a duration above 0")
        return duration

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.duration


class DmaBufRevokeEvent(EventBase):
    """The exporter revokes a GPU buffer's dma-buf, as VFIO does on a device reset ('exporter: vfio'): it
    invalidates every importer's mappings, waits for the fences and the unmaps, and refuses later maps (ENODEV);
    the MR keeps its key and its accesses complete in error."""

    kind: Literal["dmabuf-revoke"]
    buffer: Name
    """The registered GPU buffer whose dma-buf is revoked."""
    bound: Duration = Field("1s", validate_default=True)
    """How long the exporter waits for the importers' unmaps before it WARNs that one is broken (VFIO: 1s)."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.bound


ExporterFault = Literal["delay-map", "block-map", "fail-map-after-invalidate", "invalidate-and-hold", "hold-lock",
                        "move"]


class ExporterFaultEvent(EventBase):
    """A fault injected into a GPU buffer's dma-buf exporter, to test how the importer copes: 'delay-map' (the next
    'count' maps take 'delay' longer), 'block-map' (the next map never returns), 'fail-map-after-invalidate' (after
    the next invalidation, 'count' maps fail with 'errno'), 'invalidate-and-hold' (invalidate, then hold the
    reservation lock for 'hold'; no 'hold': forever), 'hold-lock' (the same without invalidating), 'move' (move the
    buffer 'to' vram or system at this instant; movable exporters only)."""

    kind: Literal["exporter-fault"]
    buffer: Name
    """The registered GPU buffer whose exporter misbehaves."""
    fault: ExporterFault
    delay: Duration | None = None
    """delay-map: the extra time of each delayed map."""
    hold: Duration | None = None
    """invalidate-and-hold, hold-lock: how long the lock stays held (default: forever)."""
    errno: Literal["ENOMEM", "EIO", "ENODEV", "EBUSY", "EINVAL"] = "ENOMEM"
    """fail-map-after-invalidate: the errno the failing maps return."""
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    """delay-map, block-map, fail-map-after-invalidate: how many maps it affects."""
    to: Literal["vram", "system"] | None = None
    """move: where the buffer goes."""

    @model_validator(mode="after")
    def _needs(self):
        needed = {"delay-map": "delay", "move": "to"}.get(self.fault)
        if needed and getattr(self, needed) is None:
            raise ValueError(f"fault '{self.fault}' needs '{needed}'")
        return self

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + (self.hold or 0)


Event = Annotated[GpuPressureEvent | GpuJobGrowthEvent | ManagedJobEvent | HostPageMigrationEvent | PeerMemReclaimEvent
                  | QpErrorEvent | NicResetEvent | ProcessExitEvent | EvictionStormEvent | LinkFlapEvent
                  | DmaBufRevokeEvent | ExporterFaultEvent, Field(discriminator="kind")]


GpuPlace = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
"""'<node>.<gpu>' (e.g. 'a.gpu0')."""
PolicyName = Literal[tuple(POLICIES)]
Count = Annotated[int, Field(ge=1, le=10_000)]


class LibraryStack(Strict):
    """A GPU, its node's NIC and what the library finds loaded there."""

    on: GpuPlace
    """The GPU ('<node>.<gpu>'); registrations use its node's NIC."""
    peermem: bool = True
    """The peer-memory client (nvidia-peermem) is loaded."""
    dmabuf: bool = True
    """The library's dma-buf switch is on (NCCL_DMABUF_ENABLE, FI_HMEM_CUDA_USE_DMABUF, ...)."""


class RcacheChurn(LibraryStack):
    """A training-like buffer churn through a registration cache (UCX's rcache, NCCL's user-buffer registration),
    run after the workloads: each size's buffer lives 'lifetime' steps, is freed and allocated again at the same
    address; every step registers it through the cache and receives an RDMA WRITE into it."""

    kind: Literal["rcache-churn"]
    name: Name | None = None
    policy: PolicyName = "nccl"
    """The registration chain behind the cache's misses."""
    sizes: Annotated[list[PositiveSize], Field(min_length=1, max_length=64)]
    """One buffer per size (e.g. [64MiB, 256MiB])."""
    steps: Count = 20
    lifetime: Count = 5
    """Steps a buffer lives before it is freed and allocated again."""
    write: PositiveSize = Field("4KiB", validate_default=True)
    """Bytes each step's RDMA WRITE carries into each buffer."""
    memory_hooks: bool = True
    """The library intercepts cudaFree and invalidates what it frees (UCX's memory hooks)."""
    validate_buffer_id: bool = False
    """Compare the CUDA buffer ID of every hit (UCX PR #5910): a recycled address misses."""
    max_unreleased: Annotated[int, Field(ge=0, le=1_000_000)] = 64
    """Unused regions kept registered (lazy deregistration) before the oldest is deregistered."""
    lookup: Latency | None = None
    """Cost of one lookup (default 200ns, unvalidated)."""


class FallbackChains(Strict):
    """Register one GPU buffer with each library policy on each stack, after the workloads."""

    kind: Literal["fallback-chain"]
    name: Name | None = None
    stacks: Annotated[list[LibraryStack], Field(min_length=1, max_length=64)]
    policies: Annotated[list[PolicyName], Field(min_length=1)] = list(POLICIES)
    size: PositiveSize = Field("2MiB", validate_default=True)


class OrderGroup(Strict):
    """``count`` buffers of ``size`` bytes."""

    size: PositiveSize
    count: Count = 1


class RegistrationOrder(Strict):
    """Register many buffers one at a time in each order, from an empty domain each time, after the workloads
    (the EFA experiment of Mooncake PR #3210: cost grows with the device memory already registered)."""

    kind: Literal["registration-order"]
    name: Name | None = None
    on: GpuPlace
    """The GPU whose memory (or whose node's host memory) is registered on its node's NIC."""
    buffers: Annotated[list[OrderGroup], Field(min_length=1, max_length=64)]
    orders: Annotated[list[Literal["ascending", "descending", "given"]], Field(min_length=1)] = [
        "ascending", "descending"]
    memory: Literal["device", "host"] = "device"

    def buffer_sizes(self) -> list[int]:
        """Every buffer's size, in the given order."""
        return [g.size for g in self.buffers for _ in range(g.count)]


class MultiNicServer(Strict):
    """A multi-GPU, multi-NIC server of its own (the scenario's nodes have one NIC each): its nvidia-smi
    topo -m matrix, each GPU's nearest and rail NICs, rail-aligned against cross-rail DMA rates with every GPU
    sending at once, and registering each GPU's buffers on all NICs against on its rail NICs."""

    kind: Literal["multi-nic"]
    name: Name | None = None
    layout: RailLayoutSpec = RailLayoutSpec()
    message: MessageSize = Field("1MiB", validate_default=True)
    """Size of each DMA write of the rate estimate."""
    buffers: Annotated[list[OrderGroup], Field(max_length=64)] = []
    """Each GPU's buffers registered in the fan-out comparison (EFA's measured growth)."""

    def buffer_sizes(self) -> list[int]:
        """Every buffer's size, in the given order."""
        return [g.size for g in self.buffers for _ in range(g.count)]


class DmExport(Strict):
    """NIC device memory exported as a dma-buf and imported by a GPU, after the workloads (how GPU-initiated
    networking lets GPU threads reach a NIC's memory): ibv_alloc_dm on the node's NIC, ibv_dm_export_dmabuf_fd,
    the importers the export refuses (a static one, a pinned one), the GPU's revocable import and first access,
    then ibv_free_dm revoking the buffer under the GPU and the GPU's next access."""

    kind: Literal["dm-export"]
    name: Name | None = None
    on: GpuPlace
    """The importing GPU ('<node>.<gpu>'); its node's NIC allocates the device memory."""
    length: PositiveSize = Field("64KiB", validate_default=True)
    """Bytes of device memory (ConnectX-7: at most 128 KiB of MEMIC)."""
    broken_importer: bool = False
    """The GPU keeps its mapping when told to let go: the revocation waits past its bound and the simulator names
    the importer that broke the bounded-time promise."""


LibraryStudy = Annotated[RcacheChurn | FallbackChains | RegistrationOrder | MultiNicServer | DmExport,
                         Field(discriminator="kind")]


class Variant(Strict):
    """One arm of a comparison: the scenario with some keys replaced."""

    name: Name
    set: dict[str, Any]
    """Dotted key paths into the scenario and their values, e.g. {'buffers.src.register': 'dmabuf'}:
    list items may be named by index or by their 'name'."""


def _transport_of_ports(data: Any) -> Any:
    """Raw scenario or testbed data with the fabric's transport defaulting to that of the ports the nodes name
    (RoCE for Ethernet ports), so the resolved scenario says which one runs; mixed or absent ports leave it."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return data
    fabric = data.get("fabric", {})
    if not isinstance(fabric, dict) or "transport" in fabric:
        return data
    nics = [node.get("nic") for node in data["nodes"] if isinstance(node, dict)]
    named = {PORT_RATES[nic["port"]].transport for nic in nics
             if isinstance(nic, dict) and nic.get("port") in PORT_RATES}
    return {**data, "fabric": {**fabric, "transport": named.pop()}} if len(named) == 1 else data


class TestbedSpec(Strict):
    """The hardware of a scenario without its buffers and workloads: a testbed built in Python (:mod:`sim.api`)."""

    nodes: Annotated[list[NodeSpec], Field(min_length=1, max_length=1024)]
    fabric: FabricSpec = FabricSpec()
    data: bool = False
    """Data mode (as a scenario's ``data``): memory holds real bytes that RDMA moves."""

    @model_validator(mode="before")
    @classmethod
    def _port_transport(cls, data):
        return _transport_of_ports(data)


class Scenario(Strict):
    """A complete rdmasim scenario."""

    schema_version: Literal[1] = Field(alias="schema")
    """Scenario format version: 1."""
    name: Name
    """Scenario name (default results directory)."""
    description: str = ""
    seed: Seed = 0
    """Run seed: the same seed gives byte-identical results."""
    engine: Literal["event", "fast", "auto"] = "auto"
    """Simulation engine: 'auto' (the vectorized core where it gives the event engine's answers, else the event
    engine, saying why), 'event' (simpy, every work request: the reference) or 'fast' (the vectorized core only:
    a scenario outside its domain is refused)."""
    nodes: Annotated[list[NodeSpec], Field(min_length=2, max_length=1024)]
    fabric: FabricSpec = FabricSpec()
    buffers: Annotated[list[BufferSpec], Field(min_length=1)]
    workload: Annotated[list[WorkloadSpec], Field(min_length=1)]
    """One measurement or a list of them, run in order."""
    events: list[Event] = []
    """Things that happen during the run (memory pressure, page migration, reclaim)."""
    data: bool = False
    """Data mode: buffers hold real (seeded random) bytes that RDMA and evictions move; the run checks that
    every destination ends up equal to its source (slower; for correctness demonstrations)."""
    invariants: Literal["raise", "record"] = "raise"
    """On a DMA-safety violation: stop with an error, or record it and keep going (teaching mode)."""
    variants: list[Variant] = []
    """Run the scenario once per variant and compare them (each variant's 'set' applied to this file)."""
    library: list[LibraryStudy] = []
    """What communication libraries do above the verbs, run after the workloads on the same testbed: a
    registration cache's buffer churn, fallback chains, a registration order experiment."""
    outputs: list[Literal["bw_vs_size", "latency_vs_size", "bw_over_time", "latency_cdf", "gpu_memory",
                          "rail_bw"]] = [
        "bw_vs_size", "latency_vs_size"]
    """Figures to draw."""

    @model_validator(mode="before")
    @classmethod
    def _port_transport(cls, data):
        return _transport_of_ports(data)

    @field_validator("workload", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return [value] if isinstance(value, dict) else value

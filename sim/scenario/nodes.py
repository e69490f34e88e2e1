"""The schema of a scenario's hardware: nodes (host, PCIe, NIC, GPUs, kernel, rail layout) and the fabric."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from models.nic.port_rates import PORT_RATES
from models.pcie.server import RailLayout
from models.presets import GPU_VENDOR
from models.versions import DEFAULT_KERNEL, Version
from sim.scenario.fields import Latency, Name, PositiveSize, Rate, Strict
from sim.scenario.rates import check_link_rate


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

    preset: Literal["connectx8", "connectx7", "connectx6", "connectx5", "efa"] = "connectx7"
    """NIC preset (sets message rate, PCIe link, port rate, ODP and dma-buf support; connectx8 alone has data
    direct)."""
    port: Literal[tuple(PORT_RATES)] | None = None
    """Port generation: edr, hdr, ndr, xdr (InfiniBand) or 100gbe, 200gbe, 400gbe, 800gbe (RoCEv2). Sets the
    fabric's default rate (the slowest port's) and, for Ethernet ports, its RoCE headers (default: the preset's
    port: connectx8 xdr, connectx7 ndr, connectx6 hdr, connectx5 edr, efa 100gbe)."""
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
    pcie_tph: bool = False
    """The NIC and its root port support PCIe TLP Processing Hints with steering tags (mlx5's ``mkey_pcie_tph``
    capability, the device's TPH capability, an OS that enables it): a DMA handle may then name a CPU
    (``ibv_alloc_dmah``). Off by default: an assumption, as it depends on the platform."""
    qp_data_in_order: bool = False
    """mlx5: the firmware reports data written in order within a work request (``ibv_query_qp_data_in_order``
    answers 1 for an RTS QP). Off by default: no source lists the firmware that does (an assumption)."""
    data_polling_128: bool = False
    """EFA: the device reports DATA_POLLING_128 (128-byte blocks written in order). Off by default (an
    assumption)."""


class GpuSpec(Strict):
    """A GPU whose memory can be registered (peer-memory or dma-buf)."""

    name: Name | None = None
    """GPU name in references such as 'a.gpu0' (default gpu<index>)."""
    preset: Literal["h200", "h100", "a100", "mi300x"] = "h200"
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
    """rdma-core (libibverbs) version: ibv_reg_dmabuf_mr needs v34+, mlx5dv_reg_dmabuf_mr v54+."""

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
    """Line rate per direction of the links and switches between the ports (default: the slowest NIC port's data
    rate). Links run at the slower of it and the NIC ports: a faster fabric carries the port's rate."""
    latency: Latency = Field("300ns", validate_default=True)
    """One-way latency: PHY, FEC, cable, switch (e.g. '300ns')."""
    mtu: Literal[256, 512, 1024, 2048, 4096] = 4096
    """Path MTU in bytes."""
    transport: Literal["ib", "roce"] = "ib"
    """InfiniBand or RoCEv2 (sets per-packet header bytes; default: roce when the nodes name Ethernet ports)."""

    @field_validator("rate", mode="before")
    @classmethod
    def _plausible_rate(cls, value):
        # Refused, not warned of: no port could carry such a rate, so it can only be a unit slip (400GBps for
        # 400Gb/s), and a warning scrolls past in a sweep of hundreds of runs whose numbers it leaves wrong.
        return check_link_rate(value)

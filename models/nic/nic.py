"""The RDMA NIC: doorbells, WQE fetch, a processing pipeline that caps the message rate, ports, and the
memory-key table that every access is checked against.

Each direction has ``tx_engines`` / ``rx_engines`` processing engines, each a FIFO server with its own per-WQE
(per-message) time; a QP is bound to one engine per direction (QP number modulo the count), so a QP's work
requests stay in order and one QP gets one engine's message rate while several QPs spread over all of them
(a modelling choice for in-order processing per QP; it is why message-rate tests use several QPs, perftest's
``-q``). Vendors publish only the aggregate message rate, so the presets have one engine at that rate.
Messages stream whole and cut-through through each resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.nic.device import DeviceAttrs
from models.nic.memic import Memic
from models.nic.mtt_cache import MttCache
from models.nic.translation import DmabufImporter
from models.nic.wqe import Access
from sim.core import PS_PER_NS, PS_PER_US, FifoServer, VerbsError, format_duration


@dataclass(frozen=True, slots=True)
class OdpParams:
    """On-demand paging costs (mlx5 ODP). No public measurement exists: unvalidated defaults."""

    fault_ps: int = 20 * PS_PER_US
    """Fixed cost of one NIC page fault: interrupt, work queue, hmm_range_fault, UMR post and completion."""
    fault_page_ps: int = 250 * PS_PER_NS
    """Per 4 KiB page faulted in and written to the MTT."""
    fault_granularity: int = 64 * 1024
    """The handler maps at least this aligned span around the faulting address (bytes)."""
    invalidate_ps: int = 5 * PS_PER_US
    """One mmu-notifier invalidation: UMR ZAP of the range and its completion."""
    implicit: bool = True
    """The device reports ``IBV_ODP_SUPPORT_IMPLICIT`` (mlx5's ``internal_fill_odp_caps``: HCAs with the
    fixed_buffer_size, null_mkey and umr_extended_translation_offset capabilities, ConnectX-4 onwards)."""

    def fault_cost_ps(self, pages: int) -> int:
        """One run of the fault path that maps ``pages`` pages: the fixed cost plus the per-page cost."""
        return self.fault_ps + pages * self.fault_page_ps


@dataclass(frozen=True, slots=True)
class UmrParams:
    """Cost of rewriting an MR's translation entries with a UMR WQE (unvalidated defaults)."""

    fixed_ps: int = 5 * PS_PER_US
    """Post the UMR, wait for its completion."""
    entry_ps: int = 2 * PS_PER_NS
    """Per 4 KiB MTT entry written (8 B each, DMA-read by the NIC)."""
    reg_ioctl_ps: int = 25 * PS_PER_US
    """uverbs ioctl and mkey creation of ``ibv_reg_dmabuf_mr`` (like ``ibv_reg_mr`` without pinning)."""
    pinned_entry_ps: int = 294 * PS_PER_NS
    """Per translation entry of an ``ibv_reg_mr`` of host memory, beyond pinning its pages: ``ib_umem_get``'s
    scatter list and DMA mapping and the MTT entry the mkey is created with (the published totals do not split
    them). Fitted to Mooncake's sequential registration of 500 GB of present 4 KiB pages
    (:mod:`models.nic.reg_calibration`)."""
    pinned_release_entry_ps: int = 81 * PS_PER_NS
    """Per translation entry of its ``ibv_dereg_mr``, beyond unpinning: the DMA unmapping and mkey teardown
    (the same source)."""


@dataclass(frozen=True, slots=True)
class NicParams:
    """NIC timing and limits (times in integer ps)."""

    doorbell_ps: int = 200 * PS_PER_NS
    """CPU MMIO doorbell (or BlueFlame WQE write) until the NIC sees it: uncached store + PCIe flight."""
    tx_process_ps: int = 4 * PS_PER_NS
    """Send-side per-WQE processing: the message-rate cap of one engine (4 ns = 250 M msg/s)."""
    tx_engines: int = 1
    """Send processing engines; a QP uses one (its number modulo the count)."""
    rx_engines: int = 1
    """Receive processing engines; a QP's incoming messages use one (its number modulo the count)."""
    tx_latency_ps: int = 150 * PS_PER_NS
    """Send pipeline latency from WQE (or payload) ready to first bit on the wire."""
    rx_process_ps: int = 4 * PS_PER_NS
    """Receive-side per-packet-train processing cap (ps)."""
    rx_latency_ps: int = 150 * PS_PER_NS
    """Receive pipeline latency from last bit in to the first DMA write issued (incl. key check)."""
    blueflame: bool = True
    """Single posted WQEs are written with the doorbell (mlx5 BlueFlame), so the NIC does not fetch them."""
    wqe_bytes: int = 64
    """Size of one send WQE fetched by DMA read (bytes)."""
    cqe_bytes: int = 64
    """Size of one completion entry written to host memory (bytes)."""
    max_inline: int = 220
    """Largest payload a WQE may carry inline (perftest's default inline size for write latency)."""
    max_rd_atomic: int = 16
    """Outstanding RDMA READs and atomics per QP as initiator (mlx5 max_qp_rd_atom)."""
    atomic_ps: int = 125 * PS_PER_NS
    """The responder's atomic unit: how long one atomic holds it (read-modify-write of 8 bytes under the
    address lock), i.e. 1 / the NIC's atomic rate (8 M atomics/s). Vendors publish no atomic rate; measurements of
    atomics on one address report a few million to about ten million per second per NIC (Kalia et al., "Design
    Guidelines for High Performance RDMA Systems", USENIX ATC 2016): an unvalidated default of that order."""
    max_qp_wr: int = 8192
    """Largest send-queue depth a QP may be created with."""
    max_mr_size: int = 2**48
    """Largest memory region (bytes)."""
    device: DeviceAttrs = DeviceAttrs()
    """Identity, object limits and capability bits the device reports (``ibv_query_device``)."""
    odp: OdpParams | None = OdpParams()
    """On-demand paging support and its costs; None for a NIC without page faults (EFA-like)."""
    dmabuf: DmabufImporter | None = "dynamic"
    """dma-buf MR support: ``dynamic`` (mlx5: move_notify + re-fault, needs ODP), ``pinned`` (EFA-like), None."""
    umr: UmrParams = UmrParams()
    """Cost of rewriting translation entries."""
    umr_extended_translation_offset: bool = True
    """The HCA capability of that name (ConnectX-5 and later): without it a UMR reaches fewer than 2**16 pages, so
    mlx5 refuses dma-buf MRs of 256 MiB or more (``mlx5r_umr_can_load_pas``)."""
    data_direct: bool = False
    """A data-direct DMA device is bound to this mlx5 device (``mlx5dv_reg_dmabuf_mr`` DATA_DIRECT needs one): a
    ConnectX-8's data-direct PCI function, the only device ``mlx5_data_direct_pci_table`` lists
    (drivers/infiniband/hw/mlx5/data_direct.c, 0x2100)."""
    data_direct_mkey_ro: bool = False
    """The data-direct mkey allows relaxed ordering; without it mlx5 drops RELAXED_ORDERING from such MRs."""
    remote_access: Access = Access.REMOTE_READ | Access.REMOTE_WRITE
    """EFA: the remote rights its RDMA_READ/RDMA_WRITE capabilities allow (``efa_alloc_mr``); mlx5 ignores it."""
    max_translations: int | None = None
    """Translation entries (each of its MR's page size) the NIC can hold over all MRs; None: not limited in the model.
    AMD Pensando ionic: about 2**20 (SemiAnalysisAI/InferenceX PR #3330); mlx5 limits are not published."""
    ignore_move_notify: bool = False
    """Deliberately broken dma-buf importer that keeps its translations after move_notify (teaching only:
    the invariant checker catches its DMA through stale mappings)."""
    max_dm_size: int = 128 * 1024
    """Device memory (``ibv_alloc_dm``, mlx5's MEMIC) the device offers, bytes (``max_dm_size`` of
    ``ibv_query_device_ex``, the MEMIC the allocator of :mod:`models.nic.memic` hands out); 0: none (EFA). Each
    preset sets its own (``SOURCES["max_dm_size"]`` in :mod:`models.presets`); the default is ConnectX-6's."""
    dmabuf_revocable: bool = False
    """A ``pinned`` importer imports dma-bufs revocably from 7.1, as irdma does
    (``ib_umem_dmabuf_get_pinned_revocable_and_lock``): a revocation invalidates the key in hardware."""
    pcie_tph: bool = False
    """PCIe TPH steering tags work (``mlx5_st_create`` finds the ``mkey_pcie_tph`` capability, the device's TPH
    capability and an OS that enables it); without them a DMA handle naming a CPU is ``EOPNOTSUPP``."""
    qp_data_in_order: bool = False
    """mlx5: the HCA capability ``qp_data_in_order``, and a QP in RTS whose context reports ``data_in_order``
    (:func:`~models.verbs.data_in_order.mlx5_query_qp_data_in_order`). Off: no source lists the firmware that
    sets them (an assumption; "not in order" is the answer that makes a program poll the completion)."""
    data_polling_128: bool = False
    """EFA: the device capability ``DATA_POLLING_128`` (128-byte aligned blocks written in order,
    ``efa_query_qp_data_in_order``). Off: which EFA generations report it is not published (an assumption)."""


class Nic:
    """One NIC: ports and engines as FIFO servers, and the key table of registered MRs."""

    def __init__(self, name: str, params: NicParams) -> None:
        self.name = name
        self.params = params
        self.tx_engines = _engines(f"{name}.tx_engine", params.tx_engines)
        self.rx_engines = _engines(f"{name}.rx_engine", params.rx_engines)
        self.tx_port = FifoServer(f"{name}.tx_port")
        self.rx_port = FifoServer(f"{name}.rx_port")
        self.atomic_unit = FifoServer(f"{name}.atomic_unit")
        """Serves incoming atomics one at a time (so they are atomic across QPs), ``params.atomic_ps`` each."""
        self.mrs: dict[int, Any] = {}
        """The registered MRs (:class:`~models.verbs.mr.MemoryRegion`) by key."""
        self.mws: dict[int, Any] = {}
        """The allocated memory windows (:class:`~models.nic.memory_window.MemoryWindow`) by key index
        (``key >> 8``: a bind changes a window's key, not its index)."""
        self.xrcd_tree: dict[Any, Any] = {}
        """The XRC domains (:class:`~models.verbs.xrc.XrcDomain`) associated with a file, by the file (its inode):
        uverbs' ``xrcd_tree`` of the device."""
        self.device_memory: list[Any] = []
        """Allocated device memory (:class:`~models.verbs.dm.DeviceMemoryAllocation`), oldest first."""
        self.memic = Memic(name, params.max_dm_size)
        """The device memory's pages and the port the data path's accesses to it claim."""
        self.mtt: MttCache | None = None
        """The MPT/MTT translation caches when modelled (off by default: every translation hits)."""
        self._next_key = 0x100
        self._next_handle = 0
        self.translations = 0
        """Translation entries held by registered MRs."""
        self.outages: tuple[tuple[int, int], ...] = ()
        """``[start, end)`` intervals (ps) in which the link loses every frame (:meth:`link_down`)."""

    def tx_engine(self, qp_num: int) -> FifoServer:
        """The send engine that processes QP ``qp_num``'s work requests."""
        return self.tx_engines[qp_num % len(self.tx_engines)]

    def rx_engine(self, qp_num: int) -> FifoServer:
        """The receive engine that processes messages arriving for QP ``qp_num``."""
        return self.rx_engines[qp_num % len(self.rx_engines)]

    def new_key(self) -> int:
        """A fresh memory key (lkey == rkey, as mlx5 hands out for user MRs)."""
        key = self._next_key
        self._next_key += 0x100
        return key

    def reserve_translations(self, pages: int, *, call: str) -> int:
        """Reserve ``pages`` translation entries (an MR's, in its page size); return how many.

        :raises VerbsError: ``ENOMEM`` when the NIC's translation table would overflow.
        """
        limit = self.params.max_translations
        if limit is not None and self.translations + pages > limit:
            raise VerbsError("ENOMEM", f"{self.name}: translation table full ({self.translations} of {limit} "
                             f"entries used, {pages} more needed)", call=call)
        self.translations += pages
        return pages

    def release_translations(self, pages: int) -> None:
        """Give back ``pages`` translation entries."""
        self.translations -= pages

    def new_handle(self) -> int:
        """A fresh object number (PD handle, QP number)."""
        self._next_handle += 1
        return self._next_handle

    def lookup(self, key: int) -> Any:
        """The MR owning ``key``, or None when the key is invalid (never registered or deregistered)."""
        return self.mrs.get(key)

    def enter_error_state(self, qps: list) -> str:
        """A fatal NIC error (mlx5_enter_error_state): ``qps`` (this NIC's) fail and every hardware key is lost;
        the MRs stay registered in the kernel until the process cleans up. Returns the event-log outcome."""
        outcome = flush_qps(qps)
        lost = len(self.mrs) + len(self.mws)
        for mr in list(self.mrs.values()):
            mr.valid = False
        self.mrs.clear()
        self.mws.clear()
        return f"{outcome}; {lost} memory keys lost"

    def link_down(self, start_ps: int, duration_ps: int, *, held: bool = False) -> str:
        """The link carries nothing in ``[start_ps, start_ps + duration_ps)``: every frame on it meanwhile, sent
        or received, is lost (RC's transport timer retransmits it); ``held``: instead both ports stall then, as a
        lossless fabric's pause holds frames (set in advance, so frames queued before the outage wait for the link
        too). Returns the event-log outcome."""
        end = start_ps + duration_ps
        if held:
            for port in (self.tx_port, self.rx_port):
                port.add_stall(start_ps, end)
            return f"link down for {format_duration(duration_ps)}, frames held"
        self.outages = tuple(sorted((*self.outages, (start_ps, end))))
        return f"link down for {format_duration(duration_ps)}, frames on it lost"

    def link_lost(self, start_ps, end_ps):
        """Whether a frame on this NIC's link during ``[start_ps, end_ps]`` meets an outage (it is lost); for arrays
        of frames, each one's answer."""
        lost = False
        for down, up in self.outages:
            lost = lost | ((down < end_ps) & (start_ps < up))
        return lost


def flush_qps(qps: list) -> str:
    """Move each QP of ``qps`` (:class:`~models.verbs.qp.QueuePair`) to ERR: the NIC flushes their outstanding
    work requests. Returns the event-log outcome."""
    for qp in qps:
        qp.to_error()
    return f"{len(qps)} QPs moved to ERR (outstanding work requests flushed)"


def _engines(name: str, count: int) -> list[FifoServer]:
    """``count`` engines named ``name`` (one) or ``name0``, ``name1``... (several).

    :raises ValueError: fewer than one engine.
    """
    if count < 1:
        raise ValueError(f"{name}: a NIC needs at least one engine per direction, got {count}")
    return [FifoServer(name if count == 1 else f"{name}{i}") for i in range(count)]

"""Wire models into one simulated testbed from a validated scenario (the helper layer over ``models``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from models.dmabuf import DmaBufCore, KernelConfig
from models.fabric import Fabric
from models.dmabuf.gpu_export import CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE, Gpu, GpuAllocation
from models.node import Node
from models.verbs.peermem import ibv_reg_mr_peermem
from models.gpu import gpu_params
from models.pcie.link import PcieParams
from models.pcie.presets import PCIE_PRESETS
from models.presets import GPU_VENDOR
from models.pcie.iommu import IOMMU_PRESETS, Iommu, IommuParams
from models.nic.mtt_cache import MTT_PRESETS, MttCache, MttParams
from models.nic.nic import Nic
from models.pcie.server import buffer_nics, build_rail_server, devices, qp_nic, rail_nics
from models.pcie.topology import build_topology, device_link, has_common_pci_switch, pci_p2pdma_distance
from models.ib.implicit_odp import SIZE_MAX
from models.nic.wqe import Access, Sge
from models.verbs.advise import IBV_ADVISE_MR_FLAG_FLUSH, AdviseMrAdvice, ibv_advise_mr
from models.verbs.device import Context, ProtectionDomain, ibv_alloc_pd, ibv_open_device
from models.verbs.mr import MemoryRegion, ibv_reg_mr
from models.versions import KernelBehaviour, Version
from models.verbs.dmabuf import MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, ibv_reg_dmabuf_mr, mlx5dv_reg_dmabuf_mr
from sim.core import Environment, SimError
from sim.scenario.resolve import access_flags, fabric_params, host_params, nic_params, pcie_params
from sim.scenario.buffers import BufferSpec
from sim.scenario.nodes import NodeSpec
from sim.scenario.schema import Scenario, TestbedSpec


@dataclass
class Registration:
    """How one scenario buffer was registered and what it cost."""

    buffer: str
    node: str
    size_bytes: int
    mode: str
    mrs: dict[str, MemoryRegion]
    """Its MR on each NIC it is registered on, by NIC (``nic0``...), in registration order."""
    location: str
    """'host' or the GPU's name."""
    allocation: GpuAllocation | None = None
    """The GPU allocation behind a GPU buffer."""
    started_ps: int = 0
    """When its registration began (the previous one had ended)."""
    first_event: int = 0
    """Index in the run's trace of the first event its registration recorded (0 when not traced)."""
    addr: int | None = None
    """The buffer's first byte in ``mr``'s iova space when ``mr`` is not its own (an implicit ODP MR)."""
    reg_ps: int | None = None
    """What registering the buffer took (ps); None: what its MRs' registrations took. A buffer sharing an implicit
    MR registered before it took none."""

    @property
    def mr(self) -> MemoryRegion:
        """Its first MR (its only one on a node with one NIC)."""
        return next(iter(self.mrs.values()))

    @property
    def register_ps(self) -> int:
        """What registering the buffer took (ps): registering it on several NICs costs each registration's time,
        one after the other (the fan-out of a library registering everywhere)."""
        return sum(mr.reg_ps for mr in self.mrs.values()) if self.reg_ps is None else self.reg_ps

    def mr_on(self, nic: str) -> MemoryRegion:
        """Its MR on NIC ``nic``.

        :raises SimError: it is not registered there.
        """
        mr = self.mrs.get(nic)
        if mr is None:
            raise SimError(f"buffer '{self.buffer}' is not registered on {self.node}.{nic} (registered on "
                           f"{', '.join(self.mrs)}; see the buffer's 'nics')")
        return mr

    def current_bytes(self) -> np.ndarray:
        """Data mode: the buffer's true contents now (where the exporter keeps it, not a stale mapping)."""
        if self.allocation is None:
            return self.mr.pd.context.node.host.data[self.buffer]
        return gpu_bytes(self.allocation)


def gpu_bytes(alloc: GpuAllocation) -> np.ndarray:
    """Data mode: a GPU allocation's true contents now (where the exporter keeps it, not a stale mapping)."""
    exporter = alloc.exporter
    if exporter is not None and exporter.storage:
        return exporter.storage[exporter.dmabuf.generation]
    return alloc.data


@dataclass
class Testbed:
    """Everything a run needs: the clock, the nodes, their opened devices, GPUs and registered buffers."""

    env: Environment
    fabric: Fabric
    nodes: dict[str, Node]
    contexts: dict[str, Context]
    pds: dict[str, ProtectionDomain]
    gpus: dict[str, Gpu] = field(default_factory=dict)
    """By '<node>.<gpu>'."""
    registrations: dict[str, Registration] = field(default_factory=dict)
    qps: list = field(default_factory=list)
    """Every QP the workloads created."""
    started_ps: int = 0
    """When setup (registration) ended and the workloads began."""
    setup_events: int = 0
    """Trace events the setup recorded (0 when not traced)."""
    implicit_mrs: dict = field(default_factory=dict)
    """Implicit ODP MRs by (node, access bits), shared by the buffers that use them."""
    injectors: dict = field(default_factory=dict)
    """The fault injector of each buffer an ``exporter-fault`` event scripted, by buffer name."""
    flows: dict[str, list] = field(default_factory=dict)
    """Each workload's QP pairs (requester and responder :class:`~models.verbs.workloads.Endpoint`), by label, in
    the order of its streams."""
    devices: dict[str, Device] = field(default_factory=dict)
    """Every NIC's opened device and PD, by '<node>.<nic>' ('a.nic0', 'a.nic5'); ``contexts`` and ``pds`` hold
    each node's first."""
    rails: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Each rails node's rail NICs (:func:`models.pcie.server.rail_nics`) of each of its memories and GPUs, by node
    and then vertex ('mem0', 'gpu3'): where its buffers register with ``nics: rail`` and its QPs go."""

    def nic_node(self, node: str, nic: str) -> Node:
        """Node ``node`` through its NIC ``nic`` (:meth:`models.node.Node.with_nic`)."""
        return self.devices[f"{node}.{nic}"].context.node


class Device(NamedTuple):
    """One opened NIC of a node and its protection domain."""

    context: Context
    pd: ProtectionDomain


class RegistrationFailed(SimError):
    """A scenario buffer could not be registered; the message names the buffer and the verbs error."""


def build(scenario: Scenario, seed: int, *, trace: bool = False) -> Testbed:
    """Create the nodes, GPUs and devices; allocate and register every buffer, advancing the clock by the
    registration times (the setup runs before the workloads, as in a real program).

    :raises RegistrationFailed: a buffer's registration failed (e.g. ENOMEM past RLIMIT_MEMLOCK).
    """
    bed = wire(scenario, seed, trace=trace)
    env = bed.env
    for gpu in bed.gpus.values():
        gpu.invariants = scenario.invariants
    for i, spec in enumerate(scenario.buffers):
        started, first_event = env.now, _traced(env)
        try:
            reg = _register(bed, spec, scenario.invariants)
        except SimError as exc:
            raise RegistrationFailed(f"buffers[{i}] '{spec.name}' on {spec.on} ({spec.registration}): {exc}") from exc
        reg.started_ps, reg.first_event = started, first_event
        bed.registrations[spec.name] = reg
        settle(bed, reg.register_ps)
        if spec.advise is not None:
            try:
                took = _advise(bed, spec, reg)
            except SimError as exc:
                raise RegistrationFailed(f"buffers[{i}] '{spec.name}' advise: {exc}") from exc
            env.run(until=env.now + took)
    bed.started_ps, bed.setup_events = env.now, _traced(env)
    return bed


def wire(spec: Scenario | TestbedSpec, seed: int, *, trace: bool = False) -> Testbed:
    """The clock, nodes, GPUs and fabric of ``spec``, each node's device opened with one PD; no buffers yet."""
    env = Environment(seed, trace=trace, data=spec.data)
    fabric = Fabric(fabric_params(spec))
    bed = Testbed(env, fabric, {}, {}, {})
    for node_spec in spec.nodes:
        _add_node(bed, node_spec)
    return bed


def _add_node(bed: Testbed, spec: NodeSpec) -> None:
    node = Node.create(spec.name, host_params(spec), pcie_params(spec), nic_params(spec))
    node.kernel = DmaBufCore(bed.env, kernel_config(spec))
    node.rdma_core = spec.rdma_core
    if spec.iommu != "off":
        node.iommu = Iommu(IommuParams(**IOMMU_PRESETS[spec.iommu]), name=f"{spec.name}.iommu")
    gpu_pcie = [PcieParams(**PCIE_PRESETS[gpu_params(g.preset).pcie]) for g in spec.gpus]
    if spec.rails is not None:
        layout = spec.rails.layout()
        node.topology = build_rail_server(layout, nic=node.pcie.params, gpu=gpu_pcie[0], uplink=node.pcie.params)
        nics = [node.with_nic(v, Nic(f"{spec.name}.{v}", node.nic.params)) for v in devices(node.topology, "nic")]
        bed.rails[spec.name] = {v: rail_nics(node.topology, v, layout)
                                for v in devices(node.topology, "memory") + devices(node.topology, "gpu")}
    else:
        if spec.gpus:
            node.topology = build_topology(spec.topology, nic=node.pcie.params, gpu=gpu_pcie[0])
            node.pcie = device_link(node.topology)
        nics = [node]
    bed.nodes[spec.name] = nics[0]
    for nic_node in nics:
        if spec.nic.translation_cache:
            nic_node.nic.mtt = MttCache(MttParams(**MTT_PRESETS[spec.nic.preset]), name=nic_node.nic.name)
        bed.fabric.attach(nic_node.nic.name)
        ctx = ibv_open_device(nic_node, bed.env, bed.fabric)
        bed.devices[f"{spec.name}.{nic_node.device}"] = Device(ctx, ibv_alloc_pd(ctx))
    bed.contexts[spec.name], bed.pds[spec.name] = bed.devices[f"{spec.name}.{nics[0].device}"]
    # An importer that is not one of the node's NICs (another GPU) is placed at its first NIC, as the one-NIC
    # topology places every importer.
    vertex = defaultdict(lambda: nics[0].device, {n.nic.name: n.device for n in nics})
    for gspec, own in zip(spec.gpus, spec.gpu_names()):
        name = f"{spec.name}.{own}"
        params = gpu_params(gspec.preset, **({} if gspec.bar1 is None else {"bar1_bytes": gspec.bar1}))
        gpu = bed.gpus[name] = Gpu(name, gspec.exporter or GPU_VENDOR[gspec.preset], params, node.kernel,
                                   capacity=gspec.memory, driver=gspec.driver, coherent=gspec.coherent,
                                   chipset_p2p=gspec.chipset_p2p,
                                   topology_check_override=gspec.topology_check_override)
        gpu.vertex = spec.vertex(own)
        gpu.peer_distance = lambda dev, g=node.topology, v=gpu.vertex: pci_p2pdma_distance(g, v, vertex[dev])
        gpu.common_switch = lambda dev, g=node.topology, v=gpu.vertex: has_common_pci_switch(g, v, vertex[dev])


def settle(bed: Testbed, cost_ps: int) -> None:
    """A blocking control-path call of ``cost_ps`` just returned: run the clock past it and past every kernel call
    that ran ahead of the clock (the calling thread waited for them)."""
    env = bed.env
    nodes = [d.context.node for d in bed.devices.values()]
    env.run(until=max(env.now + cost_ps, *(n.kernel.now_ps(n.nic.name) for n in nodes)))


def _implicit(bed: Testbed, spec: BufferSpec, node: str, addr: int, access: Access) -> Registration:
    """The buffer through its node's implicit ODP MR of these rights, registered by the first buffer that
    asks for it (on the node's first NIC)."""
    shared = bed.implicit_mrs.get((node, int(access)))
    if shared is None:
        shared = bed.implicit_mrs[node, int(access)] = ibv_reg_mr(bed.pds[node], 0, SIZE_MAX, access)
        took = None
    else:
        took = 0
    return Registration(spec.name, node, spec.size, spec.registration, {bed.nodes[node].device: shared}, "host",
                        addr=addr, reg_ps=took)


def _advise(bed: Testbed, spec: BufferSpec, reg: Registration) -> int:
    """The buffer's ``advise``: ibv_advise_mr over all of it; returns the time the call takes (ps)."""
    buf = bed.nodes[reg.node].host.buffers[spec.name]
    flags = IBV_ADVISE_MR_FLAG_FLUSH if spec.advise.flush else 0
    return ibv_advise_mr(bed.pds[reg.node], AdviseMrAdvice[spec.advise.advice.upper()], flags,
                         [Sge(buf.addr, buf.size, reg.mr.lkey)])


def _traced(env: Environment) -> int:
    return len(env.trace.events) if env.trace.enabled else 0


def kernel_config(spec) -> KernelConfig:
    """A node's kernel: its version, CONFIG_DMABUF_MOVE_NOTIFY (set, or the version's default) and
    CONFIG_INFINIBAND_ON_DEMAND_PAGING."""
    behaviour = KernelBehaviour(Version.parse(spec.kernel.version))
    enabled = behaviour.move_notify_always_on or bool(spec.kernel.dmabuf_move_notify)
    return KernelConfig(move_notify_enabled=enabled, version=spec.kernel.version,
                        on_demand_paging=spec.kernel.on_demand_paging)


def _register(bed: Testbed, spec: BufferSpec, invariants: str) -> Registration:
    """Allocate the buffer and register it on each of its NICs (:func:`registration_nics`)."""
    node_name, place = spec.on.split(".")
    node = bed.nodes[node_name]
    access = access_flags(spec.access)
    fill = (lambda: bed.env.rng(f"data.{spec.name}").integers(0, 256, spec.size, dtype=np.uint8)) \
        if bed.env.data_mode else None
    pds = [bed.devices[f"{node_name}.{nic}"].pd for nic in registration_nics(bed, spec)]
    if place == "host":
        buf = node.host.allocate(spec.name, spec.size)
        if fill:
            node.host.fill(spec.name, fill)
        if spec.registration == "odp":
            access |= Access.ON_DEMAND
        if spec.implicit:
            return _implicit(bed, spec, node_name, buf.addr, access)
        mrs = {pd.context.node.device: ibv_reg_mr(pd, buf.addr, buf.size, access) for pd in pds}
        return Registration(spec.name, node_name, spec.size, spec.registration, mrs, "host")
    gpu = bed.gpus[spec.on]
    alloc = gpu.malloc(spec.name, spec.size)
    if fill:
        alloc.data = fill()
    mrs = {}
    for pd in pds:
        if spec.registration == "peermem":
            mr = ibv_reg_mr_peermem(pd, alloc, 0, spec.size, access)
        else:
            mr = _register_dmabuf(pd.context.node, pd, gpu, alloc, spec, access, invariants)
        mr.backing.vram = gpu.vertex
        mrs[pd.context.node.device] = mr
    return Registration(spec.name, node_name, spec.size, spec.registration, mrs, place, alloc)


def registration_nics(bed: Testbed, spec: BufferSpec) -> list[str]:
    """The NICs (``nic0``...) buffer ``spec`` is registered on: its ``nics``; a node with one NIC, that one."""
    node_name, place = spec.on.split(".")
    node = bed.nodes[node_name]
    if node_name not in bed.rails:
        return [node.device]
    home = bed.rails[node_name]["mem0" if place == "host" else bed.gpus[spec.on].vertex]
    return buffer_nics(node.topology, home, spec.nics)


def _register_dmabuf(node: Node, pd: ProtectionDomain, gpu: Gpu, alloc: GpuAllocation, spec: BufferSpec,
                     access: Access, invariants: str) -> MemoryRegion:
    """perftest's sequence: export the range as a dma-buf fd, register it, close the fd."""
    kernel = node.kernel
    start = kernel.now_ps(gpu.name)
    flags = CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE if spec.export_mapping == "pcie" else 0
    fd = gpu.export(alloc, node.fds, flags=flags)
    export_ps = kernel.now_ps(gpu.name) - start
    kernel.wait_until(node.nic.name, kernel.now_ps(gpu.name))  # one thread: export, then register, then close
    if spec.registration == "dmabuf-pinned" and node.nic.params.dmabuf != "pinned":
        mr = mlx5dv_reg_dmabuf_mr(pd, 0, spec.size, alloc.addr, fd, access, MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT,
                                  invariants=invariants)
    else:
        mr = ibv_reg_dmabuf_mr(pd, 0, spec.size, alloc.addr, fd, access, invariants=invariants)
    kernel.wait_until(node.fds.owner, kernel.now_ps(node.nic.name))
    node.fds.close(fd)
    mr.reg_ps += export_ps
    return mr


def qp_device(bed: Testbed, reg: Registration, policy: str, k: int) -> Device:
    """The device a workload's QP ``k`` on ``reg``'s end opens: on a rails node the NIC ``policy`` picks for the
    buffer's GPU or host memory (:func:`models.pcie.server.qp_nic`), else the node's NIC."""
    node = bed.nodes[reg.node]
    if reg.node not in bed.rails:
        return bed.devices[f"{reg.node}.{node.device}"]
    place = "mem0" if reg.location == "host" else bed.gpus[f"{reg.node}.{reg.location}"].vertex
    return bed.devices[f"{reg.node}.{qp_nic(node.topology, bed.rails[reg.node][place], policy, k)}"]

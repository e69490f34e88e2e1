"""The stages a message streams through (DMA reads and writes, the wire, the engines, translation) and their
steps.

A message streams through each resource cut-through style: its head enters a resource when the resource
is free, it occupies the resource for its whole service time, and it cannot leave before its tail has
arrived and been served. Each stage is the core's :class:`~sim.core.steps.Claim` of the resource, ``(server,
service_ps, head_ps, tail_ps, latency_ps, eager)``: ``head_ps`` is the store-and-forward delay of the first unit (a
packet must be received whole before the NIC uses it; a transmit port puts the first bit on the wire at once),
``tail_ps`` the time the last unit still needs after it arrives, ``latency_ps`` a pure delay after the resource; a
pure delay between resources is a :class:`~sim.core.steps.Delay`. A claim normally happens at the simulated time
the head arrives, so each resource is an exact FIFO queue shared by every flow that crosses it.

A claim marked ``eager`` is made at once, without waiting for its head: allowed only where the resource
has a single feeder, the previous stage, behind a fixed delay. Its arrivals then come in the feeder's
service order (a later job starts the feeder after the earlier one finished, and finishing takes at least
one segment), so claiming in that order is the same FIFO queue with fewer events. Eager resources are a
PCIe link's downstream completions (fed only by its upstream read requests), a receive engine (fed only by
its port), a receive port on a point-to-point fabric (fed only by the one peer's transmit port) and a send
engine fed by BlueFlame doorbells (each arrives a fixed delay after its post, and posts come in time order).

:mod:`models.nic.datapath` strings a work request's stages into its step list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from models.fabric import Fabric
from models.nic.memic import MEMIC_TARGET, memic_access
from models.nic.nic import Nic
from models.pcie.link import PcieLink, PcieParams, read_tags, write_issue
from models.pcie.topology import dma_read_stages, dma_write_stages
from sim.core import PS_PER_S, Environment
from sim.core.interpreter import Operation, compile_steps
from sim.core.steps import Claim, Delay, Rebase, Step, Wake


def dma_read(link: PcieLink, nbytes: int) -> list[Step]:
    """Device reads ``nbytes`` of host memory: read tags, MRd requests up, the round trip, CplD completions
    down, then the engine's size term (:meth:`~models.pcie.link.PcieParams.read_size_ps`)."""
    p = link.params
    request = p.read_request_ps(min(nbytes, p.mrrs))
    completion = p.read_return_ps(min(nbytes, p.mps))
    tags = read_tags(link, nbytes, p.read_latency_ps)
    return [
        *([tags[0]] if tags else []),
        Claim(link.up, p.read_request_ps(nbytes), request, request),
        Delay(p.read_latency_ps),
        Claim(link.down, tags[1] if tags else p.read_return_ps(nbytes), completion, completion, p.read_size_ps(nbytes),
              True),
    ]


def end_times(stages_of: Callable[[], list[Step]], messages: int) -> list[int]:
    """When each of ``messages`` messages queued at time 0 leaves the stages ``stages_of()`` gives (each an
    operation walking them), earliest first (ps); one message: its latency alone."""
    env, done = Environment(), []
    for k in range(messages):
        program = compile_steps((*stages_of(), Rebase(True), Wake()))
        env.step_runner.start(Operation(program, k, EndTimes(done)))
    env.run()
    return sorted(done)


def stream_Bps(stages_of: Callable[[], list[Step]], nbytes: int, messages: int = 300) -> float:
    """Steady-state rate of back-to-back messages of ``nbytes`` through the stages ``stages_of()`` gives (all
    ``messages`` queued at once), over the second half of them (bytes/s)."""
    done = end_times(stages_of, messages)
    half = messages // 2
    return (messages - 1 - half) * nbytes * PS_PER_S / (done[-1] - done[half])


class EndTimes:
    """Owner of operations that only report when they end: each end time is appended to ``done`` (ps)."""

    def __init__(self, done: list[int]) -> None:
        self.done = done

    def wake(self, op: Operation, head: int) -> None:
        self.done.append(head)


def dma_read_stream_Bps(params: PcieParams, nbytes: int, reads: int = 300) -> float:
    """:func:`stream_Bps` of DMA reads of ``nbytes`` over one link with ``params`` (bytes/s)."""
    link = PcieLink("stream", params)
    return stream_Bps(lambda: dma_read(link, nbytes), nbytes, reads)


def dma_write(link: PcieLink, nbytes: int) -> list[Claim]:
    """Device writes ``nbytes`` to host memory with posted MWr TLPs, spaced by its engine's issue limit."""
    p = link.params
    tlp = p.write_ps(min(nbytes, p.mps))
    return [*write_issue(link), Claim(link.up, p.write_ps(nbytes), tlp, tlp, p.write_latency_ps)]


def wire(src: Nic, dst: Nic, fabric: Fabric, nbytes: int, first_extra: int = 0,
         mtu: int | None = None, per_packet: int = 0, last_extra: int = 0) -> list[Claim]:
    """A message from ``src``'s port through the fabric into ``dst``'s port, in packets of ``mtu`` payload bytes
    (the sending QP's path MTU; None or more than the fabric carries: the fabric's MTU), its first packet
    ``first_extra`` header bytes longer, its last one ``last_extra`` when there are several
    (:meth:`~models.fabric.FabricParams.wire_bytes`) and every packet ``per_packet``
    (:func:`~models.nic.transport.packet_headers`).

    The first bit leaves as soon as the transmit port is free; the receiver holds the first packet until it
    has arrived whole.
    """
    p = fabric.params
    if mtu is not None and mtu < p.mtu:
        p = dataclasses.replace(p, mtu=mtu)
    total = p.serialize_ps(nbytes, first_extra, per_packet, last_extra)
    first = p.first_packet_ps(nbytes, first_extra, per_packet)
    return [Claim(src.tx_port, total, 0, 0, p.latency_ps),
            Claim(dst.rx_port, total - first, first, 0, 0, fabric.point_to_point)]


def rx_engine(nic: Nic, qp_num: int) -> Claim:
    """Processing and key check by the receive engine of QP ``qp_num`` on ``nic``."""
    p = nic.params
    return Claim(nic.rx_engine(qp_num), p.rx_process_ps, p.rx_process_ps, p.rx_process_ps, p.rx_latency_ps, True)


def memory_target(mr, now_ps: int) -> str | None:
    """Where a NIC access through ``mr`` goes at ``now_ps`` in its node's PCIe topology: the GPU's vertex
    (``gpu0``, ``gpu3``...) for a GPU buffer the NIC reaches in VRAM, ``mem0`` for host memory; None when the
    node has no topology (the NIC's own link reaches host memory). A DM MR's accesses stay on the NIC
    (:data:`~models.nic.memic.MEMIC_TARGET`), topology or not."""
    if mr is None:
        return None
    if mr.dm is not None:
        return MEMIC_TARGET
    if mr.pd.context.node.topology is None:
        return None
    return "mem0" if mr.backing is None else mr.backing.target(now_ps)


def node_dma_read(node, target: str | None, nbytes: int) -> list[Step]:
    """The NIC of ``node`` reads ``nbytes`` of ``target`` (see :func:`memory_target`), along the route from
    that NIC (``node.device``); its own MEMIC without crossing PCIe."""
    if target == MEMIC_TARGET:
        return memic_access(node.nic.memic, nbytes)
    if target is None:
        return dma_read(node.pcie, nbytes)
    return dma_read_stages(node.topology, node.device, target, nbytes)


def node_dma_write(node, target: str | None, nbytes: int) -> list[Claim]:
    """The NIC of ``node`` writes ``nbytes`` to ``target``."""
    if target == MEMIC_TARGET:
        return memic_access(node.nic.memic, nbytes)
    if target is None:
        return dma_write(node.pcie, nbytes)
    return dma_write_stages(node.topology, node.device, target, nbytes)


def labelled(steps: list[Step], label: str) -> list[Step]:
    """``steps`` with their last step, a claim, labelled ``label`` (:attr:`~sim.core.steps.Claim.label`)."""
    last = steps[-1]
    return [*steps[:-1], dataclasses.replace(last, label=label) if isinstance(last, Claim) else last]


def translation_stages(node, mr, addr: int, length: int, now_ps: int, *, write: bool) -> list[Step]:
    """What translating one access costs before its data moves: NIC MPT/MTT cache misses (DMA reads of the
    entries), the deep-MR walk of a large MR the NIC writes, and IO-TLB misses of host-memory DMA. Empty when
    the node models neither (the default) and for a DM MR (a MEMIC mkey has no translation and its DMA no IOMMU)."""
    stages: list[Step] = []
    if mr.dm is not None:
        return stages
    mtt = node.nic.mtt
    if mtt is not None:
        access = mtt.access(mr.lkey, mr.length, mr.page_size, addr - mr.iova, length, write=write)
        if access.mpt_miss:
            stages += dma_read(node.pcie, mtt.params.mpt_bytes)
        if access.mtt_misses:
            stages += dma_read(node.pcie, access.mtt_misses * mtt.params.line_bytes)
        stages += mtt.walk_stage(access, node.pcie.params)
    if node.iommu is not None and not (memory_target(mr, now_ps) or "mem").startswith("gpu"):
        stages += node.iommu.stages(mr.addr + addr - mr.iova, length)
    return stages

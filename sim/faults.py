"""Fault injection for scenario events: QP errors, NIC resets, process exit without cleanup, eviction storms,
link flaps. Each returns a one-line outcome for the event log."""

from __future__ import annotations

from collections.abc import Generator

from models.dmabuf import Placement
from models.dmabuf.gpu_export import AmdgpuExporter
from models.verbs.verbs import ibv_dereg_mr
from sim.build import Testbed
from sim.core import VerbsError


def qp_error(bed: Testbed, node: str) -> str:
    """Move every QP of ``node`` to the error state."""
    qps = [qp for qp in bed.qps if qp.node.name == node]
    for qp in qps:
        qp.to_error()
    return f"{len(qps)} QPs moved to ERR (outstanding work requests flushed)"


def nic_reset(bed: Testbed, node: str) -> str:
    """A fatal NIC error: the QPs fail and every hardware key of the NIC is lost (the MRs stay registered in
    the kernel until the process cleans up)."""
    outcome = qp_error(bed, node)
    nic = bed.nodes[node].nic
    lost = len(nic.mrs)
    for mr in list(nic.mrs.values()):
        mr.valid = False
    nic.mrs.clear()
    return f"{outcome}; {lost} memory keys lost"


def process_exit(bed: Testbed, node: str) -> str:
    """The process dies without deregistering: its QPs die and the kernel deregisters every MR (dma-buf MRs:
    revoke the key, then revoke, unmap, detach and put the umem)."""
    outcome = qp_error(bed, node)
    freed = 0
    for reg in bed.registrations.values():
        if reg.node == node and reg.mr.registered:
            ibv_dereg_mr(reg.mr)
            freed += 1
    bed.nodes[node].fds.close_all()
    return f"{outcome}; kernel cleanup deregistered {freed} MRs and closed the process's files"


def eviction_storm(bed: Testbed, gpu_name: str, count: int, every_ps: int, log_row) -> Generator:
    """Move every movable exported buffer of the GPU back and forth ``count`` times, every ``every_ps``."""
    gpu = bed.gpus[gpu_name]
    moved = refused = 0
    for step in range(count):
        if step:
            yield bed.env.timeout(every_ps)
        for alloc in gpu.allocations.values():
            exporter = alloc.exporter
            if not isinstance(exporter, AmdgpuExporter) or exporter.dmabuf.released:
                continue
            target = Placement.SYSTEM if exporter.dmabuf.placement is Placement.VRAM else Placement.VRAM
            try:
                exporter.move(target)
                moved += 1
            except VerbsError:
                refused += 1
    log_row(f"{moved} moves, {refused} refused (pinned)")


def link_flap(bed: Testbed, node: str, start_ps: int, duration_ps: int) -> str:
    """The node's link carries nothing in ``[start_ps, start_ps + duration_ps)``: both its ports stall then
    (set in advance, so frames queued before the flap wait for the link too)."""
    nic = bed.nodes[node].nic
    for port in (nic.tx_port, nic.rx_port):
        port.add_stall(start_ps, start_ps + duration_ps)
    return f"link down for {duration_ps / 1e6:.3f} us"

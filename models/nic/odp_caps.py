"""On-demand paging capabilities per transport: what a device's firmware says its page faults cover, as mlx5's
``internal_fill_odp_caps`` (drivers/infiniband/hw/mlx5/odp.c) copies them into ``struct ib_odp_caps``, and which
capability a NIC page fault of one access needs (``mlx5_ib_odp_opcode_cap``).

A device takes a page fault only where its capabilities say so. mlx5 before Linux 5.2 refused any other fault in
its handler (``mlx5_ib_mr_initiator_pfault_handler``: "ODP fault on QP of an unsupported opcode", -EFAULT, the QP
resumed with an error); later kernels leave it to the hardware, which raises no fault there at all: an access
through a page its translation does not hold fails as any other access without a valid translation does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from models.nic.device import DeviceAttrs
from models.nic.transport import QpType
from models.nic.wqe import Opcode, WcStatus


class OdpTransportCaps(enum.IntFlag):
    """``enum ibv_odp_transport_cap_bits``."""

    SEND = 1 << 0
    RECV = 1 << 1
    WRITE = 1 << 2
    READ = 1 << 3
    ATOMIC = 1 << 4
    SRQ_RECV = 1 << 5


_ALL = OdpTransportCaps.SEND | OdpTransportCaps.RECV | OdpTransportCaps.WRITE | OdpTransportCaps.READ
_NONE = OdpTransportCaps(0)


@dataclass(frozen=True, slots=True)
class OdpFirmwareCaps:
    """The ``odp_cap`` fields of a device's HCA capabilities (``MLX5_CAP_ODP_SCHEME``), per transport; the
    driver reports them unchanged in ``ibv_query_device_ex``'s ``odp_caps``."""

    rc: OdpTransportCaps = _ALL | OdpTransportCaps.ATOMIC | OdpTransportCaps.SRQ_RECV
    uc: OdpTransportCaps = _NONE
    ud: OdpTransportCaps = OdpTransportCaps.SEND
    xrc: OdpTransportCaps = (OdpTransportCaps.SEND | OdpTransportCaps.WRITE | OdpTransportCaps.READ
                             | OdpTransportCaps.ATOMIC | OdpTransportCaps.SRQ_RECV)

    def of(self, qp_type: QpType) -> OdpTransportCaps:
        """The capabilities of the transport ``qp_type``."""
        return {QpType.RC: self.rc, QpType.UC: self.uc, QpType.UD: self.ud, QpType.XRC_SEND: self.xrc,
                QpType.XRC_RECV: self.xrc}[qp_type]


CONNECTX7_ODP = OdpFirmwareCaps()
"""ConnectX-7: RC SEND, RECV, WRITE, READ, ATOMIC, SRQ_RECV; UD SEND; XRC all but RECV (issue 34's
``ibv_devinfo -v`` of a ConnectX-7; ODP atomics since Linux 5.2, commit 17d2f88f92ce)."""
CONNECTX6_ODP = OdpFirmwareCaps(rc=_ALL | OdpTransportCaps.SRQ_RECV,
                                xrc=OdpTransportCaps.SEND | OdpTransportCaps.WRITE | OdpTransportCaps.READ
                                | OdpTransportCaps.SRQ_RECV)
"""ConnectX-6 family firmware as ``ibv_devinfo -v`` prints it (github.com/openucx/ucx/issues/9727, fw 26): RC
SEND, RECV, WRITE, READ, SRQ; UD SEND; XRC SEND, WRITE, READ, SRQ; no ODP atomics."""

_PART_CAPS = {4129: CONNECTX7_ODP, 4123: CONNECTX6_ODP, 4119: CONNECTX6_ODP}
"""Firmware ODP capabilities by ``vendor_part_id`` (ConnectX-7, ConnectX-6, ConnectX-5)."""


def firmware_odp_caps(device: DeviceAttrs) -> OdpFirmwareCaps:
    """The ODP capabilities the firmware of ``device`` reports (the device's profile: its ``vendor_part_id``;
    the ConnectX-7 set for a device the table does not list). Only meaningful where the NIC has ODP."""
    return _PART_CAPS.get(device.vendor_part_id, CONNECTX7_ODP)


_OPCODE_CAP = {Opcode.SEND: OdpTransportCaps.SEND, Opcode.SEND_WITH_IMM: OdpTransportCaps.SEND,
               Opcode.RDMA_WRITE: OdpTransportCaps.WRITE, Opcode.RDMA_WRITE_WITH_IMM: OdpTransportCaps.WRITE,
               Opcode.RDMA_READ: OdpTransportCaps.READ, Opcode.ATOMIC_CMP_AND_SWP: OdpTransportCaps.ATOMIC,
               Opcode.ATOMIC_FETCH_AND_ADD: OdpTransportCaps.ATOMIC}


def mlx5_ib_odp_opcode_cap(opcode: Opcode, *, receive: bool = False, srq: bool = False) -> OdpTransportCaps:
    """The capability a page fault needs: the opcode's (``mlx5_ib_odp_opcode_cap``: SEND for sends, WRITE, READ,
    ATOMIC) for the requester's own buffers and an RDMA responder's; for a receive's scatter, RECV, or SRQ_RECV
    when the receive came from an SRQ (``mlx5_ib_mr_responder_pfault_handler_rq`` / ``_srq``)."""
    if receive:
        return OdpTransportCaps.SRQ_RECV if srq else OdpTransportCaps.RECV
    return _OPCODE_CAP[opcode]


def odp_fault_allowed(caps: OdpFirmwareCaps | None, qp_type: QpType, need: OdpTransportCaps) -> bool:
    """Whether a device with ODP capabilities ``caps`` (None: no ODP) takes a page fault that needs ``need`` on a
    QP of ``qp_type``."""
    return caps is not None and bool(caps.of(qp_type) & need)


def gated_translate(qp, mr, need: OdpTransportCaps, now_ps: int, offset: int, length: int):
    """An access by ``qp`` (the QP whose NIC makes it: the requester's, or the responder's for a request arriving)
    of ``length`` bytes at ``offset`` in ``mr``, answered as :meth:`~models.nic.translation.MrBacking.translate`
    does. Through an ODP MR, the access takes a page fault only where :func:`odp_fault_allowed` says the device
    does; elsewhere it goes on when every page is already in the NIC's table, else fails IBV_WC_LOC_PROT_ERR (no
    fault: the translation entries hold no read or write permission)."""
    backing = mr.backing
    params = qp.node.nic.params
    if backing.mode != "odp" or odp_fault_allowed(firmware_odp_caps(params.device), qp.qp_type, need):
        return backing.translate(now_ps, offset, length)
    return None if backing.present(now_ps, offset, length) else WcStatus.LOC_PROT_ERR

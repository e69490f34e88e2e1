"""Device and port queries (``ibv_query_device``, ``ibv_query_device_ex``, ``ibv_query_port``): what the model
uses, reported with libibverbs' field names. Limits the model enforces come from
:class:`~models.nic.nic.NicParams`, the rest from its :class:`~models.nic.device.DeviceAttrs`; port rate, MTU and
link layer from the fabric the context is attached to."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from models.ib.implicit_odp import odp_supports_implicit
from models.nic.device import PORT_NUM, AtomicCap, rdma_is_port_valid
from models.nic.device_records import device_records
from models.nic.odp_caps import OdpTransportCaps, firmware_odp_caps
from models.nic.port_rates import PORT_RATES
from models.verbs.qp_state import PathMtu
from models.verbs.device import Context
from sim.core import VerbsError


@dataclass(frozen=True, slots=True)
class IbvDeviceAttr:
    """``struct ibv_device_attr`` (the fields the model has an answer for)."""

    fw_ver: str
    vendor_id: int
    vendor_part_id: int
    hw_ver: int
    max_mr_size: int
    """Largest MR (bytes): ``ibv_reg_mr`` of a longer range fails with EINVAL."""
    page_size_cap: int
    max_qp: int
    max_qp_wr: int
    """Deepest send queue ``ibv_create_qp`` accepts."""
    device_cap_flags: int
    max_sge: int
    max_sge_rd: int
    max_cq: int
    max_cqe: int
    max_mr: int
    max_pd: int
    max_qp_rd_atom: int
    """READs and atomics one QP may have outstanding as responder; the model gates only the initiator, and this
    reports the same ``max_rd_atomic`` (mlx5 reports equal values for both)."""
    max_res_rd_atom: int
    max_qp_init_rd_atom: int
    """READs and atomics one QP may have outstanding as initiator (the model's ``max_rd_atomic`` gate)."""
    atomic_cap: AtomicCap
    phys_port_cnt: int
    max_srq: int = 0
    max_srq_wr: int = 0
    """Deepest SRQ ``ibv_create_srq`` accepts."""
    max_srq_sge: int = 0
    node_guid: int = 0
    sys_image_guid: int = 0
    max_ee: int = 0
    max_rdd: int = 0
    max_mw: int = 0
    max_raw_ipv6_qp: int = 0
    max_raw_ethy_qp: int = 0
    max_mcast_grp: int = 0
    max_mcast_qp_attach: int = 0
    max_total_mcast_qp_attach: int = 0
    max_ah: int = 0
    max_fmr: int = 0
    max_map_per_fmr: int = 0
    max_pkeys: int = 0
    local_ca_ack_delay: int = 0
    max_ee_rd_atom: int = 0
    max_ee_init_rd_atom: int = 0


class OdpGeneralCaps(enum.IntFlag):
    """``enum ibv_odp_general_caps``."""

    SUPPORT = 1 << 0
    SUPPORT_IMPLICIT = 1 << 1


@dataclass(frozen=True, slots=True)
class IbvOdpCaps:
    """``struct ibv_odp_caps``: whether ODP and implicit ODP MRs register, and per transport the operations whose
    accesses take page faults (:func:`~models.nic.odp_caps.firmware_odp_caps`)."""

    general_caps: OdpGeneralCaps
    rc_odp_caps: OdpTransportCaps
    uc_odp_caps: OdpTransportCaps
    ud_odp_caps: OdpTransportCaps


@dataclass(frozen=True, slots=True)
class IbvTsoCaps:
    """``struct ibv_tso_caps``: ``max_tso`` bytes, on QP types ``supported_qpts`` (a bit per ``ibv_qp_type``)."""

    max_tso: int
    supported_qpts: int


@dataclass(frozen=True, slots=True)
class IbvRssCaps:
    """``struct ibv_rss_caps``."""

    supported_qpts: int
    max_rwq_indirection_tables: int
    max_rwq_indirection_table_size: int
    rx_hash_fields_mask: int
    rx_hash_function: int


@dataclass(frozen=True, slots=True)
class IbvCqModerationCaps:
    """``struct ibv_cq_moderation_caps``: ``max_cq_count`` completions, ``max_cq_period`` microseconds."""

    max_cq_count: int
    max_cq_period: int


@dataclass(frozen=True, slots=True)
class IbvDeviceAttrEx:
    """``struct ibv_device_attr_ex`` (subset): the classic attributes, 64-bit capability flags, ODP caps."""

    orig_attr: IbvDeviceAttr
    device_cap_flags_ex: int
    odp_caps: IbvOdpCaps
    xrc_odp_caps: OdpTransportCaps = OdpTransportCaps(0)
    completion_timestamp_mask: int = 0
    hca_core_clock: int = 0
    """kHz."""
    tso_caps: IbvTsoCaps = field(default_factory=lambda: IbvTsoCaps(0, 0))
    rss_caps: IbvRssCaps = field(default_factory=lambda: IbvRssCaps(0, 0, 0, 0, 0))
    max_wq_type_rq: int = 0
    cq_mod_caps: IbvCqModerationCaps = field(default_factory=lambda: IbvCqModerationCaps(0, 0))
    max_dm_size: int = 0
    """Device memory ``ibv_alloc_dm`` may allocate (bytes; 0: none)."""
    phys_port_cnt_ex: int = 1


PHYS_LINK_UP = 5
"""``ibv_port_attr.phys_state`` of a port whose link is up (IB spec PortPhysicalState 5, LinkUp)."""


class PortState(enum.IntEnum):
    """``enum ibv_port_state``."""

    NOP = 0
    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4
    ACTIVE_DEFER = 5


class LinkLayer(enum.IntEnum):
    """``IBV_LINK_LAYER_*``."""

    UNSPECIFIED = 0
    INFINIBAND = 1
    ETHERNET = 2


WIDTH_LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}
"""``ibv_port_attr.active_width`` code -> lanes (1X, 4X, 8X, 12X, 2X; ibv_devinfo's width_str)."""
LANES_WIDTH = {lanes: code for code, lanes in WIDTH_LANES.items()}
"""Lanes -> ``active_width`` code."""
SPEED_DATA_GBPS = {1: 2.5, 2: 5.0, 4: 10.0, 8: 10.0, 16: 14.0, 32: 25.0, 64: 50.0, 128: 100.0, 256: 200.0}
"""``active_speed`` code -> nominal data rate per lane (Gb/s): SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR."""
LANE_SPEED = {lane: code for code, lane in SPEED_DATA_GBPS.items() if code != 8}
"""Data rate per lane (Gb/s) -> ``active_speed`` code (FDR10 left out: QDR has the same lane rate)."""


@dataclass(frozen=True, slots=True)
class IbvPortAttr:
    """``struct ibv_port_attr`` (the fields the model has an answer for)."""

    state: PortState
    max_mtu: PathMtu
    active_mtu: PathMtu
    """The fabric's path MTU: the segment size of every message."""
    link_layer: LinkLayer
    active_width: int
    """``IBV_WIDTH_*`` code; 0 when no IB width and speed give the fabric's rate."""
    active_speed: int
    """``IBV_SPEED_*`` code; 0 when no IB width and speed give the fabric's rate."""
    lid: int = 0
    """The port's LID (1, 2, ... in the order ports joined the fabric); 0 on Ethernet, where GIDs address ports
    (:func:`models.verbs.ah.ibv_query_gid`)."""
    gid_tbl_len: int = 0
    port_cap_flags: int = 0
    max_msg_sz: int = 0
    """Largest message (bytes)."""
    bad_pkey_cntr: int = 0
    qkey_viol_cntr: int = 0
    pkey_tbl_len: int = 0
    sm_lid: int = 0
    lmc: int = 0
    max_vl_num: int = 0
    sm_sl: int = 0
    subnet_timeout: int = 0
    init_type_reply: int = 0
    phys_state: int = 0
    """``5``: LinkUp."""
    flags: int = 0
    port_cap_flags2: int = 0

    @property
    def rate_Gbps(self) -> float:
        """Nominal data rate of the port (width x per-lane rate, as ``ibv_devinfo`` names it); 0 if unknown."""
        return WIDTH_LANES.get(self.active_width, 0) * SPEED_DATA_GBPS.get(self.active_speed, 0.0)


def ibv_query_device(context: Context) -> IbvDeviceAttr:
    """The device's attributes: the limits the model enforces, the identity its preset carries and the rest of
    what its family reports (:func:`~models.nic.device_records.device_records`); the node GUID is its port's
    GUID (the interface id of GID 0)."""
    params = context.node.nic.params
    dev, rec = params.device, device_records(params.device)
    guid = _port_guid(context)
    return IbvDeviceAttr(
        fw_ver=dev.fw_ver, vendor_id=dev.vendor_id, vendor_part_id=dev.vendor_part_id, hw_ver=dev.hw_ver,
        max_mr_size=params.max_mr_size, page_size_cap=dev.page_size_cap, max_qp=dev.max_qp,
        max_qp_wr=params.max_qp_wr, device_cap_flags=int(dev.cap_flags) & 0xFFFFFFFF, max_sge=dev.max_sge,
        max_sge_rd=dev.max_sge_rd, max_cq=dev.max_cq, max_cqe=dev.max_cqe, max_mr=dev.max_mr, max_pd=dev.max_pd,
        max_qp_rd_atom=params.max_rd_atomic, max_res_rd_atom=dev.max_res_rd_atom,
        max_qp_init_rd_atom=params.max_rd_atomic, atomic_cap=dev.atomic_cap, phys_port_cnt=1, max_srq=dev.max_srq,
        max_srq_wr=dev.max_srq_wr, max_srq_sge=dev.max_srq_sge, node_guid=guid, sys_image_guid=guid,
        max_mw=rec.max_mw, max_mcast_grp=rec.max_mcast_grp, max_mcast_qp_attach=rec.max_mcast_qp_attach,
        max_total_mcast_qp_attach=rec.max_total_mcast_qp_attach, max_ah=rec.max_ah, max_pkeys=rec.max_pkeys,
        local_ca_ack_delay=rec.local_ca_ack_delay)


def _port_guid(context: Context) -> int:
    """The port's GUID: the interface id of its GID 0 (:func:`~models.nic.transport.port_gid`); 0 off a fabric."""
    name = context.node.nic.name
    fabric = context.fabric
    return fabric.lid(name) if fabric is not None and name in fabric.endpoints else 0


_RAW_PACKET_QPTS = 1 << 8
"""``1 << IBV_QPT_RAW_PACKET``: the QP type TSO and RSS serve."""


def _ethernet(context: Context) -> bool:
    return context.fabric is not None and context.fabric.params.transport == "roce"


def ibv_query_device_ex(context: Context) -> IbvDeviceAttrEx:
    """:func:`ibv_query_device` plus the 64-bit capability flags, the ODP capabilities (none without ODP, else
    SUPPORT, SUPPORT_IMPLICIT where the device has it, and each transport's capabilities as the firmware reports
    them: mlx5's ``internal_fill_odp_caps``; ``xrc_odp_caps`` beside ``odp_caps`` as in libibverbs), the raw-packet
    capabilities (on an Ethernet port only), CQ moderation, ``max_dm_size`` and the port count."""
    params = context.node.nic.params
    none = OdpTransportCaps(0)
    rec, eth = device_records(params.device), _ethernet(context)
    if params.odp is None:
        odp, xrc = IbvOdpCaps(OdpGeneralCaps(0), none, none, none), none
    else:
        general = OdpGeneralCaps.SUPPORT | (OdpGeneralCaps.SUPPORT_IMPLICIT if odp_supports_implicit(params) else 0)
        caps = firmware_odp_caps(params.device)
        odp, xrc = IbvOdpCaps(general, caps.rc, caps.uc, caps.ud), caps.xrc
    tables, size, function, fields = rec.rss_eth if eth else (0, 0, 0, 0)
    return IbvDeviceAttrEx(
        ibv_query_device(context), int(params.device.cap_flags), odp, xrc,
        completion_timestamp_mask=rec.completion_timestamp_mask, hca_core_clock=rec.hca_core_clock_khz,
        tso_caps=IbvTsoCaps(rec.max_tso_eth, _RAW_PACKET_QPTS) if eth and rec.max_tso_eth else IbvTsoCaps(0, 0),
        rss_caps=IbvRssCaps(_RAW_PACKET_QPTS if tables else 0, tables, size, fields, function),
        max_wq_type_rq=rec.max_wq_type_rq_eth if eth else 0,
        cq_mod_caps=IbvCqModerationCaps(rec.max_cq_count, rec.max_cq_period_us), max_dm_size=params.max_dm_size)


def ibv_query_port(context: Context, port_num: int) -> IbvPortAttr:
    """Port ``port_num``'s attributes (every modelled device has one port, number 1).

    :raises VerbsError: ``EINVAL`` for any other port number (``ib_query_port``: rdma_is_port_valid).
    """
    if not rdma_is_port_valid(port_num):
        raise VerbsError("EINVAL", f"port {port_num} does not exist: the device has port {PORT_NUM} only",
                         call="ibv_query_port")
    fabric = context.fabric.params
    width, speed = width_and_speed(fabric.rate_Bps * 8 / 1e9, fabric.transport)
    link = LinkLayer.ETHERNET if fabric.transport == "roce" else LinkLayer.INFINIBAND
    name = context.node.nic.name
    lid = context.fabric.lid(name) if link is LinkLayer.INFINIBAND and name in context.fabric.endpoints else 0
    rec, k = device_records(context.node.nic.params.device), int(link is LinkLayer.ETHERNET)
    return IbvPortAttr(PortState.ACTIVE, PathMtu.MTU_4096, PathMtu.at_most(fabric.mtu), link, width, speed, lid,
                       gid_tbl_len=rec.gid_tbl_len[k], port_cap_flags=rec.port_cap_flags[k],
                       max_msg_sz=1 << rec.log_max_msg, pkey_tbl_len=rec.pkey_tbl_len[k], sm_lid=1 - k,
                       max_vl_num=rec.max_vl_num[k], subnet_timeout=rec.subnet_timeout[k], phys_state=PHYS_LINK_UP)


def width_and_speed(rate_Gbps: float, transport: str = "ib") -> tuple[int, int]:
    """The ``(active_width, active_speed)`` codes of a port running at ``rate_Gbps``: the lanes and lane rate of
    the port generation of that rate and link layer (:data:`~models.nic.port_rates.PORT_RATES`; mlx5 reports
    Ethernet ports in the same codes: 100GbE EDR 4X, 400GAUI-4 NDR 4X, 800GAUI-8 NDR 8X); otherwise any width and
    speed that give the rate, 4X preferred; ``(0, 0)`` when none does."""
    for port in PORT_RATES.values():
        if port.transport == transport and port.data_Gbps == rate_Gbps:
            return LANES_WIDTH[port.lanes], LANE_SPEED[port.lane_data_Gbps]
    for width in (2, 1, 16, 4, 8):
        for speed, lane in SPEED_DATA_GBPS.items():
            if speed != 8 and WIDTH_LANES[width] * lane == rate_Gbps:
                return width, speed
    return 0, 0

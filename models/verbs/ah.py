"""Address handles (``ibv_create_ah``, ``ibv_destroy_ah``) and where a UD work request's datagram goes.

The checks are mlx5's ``mlx5_create_ah`` (rdma-core providers/mlx5/verbs.c): a port the device does not have ->
EINVAL; no GRH (``is_global`` 0) on an Ethernet (RoCE) port, where every packet carries one -> EINVAL. An AH holds
its PD (``pd->usecnt``: :func:`~models.verbs.destroy.ibv_dealloc_pd` refuses EBUSY while it exists).

A datagram reaches the UD QP that its AH's port (by GID with a GRH, else by LID) and the work request's
``remote_qpn`` name (:attr:`models.fabric.Fabric.datagram_qps`). One whose QP number names no UD QP there reaches
the port and is dropped by its receive engine, silently, as the IB specification's UD responder drops a datagram it
has no QP for (:class:`AbsentQp`); the requester completes it successfully.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.nic.device import PORT_NUM, rdma_is_port_valid
from models.nic.transport import QpType, lid_of_gid, port_gid
from models.nic.wqe import SendWR
from models.verbs.qp_state import AhAttr, QPAttr
from models.verbs.receive_queue import ReceiveQueue
from sim.core import ProtocolError, VerbsError


@dataclass(eq=False)
class AddressHandle:
    """``struct ibv_ah``: a copy of the ``ibv_ah_attr`` it was created with."""

    pd: object
    """The :class:`~models.verbs.device.ProtectionDomain`."""
    attr: AhAttr
    destroyed: bool = False

    @property
    def dlid(self) -> int:
        """The LID of the destination port (from the GID when the AH has a GRH)."""
        return lid_of_gid(self.attr.dgid) if self.attr.is_global else self.attr.dlid


def ibv_create_ah(pd, attr: AhAttr) -> AddressHandle:
    """Create an address handle for UD work requests to the port ``attr`` names.

    :raises VerbsError: ``EINVAL`` for a port other than 1 or, on an Ethernet (RoCE) fabric, an ``attr`` without
        ``is_global``; ``EINVAL`` on a PD already deallocated.
    """
    call = "ibv_create_ah"
    if pd.destroyed:
        raise VerbsError("EINVAL", f"PD {pd.handle} was deallocated", call=call)
    if not rdma_is_port_valid(attr.port_num):
        raise VerbsError("EINVAL", f"port_num {attr.port_num}: the device has port {PORT_NUM} only "
                         "(mlx5_create_ah)", call=call)
    if not attr.is_global and pd.context.fabric.params.transport == "roce":
        raise VerbsError("EINVAL", "is_global 0 on an Ethernet port: RoCE packets carry a GRH, so the AH needs "
                         "one (mlx5_create_ah)", call=call)
    pd.usecnt += 1  # ib_uverbs_create_ah -> rdma_create_user_ah: atomic_inc(&pd->usecnt)
    return AddressHandle(pd, dataclasses.replace(attr))


def ibv_destroy_ah(ah: AddressHandle) -> None:
    """Destroy ``ah`` and release its PD.

    :raises VerbsError: ``EINVAL`` when it was destroyed already.
    """
    if ah.destroyed:
        raise VerbsError("EINVAL", "AH was destroyed already", call="ibv_destroy_ah")
    ah.destroyed = True
    ah.pd.usecnt -= 1


def ibv_query_gid(context, port_num: int, index: int) -> bytes:
    """GID ``index`` of port ``port_num`` (the model's ports have one GID, index 0; see
    :func:`~models.nic.transport.port_gid`).

    :raises VerbsError: ``EINVAL`` for another port or index.
    """
    if not rdma_is_port_valid(port_num) or index != 0:
        raise VerbsError("EINVAL", f"port {port_num} GID index {index}: the model's port 1 has GID index 0 only",
                         call="ibv_query_gid")
    fabric = context.fabric
    return port_gid(fabric.lid(context.node.nic.name))


def datagram_destination(qp, wr: SendWR):
    """The UD QP (a :class:`~models.verbs.qp.QueuePair`) a work request posted on the UD ``qp`` is delivered to.

    :raises VerbsError: ``EINVAL`` for no AH, or one destroyed or of another PD's device.
    :raises ProtocolError: the address names no port of the fabric (the model has nowhere to carry the datagram).
        A port without that UD QP number gets it and drops it (:class:`AbsentQp`).
    """
    call = "ibv_post_send"
    ah = wr.ah
    if not isinstance(ah, AddressHandle) or ah.destroyed:
        raise VerbsError("EINVAL", "a UD work request needs a live address handle (wr.ud.ah)", call=call)
    if ah.pd.context.node is not qp.node:
        raise VerbsError("EINVAL", "the address handle belongs to another device", call=call)
    fabric = qp.pd.context.fabric
    dest = fabric.datagram_qps.get((ah.dlid, wr.remote_qpn))
    if dest is not None:
        return dest
    node = fabric.ports.get(ah.dlid)
    if node is None:
        raise ProtocolError(f"{call}: no port has LID {ah.dlid}: the model has nowhere to carry the datagram")
    return absent_qp(qp, ah.dlid, node, wr.remote_qpn)


def absent_qp(qp, dlid: int, node, qp_num: int) -> AbsentQp:
    """The :class:`AbsentQp` that UD ``qp`` sends to at QP number ``qp_num`` of ``node`` (port LID ``dlid``), made
    at its first datagram there (so its :func:`sender_to` and step lists are made once too)."""
    key = (dlid, qp_num)
    absent = qp.absent_qps.get(key)
    if absent is None:
        absent = qp.absent_qps[key] = AbsentQp(node, qp_num)
    return absent


class AbsentQp:
    """A QP number on ``node`` with no UD QP behind it, as the data path sees a datagram's destination: it is not
    there (``destroyed``), so the responder drops what reaches it (:func:`~models.nic.receive.unacknowledged_refusal`);
    the rest is what the path reads of a responder that has nothing."""

    qp_type = QpType.UD
    destroyed = True

    def __init__(self, node, qp_num: int) -> None:
        self.node, self.qp_num = node, qp_num
        self.attr = QPAttr()
        self.receives = ReceiveQueue(0, 0)
        self.missing = None
        self.nak_sent = self.psn_synced = False

    @property
    def state(self):
        """``qp_state``: RESET."""
        return self.attr.qp_state


class SenderView:
    """A QP as the data path sees it for the requests to one destination: ``remote`` is that destination (a UD
    QP's datagram destination; an XRC initiator's target as one XRC SRQ number reaches it,
    :class:`~models.verbs.xrc_path.XrcTarget`) and the step lists are its own (they depend on it); every other
    attribute is the QP's, read and written through.

    The data path is written for a QP with one peer (``qp.remote``); a UD QP has one per destination and an XRC
    initiator one per SRQ number, so each gets one of these (:func:`sender_to`)."""

    __slots__ = ("_qp", "remote", "paths")

    def __init__(self, qp, remote) -> None:
        object.__setattr__(self, "_qp", qp)
        object.__setattr__(self, "remote", remote)
        object.__setattr__(self, "paths", {})

    def __getattr__(self, name: str):
        return getattr(self._qp, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._qp, name, value)


def data_path_qp(qp, dest):
    """What the data path takes as the QP of ``qp``'s work requests to ``dest``: a UD QP's
    :func:`sender_to` ``dest``; a connected QP itself (its peer is ``dest``)."""
    return sender_to(qp, dest) if qp.qp_type is QpType.UD else qp


def sender_to(qp, dest) -> SenderView:
    """The :class:`SenderView` of UD ``qp`` to ``dest`` (made once per destination)."""
    key = (id(dest.node), dest.qp_num)
    sender = qp.senders.get(key)
    if sender is None or sender.remote is not dest:
        sender = qp.senders[key] = SenderView(qp, dest)
    return sender

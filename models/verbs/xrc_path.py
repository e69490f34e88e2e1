"""The data path's view of XRC traffic: an initiator's request reaches its target QP as the XRC SRQ it names does.

Every request packet of an XRC initiator carries an XRCETH with the number of an XRC SRQ (mlx5 writes
``wr.qp_type.xrc.remote_srqn`` into the WQE's ``mlx5_wqe_xrc_seg`` for every opcode but BIND_MW and LOCAL_INV,
``_mlx5_post_send``). The target QP takes from that SRQ what it would take from its own: the receive a SEND
consumes (completed in the SRQ's CQ), and the protection domain the request's keys are checked in, for a SEND's
scatter entries and for an RDMA WRITE's, READ's or atomic's R_Key alike. A number that names no XRC SRQ of the
target's XRC domain (none at all, or one of another domain) is answered with a NAK Remote Access Error, the
requester completing ``IBV_WC_REM_ACCESS_ERR`` and the target moving to the error state (``check_resource`` ->
``RESPST_ERR_INVALID_XRCETH`` -> ``do_class_ac_error(AETH_NAK_REM_ACC_ERR)`` in the rxe XRC series "RDMA/rxe: Add
xrc support", linux-rdma 2022; mainline rxe has no XRC, and mlx5's firmware does not publish its check).

The verbs (domains, XRC SRQs, target QPs) are :mod:`models.verbs.xrc`.
"""

from __future__ import annotations

from models.verbs.ah import SenderView
from models.verbs.receive_queue import ReceiveQueue

_NO_RECEIVES = ReceiveQueue(0, 0)
"""What a request naming no XRC SRQ finds to receive into: nothing."""


class XrcTarget:
    """An XRC target QP as the data path sees a request that names XRC SRQ ``srq_num``: ``srq`` (the SRQ, looked up
    in the target's domain when read: None when the number names none there), ``receives`` and ``pd`` are that
    SRQ's; every other attribute is the target QP's, read and written through (its state, PSNs, RNR and sequence
    bookkeeping are one QP's, whichever SRQ a request names)."""

    __slots__ = ("_qp", "srq_num")

    def __init__(self, tgt, srq_num: int) -> None:
        object.__setattr__(self, "_qp", tgt)
        object.__setattr__(self, "srq_num", srq_num)

    @property
    def tgt(self):
        """The target QP (:class:`~models.verbs.qp.QueuePair`)."""
        return self._qp

    @property
    def srq(self):
        """The XRC SRQ of the target's domain numbered ``srq_num``, or None."""
        domain = self._qp.xrc_domain
        return None if domain is None else domain.srqs.get(self.srq_num)

    @property
    def xrc_srq_valid(self) -> bool:
        """The request's XRCETH names an XRC SRQ of the target's XRC domain (else: NAK Remote Access Error)."""
        return self.srq is not None

    @property
    def receives(self) -> ReceiveQueue:
        """The queue a SEND consumes from: the named SRQ (an empty queue when it names none)."""
        srq = self.srq
        return _NO_RECEIVES if srq is None else srq

    @property
    def pd(self):
        """The protection domain the request's keys are checked in: the SRQ's (None: no SRQ, every key refused)."""
        srq = self.srq
        return None if srq is None else srq.pd

    def __getattr__(self, name: str):
        return getattr(self._qp, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._qp, name, value)


def xrc_sender(qp, srq_num: int) -> SenderView:
    """The data path's view of XRC initiator ``qp`` for its requests naming XRC SRQ ``srq_num`` (a work request's
    ``remote_srqn``): towards its target (``qp.remote``) as that SRQ makes it; made once per SRQ number while the
    target stays the same."""
    key = ("xrc", srq_num)
    sender = qp.senders.get(key)
    if sender is None or sender.remote.tgt is not qp.remote:
        sender = qp.senders[key] = SenderView(qp, XrcTarget(qp.remote, srq_num))
    return sender

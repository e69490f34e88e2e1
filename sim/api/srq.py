"""``SRQ`` with ``SrqInitAttr``, ``SrqInitAttrEx`` and ``SrqAttr`` in pyverbs' shape (pyverbs/srq.pyx) over
:mod:`models.verbs.recv` and :mod:`models.verbs.xrc`: a shared receive queue whose receives any QP created on it
consumes (an XRC SRQ: any XRC target of its domain, for the initiators that name its number), and its limit
event."""

from __future__ import annotations

from dataclasses import dataclass

from models.verbs import recv
from models.verbs.destroy import ibv_destroy_srq
from models.verbs.recv import ibv_create_srq, ibv_modify_srq, ibv_post_srq_recv, ibv_query_srq
from models.verbs.xrc import SrqType, ibv_create_srq_ex, ibv_get_srq_num
from sim.api.device import PD, Context
from sim.api.qp import RecvWR
from sim.api.resource import Resource


@dataclass(frozen=True)
class SrqAttr(recv.SrqAttr):
    """``struct ibv_srq_attr`` with pyverbs' defaults: ``max_wr`` receives of ``max_sge`` SGEs, and the limit
    ``srq_limit`` (receives left) below which the SRQ raises ``IBV_EVENT_SRQ_LIMIT_REACHED`` once."""

    max_wr: int = 100
    max_sge: int = 1
    srq_limit: int = 0


@dataclass
class SrqInitAttr:
    """``struct ibv_srq_init_attr`` (pyverbs' ``SrqInitAttr(attr=None)``; ``srq_context`` kept, not modelled)."""

    attr: SrqAttr | None = None
    srq_context: object = None


@dataclass
class SrqInitAttrEx:
    """``struct ibv_srq_init_attr_ex`` (pyverbs' ``SrqInitAttrEx(max_wr, max_sge, srq_limit)`` and its settable
    ``comp_mask`` (:class:`~models.verbs.xrc.SrqInitAttrMask`), ``srq_type``, ``pd``, ``xrcd`` and ``cq``)."""

    max_wr: int = 100
    max_sge: int = 1
    srq_limit: int = 0
    comp_mask: int = 0
    srq_type: int = SrqType.BASIC
    pd: PD | None = None
    xrcd: object = None
    """An :class:`~sim.api.xrc.XRCD`."""
    cq: object = None
    """A :class:`~sim.api.device.CQ`: an XRC SRQ's receives complete there."""


class SRQ(Resource):
    """A shared receive queue (``ibv_create_srq``) on ``pd``, as deep and wide as mlx5 makes it for
    ``init_attr.attr`` (:meth:`query` says what it got). QPs created with it in ``QPInitAttr.srq`` consume its
    receives; their completions go to each QP's receive CQ. It holds its PD.

    Made on a :class:`~sim.api.device.Context` with an :class:`SrqInitAttrEx` (``ibv_create_srq_ex``), it may be an
    XRC SRQ (``srq_type`` ``SrqType.XRC``) of ``init_attr.xrcd``'s domain: the XRC targets of that domain take its
    receives for the initiators that name :meth:`get_srq_num`, checking keys in its PD, and its receives complete
    in ``init_attr.cq``. It holds its PD, XRC domain and CQ.

    :raises VerbsError: as :func:`models.verbs.recv.ibv_create_srq` (``EINVAL`` for ``max_wr`` 0 or beyond the
        device's ``max_srq_wr``, ``max_sge`` beyond ``max_srq_sge``; ``EOPNOTSUPP`` without SRQs) and
        :func:`models.verbs.xrc.ibv_create_srq_ex`; from :meth:`close`: ``EBUSY`` while a QP uses it
        (``ib_destroy_srq_user``).
    """

    def __init__(self, creator: PD | Context, init_attr: SrqInitAttr | SrqInitAttrEx) -> None:
        self.xrcd = self.cq = None
        if isinstance(creator, Context):
            self._ex(creator, init_attr)
        else:
            creator._check_open("ibv_create_srq")
            self.pd, self.context = creator, creator.context
            self.srq = ibv_create_srq(creator.pd, init_attr.attr or SrqAttr())
            """The verbs layer's SRQ (:class:`models.verbs.receive_queue.SharedReceiveQueue`)."""
            self.srq_context = init_attr.srq_context
        self.context._adopt(self)

    def _ex(self, context: Context, attr: SrqInitAttrEx) -> None:
        call = "ibv_create_srq_ex"
        context._check_open(call)
        for obj in (attr.pd, attr.xrcd, attr.cq):
            if obj is not None:
                obj._check_open(call)
        self.pd, self.context, self.xrcd, self.cq, self.srq_context = attr.pd, context, attr.xrcd, attr.cq, None
        self.srq = ibv_create_srq_ex(context.ctx, attr.comp_mask, SrqAttr(attr.max_wr, attr.max_sge, attr.srq_limit),
                                     srq_type=attr.srq_type, pd=None if attr.pd is None else attr.pd.pd,
                                     xrcd=None if attr.xrcd is None else attr.xrcd.xrcd,
                                     cq=None if attr.cq is None else attr.cq.cq)

    def get_srq_num(self) -> int:
        """``ibv_get_srq_num``: the number XRC initiators name (:meth:`~sim.api.qp.SendWR.set_qp_type_xrc`)."""
        self._check_open("ibv_get_srq_num")
        return ibv_get_srq_num(self.srq)

    def post_recv(self, wr: RecvWR, bad_wr: RecvWR | None = None) -> None:
        """``ibv_post_srq_recv``: add the receive ``wr`` for any of the SRQ's QPs.

        :raises VerbsError: ``EINVAL`` for more SGEs than the SRQ's ``max_sge``; ``ENOMEM`` when it is full.
        """
        call = "ibv_post_srq_recv"
        self._check_open(call)
        ibv_post_srq_recv(self.srq, wr._request(call))

    def modify(self, attr: SrqAttr, attr_mask: int) -> None:
        """``ibv_modify_srq``: arm the limit (``SRQ_LIMIT`` in ``attr_mask``).

        :raises VerbsError: ``EINVAL`` for ``SRQ_MAX_WR`` (mlx5 does not resize SRQs) or a limit not below
            ``max_wr``.
        """
        self._check_open("ibv_modify_srq")
        ibv_modify_srq(self.srq, attr, attr_mask)

    def query(self) -> SrqAttr:
        """``ibv_query_srq``: ``max_wr``, ``max_sge`` and the armed limit (0 once its event fired)."""
        self._check_open("ibv_query_srq")
        got = ibv_query_srq(self.srq)
        return SrqAttr(got.max_wr, got.max_sge, got.srq_limit)

    @property
    def _uses(self) -> tuple:
        return self.pd, self.xrcd, self.cq

    def _destroy(self) -> None:
        ibv_destroy_srq(self.srq)

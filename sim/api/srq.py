"""``SRQ`` with ``SrqInitAttr`` and ``SrqAttr`` in pyverbs' shape (pyverbs/srq.pyx) over :mod:`models.verbs.recv`:
a shared receive queue whose receives any QP created on it consumes, and its limit event."""

from __future__ import annotations

from dataclasses import dataclass

from models.verbs import recv
from models.verbs.destroy import ibv_destroy_srq
from models.verbs.recv import ibv_create_srq, ibv_modify_srq, ibv_post_srq_recv, ibv_query_srq
from sim.api.device import PD
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


class SRQ(Resource):
    """A shared receive queue (``ibv_create_srq``) on ``pd``, as deep and wide as mlx5 makes it for
    ``init_attr.attr`` (:meth:`query` says what it got). QPs created with it in ``QPInitAttr.srq`` consume its
    receives; their completions go to each QP's receive CQ. It holds its PD.

    :raises VerbsError: as :func:`models.verbs.recv.ibv_create_srq` (``EINVAL`` for ``max_wr`` 0 or beyond the
        device's ``max_srq_wr``, ``max_sge`` beyond ``max_srq_sge``; ``EOPNOTSUPP`` without SRQs); from
        :meth:`close`: ``EBUSY`` while a QP uses it (``ib_destroy_srq_user``).
    """

    def __init__(self, pd: PD, init_attr: SrqInitAttr) -> None:
        pd._check_open("ibv_create_srq")
        self.pd, self.context = pd, pd.context
        self.srq = ibv_create_srq(pd.pd, init_attr.attr or SrqAttr())
        """The verbs layer's SRQ (:class:`models.verbs.receive_queue.SharedReceiveQueue`)."""
        self.srq_context = init_attr.srq_context
        self.context._adopt(self)

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
        return (self.pd,)

    def _destroy(self) -> None:
        ibv_destroy_srq(self.srq)

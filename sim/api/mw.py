"""``MW``, ``MWBindInfo`` and ``MWBind`` in pyverbs' shape (pyverbs/mr.pyx) over :mod:`models.verbs.mw`.

A window is bound by a work request: a type 1 window by :meth:`QP.bind_mw <sim.api.qp.QP.bind_mw>`
(``ibv_bind_mw``), a type 2 window by a :class:`~sim.api.qp.SendWR` of opcode ``Opcode.BIND_MW`` that
:meth:`~sim.api.qp.SendWR.set_bind_wr` filled in; either completes in the send CQ. Allocating and freeing take no
simulated time in the model.
"""

from __future__ import annotations

from models.nic.memory_window import MwBindInfo, MwType
from models.verbs.mw import ibv_alloc_mw, ibv_dealloc_mw
from sim.api.arguments import c_integer
from sim.api.device import PD
from sim.api.mr import MR
from sim.api.resource import Resource
from sim.core import ProtocolError


class MWBindInfo:
    """``struct ibv_mw_bind_info`` (pyverbs' ``MWBindInfo(mr, addr, length, mw_access_flags)``): the window opens
    ``length`` bytes of ``mr`` from ``addr`` with the ``Access`` rights ``mw_access_flags``; length 0 unbinds it.

    :raises ArgumentTypeError: an argument that is not an integer.
    """

    def __init__(self, mr: MR, addr: int, length: int, mw_access_flags: int) -> None:
        call = "MWBindInfo"
        if not isinstance(mr, MR):
            raise ProtocolError(f"{call}: mr must be an MR, not {type(mr).__name__}")
        self.mr = mr
        self.addr = c_integer(addr, "uint64_t", "addr", call)
        self.length = c_integer(length, "uint64_t", "length", call)
        self.mw_access_flags = c_integer(mw_access_flags, "unsigned int", "mw_access_flags", call)

    def _info(self, call: str) -> MwBindInfo:
        """The verbs layer's bind info."""
        self.mr._check_open(call)
        return MwBindInfo(self.mr.mr, self.addr, self.length, self.mw_access_flags)


class MWBind:
    """``struct ibv_mw_bind`` (pyverbs' ``MWBind(info, send_flags, wr_id=0)``): a type 1 bind's work request id
    and ``SendFlags``."""

    def __init__(self, info: MWBindInfo, send_flags: int, wr_id: int = 0) -> None:
        call = "MWBind"
        self.info = info
        self.send_flags = c_integer(send_flags, "unsigned int", "send_flags", call)
        self.wr_id = c_integer(wr_id, "uint64_t", "wr_id", call)


class MW(Resource):
    """A memory window (``ibv_alloc_mw``) of ``mw_type`` (1 or 2, ``IBV_MW_TYPE_*``) on ``pd``; it holds its PD.
    ``close()`` frees it whether it is bound or not (``ibv_dealloc_mw``): requests through its rkey are refused from
    then on.

    :raises VerbsError: as :func:`models.verbs.mw.ibv_alloc_mw` (``EOPNOTSUPP`` on a device without memory
        windows, such as EFA; ``EINVAL`` for another type).
    """

    def __init__(self, pd: PD, mw_type: int) -> None:
        call = "ibv_alloc_mw"
        pd._check_open(call)
        self.pd, self.context = pd, pd.context
        self.mw = ibv_alloc_mw(pd.pd, c_integer(mw_type, "enum ibv_mw_type", "mw_type", call))
        """The verbs layer's window (:class:`models.nic.memory_window.MemoryWindow`)."""
        self.context._adopt(self)

    @property
    def rkey(self) -> int:
        """``ibv_mw.rkey``: after a type 1 bind the new key; a type 2 window's bind posts its new key in the work
        request (:attr:`SendWR.rkey <sim.api.qp.SendWR.rkey>`) and leaves this one as it was, as libibverbs does."""
        return self.mw.rkey

    @property
    def type(self) -> MwType:
        """``IBV_MW_TYPE_1`` or ``IBV_MW_TYPE_2``."""
        return self.mw.type

    @property
    def _uses(self) -> tuple:
        return (self.pd,)

    def _destroy(self) -> None:
        ibv_dealloc_mw(self.mw)

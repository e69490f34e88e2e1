"""``XRCD`` and ``XRCDInitAttr`` in pyverbs' shape (pyverbs/xrcd.pyx) over :mod:`models.verbs.xrc`: an XRC domain,
opened on a file of the simulated process (:meth:`XRCD.open_file`) or private, whose XRC SRQs
(:class:`~sim.api.srq.SRQ` with :class:`~sim.api.srq.SrqInitAttrEx`) and XRC target QPs
(:class:`~sim.api.qp.QP` with :class:`~sim.api.qp_ex.QPInitAttrEx`) the initiators of other nodes reach."""

from __future__ import annotations

from dataclasses import dataclass

from models.verbs.xrc import O_CREAT, XrcdInitAttrMask, ibv_close_xrcd, ibv_open_xrcd
from sim.api.arguments import c_integer
from sim.api.device import Context
from sim.api.resource import Resource


@dataclass
class XRCDInitAttr:
    """``struct ibv_xrcd_init_attr`` (pyverbs' ``XRCDInitAttr(comp_mask, oflags, fd)``): ``fd`` an open file of the
    simulated process (:meth:`XRCD.open_file`) whose domain is opened, -1 for a private one; ``oflags`` ``O_CREAT``
    (make it if the file has none) and ``O_EXCL`` (refuse one that exists)."""

    comp_mask: int = XrcdInitAttrMask.FD | XrcdInitAttrMask.OFLAGS
    oflags: int = O_CREAT
    fd: int = -1


class XRCD(Resource):
    """An XRC domain (``ibv_open_xrcd``) on ``context``'s device: the one of the file ``init_attr.fd`` names, shared
    by every open of that file on the device, or a private one. Closing it closes the SRQs and QPs made through it
    first.

    :raises VerbsError: as :func:`models.verbs.xrc.ibv_open_xrcd` (``EOPNOTSUPP`` on a device without XRC;
        ``EINVAL`` for a ``comp_mask`` without FD and OFLAGS or ``O_EXCL`` on a file with a domain; ``EBADF`` for an
        fd that is not open; ``EAGAIN`` for a file without a domain and no ``O_CREAT``).
    """

    def __init__(self, context: Context, init_attr: XRCDInitAttr) -> None:
        call = "ibv_open_xrcd"
        context._check_open(call)
        self.context = context
        self.xrcd = ibv_open_xrcd(context.ctx, c_integer(init_attr.comp_mask, "uint32_t", "comp_mask", call),
                                  c_integer(init_attr.fd, "int", "fd", call),
                                  c_integer(init_attr.oflags, "int", "oflags", call))
        """The verbs layer's handle (:class:`models.verbs.xrc.Xrcd`)."""
        context._adopt(self)

    @staticmethod
    def open_file(context: Context, path: str) -> int:
        """``open(2)`` of ``path`` in the simulated process of ``context``'s node: its fd, for
        :attr:`XRCDInitAttr.fd` (every open of one path is the same file, so the same domain)."""
        return context.ctx.node.fds.open(path)

    def _destroy(self) -> None:
        ibv_close_xrcd(self.xrcd)

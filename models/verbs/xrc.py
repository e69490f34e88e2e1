"""XRC (eXtended Reliable Connected): XRC domains, XRC SRQs and XRC target QPs, with the kernel's and rdma-core's
rules (``ibv_open_xrcd``, ``ibv_close_xrcd``, ``ibv_create_srq_ex`` with ``IBV_SRQT_XRC``, ``ibv_get_srq_num``,
``ibv_create_qp_ex`` with ``IBV_QPT_XRC_RECV``, ``ibv_open_qp``). XRC initiator QPs (``IBV_QPT_XRC_SEND``) are
:func:`models.verbs.qp.ibv_create_qp`'s; the traffic's view of a target is :mod:`models.verbs.xrc_path`.

Read in rdma-core 691953d8d (libibverbs/cmd.c ``ibv_cmd_open_xrcd``, ``ibv_cmd_open_qp``; cmd_srq.c
``ibv_cmd_create_srq_ex``; cmd_qp.c ``ibv_cmd_create_qp_ex2``; verbs.h ``ibv_create_srq_ex``;
providers/mlx5/verbs.c ``mlx5_create_srq_ex``, ``mlx5_get_srq_num``) and Linux (drivers/infiniband/core/
uverbs_cmd.c ``ib_uverbs_open_xrcd``, ``ib_uverbs_dealloc_xrcd``, ``__uverbs_create_xsrq``, ``create_qp``,
``ib_uverbs_open_qp``; uverbs_std_types.c ``uverbs_free_xrcd``; core/verbs.c ``create_xrc_qp_user``,
``ib_open_qp``, ``__ib_destroy_shared_qp``, ``ib_destroy_srq_user``):

* A domain is the kernel's ``ib_xrcd`` (:class:`XrcDomain`); each ``ibv_open_xrcd`` gives the process a handle
  (:class:`Xrcd`). Opened on a file (``fd`` not -1), the domain is the one of the file's inode on that device:
  the first open needs ``O_CREAT`` (else EAGAIN), ``O_EXCL`` refuses one that exists (EINVAL), a bad fd is EBADF;
  each open on a file counts in the domain's ``usecnt``. With ``fd`` -1 every open makes a new private domain.
* A handle cannot close while SRQs or QPs made through it exist (``uxrcd->refcnt``: EBUSY); the domain goes when
  its last open on the file closes and nothing uses it.
* An XRC SRQ belongs to a domain, a PD and a CQ (its receives complete there, whichever target took them); its
  number (``ibv_get_srq_num``) is what initiators name.
* A target QP (``create_xrc_qp_user``) has no PD, CQs or send queue of its own (mlx5 gives it the device's internal
  PD and CQ, ``devr->p0``/``c0``; here the domain's); the process holds it as an open of the real QP, as
  ``ibv_open_qp`` gives other processes; the real QP lives until its last open is destroyed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from models.nic.device import DeviceCap
from models.verbs.cq import CompletionQueue
from models.verbs.device import Context, ProtectionDomain
from models.verbs.qp import QueuePair, check_qp_type
from models.verbs.qp_state import QpType
from models.verbs.receive_queue import ReceiveQueue, SharedReceiveQueue
from models.verbs.recv import SrqAttr, check_srq_caps, ibv_create_srq, srq_geometry
from sim.core import VerbsError

O_CREAT, O_EXCL = 0o100, 0o200
"""The ``oflags`` bits ``ibv_open_xrcd`` reads (include/uapi/asm-generic/fcntl.h)."""


class XrcdInitAttrMask(enum.IntFlag):
    """``enum ibv_xrcd_init_attr_mask``."""

    FD = 1 << 0
    OFLAGS = 1 << 1
    RESERVED = 1 << 2


class SrqType(enum.IntEnum):
    """``enum ibv_srq_type``."""

    BASIC = 0
    XRC = 1
    TM = 2


class SrqInitAttrMask(enum.IntFlag):
    """``enum ibv_srq_init_attr_mask``."""

    TYPE = 1 << 0
    PD = 1 << 1
    XRCD = 1 << 2
    CQ = 1 << 3
    TM = 1 << 4
    RESERVED = 1 << 5


class QpOpenAttrMask(enum.IntFlag):
    """``enum ibv_qp_open_attr_mask``."""

    NUM = 1 << 0
    XRCD = 1 << 1
    CONTEXT = 1 << 2
    TYPE = 1 << 3
    RESERVED = 1 << 4


@dataclass(eq=False)
class XrcDomain:
    """The kernel's ``struct ib_xrcd`` on one device: its XRC SRQs and target QPs by number."""

    context: Context
    inode: object | None
    """The file it is associated with (the process's open file, :mod:`models.dmabuf.fd`: a plain file is one inode
    by its name), None for a private one (``fd`` -1)."""
    pd: ProtectionDomain
    """The internal PD its target QPs are made on (mlx5's ``devr->p0``): never one a process can name."""
    cq: CompletionQueue
    """The internal CQ its target QPs are made on (mlx5's ``devr->c0``)."""
    usecnt: int = 0
    """``xrcd->usecnt``: its XRC SRQs and target QPs, and each open on its file."""
    srqs: dict[int, SharedReceiveQueue] = field(default_factory=dict)
    tgt_qps: dict[int, QueuePair] = field(default_factory=dict)
    """``xrcd->tgt_qps``: the real target QPs by number."""


@dataclass(eq=False)
class Xrcd:
    """``struct ibv_xrcd``: a process's handle on an XRC domain (the kernel's ``ib_uxrcd_object``)."""

    context: Context
    domain: XrcDomain
    refcnt: int = 0
    """``uxrcd->refcnt``: SRQs and QPs made or opened through this handle and not destroyed."""
    destroyed: bool = False


def ibv_open_xrcd(context: Context, comp_mask: int, fd: int = -1, oflags: int = 0) -> Xrcd:
    """Open an XRC domain (``struct ibv_xrcd_init_attr``: ``comp_mask``, ``fd``, ``oflags``): the one of the file
    ``fd`` (of the process's fd table, :attr:`models.node.Node.fds`) on this device, made when ``oflags`` has
    ``O_CREAT``; with ``fd`` -1 a new private one.

    :raises VerbsError: ``EOPNOTSUPP`` on a device without XRC (no ``open_xrcd`` op; mlx5_ib ``alloc_xrcd``:
        ``MLX5_CAP_GEN(mdev, xrc)``) or for ``comp_mask`` bits from ``IBV_XRCD_INIT_ATTR_RESERVED`` on; ``EINVAL``
        without both ``IBV_XRCD_INIT_ATTR_FD`` and ``_OFLAGS`` (``ibv_cmd_open_xrcd``); ``EBADF`` for an ``fd``
        that is no open file; ``EAGAIN`` for a file with no domain yet and no ``O_CREAT``; ``EINVAL`` for
        ``O_EXCL`` on a file that has one (``ib_uverbs_open_xrcd``).
    """
    call = "ibv_open_xrcd"
    nic = context.node.nic
    if not nic.params.device.cap_flags & DeviceCap.XRC:
        raise VerbsError("EOPNOTSUPP", "the device has no XRC (IBV_DEVICE_XRC not in its device_cap_flags)", call=call)
    if comp_mask >= XrcdInitAttrMask.RESERVED:
        raise VerbsError("EOPNOTSUPP", f"comp_mask {comp_mask:#x} has bits from IBV_XRCD_INIT_ATTR_RESERVED on",
                         call=call)
    if not comp_mask & XrcdInitAttrMask.FD or not comp_mask & XrcdInitAttrMask.OFLAGS:
        raise VerbsError("EINVAL", "comp_mask needs IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS", call=call)
    inode = domain = None
    if fd != -1:
        inode = context.node.fds.fget(fd, call)
        domain = nic.xrcd_tree.get(inode)
        if domain is None and not oflags & O_CREAT:
            raise VerbsError("EAGAIN", f"no XRC domain is associated with fd {fd}'s file yet and oflags has no "
                             "O_CREAT", call=call)
        if domain is not None and oflags & O_EXCL:
            raise VerbsError("EINVAL", f"fd {fd}'s file has an XRC domain already and oflags has O_EXCL", call=call)
    if domain is None:
        internal = ProtectionDomain(context, nic.new_handle())
        domain = XrcDomain(context, inode, internal, CompletionQueue(context, 1))
        if inode is not None:
            nic.xrcd_tree[inode] = domain
    if inode is not None:
        domain.usecnt += 1
    return Xrcd(context, domain)


def ibv_close_xrcd(xrcd: Xrcd) -> None:
    """Close the handle ``xrcd``; the domain goes with its last open on the file (a private one at once).

    :raises VerbsError: ``EBUSY`` while SRQs or QPs made or opened through it exist (``uverbs_free_xrcd``:
        ``uxrcd->refcnt``; ``ib_dealloc_xrcd_user``'s ``xrcd->usecnt`` then holds only other handles' objects,
        which keep a domain on a file alive rather than refuse); ``EINVAL`` when it was closed already.
    """
    call = "ibv_close_xrcd"
    if xrcd.destroyed:
        raise VerbsError("EINVAL", "the XRC domain handle was closed already", call=call)
    if xrcd.refcnt:
        raise VerbsError("EBUSY", f"{xrcd.refcnt} SRQ(s) or QP(s) made through this handle still exist (destroy "
                         "them first)", call=call)
    domain = xrcd.domain
    xrcd.destroyed = True
    if domain.inode is not None:  # (a private domain's SRQs and target QPs all hold this, its one handle)
        domain.usecnt -= 1
        if not domain.usecnt:  # no other open of the file, SRQ or target QP keeps it
            del domain.context.node.nic.xrcd_tree[domain.inode]


def ibv_create_srq_ex(context: Context, comp_mask: int, attr: SrqAttr, *, srq_type: SrqType = SrqType.BASIC,
                      pd: ProtectionDomain | None = None, xrcd: Xrcd | None = None,
                      cq: CompletionQueue | None = None) -> SharedReceiveQueue:
    """Create an SRQ from ``struct ibv_srq_init_attr_ex``: a basic one as :func:`~models.verbs.recv.ibv_create_srq`
    (libibverbs takes that path when ``comp_mask`` holds only PD and TYPE and the type is basic), an XRC one on
    ``xrcd``'s domain whose receives complete in ``cq``, its keys checked in ``pd``.

    :raises VerbsError: ``EINVAL`` for a type other than basic, XRC and tag matching (``mlx5_create_srq_ex``), the
        size checks of :func:`~models.verbs.recv.check_srq_caps`, an XRC SRQ without ``IBV_SRQ_INIT_ATTR_XRCD`` and
        ``_CQ`` (``ibv_cmd_create_srq_ex``), an XRC domain handle or CQ closed or of another device, or no PD
        (``__uverbs_create_xsrq``: the handles' lookups); ``EOPNOTSUPP`` for a tag-matching SRQ (not modelled).
    """
    call = "ibv_create_srq_ex"
    if (not comp_mask & ~(SrqInitAttrMask.PD | SrqInitAttrMask.TYPE) and comp_mask & SrqInitAttrMask.PD
            and (not comp_mask & SrqInitAttrMask.TYPE or srq_type == SrqType.BASIC)):
        return ibv_create_srq(_handle(pd, context, "PD", call), attr)
    if comp_mask & SrqInitAttrMask.TYPE and srq_type not in (SrqType.BASIC, SrqType.XRC, SrqType.TM):
        raise VerbsError("EINVAL", f"srq_type {srq_type} is not an enum ibv_srq_type value", call=call)
    if comp_mask & SrqInitAttrMask.TYPE and srq_type == SrqType.TM:
        raise VerbsError("EOPNOTSUPP", "tag-matching SRQs (IBV_SRQT_TM) are not modelled", call=call)
    if not comp_mask & SrqInitAttrMask.TYPE or srq_type == SrqType.BASIC:
        return ibv_create_srq(_handle(pd, context, "PD", call), attr)  # mlx5_create_srq_ex: the basic path
    check_srq_caps(context.node.nic.params.device, attr, call)
    if not comp_mask & SrqInitAttrMask.XRCD or not comp_mask & SrqInitAttrMask.CQ:
        raise VerbsError("EINVAL", "an XRC SRQ needs IBV_SRQ_INIT_ATTR_XRCD and IBV_SRQ_INIT_ATTR_CQ", call=call)
    xrcd = _handle(xrcd, context, "XRC domain handle", call)
    cq = _handle(cq, context, "CQ", call)
    pd = _handle(pd, context, "PD", call)
    depth, max_sge = srq_geometry(attr.max_wr, attr.max_sge)
    srq = SharedReceiveQueue(pd, depth, max_sge, context.node.nic.new_handle(), cq=cq, xrcd=xrcd)
    pd.usecnt += 1  # ib_create_srq_user: the PD's, the domain's and the CQ's use counts
    cq.usecnt += 1
    xrcd.domain.usecnt += 1
    xrcd.refcnt += 1
    xrcd.domain.srqs[srq.handle] = srq
    return srq


def _handle(obj, context: Context, what: str, call: str):
    """``obj``, a live object of ``context``'s device (uverbs finds its handle in the caller's file).

    :raises VerbsError: ``EINVAL`` for None, a destroyed object or one of another device.
    """
    if obj is None or obj.destroyed or obj.context.node is not context.node:
        raise VerbsError("EINVAL", f"no {what} of this device (uverbs finds no such handle)", call=call)
    return obj


def ibv_get_srq_num(srq: SharedReceiveQueue) -> int:
    """The SRQ's number, which XRC initiators name in ``remote_srqn`` (``mlx5_get_srq_num``: any SRQ's ``srqn``)."""
    return srq.handle


def release_xrc_srq(srq: SharedReceiveQueue) -> None:
    """An XRC SRQ was destroyed (``ib_destroy_srq_user``): it leaves its domain and releases the domain, its
    handle and its CQ."""
    srq.cq.usecnt -= 1
    srq.xrcd.refcnt -= 1
    srq.xrcd.domain.usecnt -= 1
    del srq.xrcd.domain.srqs[srq.handle]


class OpenedQp:
    """A process's hold on an XRC target QP (the kernel's shared ``ib_qp`` whose ``real_qp`` is the target): every
    attribute is the real QP's, read and written through, but for its own ``xrcd`` handle and ``destroyed``."""

    __slots__ = ("_qp", "xrcd", "destroyed")

    def __init__(self, real, xrcd: Xrcd) -> None:
        object.__setattr__(self, "_qp", real)
        object.__setattr__(self, "xrcd", xrcd)
        object.__setattr__(self, "destroyed", False)

    @property
    def real_qp(self) -> QueuePair:
        """The target QP itself."""
        return self._qp

    def __getattr__(self, name: str):
        return getattr(self._qp, name)

    def __setattr__(self, name: str, value) -> None:
        if name in OpenedQp.__slots__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._qp, name, value)


def create_xrc_qp_user(xrcd: Xrcd) -> OpenedQp:
    """``ibv_create_qp_ex`` with ``IBV_QPT_XRC_RECV`` and ``IBV_QP_INIT_ATTR_XRCD``: a target QP in ``xrcd``'s
    domain (kernel ``create_xrc_qp_user``: no PD, CQs or SRQ of its own, listed in the domain's ``tgt_qps``), held
    by the process as an open of it.

    :raises VerbsError: ``EOPNOTSUPP`` on a device without XRC (:func:`~models.verbs.qp.check_qp_type`); ``EINVAL``
        for a closed handle (uverbs ``create_qp``: the XRCD handle's lookup).
    """
    call = "ibv_create_qp_ex"
    check_qp_type(xrcd.context.node.nic.params, QpType.XRC_RECV)
    xrcd = _handle(xrcd, xrcd.context, "XRC domain handle", call)
    domain = xrcd.domain
    real = QueuePair(domain.pd, domain.cq, 0, domain.context.node.nic.new_handle(), rq=ReceiveQueue(0, 0),
                     qp_type=QpType.XRC_RECV, xrc_domain=domain)
    domain.usecnt += 1
    domain.tgt_qps[real.qp_num] = real
    return _open(real, xrcd)


def _open(real: QueuePair, xrcd: Xrcd) -> OpenedQp:
    """``__ib_open_qp``: one more open of ``real`` through ``xrcd``."""
    real.usecnt += 1
    xrcd.refcnt += 1
    return OpenedQp(real, xrcd)


def ibv_open_qp(context: Context, comp_mask: int, qp_num: int, qp_type: QpType, xrcd: Xrcd | None) -> OpenedQp:
    """Open the XRC target QP ``qp_num`` of ``xrcd``'s domain (``struct ibv_qp_open_attr``), made by this process
    or another: its state and attributes are the target's, and it keeps the target alive until destroyed.

    :raises VerbsError: ``EOPNOTSUPP`` for ``comp_mask`` bits from ``IBV_QP_OPEN_ATTR_RESERVED`` on; ``EINVAL``
        without ``IBV_QP_OPEN_ATTR_XRCD``, ``_NUM`` and ``_TYPE`` (``ibv_cmd_open_qp``), for a closed domain handle
        (uverbs ``ib_uverbs_open_qp``), a type other than XRC_RECV or a number with no target QP in the domain
        (``ib_open_qp``).
    """
    call = "ibv_open_qp"
    if comp_mask >= QpOpenAttrMask.RESERVED:
        raise VerbsError("EOPNOTSUPP", f"comp_mask {comp_mask:#x} has bits from IBV_QP_OPEN_ATTR_RESERVED on",
                         call=call)
    needed = QpOpenAttrMask.XRCD | QpOpenAttrMask.NUM | QpOpenAttrMask.TYPE
    if comp_mask & needed != needed:
        raise VerbsError("EINVAL", "comp_mask needs IBV_QP_OPEN_ATTR_XRCD, _NUM and _TYPE", call=call)
    xrcd = _handle(xrcd, context, "XRC domain handle", call)
    if qp_type != QpType.XRC_RECV:
        raise VerbsError("EINVAL", f"qp_type {qp_type!s}: only XRC target QPs are opened (ib_open_qp)", call=call)
    real = xrcd.domain.tgt_qps.get(qp_num)
    if real is None:
        raise VerbsError("EINVAL", f"the XRC domain has no target QP {qp_num} (ib_open_qp)", call=call)
    return _open(real, xrcd)


def destroy_shared_qp(qp: OpenedQp) -> bool:
    """Destroy one process's hold on a target QP (``__ib_destroy_shared_qp``): it releases its handle; the real QP
    leaves the domain with its last open. Returns whether the real QP is to be destroyed now."""
    real = qp.real_qp
    object.__setattr__(qp, "destroyed", True)
    qp.xrcd.refcnt -= 1
    real.usecnt -= 1
    if real.usecnt:
        return False
    domain = real.xrc_domain
    del domain.tgt_qps[real.qp_num]
    domain.usecnt -= 1
    return True

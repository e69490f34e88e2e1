"""Memory windows as the NIC keeps them: their state, the bind and invalidation a work request makes the NIC
execute, and the R_Key check of a request that names a window.

Read in the kernel's Soft-RoCE (drivers/infiniband/sw/rxe/rxe_mw.c: ``rxe_check_bind_mw``, ``rxe_do_bind_mw``,
``rxe_invalidate_mw``, ``rxe_lookup_mw``; rxe_req.c ``rxe_do_local_ops``; rxe_resp.c ``check_rkey`` and the
invalidation of a SEND with invalidate) and in mlx5 (rdma-core providers/mlx5/qp.c ``set_umr_mkey_seg``: a bound
window is an mkey of its own with a start address, a length and rights, so a request through it is held to the
window's range):

* A type 1 window is valid from its allocation and bound by ``ibv_bind_mw``; a type 2 window is free until a
  ``IBV_WR_BIND_MW`` work request binds it to the posting QP, and it answers only requests that reach that QP
  (type 2B: ``mw->qp != qp`` refuses the others).
* A bind that breaks a rule completes ``IBV_WC_MW_BIND_ERR`` (rxe: ``rxe_do_local_ops``), a local invalidation that
  cannot invalidate its key ``IBV_WC_LOC_QP_OP_ERR``; either error moves the QP to ERR like any error completion.
* A window key shares the mkey space of the MRs (mlx5: ``mlx5_ib_alloc_mw`` creates an mkey): the index is
  ``key >> 8``, the low 8 bits a tag each bind replaces with the new rkey's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from models.nic.translation import lookup_mr
from models.nic.wqe import Access, Opcode, SendWR, VerbsEnum, WcStatus

KEY_TAG = 0xFF
"""The low 8 bits of a key: the tag a bind sets (``rxe_do_bind_mw``: ``mw->rkey & ~0xff | key``)."""


class MwType(VerbsEnum):
    """``enum ibv_mw_type``."""

    TYPE_1 = 1
    TYPE_2 = 2


class MwState(enum.Enum):
    """``enum rxe_mw_state``."""

    VALID = "valid"
    FREE = "free"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class MwBindInfo:
    """``struct ibv_mw_bind_info``: the MR the window opens onto (None: unbind), the window's start (an address
    of the MR, or an offset with ``IBV_ACCESS_ZERO_BASED``), its length (bytes) and its ``IBV_ACCESS_*`` rights."""

    mr: Any
    addr: int
    length: int
    mw_access_flags: int


@dataclass(frozen=True, slots=True)
class MwBind:
    """``wr.bind_mw`` of an ``IBV_WR_BIND_MW`` work request: the window, the rkey it takes (``ibv_inc_rkey`` of
    its current one) and the bind's :class:`MwBindInfo`."""

    mw: Any
    rkey: int
    bind_info: MwBindInfo


@dataclass(eq=False)
class MemoryWindow:
    """A ``struct ibv_mw`` and the NIC's record of it (``struct rxe_mw``)."""

    pd: Any
    type: MwType
    rkey: int
    """``ibv_mw.rkey``: the key the application holds (``mlx5_bind_mw`` sets it once a type 1 bind is posted)."""
    key: int
    """The key the NIC answers to now (a bind's work request sets its tag as it executes)."""
    state: MwState
    mr: Any = None
    addr: int = 0
    length: int = 0
    access: int = 0
    qp: Any = None
    """The QP a type 2 window is bound to (None: free or type 1)."""

    @property
    def index(self) -> int:
        """The key's index in the NIC's table (the key without its tag)."""
        return self.key >> 8


_BIND_RIGHTS = int(Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
_ZERO_BASED, _MW_BIND, _LOCAL_WRITE = int(Access.ZERO_BASED), int(Access.MW_BIND), int(Access.LOCAL_WRITE)


def rxe_check_bind_mw(qp, mw: MemoryWindow, mr, info: MwBindInfo) -> str | None:
    """Why binding ``mw`` to ``mr`` as ``info`` says, by a work request of ``qp``, breaks a rule of the IB
    specification (rxe_mw.c ``rxe_check_bind_mw``, the rule's number in brackets); None when none is broken.
    Beyond rxe, the MR must be of the window's PD (libibverbs' ``ibv_bind_mw`` refuses it with EPERM for type 1;
    the window's mkey reaches the MR's only within one PD)."""
    access = info.mw_access_flags
    if mw.type is MwType.TYPE_1:
        if mw.state is not MwState.VALID:
            return "a type 1 window not in the valid state"
        if access & _ZERO_BASED:
            return "a zero-based type 1 window (o10-36.2.2)"
    else:
        if mw.state is not MwState.FREE:
            return "a type 2 window not in the free state (o10-37.2.30)"
        if qp.pd is not mw.pd:
            return "a type 2 window through a QP of another PD (C10-72)"
        if mr is None or info.length == 0:
            return "a type 2 window with no MR or length 0 (o10-37.2.40)"
    if mr is None:
        return None
    if mr.pd is not mw.pd:
        return "an MR of another PD than the window's"
    if mr.access & _ZERO_BASED:
        return "a zero-based MR"
    if not mr.access & _MW_BIND:
        return "an MR without IBV_ACCESS_MW_BIND (C10-73)"
    if access & _BIND_RIGHTS and not mr.access & _LOCAL_WRITE:
        return "a writable window on an MR without IBV_ACCESS_LOCAL_WRITE (C10-74)"
    if access & _ZERO_BASED:
        if info.length > mr.length:
            return "a zero-based window longer than the MR (C10-75)"
    elif info.addr < mr.iova or info.addr + info.length > mr.iova + mr.length:
        return "a window outside the MR (C10-75)"
    return None


def rxe_bind_mw(qp, bind: MwBind) -> str | None:
    """Execute an ``IBV_WR_BIND_MW`` of ``qp`` (rxe_mw.c ``rxe_bind_mw``): the MR its lkey names (none for length
    0), the checks of :func:`rxe_check_bind_mw`, then the bind (``rxe_do_bind_mw``): the window takes the new
    rkey's tag, the range and rights, its MR, and for type 2 the QP. Returns why it failed (the work request
    completes ``IBV_WC_MW_BIND_ERR``), or None."""
    mw, info = bind.mw, bind.bind_info
    if qp.node.nic.mws.get(mw.index) is not mw:
        return "the window was deallocated"
    mr = None
    if info.length:
        mr = None if info.mr is None else qp.node.nic.lookup(info.mr.lkey)
        if mr is None:
            return "the MR's key is not valid"
    why = rxe_check_bind_mw(qp, mw, mr, info)
    if why is not None:
        return why
    mw.key = (mw.key & ~KEY_TAG) | (bind.rkey & KEY_TAG)
    mw.access, mw.state, mw.addr, mw.length = info.mw_access_flags, MwState.VALID, info.addr, info.length
    mw.mr = mr if info.length else None
    mw.qp = qp if mw.type is MwType.TYPE_2 else None
    return None


def window(nic, key: int) -> MemoryWindow | None:
    """The window ``key`` names on ``nic`` (its index and its tag), or None (``rkey_is_mw`` and the key check of
    ``rxe_lookup_mw``)."""
    mw = nic.mws.get(key >> 8)
    return mw if mw is not None and mw.key == key else None


def rxe_invalidate_mw(qp, key: int) -> bool:
    """Invalidate the window ``key`` names (rxe_mw.c ``rxe_invalidate_mw``): only a bound type 2 window
    (o10-37.2.26: a type 1 window is invalidated by binding it with length 0); it is free again, its MR, range,
    rights and QP dropped. Returns whether it did."""
    mw = window(qp.node.nic, key)
    if mw is None or mw.state is MwState.INVALID or mw.type is MwType.TYPE_1:
        return False
    mw.mr, mw.qp, mw.access, mw.addr, mw.length, mw.state = None, None, 0, 0, 0, MwState.FREE
    return True


def invalidate_rkey(qp, key: int) -> bool:
    """The invalidation of a LOCAL_INV or a SEND with invalidate (rxe_req.c ``rxe_do_local_ops``, rxe_resp.c
    ``invalidate_rkey``): a window's key through :func:`rxe_invalidate_mw`; an MR's key through
    ``rxe_invalidate_mr``, which invalidates only fast-registration MRs (``IB_MR_TYPE_MEM_REG``), none of which the
    model has: every MR key is refused. Returns whether the key was invalidated."""
    return rxe_invalidate_mw(qp, key)


def local_operation(qp, wr: SendWR) -> WcStatus | None:
    """Execute a BIND_MW or LOCAL_INV of ``qp`` (rxe_req.c ``rxe_do_local_ops``): the status of its error
    completion (``IBV_WC_MW_BIND_ERR``, ``IBV_WC_LOC_QP_OP_ERR``), or None. The reason goes to the trace."""
    if wr.opcode is Opcode.BIND_MW:
        why, status = rxe_bind_mw(qp, wr.bind_mw), WcStatus.MW_BIND_ERR
    else:
        why = None if invalidate_rkey(qp, wr.invalidate_rkey) else f"key {wr.invalidate_rkey:#x} not invalidated"
        status = WcStatus.LOC_QP_OP_ERR
    if why is None:
        return None
    qp.pd.context.env.trace.instant(f"{qp.node.nic.name}.hw", "LocalOperationFailed", qp=qp.qp_num,
                                    opcode=wr.opcode.name, reason=why)
    return status


def rxe_lookup_mw(qp, needed: int, key: int) -> MemoryWindow | None:
    """The window ``key`` names for a request reaching ``qp`` that needs the ``needed`` right (rxe_mw.c
    ``rxe_lookup_mw``): of the QP's PD, a type 2 window bound to that QP, bound (length not 0) with the right, and
    valid; else None."""
    mw = window(qp.node.nic, key)
    if (mw is None or mw.pd is not qp.pd or (mw.type is MwType.TYPE_2 and mw.qp is not qp) or mw.length == 0
            or not mw.access & needed or mw.state is not MwState.VALID):
        return None
    return mw


def remote_region(qp, key: int, addr: int, length: int, needed: int) -> tuple[Any, int] | None:
    """``(mr, address in the MR's iova space)`` that a request reaching ``qp`` with R_Key ``key`` at ``addr`` for
    ``length`` bytes reaches, needing the ``needed`` right; None: the responder refuses the key (rxe_resp.c
    ``check_rkey``: a window through :func:`rxe_lookup_mw` and the window's range, a zero-based window's ``addr``
    an offset from its start; an MR of the QP's PD with the right over the range)."""
    if (key >> 8) in qp.node.nic.mws:
        mw = rxe_lookup_mw(qp, needed, key)
        if mw is None:
            return None
        start = mw.addr + addr if mw.access & _ZERO_BASED else addr
        if start < mw.addr or start + length > mw.addr + mw.length or not mw.mr.allows(start, length, 0):
            return None
        return mw.mr, start
    mr = lookup_mr(qp, key)
    return (mr, addr) if mr is not None and mr.allows(addr, length, needed) else None


def key_mr(nic, key: int):
    """The MR behind ``key`` on ``nic`` for planning a request's path: an MR's own, or the MR a window opens
    onto (None: neither)."""
    mw = nic.mws.get(key >> 8)
    return nic.lookup(key) if mw is None else mw.mr

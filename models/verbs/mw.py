"""Memory windows: ``ibv_alloc_mw``, ``ibv_dealloc_mw``, ``ibv_bind_mw`` (type 1) and the ``IBV_WR_BIND_MW`` work
request that binds a type 2 window, with libibverbs', uverbs' and mlx5's argument checks and errno values.

Read in rdma-core (libibverbs/verbs.h: ``ibv_alloc_mw``, ``ibv_bind_mw``, ``ibv_inc_rkey``; providers/mlx5/qp.c
``mlx5_bind_mw``, ``set_bind_wr``) and the kernel (uverbs_cmd.c ``ib_uverbs_alloc_mw``; mlx5 main.c: the device
has ``alloc_mw`` and reports ``IB_DEVICE_MEM_WINDOW | IB_DEVICE_MEM_WINDOW_TYPE_2B`` only with the ``imaicl``
capability; mr.c ``mlx5_ib_alloc_mw``, ``mlx5_ib_dealloc_mw``). What the NIC does with a bind, an invalidation and
a request through a window is :mod:`models.nic.memory_window`'s.
"""

from __future__ import annotations

from models.nic.device import DeviceCap
from models.nic.memory_window import KEY_TAG, MemoryWindow, MwBind, MwBindInfo, MwState, MwType
from models.nic.wqe import Access, Opcode, SendWR
from models.verbs.device import ProtectionDomain
from models.verbs.qp import QueuePair, ibv_post_send
from sim.core import VerbsError


def ibv_inc_rkey(rkey: int) -> int:
    """``ibv_inc_rkey`` (libibverbs/verbs.h): ``rkey`` with its low 8 bits, the tag, incremented (wrapping)."""
    return (rkey & ~KEY_TAG) | ((rkey + 1) & KEY_TAG)


def ibv_alloc_mw(pd: ProtectionDomain, mw_type: int) -> MemoryWindow:
    """Allocate a window of ``mw_type`` on ``pd``'s device: a type 1 window is valid at once (bound to nothing), a
    type 2 window free until a work request binds it (rxe ``rxe_alloc_mw``). The window takes a key of the device's
    mkey space; it holds its PD (``pd->usecnt``).

    :raises VerbsError: ``EOPNOTSUPP`` on a device without memory windows (no ``alloc_mw``: libibverbs' dummy op;
        mlx5 without ``imaicl``, EFA); ``EINVAL`` for a type other than 1 and 2 (``ib_uverbs_alloc_mw``).
    """
    call = "ibv_alloc_mw"
    nic = pd.context.node.nic
    if not nic.params.device.cap_flags & DeviceCap.MEM_WINDOW:
        raise VerbsError("EOPNOTSUPP", f"{nic.name} has no memory windows (the device reports no "
                         "IB_DEVICE_MEM_WINDOW: its driver has no alloc_mw)", call=call)
    if mw_type not in (MwType.TYPE_1, MwType.TYPE_2):
        raise VerbsError("EINVAL", f"mw_type {mw_type}: only IBV_MW_TYPE_1 and IBV_MW_TYPE_2 (ib_uverbs_alloc_mw)",
                         call=call)
    mw_type = MwType(mw_type)
    key = nic.new_key()
    mw = MemoryWindow(pd, mw_type, key, key, MwState.VALID if mw_type is MwType.TYPE_1 else MwState.FREE)
    nic.mws[mw.index] = mw
    pd.usecnt += 1  # ib_uverbs_alloc_mw: atomic_inc(&pd->usecnt)
    return mw


def ibv_dealloc_mw(mw: MemoryWindow) -> None:
    """Free ``mw`` (``uverbs_dealloc_mw``, ``mlx5_ib_dealloc_mw``: the mkey destroyed), bound or not: nothing
    refuses it, and a request through its key from then on is refused (NAK Remote Access Error).

    :raises VerbsError: ``EINVAL`` for a window already freed.
    """
    nic = mw.pd.context.node.nic
    if nic.mws.get(mw.index) is not mw:
        raise VerbsError("EINVAL", "memory window already deallocated", call="ibv_dealloc_mw")
    del nic.mws[mw.index]
    mw.state, mw.mr, mw.qp, mw.length = MwState.INVALID, None, None, 0
    mw.pd.usecnt -= 1


def ibv_bind_mw(qp: QueuePair, mw: MemoryWindow, wr_id: int, send_flags: int, info: MwBindInfo) -> None:
    """Bind the type 1 window ``mw`` as ``info`` says through ``qp`` (``struct ibv_mw_bind``: ``wr_id``,
    ``send_flags``, ``bind_info``): libibverbs' checks, then :func:`mlx5_bind_mw`, which posts an
    ``IBV_WR_BIND_MW`` with the window's next rkey (``ibv_inc_rkey``) and sets ``mw.rkey`` to it once posted. The
    bind itself runs on the NIC and completes in the send CQ (``IBV_WC_BIND_MW``; ``IBV_WC_MW_BIND_ERR`` when it
    breaks a rule: :func:`~models.nic.memory_window.rxe_check_bind_mw`). ``info.length`` 0 unbinds the window.

    :raises VerbsError: ``EINVAL`` for a window not of type 1, or an ``addr`` or ``length`` without an MR; ``EPERM``
        for an MR of another PD than the window's (libibverbs ``ibv_bind_mw``); those of :func:`mlx5_bind_mw` and
        of :func:`~models.verbs.qp.ibv_post_send`.
    """
    call = "ibv_bind_mw"
    if mw.type is not MwType.TYPE_1:
        raise VerbsError("EINVAL", f"ibv_bind_mw binds type 1 windows; a {mw.type.name} window is bound by an "
                         "IBV_WR_BIND_MW work request", call=call)
    if info.mr is None and (info.addr or info.length):
        raise VerbsError("EINVAL", "an address or length without an MR", call=call)
    if info.mr is not None and info.mr.pd is not mw.pd:
        raise VerbsError("EPERM", "the MR is of another PD than the window", call=call)
    mlx5_bind_mw(qp, mw, wr_id, send_flags, info)


def mlx5_bind_mw(qp: QueuePair, mw: MemoryWindow, wr_id: int, send_flags: int, info: MwBindInfo) -> None:
    """mlx5's ``bind_mw`` (providers/mlx5/qp.c ``mlx5_bind_mw``): a zero-based window or MR and an MR that is not
    ``IBV_MR_TYPE_MR`` refused, then the work request posted and ``mw.rkey`` advanced.

    :raises VerbsError: ``EINVAL`` for ``IBV_ACCESS_ZERO_BASED`` in the window's rights or the MR's; ``EOPNOTSUPP``
        (``ENOTSUP``, the same errno on Linux) for a dma-buf MR; those of :func:`~models.verbs.qp.ibv_post_send`.
    """
    call = "ibv_bind_mw"
    if info.mw_access_flags & Access.ZERO_BASED:
        raise VerbsError("EINVAL", "a type 1 window cannot be zero-based (mlx5_bind_mw)", call=call)
    if info.mr is not None:
        if info.mr.mr_type != "MR":
            raise VerbsError("EOPNOTSUPP", f"a window onto a {info.mr.mr_type}: only IBV_MR_TYPE_MR (mlx5_bind_mw)",
                             call=call)
        if info.mr.access & Access.ZERO_BASED:
            raise VerbsError("EINVAL", "a window onto a zero-based MR (mlx5_bind_mw)", call=call)
    rkey = ibv_inc_rkey(mw.rkey)
    ibv_post_send(qp, SendWR(wr_id, Opcode.BIND_MW, 0, 0, 0, 0, 0, send_flags=send_flags,
                             bind_mw=MwBind(mw, rkey, info)))
    mw.rkey = rkey

"""Destroying verbs objects (``ibv_destroy_qp``, ``ibv_destroy_srq``, ``ibv_destroy_cq``, ``ibv_dealloc_pd``) with
the kernel's rules.

An object another one still uses cannot be destroyed: uverbs refuses with ``EBUSY`` while its use count is not 0
(``uverbs_free_pd`` in drivers/infiniband/core/uverbs_std_types.c, ``ib_destroy_cq_user`` and
``ib_destroy_srq_user`` in verbs.c: MRs, QPs and SRQs hold their PD, QPs their send and receive CQs and their SRQ).
Closing the device file destroys everything regardless (the ucontext cleanup), which is the caller's loop over these
functions in reverse order of creation. ``ibv_dereg_mr`` is :func:`models.verbs.mr.ibv_dereg_mr`.
"""

from __future__ import annotations

from models.nic.transport import QpType
from models.verbs.receive_queue import SharedReceiveQueue
from models.verbs.cq import CompletionQueue, cq_clean
from models.verbs.cq_events import unacknowledged_events
from models.verbs.device import ProtectionDomain
from models.verbs.qp import QueuePair
from models.verbs.xrc import OpenedQp, destroy_shared_qp, release_xrc_srq
from sim.core import DeadlockError, VerbsError


def ibv_destroy_qp(qp: QueuePair | OpenedQp) -> None:
    """Destroy ``qp``: its outstanding work requests and receives never complete (its CQs drop their completions,
    as mlx5 cleans a destroyed QP's CQEs from its CQs) and it releases its PD, its CQs and its SRQ. An XRC target
    QP is a process's open of it: the real QP goes with its last open (:func:`~models.verbs.xrc.destroy_shared_qp`).

    :raises VerbsError: ``EINVAL`` when it was destroyed already.
    """
    call = "ibv_destroy_qp"
    _check_alive(qp, f"QP {qp.qp_num}", call)
    if isinstance(qp, OpenedQp):
        if not destroy_shared_qp(qp):
            return
        qp = qp.real_qp
    qp.to_error()
    for cq in qp.cqs:
        cq.cleaned.add(qp.qp_num)
        cq_clean(cq, qp.qp_num)
        cq.usecnt -= 1
    if qp.srq is not None:
        qp.srq.qps.remove(qp)
    if qp.qp_type is QpType.UD:  # no longer reachable by datagram
        fabric = qp.pd.context.fabric
        del fabric.datagram_qps[(fabric.lid(qp.node.nic.name), qp.qp_num)]
    qp.destroyed = True
    qp.pd.usecnt -= 1


def ibv_destroy_srq(srq: SharedReceiveQueue) -> None:
    """Destroy ``srq`` (its receives not yet consumed go with it) and release its PD (an XRC SRQ also its domain,
    its domain handle and its CQ).

    :raises VerbsError: ``EBUSY`` while a QP uses it (``ib_destroy_srq_user``: ``srq->usecnt``); ``EINVAL`` when
        it was destroyed already.
    """
    call = "ibv_destroy_srq"
    _check_alive(srq, "SRQ", call)
    _check_unused(len(srq.qps), "SRQ", "QP(s) still use it", call)
    srq.reset()
    srq.destroyed = True
    srq.pd.usecnt -= 1
    if srq.xrcd is not None:
        release_xrc_srq(srq)


def ibv_destroy_cq(cq: CompletionQueue) -> None:
    """Destroy ``cq``.

    :raises VerbsError: ``EBUSY`` while a QP uses it; ``EINVAL`` when it was destroyed already.
    :raises DeadlockError: events read from its channel are not all acknowledged (``ibv_cmd_destroy_cq`` would wait
        for ever). Its events still unread leave the channel (``ib_uverbs_release_ucq``).
    """
    call = "ibv_destroy_cq"
    _check_alive(cq, "CQ", call)
    _check_unused(cq.usecnt, "CQ", "QP(s) still use it", call)
    never = unacknowledged_events(cq)
    if never is not None:
        raise DeadlockError(f"{call}: {never}")
    cq.destroyed = True
    if cq.channel is not None:
        cq.channel.refcnt -= 1
        cq.channel.events = type(cq.channel.events)(c for c in cq.channel.events if c is not cq)


def ibv_dealloc_pd(pd: ProtectionDomain) -> None:
    """Deallocate ``pd``.

    :raises VerbsError: ``EBUSY`` while MRs, MWs, QPs, SRQs or AHs use it; ``EINVAL`` when it was deallocated already.
    """
    call = "ibv_dealloc_pd"
    _check_alive(pd, f"PD {pd.handle}", call)
    _check_unused(pd.usecnt, f"PD {pd.handle}", "MR(s), MW(s), QP(s), SRQ(s) or AH(s) still use it", call)
    pd.destroyed = True


def _check_alive(obj, what: str, call: str) -> None:
    if obj.destroyed:
        raise VerbsError("EINVAL", f"{what} was destroyed already", call=call)


def _check_unused(usecnt: int, what: str, users: str, call: str) -> None:
    """uverbs' use-count rule: an object still in use is not destroyed."""
    if usecnt:
        raise VerbsError("EBUSY", f"{what}: {usecnt} {users} (destroy them first)", call=call)

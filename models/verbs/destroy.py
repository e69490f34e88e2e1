"""Destroying verbs objects (``ibv_destroy_qp``, ``ibv_destroy_cq``, ``ibv_dealloc_pd``) with the kernel's rules.

An object another one still uses cannot be destroyed: uverbs refuses with ``EBUSY`` while its use count is not
0 (``uverbs_free_pd`` in drivers/infiniband/core/uverbs_std_types.c, ``ib_destroy_cq_user`` in verbs.c: MRs and
QPs hold their PD, QPs their CQs). Closing the device file destroys everything regardless (the ucontext
cleanup), which is the caller's loop over these functions in reverse order of creation. ``ibv_dereg_mr`` is
:func:`models.verbs.verbs.ibv_dereg_mr`.
"""

from __future__ import annotations

from models.verbs.verbs import CompletionQueue, ProtectionDomain, QueuePair
from sim.core import VerbsError


def ibv_destroy_qp(qp: QueuePair) -> None:
    """Destroy ``qp``: its outstanding work requests never complete (the CQ drops their completions, as mlx5
    cleans a destroyed QP's CQEs from its CQ) and it releases its PD and CQ.

    :raises VerbsError: ``EINVAL`` when it was destroyed already.
    """
    call = "ibv_destroy_qp"
    _check_alive(qp, f"QP {qp.qp_num}", call)
    qp.to_error()
    cq = qp.send_cq
    cq.cleaned.add(qp.qp_num)
    cq.entries = type(cq.entries)(wc for wc in cq.entries if wc.qp_num != qp.qp_num)
    qp.destroyed = True
    qp.pd.usecnt -= 1
    cq.usecnt -= 1


def ibv_destroy_cq(cq: CompletionQueue) -> None:
    """Destroy ``cq``.

    :raises VerbsError: ``EBUSY`` while a QP uses it; ``EINVAL`` when it was destroyed already.
    """
    call = "ibv_destroy_cq"
    _check_alive(cq, "CQ", call)
    _check_unused(cq.usecnt, "CQ", "QP(s) still use it", call)
    cq.destroyed = True


def ibv_dealloc_pd(pd: ProtectionDomain) -> None:
    """Deallocate ``pd``.

    :raises VerbsError: ``EBUSY`` while MRs or QPs use it; ``EINVAL`` when it was deallocated already.
    """
    call = "ibv_dealloc_pd"
    _check_alive(pd, f"PD {pd.handle}", call)
    _check_unused(pd.usecnt, f"PD {pd.handle}", "MR(s) or QP(s) still use it", call)
    pd.destroyed = True


def _check_alive(obj, what: str, call: str) -> None:
    if obj.destroyed:
        raise VerbsError("EINVAL", f"{what} was destroyed already", call=call)


def _check_unused(usecnt: int, what: str, users: str, call: str) -> None:
    """uverbs' use-count rule: an object still in use is not destroyed."""
    if usecnt:
        raise VerbsError("EBUSY", f"{what}: {usecnt} {users} (destroy them first)", call=call)

"""The kernel's checks that every memory registration shares (``ibv_reg_mr``, ``ibv_rereg_mr``, peer memory and
``ibv_reg_dmabuf_mr``), each in one function named after its kernel counterpart."""

from __future__ import annotations

from sim.core import VerbsError

from models.nic.wqe import Access


def ib_check_mr_access(access: int, call: str) -> None:
    """``ib_check_mr_access`` (include/rdma/ib_verbs.h): remote write or atomic rights need local write too.

    :raises VerbsError: ``EINVAL``.
    """
    if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not access & Access.LOCAL_WRITE:
        raise VerbsError("EINVAL", "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE (ib_check_mr_access)",
                         call=call)


def check_max_mr_size(max_mr_size: int, length: int, call: str) -> None:
    """The device's ``max_mr_size`` (``ibv_device_attr``) bounds the length of one MR.

    :raises VerbsError: ``EINVAL``.
    """
    if length > max_mr_size:
        raise VerbsError("EINVAL", f"length {length} exceeds the device's max_mr_size {max_mr_size}", call=call)

"""``ibv_query_qp_data_in_order(3)``: whether the data of one work request is written in order at a QP's receiving
side, so that a reader may poll the data instead of the completion (it says nothing of order between work
requests).

libibverbs (verbs.c, rdma-core v59) returns 0 for flags outside ``RETURN_CAPS | DEVICE_ONLY``, asks the provider,
adds ``ALIGNED_128_BYTES`` to ``WHOLE_MSG``, and returns the capability bits with ``RETURN_CAPS``, else whether
``WHOLE_MSG`` is set (0 or 1). The simulated hosts are x86, where the call is made (other architectures answer 0
without ``DEVICE_ONLY``). mlx5 (``mlx5_query_qp_data_in_order``) answers 0 without the HCA capability
``qp_data_in_order`` or for a QP not in RTS, else the QP context's ``data_in_order`` (``WHOLE_MSG``); EFA
(``efa_query_qp_data_in_order``) answers ``ALIGNED_128_BYTES`` on a device with ``DATA_POLLING_128``.

Which devices have those capabilities is not published (firmware reports them): the device profiles report neither
(:attr:`models.nic.nic.NicParams.qp_data_in_order`, :attr:`~models.nic.nic.NicParams.data_polling_128`), the
answer a program must take as "poll the completion"; a profile may set them.
"""

from __future__ import annotations

import enum

from models.ib.mr_checks import EFA_VENDOR_ID
from models.nic.wqe import Opcode, QpState


class QueryDataInOrderFlags(enum.IntFlag):
    """``enum ibv_query_qp_data_in_order_flags``."""

    RETURN_CAPS = 1 << 0
    DEVICE_ONLY = 1 << 1


class DataInOrderCaps(enum.IntFlag):
    """``enum ibv_query_qp_data_in_order_caps``."""

    WHOLE_MSG = 1 << 0
    ALIGNED_128_BYTES = 1 << 1


def ibv_query_qp_data_in_order(qp, op: Opcode, flags: int = 0) -> int:
    """Whether ``op``'s data is written in order at ``qp``'s receiving side: 0 or 1, or with ``RETURN_CAPS`` the
    :class:`DataInOrderCaps` bits (libibverbs' ``ibv_query_qp_data_in_order``)."""
    if int(flags) & ~int(QueryDataInOrderFlags.RETURN_CAPS | QueryDataInOrderFlags.DEVICE_ONLY):
        return 0  # check_comp_mask
    params = qp.node.nic.params
    provider = efa_query_qp_data_in_order if params.device.vendor_id == EFA_VENDOR_ID \
        else mlx5_query_qp_data_in_order
    result = provider(qp)
    if result & DataInOrderCaps.WHOLE_MSG:
        result |= DataInOrderCaps.ALIGNED_128_BYTES
    if flags & QueryDataInOrderFlags.RETURN_CAPS:
        return int(result)
    return int(bool(result & DataInOrderCaps.WHOLE_MSG))


def mlx5_query_qp_data_in_order(qp) -> DataInOrderCaps:
    """mlx5's answer: nothing without the HCA capability or outside RTS, else the QP context's bit."""
    if not qp.node.nic.params.qp_data_in_order or qp.state is not QpState.RTS:
        return DataInOrderCaps(0)
    return DataInOrderCaps.WHOLE_MSG


def efa_query_qp_data_in_order(qp) -> DataInOrderCaps:
    """EFA's answer: 128-byte aligned blocks in order on a device with ``DATA_POLLING_128``, whatever the QP's
    state."""
    return DataInOrderCaps.ALIGNED_128_BYTES if qp.node.nic.params.data_polling_128 else DataInOrderCaps(0)

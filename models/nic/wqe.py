"""A work request and its completion as the NIC executes them: libibverbs' opcodes, access flags, QP states,
completion status (rdma-core's values), ``struct ibv_send_wr`` and ``struct ibv_wc``."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import simpy


class Access(enum.IntFlag):
    """``enum ibv_access_flags`` (libibverbs/verbs.h)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 1 << 1
    REMOTE_READ = 1 << 2
    REMOTE_ATOMIC = 1 << 3
    MW_BIND = 1 << 4
    ZERO_BASED = 1 << 5
    ON_DEMAND = 1 << 6
    HUGETLB = 1 << 7
    FLUSH_GLOBAL = 1 << 8
    FLUSH_PERSISTENT = 1 << 9
    RELAXED_ORDERING = 1 << 20
    """The first of the optional bits (``IBV_ACCESS_OPTIONAL_FIRST``): a driver may ignore them."""


class WcStatus(enum.Enum):
    """``enum ibv_wc_status`` (libibverbs/verbs.h), with rdma-core's values."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21
    TM_ERR = 22
    TM_RNDV_INCOMPLETE = 23

    @property
    def ibv_name(self) -> str:
        """The C enumerator's name, e.g. ``IBV_WC_WR_FLUSH_ERR``."""
        return f"IBV_WC_{self.name}"


WC_STATUS_NAMES = [s.ibv_name for s in WcStatus]
"""Every status's C name, indexed by its value (the values run 0..23 without gaps)."""


class Opcode(enum.Enum):
    """Send-queue opcodes modelled so far."""

    RDMA_WRITE = "RDMA_WRITE"
    RDMA_READ = "RDMA_READ"


class QpState(enum.Enum):
    """``enum ibv_qp_state``."""

    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"
    RTS = "RTS"
    SQD = "SQD"
    SQE = "SQE"
    ERR = "ERR"


RNR_RETRY_INFINITE = 7
"""``rnr_retry`` value meaning unlimited retries (IB spec)."""


@dataclass(slots=True)
class WorkCompletion:
    """``struct ibv_wc`` plus the simulated times the workload measures with (ps)."""

    wr_id: int
    status: WcStatus
    opcode: Opcode
    byte_len: int
    qp_num: int
    posted_ps: int
    completed_ps: int


@dataclass(frozen=True, slots=True)
class Sge:
    """``struct ibv_sge``: one piece of a work request's local buffer."""

    addr: int
    length: int
    lkey: int


@dataclass(slots=True)
class SendWR:
    """``struct ibv_send_wr`` for one RDMA operation (single SGE)."""

    wr_id: int
    opcode: Opcode
    local_addr: int
    length: int
    lkey: int
    remote_addr: int
    rkey: int
    inline: bool = False
    landed: simpy.Event | None = None
    """Optional event fired when the payload is visible in the destination memory."""
    order: tuple[int, int] | None = None
    """Operation number and step-position offset under the data path's ordering rule (None: the next number,
    offset 0); a ping-pong's two WRITEs share one number (:func:`models.verbs.workloads.ping_pong`)."""

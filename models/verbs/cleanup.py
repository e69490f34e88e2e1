"""A process's exit without cleanup: the kernel tears down what its verbs file still holds
(``uverbs_destroy_ufile_hw``)."""

from __future__ import annotations

from models.nic.nic import flush_qps
from models.node import Node
from models.verbs.mr import MemoryRegion, ibv_dereg_mr
from models.verbs.qp import QueuePair


def uverbs_destroy_ufile_hw(node: Node, qps: list[QueuePair], mrs: list[MemoryRegion]) -> str:
    """The process on ``node`` died holding ``qps`` and ``mrs``: its QPs die, the kernel deregisters every MR
    still registered (dma-buf MRs: revoke the key, then revoke, unmap, detach and put the umem) and closes the
    process's files. Returns the event-log outcome."""
    outcome = flush_qps(qps)
    freed = 0
    for mr in mrs:
        if mr.registered:
            ibv_dereg_mr(mr)
            freed += 1
    node.fds.close_all()
    return f"{outcome}; kernel cleanup deregistered {freed} MRs and closed the process's files"

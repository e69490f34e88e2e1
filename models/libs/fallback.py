"""Registration fallback chains as communication libraries apply them to a GPU buffer: try dma-buf, peer memory
or host staging in a policy's order, move on after the failures the policy falls back on, and turn what the
libraries do silently into warnings.

The one rule of a chain is :func:`after_failure`: what a policy does when a method fails with an errno (or, for
a failed dma-buf export, a CUresult name). Each policy (:data:`models.libs.policies.POLICIES`) cites where its rule
comes from.

Silent outcomes become warnings: a dma-buf MR whose NIC accesses land in system memory although the buffer is in
VRAM (amdgpu moved it to GTT for an attachment without peer-to-peer: ROCm/rocm-xio issue #181), a fallback to
host staging, a failed export that a policy reports as a registration error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from models.dmabuf.gpu_export import CudaError, Gpu
from models.libs.cuda_process import CudaProcess, DeviceBuffer
from models.libs.policies import ANY, EXPORT_FAILED, Method, Policy, Step
from models.nic.wqe import Access
from models.node import Node
from models.verbs.dmabuf import ibv_reg_dmabuf_mr
from models.verbs.peermem import ibv_reg_mr_peermem
from models.verbs.device import ProtectionDomain
from models.verbs.mr import MemoryRegion, ibv_reg_mr
from sim.core import VerbsError

PROBE_UNSUPPORTED = frozenset({"EOPNOTSUPP", "EPROTONOSUPPORT"})
"""The probe's errnos that mean 'no dma-buf MRs' (NCCL's ncclIbDmaBufSupport); any other means supported."""


def after_failure(step: Step, failure: str) -> Literal["next", "error"]:
    """What a chain does when ``step`` failed with ``failure`` (an errno name, or
    :data:`~models.libs.policies.EXPORT_FAILED` for an export's CUresult): move to the next step, or end with a
    registration error."""
    if step.falls_back_on is ANY or failure in step.falls_back_on:
        return "next"
    return "error"


@dataclass(eq=False)
class Stack:
    """Where a chain runs: a node's NIC and protection domain, a GPU and the process's allocations on it."""

    node: Node
    pd: ProtectionDomain
    gpu: Gpu
    process: CudaProcess
    peermem_loaded: bool = True
    """The nvidia-peermem (or amdgpu peer-memory) client is loaded; without it ``ibv_reg_mr`` on a GPU address
    fails in ``ib_umem_get`` with EFAULT (pin_user_pages cannot pin device memory)."""
    dmabuf_enabled: bool = True
    """The library's switch (the policy's ``switch`` variable unset)."""


@dataclass
class Attempt:
    """One step tried: ``outcome`` is 'ok', 'skipped: why' or the failure (errno or CUresult)."""

    method: Method
    outcome: str
    action: str = ""
    """'next', 'error' or '' when it succeeded or was skipped."""


@dataclass
class ChainResult:
    """Where a chain ended: the MR (None on error), the method that made it, its cost and what to warn of."""

    mr: MemoryRegion | None
    method: Method | None
    cost_ps: int
    attempts: list[Attempt] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    """The failure that ended the chain ('' on success)."""
    staging: str = ""
    """Host staging: the bounce buffer's name."""


class _Failed(Exception):
    def __init__(self, failure: str, detail: str, cost_ps: int = 0) -> None:
        super().__init__(detail)
        self.failure, self.detail, self.cost_ps = failure, detail, cost_ps


def probe_dmabuf(stack: Stack) -> str:
    """NCCL's probe: ``ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`` never succeeds; return its errno name."""
    try:
        ibv_reg_dmabuf_mr(stack.pd, 0, 0, 0, -1, Access(0))
    except VerbsError as exc:
        return exc.errno
    raise AssertionError("ibv_reg_dmabuf_mr with fd -1 and length 0 succeeded")


def register_chain(stack: Stack, policy: Policy, buf: DeviceBuffer, access: Access) -> ChainResult:
    """Register ``buf`` on ``stack`` the way ``policy`` does (see the module docstring)."""
    result = ChainResult(None, None, 0)
    for step in policy.steps:
        skipped = _skip_reason(stack, policy, step)
        if skipped:
            result.attempts.append(Attempt(step.method, f"skipped: {skipped}"))
            continue
        try:
            mr, cost, extra = _METHOD[step.method](stack, buf, access)
        except _Failed as failed:
            result.cost_ps += failed.cost_ps
            action = after_failure(step, EXPORT_FAILED if failed.failure.startswith("CUDA_") else failed.failure)
            result.attempts.append(Attempt(step.method, failed.failure, action))
            if action == "error":
                result.error = failed.failure
                if failed.failure.startswith("CUDA_"):
                    result.warnings.append(f"the dma-buf export failed ({failed.failure}) and {policy.name} "
                                           "reports it as a registration error instead of falling back")
                return result
            continue
        result.attempts.append(Attempt(step.method, "ok"))
        result.mr, result.method, result.cost_ps = mr, step.method, result.cost_ps + cost
        result.staging = extra
        result.warnings += _silent_outcomes(stack, buf, step.method, mr)
        return result
    result.error = result.attempts[-1].outcome if result.attempts else "no method"
    return result


def _skip_reason(stack: Stack, policy: Policy, step: Step) -> str:
    if step.method == "peermem":
        return "no peer-memory client loaded" if policy.detects_peermem and not stack.peermem_loaded else ""
    if step.method != "dmabuf":
        return ""
    if not stack.dmabuf_enabled:
        return f"{policy.switch or 'dma-buf'} set"
    if policy.probe:
        errno = probe_dmabuf(stack)
        if errno in PROBE_UNSUPPORTED:
            return f"the probe says unsupported ({errno})"
    return ""


def _silent_outcomes(stack: Stack, buf: DeviceBuffer, method: Method, mr: MemoryRegion) -> list[str]:
    if method == "host-staging":
        return [f"{buf.alloc.name}: registered through host staging: transfers are copied through host memory, "
                "no GPUDirect RDMA"]
    if method == "dmabuf" and mr.backing.target(stack.pd.context.env.now) == "mem0":
        return [f"{buf.alloc.name}: the dma-buf MR reaches system memory, not VRAM: the exporter moved the buffer "
                "to GTT for an attachment without peer-to-peer, so no peer-to-peer transfer happens and nothing "
                "reports an error"]
    return []


def _dmabuf(stack: Stack, buf: DeviceBuffer, access: Access):
    """Export the allocation, register the fd, close it (the exporter's and the NIC's timelines in turn)."""
    node, kernel = stack.node, stack.node.kernel
    start = kernel.now_ps(stack.gpu.name)
    try:
        fd = stack.gpu.export(buf.alloc, node.fds)
    except CudaError as exc:
        raise _Failed(exc.result, str(exc), kernel.now_ps(stack.gpu.name) - start) from None
    export_ps = kernel.now_ps(stack.gpu.name) - start
    kernel.wait_until(node.nic.name, kernel.now_ps(stack.gpu.name))
    try:
        mr = ibv_reg_dmabuf_mr(stack.pd, 0, buf.size, buf.addr, fd, access)
    except VerbsError as exc:
        raise _Failed(exc.errno, str(exc), export_ps) from None
    finally:
        node.fds.close(fd)
    return mr, export_ps + mr.reg_ps, ""


def _peermem(stack: Stack, buf: DeviceBuffer, access: Access):
    try:
        if not stack.peermem_loaded:
            ibv_reg_mr(stack.pd, buf.addr, buf.size, access)  # get_user_pages on a device address: EFAULT
        mr = ibv_reg_mr_peermem(stack.pd, buf.alloc, 0, buf.size, access)
    except VerbsError as exc:
        raise _Failed(exc.errno, str(exc)) from None
    stack.process.track_peer_mr(buf, mr)
    return mr, mr.reg_ps, ""


def _host_staging(stack: Stack, buf: DeviceBuffer, access: Access):
    host = stack.node.host
    bounce = host.allocate(f"{buf.alloc.name}.staging", buf.size)
    try:
        mr = ibv_reg_mr(stack.pd, bounce.addr, bounce.size, access)
    except VerbsError as exc:
        raise _Failed(exc.errno, str(exc)) from None
    return mr, mr.reg_ps, bounce.name


_METHOD = {"dmabuf": _dmabuf, "peermem": _peermem, "host-staging": _host_staging}


def fallback_table(policy: Policy, failures: tuple[str, ...]) -> list[dict]:
    """For documentation and tests: per step and failure, what ``policy`` does."""
    return [{"policy": policy.name, "method": step.method, "failure": failure,
             "action": after_failure(step, failure)} for step in policy.steps for failure in failures]

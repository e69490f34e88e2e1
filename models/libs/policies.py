"""The registration fallback chains of communication libraries as data: each policy's methods in order and the
failures after which it moves on, with where its rule comes from (:mod:`models.libs.fallback` runs them).
A scenario names policies by these names, so validating one imports only this module.

* ``nccl`` (NCCL's ``ncclIbDmaBufSupport`` in transport/net_ib.cc, NVIDIA/nccl issue #778): dma-buf support is
  probed once, with ``ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)``; EOPNOTSUPP or EPROTONOSUPPORT means unsupported
  and NCCL uses nvidia-peermem, any other errno (EBADF for the bad fd) means supported. Peer memory is used only
  when ``ncclIbGdrSupport`` finds the module loaded (``/sys/module/nvidia_peermem/version`` and its older names);
  with neither, NCCL does not register GPU memory on the NIC and its proxy stages through host memory. A real
  registration that fails is an error ("Call to ibv_reg_dmabuf_mr failed with error Operation not supported"),
  not a fallback; ``NCCL_DMABUF_ENABLE=0`` is the switch that skips dma-buf.
* ``libfabric-efa`` (ofiwg/libfabric PRs #11465, #11804, #11865): try dma-buf first, and on any failure, of the
  export or of ``ibv_reg_dmabuf_mr``, fall back to ``ibv_reg_mr``; ``FI_HMEM_CUDA_USE_DMABUF`` (PR #10502) is the
  switch.
* ``ucx`` (openucx/ucx PR #11002 and the cuda_copy behaviour quoted in PR #11934): dma-buf when the IB device and
  CUDA both support it, even without nvidia_peermem; a failed export clears the buffer's registrable flag, so it
  is not registered on the NIC and UCX pipelines it through host memory (as it does when neither dma-buf nor a
  loaded nvidia_peermem can register it); a failed ``ibv_reg_dmabuf_mr`` is an error.
* ``ucx-rocm-11934`` (the review of openucx/ucx PR #11934): ROCm dma-buf advertised from the kernel configuration
  alone, so a failed ``hsa_amd_portable_export_dmabuf`` turns "not registered on IB" into a registration error.
* ``mori`` (ROCm/mori PR #355): dma-buf first, ``ibv_reg_mr`` when the export or the registration fails;
  ``MORI_DISABLE_DMABUF_REG`` is the switch.
* ``peermem-first``: the reverse order, as stacks that prefer the legacy peer-memory client when it is loaded and
  use dma-buf otherwise (UCX's IB memory domain before PR #11002).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Method = Literal["dmabuf", "peermem", "host-staging"]
ANY = None
"""A step that falls back on every failure."""
EXPORT_FAILED = "export"
"""The failure class of a dma-buf export (a CUresult) in a step's ``falls_back_on``."""


@dataclass(frozen=True)
class Step:
    """One method of a chain and the failures after which the chain moves on (ANY: all of them); any other
    failure ends the chain with an error."""

    method: Method
    falls_back_on: frozenset[str] | None = ANY


@dataclass(frozen=True)
class Policy:
    """A library's registration chain."""

    name: str
    steps: tuple[Step, ...]
    probe: bool = False
    """Probe dma-buf support once (NCCL): the dma-buf step is skipped when the probe says unsupported."""
    switch: str = ""
    """The library's environment variable that turns dma-buf off."""
    detects_peermem: bool = False
    """The library checks that the peer-memory client is loaded and skips peer memory when it is not (UCX);
    otherwise it calls ``ibv_reg_mr`` and gets the kernel's EFAULT."""
    source: str = ""


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("nccl", (Step("dmabuf", frozenset()), Step("peermem", frozenset()), Step("host-staging", frozenset())),
           probe=True, switch="NCCL_DMABUF_ENABLE=0", detects_peermem=True,
           source="NCCL transport/net_ib.cc ncclIbDmaBufSupport, ncclIbGdrSupport; NVIDIA/nccl #778"),
    Policy("libfabric-efa", (Step("dmabuf"), Step("peermem", frozenset())), switch="FI_HMEM_CUDA_USE_DMABUF=0",
           source="ofiwg/libfabric #11465, #11804, #11865, #10502"),
    Policy("ucx", (Step("dmabuf", frozenset({EXPORT_FAILED})), Step("peermem", frozenset()),
                   Step("host-staging", frozenset())), probe=True, switch="UCX_CUDA_COPY_DMABUF=no",
           detects_peermem=True, source="openucx/ucx #11002, #11934 (cuda_copy)"),
    Policy("ucx-rocm-11934", (Step("dmabuf", frozenset()), Step("peermem", frozenset())),
           switch="UCX_ROCM_COPY_DMABUF=no", source="openucx/ucx #11934 (review of the ROCm default)"),
    Policy("mori", (Step("dmabuf"), Step("peermem", frozenset())), switch="MORI_DISABLE_DMABUF_REG=1",
           source="ROCm/mori #355"),
    Policy("peermem-first", (Step("peermem"), Step("dmabuf", frozenset())),
           source="UCX's IB memory domain before openucx/ucx #11002"),
)}

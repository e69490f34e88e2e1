"""The schema of a scenario's buffers: where each lives, its size, how it is registered and advised."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from models.nic.translation import RegMode
from sim.scenario.fields import Name, PositiveSize, Strict


Access = Literal["local_write", "remote_write", "remote_read", "remote_atomic", "relaxed_ordering"]
RegisterMode = RegMode


class AdviseSpec(Strict):
    """ibv_advise_mr over the whole buffer, right after it is registered (ODP MRs only)."""

    advice: Literal["prefetch", "prefetch_write", "prefetch_no_fault"] = "prefetch_write"
    """IBV_ADVISE_MR_ADVICE_*: prefetch (fault pages in, read access), prefetch_write (read and write),
    prefetch_no_fault (map only the pages the CPU already has)."""
    flush: bool = True
    """IBV_ADVISE_MR_FLAG_FLUSH: return once the translations are in the NIC (the setup waits for the fault
    path); false queues the work, returns after the ioctl and maps the pages in the background."""


class BufferSpec(Strict):
    """A buffer in a node's memory and how it is registered."""

    name: Name
    """Buffer name, used by workloads."""
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """Where it lives: '<node>.host' or '<node>.<gpu>' (e.g. 'a.gpu0')."""
    size: PositiveSize
    """Size (e.g. '8MiB')."""
    registration: RegisterMode = Field("pinned", alias="register")
    """How it is registered: pinned (ibv_reg_mr), odp (ON_DEMAND), peermem (legacy nvidia-peermem),
    dmabuf (ibv_reg_dmabuf_mr, dynamic), dmabuf-pinned (ibv_reg_dmabuf_mr, pinned importer)."""
    access: list[Access] = ["local_write", "remote_write", "remote_read"]
    """ibv_access_flags of the MR."""
    implicit: bool = False
    """register: odp through the node's implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND), one per node
    and access) instead of an MR of its own: faults create 1 GiB child MRs as mlx5 does."""
    advise: AdviseSpec | None = None
    """Prefetch the buffer's pages into the NIC with ibv_advise_mr after registering it (register: odp)."""
    export_mapping: Literal["default", "pcie"] = "default"
    """register: dmabuf or dmabuf-pinned of NVIDIA GPU memory: the mapping type the export asks for. pcie passes
    CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (CUDA 12.8+, as perftest's --use_cuda_pcie_mapping and NCCL's
    data-direct path do): BAR1 mappings on a coherent platform, refused (CUDA_ERROR_NOT_SUPPORTED) on others."""
    nics: Literal["rail", "all"] | Annotated[list[Name], Field(min_length=1)] = "rail"
    """The NICs of a rails node it is registered on, one MR per NIC (each NIC's own PD and keys), their costs
    added up: 'rail' (a GPU buffer: the GPU's rail NICs; host memory: the NICs of its socket), 'all' (every
    NIC: the fan-out of a library that registers everywhere) or a list such as [nic0, nic4]. A node with one
    NIC registers on it."""

    @field_validator("nics")
    @classmethod
    def _nics_once(cls, nics):
        if isinstance(nics, list):
            twice = sorted({n for n in nics if nics.count(n) > 1})
            if twice:
                raise ValueError(f"{', '.join(twice)} listed twice: a buffer is registered once per NIC")
        return nics

    @field_validator("implicit")
    @classmethod
    def _implicit_odp(cls, implicit, info):
        mode = info.data.get("registration")
        if implicit and mode is not None and mode != "odp":
            raise ValueError(f"an implicit MR is an ODP MR (ibv_reg_mr with IBV_ACCESS_ON_DEMAND); this buffer is "
                             f"registered '{mode}': use register: odp or drop 'implicit'")
        return implicit

    @field_validator("export_mapping")
    @classmethod
    def _export_mapping_dmabuf(cls, mapping, info):
        mode = info.data.get("registration")
        if mapping != "default" and mode is not None and not str(mode).startswith("dmabuf"):
            raise ValueError(f"the mapping type is a flag of the dma-buf export; this buffer is registered '{mode}': "
                             "use register: dmabuf or dmabuf-pinned, or drop 'export_mapping'")
        return mapping

    @field_validator("advise")
    @classmethod
    def _advise_odp(cls, advise, info):
        mode = info.data.get("registration")
        if advise is not None and mode is not None and mode != "odp":
            raise ValueError(f"ibv_advise_mr prefetches ODP MRs only (mlx5: ENOENT for any other lkey); this buffer "
                             f"is registered '{mode}': use register: odp or drop 'advise'")
        return advise

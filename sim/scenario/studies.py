"""The schema of a scenario's library studies, run after the workloads on the same testbed: a registration cache's
churn, fallback chains, registration order, a multi-NIC server, NIC device memory exported to a GPU."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from models.libs.policies import POLICIES
from sim.scenario.fields import Latency, MessageSize, Name, PositiveSize, Strict
from sim.scenario.nodes import RailLayoutSpec


GpuPlace = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
"""'<node>.<gpu>' (e.g. 'a.gpu0')."""
PolicyName = Literal[tuple(POLICIES)]
Count = Annotated[int, Field(ge=1, le=10_000)]


class LibraryStack(Strict):
    """A GPU, its node's NIC and what the library finds loaded there."""

    on: GpuPlace
    """The GPU ('<node>.<gpu>'); registrations use its node's NIC."""
    peermem: bool = True
    """The peer-memory client (nvidia-peermem) is loaded."""
    dmabuf: bool = True
    """The library's dma-buf switch is on (NCCL_DMABUF_ENABLE, FI_HMEM_CUDA_USE_DMABUF, ...)."""


class RcacheChurn(LibraryStack):
    """A training-like buffer churn through a registration cache (UCX's rcache, NCCL's user-buffer registration),
    run after the workloads: each size's buffer lives 'lifetime' steps, is freed and allocated again at the same
    address; every step registers it through the cache and receives an RDMA WRITE into it."""

    kind: Literal["rcache-churn"]
    name: Name | None = None
    policy: PolicyName = "nccl"
    """The registration chain behind the cache's misses."""
    sizes: Annotated[list[PositiveSize], Field(min_length=1, max_length=64)]
    """One buffer per size (e.g. [64MiB, 256MiB])."""
    steps: Count = 20
    lifetime: Count = 5
    """Steps a buffer lives before it is freed and allocated again."""
    write: PositiveSize = Field("4KiB", validate_default=True)
    """Bytes each step's RDMA WRITE carries into each buffer."""
    memory_hooks: bool = True
    """The library intercepts cudaFree and invalidates what it frees (UCX's memory hooks)."""
    validate_buffer_id: bool = False
    """Compare the CUDA buffer ID of every hit (UCX PR #5910): a recycled address misses."""
    max_unreleased: Annotated[int, Field(ge=0, le=1_000_000)] = 64
    """Unused regions kept registered (lazy deregistration) before the oldest is deregistered."""
    lookup: Latency | None = None
    """Cost of one lookup (default 200ns, unvalidated)."""


class FallbackChains(Strict):
    """Register one GPU buffer with each library policy on each stack, after the workloads."""

    kind: Literal["fallback-chain"]
    name: Name | None = None
    stacks: Annotated[list[LibraryStack], Field(min_length=1, max_length=64)]
    policies: Annotated[list[PolicyName], Field(min_length=1)] = list(POLICIES)
    size: PositiveSize = Field("2MiB", validate_default=True)


class OrderGroup(Strict):
    """``count`` buffers of ``size`` bytes."""

    size: PositiveSize
    count: Count = 1


class RegistrationOrder(Strict):
    """Register many buffers one at a time in each order, from an empty domain each time, after the workloads
    (the EFA experiment of Mooncake PR #3210: cost grows with the device memory already registered)."""

    kind: Literal["registration-order"]
    name: Name | None = None
    on: GpuPlace
    """The GPU whose memory (or whose node's host memory) is registered on its node's NIC."""
    buffers: Annotated[list[OrderGroup], Field(min_length=1, max_length=64)]
    orders: Annotated[list[Literal["ascending", "descending", "given"]], Field(min_length=1)] = [
        "ascending", "descending"]
    memory: Literal["device", "host"] = "device"

    def buffer_sizes(self) -> list[int]:
        """Every buffer's size, in the given order."""
        return [g.size for g in self.buffers for _ in range(g.count)]


class MultiNicServer(Strict):
    """A multi-GPU, multi-NIC server of its own (the scenario's nodes have one NIC each): its nvidia-smi
    topo -m matrix, each GPU's nearest and rail NICs, rail-aligned against cross-rail DMA rates with every GPU
    sending at once, and registering each GPU's buffers on all NICs against on its rail NICs."""

    kind: Literal["multi-nic"]
    name: Name | None = None
    layout: RailLayoutSpec = RailLayoutSpec()
    message: MessageSize = Field("1MiB", validate_default=True)
    """Size of each DMA write of the rate estimate."""
    buffers: Annotated[list[OrderGroup], Field(max_length=64)] = []
    """Each GPU's buffers registered in the fan-out comparison (EFA's measured growth)."""

    def buffer_sizes(self) -> list[int]:
        """Every buffer's size, in the given order."""
        return [g.size for g in self.buffers for _ in range(g.count)]


class DmExport(Strict):
    """NIC device memory exported as a dma-buf and imported by a GPU, after the workloads (how GPU-initiated
    networking lets GPU threads reach a NIC's memory): ibv_alloc_dm on the node's NIC, ibv_dm_export_dmabuf_fd,
    the importers the export refuses (a static one, a pinned one), the GPU's revocable import and first access,
    then ibv_free_dm revoking the buffer under the GPU and the GPU's next access."""

    kind: Literal["dm-export"]
    name: Name | None = None
    on: GpuPlace
    """The importing GPU ('<node>.<gpu>'); its node's NIC allocates the device memory."""
    length: PositiveSize = Field("64KiB", validate_default=True)
    """Bytes of device memory (at most the NIC's max_dm_size: 256 KiB of MEMIC on a ConnectX-7)."""
    broken_importer: bool = False
    """The GPU keeps its mapping when told to let go: the revocation waits past its bound and the simulator names
    the importer that broke the bounded-time promise."""


LibraryStudy = Annotated[RcacheChurn | FallbackChains | RegistrationOrder | MultiNicServer | DmExport,
                         Field(discriminator="kind")]

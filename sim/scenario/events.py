"""The schema of a scenario's events: what happens during the run (memory pressure, migration, reclaim, QP errors,
resets, link flaps, revocations, exporter faults), discriminated by ``kind``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from sim.scenario.fields import Duration, Name, PositiveSize, Strict


class EventBase(Strict):
    at: Duration
    """When it happens, counted from the start of the first workload (e.g. '2ms')."""

    def last_ps(self) -> int:
        """When its last scheduled action happens (ps after the first workload starts)."""
        return self.at


class GpuPressureEvent(EventBase):
    """Another job allocates GPU memory: the exporter must make room (evict) or the allocation fails."""

    kind: Literal["gpu-memory-pressure"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    allocate: PositiveSize
    """Bytes the other job allocates."""
    hold: Duration | None = None
    """Free the allocation again after this long (default: keep it)."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + (self.hold or 0)


class GpuJobGrowthEvent(EventBase):
    """A training-like job on the GPU grows its working set step by step (each step a new allocation)."""

    kind: Literal["gpu-job-grows"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    step: PositiveSize
    """Bytes added at each step."""
    every: Duration
    """Time between steps."""
    steps: Annotated[int, Field(ge=1, le=10_000)]
    """Number of steps."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.every * self.steps


class ManagedJobEvent(EventBase):
    """A job on the GPU sweeps a cudaMallocManaged range: its page faults take VRAM as they go (evicting
    movable dma-buf buffers on a dynamic exporter; on nvidia only free memory, then it evicts its own
    pages), and the job frees the range when it ends."""

    kind: Literal["managed-job"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    """The GPU, e.g. 'a.gpu0'."""
    size: PositiveSize
    """Bytes of the managed range."""
    passes: Annotated[int, Field(ge=1, le=1000)] = 1
    """Sequential sweeps over the whole range (each page touched once per sweep)."""


class HostPageMigrationEvent(EventBase):
    """The kernel migrates a buffer's host pages (compaction, NUMA balancing): ODP MRs are invalidated,
    pinned pages cannot move."""

    kind: Literal["host-page-migration"]
    buffer: Name
    """The host buffer whose pages move."""


class PeerMemReclaimEvent(EventBase):
    """The GPU driver reclaims memory registered through peer-memory (cudaFree, process exit)."""

    kind: Literal["peermem-reclaim"]
    buffer: Name


NodeRef = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")]


class QpErrorEvent(EventBase):
    """Every QP of a node moves to the error state: outstanding and later work requests are flushed."""

    kind: Literal["qp-error"]
    node: NodeRef


class NicResetEvent(EventBase):
    """The node's NIC resets (fatal error): its QPs fail and every MR's hardware key is lost."""

    kind: Literal["nic-reset"]
    node: NodeRef


class ProcessExitEvent(EventBase):
    """The process on a node exits without deregistering: the kernel tears its MRs down (for dma-buf MRs:
    revoke, unmap, detach, put) and its QPs die."""

    kind: Literal["process-exit"]
    node: NodeRef


class EvictionStormEvent(EventBase):
    """The GPU's exporter moves every movable dma-buf back and forth ``count`` times, every ``every``."""

    kind: Literal["eviction-storm"]
    on: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9_-]*$")]
    count: Annotated[int, Field(ge=1, le=100_000)]
    every: Duration

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.every * self.count


class LinkFlapEvent(EventBase):
    """The node's network link goes down for ``duration``: its ports carry nothing meanwhile. ``frames: lost``
    (the default): frames on the link then are lost and RC's transport timer sends their requests again
    (``timeout``, ``retry_cnt``); ``held``: they wait for the link, as a lossless fabric's pause holds them."""

    kind: Literal["link-flap"]
    node: NodeRef
    duration: Duration
    frames: Literal["lost", "held"] = "lost"

    @field_validator("duration")
    @classmethod
    def _link_goes_down(cls, duration):
        if duration <= 0:
            raise ValueError("a link-flap takes the link down for some time: give a duration above 0")
        return duration

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.duration


class DmaBufRevokeEvent(EventBase):
    """The exporter revokes a GPU buffer's dma-buf, as VFIO does on a device reset ('exporter: vfio'): it
    invalidates every importer's mappings, waits for the fences and the unmaps, and refuses later maps (ENODEV);
    the MR keeps its key and its accesses complete in error."""

    kind: Literal["dmabuf-revoke"]
    buffer: Name
    """The registered GPU buffer whose dma-buf is revoked."""
    bound: Duration = Field("1s", validate_default=True)
    """How long the exporter waits for the importers' unmaps before it WARNs that one is broken (VFIO: 1s)."""

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + self.bound


ExporterFault = Literal["delay-map", "block-map", "fail-map-after-invalidate", "invalidate-and-hold", "hold-lock",
                        "move"]


class ExporterFaultEvent(EventBase):
    """A fault injected into a GPU buffer's dma-buf exporter, to test how the importer copes: 'delay-map' (the next
    'count' maps take 'delay' longer), 'block-map' (the next map never returns), 'fail-map-after-invalidate' (after
    the next invalidation, 'count' maps fail with 'errno'), 'invalidate-and-hold' (invalidate, then hold the
    reservation lock for 'hold'; no 'hold': forever), 'hold-lock' (the same without invalidating), 'move' (move the
    buffer 'to' vram or system at this instant; movable exporters only)."""

    kind: Literal["exporter-fault"]
    buffer: Name
    """The registered GPU buffer whose exporter misbehaves."""
    fault: ExporterFault
    delay: Duration | None = None
    """delay-map: the extra time of each delayed map."""
    hold: Duration | None = None
    """invalidate-and-hold, hold-lock: how long the lock stays held (default: forever)."""
    errno: Literal["ENOMEM", "EIO", "ENODEV", "EBUSY", "EINVAL"] = "ENOMEM"
    """fail-map-after-invalidate: the errno the failing maps return."""
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    """delay-map, block-map, fail-map-after-invalidate: how many maps it affects."""
    to: Literal["vram", "system"] | None = None
    """move: where the buffer goes."""

    @model_validator(mode="after")
    def _needs(self):
        needed = {"delay-map": "delay", "move": "to"}.get(self.fault)
        if needed and getattr(self, needed) is None:
            raise ValueError(f"fault '{self.fault}' needs '{needed}'")
        return self

    def last_ps(self) -> int:  # noqa: D102 - see EventBase
        return self.at + (self.hold or 0)


Event = Annotated[GpuPressureEvent | GpuJobGrowthEvent | ManagedJobEvent | HostPageMigrationEvent | PeerMemReclaimEvent
                  | QpErrorEvent | NicResetEvent | ProcessExitEvent | EvictionStormEvent | LinkFlapEvent
                  | DmaBufRevokeEvent | ExporterFaultEvent, Field(discriminator="kind")]

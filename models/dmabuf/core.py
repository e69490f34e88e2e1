"""The dma-buf core's objects: kernel config, call costs, the core itself, buffers, attachments, mappings.

Contexts and time. Every call runs in a *context*, a string naming the kernel task (``"mlx5_0"``,
``"amdgpu"``, a process). Lock ownership is checked against it, and each context has its own picosecond
cursor: a call starts at ``max(env.now, cursor)`` and moves the cursor by its cost, so a chain of synchronous
calls is laid out in time and a simpy process can ``yield env.delay(core.now_ps(ctx) - env.now)`` to catch
up. Callbacks run in the context of the call that invoked them (``move_notify`` runs in the exporter's).
Default contexts: the attachment's device for importer calls, the exporter's name for export and
move_notify, the fd table's owner for fd calls, and an anonymous ``"task"`` for ``dma_buf_put``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sim.core import PS_PER_NS, PS_PER_US, Environment, InvariantViolation, format_duration

from models.dmabuf.resv import DmaResv
from models.versions import DEFAULT_KERNEL, KernelBehaviour, Version


@dataclass(frozen=True, slots=True)
class KernelConfig:
    """The kernel version and build options the dma-buf core depends on."""

    move_notify_enabled: bool = False
    """``CONFIG_DMABUF_MOVE_NOTIFY``: off (default before 2026) pins buffers on map even for dynamic importers."""
    version: str = DEFAULT_KERNEL
    """Kernel version; dates the behaviours listed in :mod:`models.versions`."""
    on_demand_paging: bool = True
    """``CONFIG_INFINIBAND_ON_DEMAND_PAGING`` (distribution kernels set it): mlx5 refuses dma-buf MRs without it."""

    @property
    def behaviour(self) -> KernelBehaviour:
        """The dated behaviours of this kernel."""
        return KernelBehaviour(Version.parse(self.version))


@dataclass(frozen=True, slots=True)
class DmaBufCosts:
    """CPU time of the core's calls, integer ps. Unvalidated: no public measurement of these calls was found."""

    export_ps: int = 2 * PS_PER_US
    """``dma_buf_export``: allocate the dma_buf, its anon file and reservation object."""
    file_op_ps: int = 200 * PS_PER_NS
    """One fd install, fget or fput."""
    attach_ps: int = 1 * PS_PER_US
    """``dma_buf_(dynamic_)attach``: allocation and list insertion under the lock."""
    detach_ps: int = 1 * PS_PER_US
    """``dma_buf_detach``."""
    pin_ps: int = 1 * PS_PER_US
    """``dma_buf_pin``/``unpin`` bookkeeping when the buffer need not migrate."""
    map_ps: int = 2 * PS_PER_US
    """``dma_buf_map_attachment``: sg_table allocation and exporter call, fixed part."""
    map_page_ps: int = 10 * PS_PER_NS
    """Per ``page_size`` page mapped (sg entry and IOMMU passthrough mapping)."""
    unmap_ps: int = 1 * PS_PER_US
    """``dma_buf_unmap_attachment``, fixed part."""
    unmap_page_ps: int = 5 * PS_PER_NS
    """Per page unmapped."""
    move_notify_ps: int = 10 * PS_PER_US
    """Per dynamic importer notified: it zaps its translations (mlx5: UMR XLT ZAP and its completion);
    an invalidation with its MTT update and fence is estimated at tens of us (unvalidated)."""
    page_size: int = 4096
    """CPU page size in bytes (sg entries are page granular)."""

    def pages(self, nbytes: int) -> int:
        """Pages of ``page_size`` covering ``nbytes``."""
        return -(-nbytes // self.page_size)


class DmaBufCore:
    """The dma-buf subsystem of one kernel: config, costs, per-context clocks and the WARN log.

    :param env: supplies ``now`` and the trace recorder.
    :param config: kernel build options.
    :param costs: CPU time of each call.
    """

    def __init__(self, env: Environment, config: KernelConfig = KernelConfig(),
                 costs: DmaBufCosts = DmaBufCosts()) -> None:
        self.env = env
        self.config = config
        self.costs = costs
        self.warnings: list[str] = []
        """Messages of WARN/WARN_ON splats that did not stop the call, oldest first."""
        self._cursor: dict[str, int] = {}
        self._tasks: list[str] = []
        self._next_ino = 1

    def now_ps(self, ctx: str) -> int:
        """The time context ``ctx`` is at: ``env.now`` or later if its calls have run ahead (ps)."""
        return max(self.env.now, self._cursor.get(ctx, 0))

    def spend(self, ctx: str, cost_ps: int) -> int:
        """Charge ``cost_ps`` of CPU time to ``ctx``; return the time it ends (ps)."""
        self._cursor[ctx] = self.now_ps(ctx) + cost_ps
        return self._cursor[ctx]

    def wait_until(self, ctx: str, time_ps: int) -> None:
        """Make ``ctx`` idle until ``time_ps`` (a fence wait)."""
        self._cursor[ctx] = max(self.now_ps(ctx), time_ps)

    def context(self, explicit: str | None, default: str) -> str:
        """The calling context: ``explicit``, else the task running a callback, else ``default``."""
        return explicit or (self._tasks[-1] if self._tasks else default)

    @contextmanager
    def call(self, ctx: str, name: str, **args: Any) -> Iterator[None]:
        """Run a call in ``ctx``: nested calls and callbacks default to it; it is traced as a slice whether it
        succeeds or fails (a failing kernel call still takes the time it spent)."""
        handle = self.env.trace.begin(ctx, name, self.now_ps(ctx), **args)
        self._tasks.append(ctx)
        try:
            yield
        finally:
            self._tasks.pop()
            self.env.trace.end(handle, self.now_ps(ctx))

    def warn(self, ctx: str, message: str) -> None:
        """Record a WARN splat that lets the call continue."""
        self.warnings.append(message)
        self.instant(ctx, "KernelWarned", message=message)

    def instant(self, ctx: str, name: str, **args: Any) -> None:
        """Trace event ``name`` on ``ctx``'s track at the time ``ctx`` has reached."""
        self.env.trace.instant(ctx, name, at_ps=self.now_ps(ctx), **args)

    def next_ino(self) -> int:
        """A fresh inode number for an exported buffer's file (1, 2, ...)."""
        ino, self._next_ino = self._next_ino, self._next_ino + 1
        return ino


class Placement(enum.Enum):
    """Where a buffer's backing storage lives."""

    VRAM = "VRAM"
    """Device memory, reached by peers through the GPU's BAR (peer-to-peer)."""
    SYSTEM = "SYSTEM"
    """Host memory (amdgpu's GTT domain)."""


class DmaDataDirection(enum.Enum):
    """``enum dma_data_direction``."""

    BIDIRECTIONAL = 0
    TO_DEVICE = 1
    FROM_DEVICE = 2


Segments = tuple[tuple[int, int], ...]
"""An sg list as ``(dma_address, length_bytes)`` pairs."""


@dataclass(frozen=True, slots=True)
class DmaBufOps:
    """``struct dma_buf_ops``: exporter callbacks; ``None`` is an absent op.

    ``attach(dmabuf, attach)`` and ``pin(attach)`` refuse by raising :class:`~sim.core.VerbsError`;
    ``map_dma_buf(attach, direction) -> Segments | None`` returns ``None`` when it cannot map, or raises
    :class:`~sim.core.VerbsError` with its errno (an ``ERR_PTR``);
    ``detach(dmabuf, attach)``, ``unpin(attach)``, ``unmap_dma_buf(attach, sgt, direction)`` and
    ``release(dmabuf)`` cannot fail. ``pin``/``unpin``/``map``/``unmap`` run with the lock held and must not
    take it; ``attach``/``detach``/``release`` run unlocked.
    """

    map_dma_buf: Callable[..., Segments | None] | None
    unmap_dma_buf: Callable[..., None] | None
    release: Callable[..., None] | None
    attach: Callable[..., None] | None = None
    detach: Callable[..., None] | None = None
    pin: Callable[..., None] | None = None
    unpin: Callable[..., None] | None = None


@dataclass(frozen=True, slots=True)
class DmaBufAttachOps:
    """``struct dma_buf_attach_ops`` of a dynamic importer."""

    move_notify: Callable[[DmaBufAttachment], None] | None
    """Called with the lock held (in the exporter's context) before the buffer moves."""
    allow_peer2peer: bool = False
    """The importer can reach memory without struct pages (a peer device's BAR)."""
    name: str = "move_notify"
    """The importer's callback as its driver names it (``mlx5_ib_dmabuf_invalidate_cb``): the traced call."""


@dataclass(eq=False)
class DmaBuf:
    """``struct dma_buf`` plus the backing storage state its exporter keeps up to date.

    ``refcount`` counts file references (the creator's, each fd's, each ``dma_buf_get``).
    """

    core: DmaBufCore
    ops: DmaBufOps
    size: int
    priv: Any
    exp_name: str
    ino: int
    resv: DmaResv
    refcount: int = 1
    released: bool = False
    attachments: list[DmaBufAttachment] = field(default_factory=list)
    placement: Placement = Placement.SYSTEM
    """Where the storage lives now (set by the exporter)."""
    generation: int = 0
    """Bumped by the exporter on every move; mappings remember the generation they were made for."""
    invalidations: int = 0
    """``dma_buf_move_notify`` / ``dma_buf_invalidate_mappings`` calls so far (moves, revocations, injected ones)."""

    @property
    def name(self) -> str:
        """``"dmabuf<ino>"``, used in messages."""
        return f"dmabuf{self.ino}"


@dataclass(eq=False)
class DmaBufAttachment:
    """``struct dma_buf_attachment``: one importing device's link to a buffer."""

    dmabuf: DmaBuf
    dev: str
    """The importing device, also the default context of its calls."""
    importer_ops: DmaBufAttachOps | None
    importer_priv: Any
    peer2peer: bool
    mappings: list[SgTable] = field(default_factory=list)
    """Live (not yet unmapped) sg tables."""
    pin_count: int = 0
    """Outstanding ``dma_buf_pin`` calls (negative after an unpin too many)."""
    detached: bool = False
    sgt: SgTable | None = None
    """The sg table mapped at attach and cached (5.7 to 6.14, importer and exporter disagreeing on being
    dynamic): maps return it, unmaps leave it, detach unmaps it."""

    @property
    def pinned(self) -> bool:
        """The importer holds a pin, explicit or taken on map."""
        return self.pin_count > 0 or any(m.pinned_on_map for m in self.mappings)


@dataclass(eq=False)
class SgTable:
    """``struct sg_table`` returned by a map, stamped with the placement it was made for."""

    attach: DmaBufAttachment
    direction: DmaDataDirection
    placement: Placement
    generation: int
    segments: Segments
    ready_at_ps: int
    """When the KERNEL fences present at map time signal: the contents are valid from then on."""
    pinned_on_map: bool
    unmapped: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes covered by the segments."""
        return sum(length for _, length in self.segments)


def check_dma(mapping: SgTable, now_ps: int | None = None) -> None:
    """Check that a device DMA through ``mapping`` (at ``now_ps``, if given) is safe.

    :raises InvariantViolation: the buffer was released, the mapping was unmapped, the buffer moved since
        the mapping was made (stale placement), or the KERNEL fences it was made under have not signaled.
    """
    dmabuf = mapping.attach.dmabuf
    who = f"DMA by {mapping.attach.dev} through a mapping of {dmabuf.name}"
    if dmabuf.released:
        raise InvariantViolation(f"{who}: the buffer was released")
    if mapping.unmapped:
        raise InvariantViolation(f"{who}: the mapping was unmapped")
    if mapping.generation != dmabuf.generation:
        raise InvariantViolation(
            f"{who}: stale mapping: made for placement generation {mapping.generation} "
            f"({mapping.placement.value}), the buffer moved to generation {dmabuf.generation} "
            f"({dmabuf.placement.value}); the importer must re-map after move_notify")
    if now_ps is not None and now_ps < mapping.ready_at_ps:
        raise InvariantViolation(f"{who} at {format_duration(now_ps)}: the exporter's KERNEL fences signal at "
                                 f"{format_duration(mapping.ready_at_ps)}; dynamic importers must wait for them")

"""``rdmasim explain``: the protocol timeline of a run as text a student can read aloud.

Each registration has its section, opened by what that mode does; then the first memory event (or the first
faulting accesses). A line gives the simulated time in µs, the acting component and the call (a slice, with its
duration) or the event (past tense); calls made inside a call, and while a lock is held, are indented one step
right. Outcomes carry one line saying why.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.engine.build import Registration, Testbed
from sim.core.trace import TraceEvent
from sim.core.units import format_size
from sim.scenario.schema import Scenario
from sim.engine.tables import RunResult, bar1_bytes, pinned_bytes
from sim.inspect.timeline import LOCK_EVENTS, Entry, Section, sections

SIZE_ARGS = ("bytes", "size", "length", "free", "largest_free")
"""Arguments that are sizes in bytes (printed with a binary unit)."""


def us(ps: int) -> str:
    """A simulated time or duration in µs, with its unit."""
    return f"{ps / 1e6:.3f} µs"


def _value(key: str, value) -> tuple[str, str]:
    if key.endswith("_ps") and isinstance(value, int):
        return key[:-3], us(value)
    if key in SIZE_ARGS and isinstance(value, int):
        return key, format_size(value)
    if isinstance(value, bool):  # as the kernel's C reads it
        return key, str(value).lower()
    return key, str(value)


def describe(event: TraceEvent) -> str:
    """``name(arg=value, ...)`` with times in µs and sizes with units; a slice adds its duration."""
    args = ", ".join("=".join(_value(k, v)) for k, v in event.args.items() if k != "lock")
    text = f"{event.name}({args})" if event.dur_ps is not None else event.name + (f" ({args})" if args else "")
    return text if event.dur_ps is None else f"{text}  [{us(event.dur_ps)}]"


def mode_note(reg: Registration, bed: Testbed) -> str:
    """What a registration of ``reg``'s mode does, in one sentence."""
    node = bed.nodes[reg.node]
    if reg.mode == "pinned":
        return ("ibv_reg_mr on host memory: pin_user_pages pins every page (charged to RLIMIT_MEMLOCK), the driver "
                "writes the MTT and creates the mkey; the pages never move.")
    if reg.mode == "odp":
        return ("ibv_reg_mr with IBV_ACCESS_ON_DEMAND: nothing is pinned; from 5.10 mlx5 maps the pages the CPU "
                "already has (a snapshot that faults nothing), and the NIC faults the others in on first touch.")
    if reg.mode == "peermem":
        return ("ibv_reg_mr on GPU memory through the peer-memory client: nvidia_p2p_get_pages pins the GPU pages "
                "for the MR's lifetime (nothing is charged to RLIMIT_MEMLOCK).")
    vfio = bed.gpus[f"{reg.node}.{reg.location}"].vendor == "vfio"
    exports = "vfio-pci exports a range of the device's BAR as a dma-buf fd" if vfio else \
        "The GPU driver exports a dma-buf fd"
    if reg.mode == "dmabuf-pinned" or node.nic.params.dmabuf == "pinned":
        revocable = (" The importer accepts revocation (ib_umem_dmabuf_get_pinned_revocable_and_lock): the "
                     "exporter may still revoke it." if reg.mr.backing.umem.pinned_revoke is not None else "")
        return (f"{exports}; the importer attaches, pins it (dma_buf_pin) and maps it: the buffer can no longer "
                f"move.{revocable}")
    static = reg.mr.backing.umem.attach.dmabuf.ops.pin is None and not vfio
    tail = ("the exporter may revoke the buffer later, after telling the NIC (invalidate_mappings)." if vfio else
            "but the exporter is static (NVIDIA's nv_dma_buf has no pin op and never moves memory): move_notify "
            "never comes, and the MR holds its VRAM like a pinned one." if static else
            "the exporter may move the buffer later, after telling the NIC (move_notify)."
            if node.kernel.config.move_notify_enabled else
            "this kernel has CONFIG_DMABUF_MOVE_NOTIFY off, so the map pins the buffer.")
    return (f"{exports}; the NIC attaches as a dynamic importer and maps it under the reservation lock; {tail}")


def footprint(reg: Registration) -> str:
    """What the registration holds in the NIC's translation table and in its GPU's BAR1, in one sentence."""
    mr, bar1 = reg.mr, bar1_bytes(reg)
    held = f"; its mapping holds {format_size(bar1)} of the GPU's BAR1" if bar1 else ""
    return f"It has {mr.mtt_entries} translation entries of {format_size(mr.page_size)}{held}."


def _allocation_failed(event: TraceEvent, bed: Testbed) -> str:
    pins = [f"{format_size(pinned_bytes(r))} of this GPU pinned by {r.node}.nic through {r.mode}"
            for r in bed.registrations.values() if f"{r.node}.{r.location}" == event.component and pinned_bytes(r)]
    if pins:
        return f"allocation failed: {' and '.join(pins)}, and pinned memory cannot be evicted"
    return (f"allocation failed: no free run of {format_size(event.args['bytes'])} "
            f"(the largest is {format_size(event.args['largest_free'])})")


def _fences(event: TraceEvent, bed: Testbed) -> str:
    if not event.args["waited_ps"]:
        return "no fence was pending: the pages were ready at once"
    waited = us(event.args["waited_ps"])
    return f"the pages were usable only after the exporter's copy signalled its fence, {waited} later"


def _pinned_importer(dev: str, bed: Testbed) -> bool:
    """Whether NIC ``dev`` imports dma-bufs pinned (it has no page faults)."""
    return any(node.nic.name == dev and node.nic.params.dmabuf == "pinned" for node in bed.nodes.values())


SEND_QUEUE_STOPS = ("the access completes IBV_WC_LOC_PROT_ERR and the send queue stops there: the later work "
                    "requests are flushed, their accesses not made")
"""What follows an access that fails at the requester (:attr:`models.verbs.qp.QueuePair.sq_failed`)."""

WHY: dict[str, Callable[[TraceEvent, Testbed], str]] = {
    "MkeyCreated": lambda e, bed: (f"the NIC can translate all {e.args['mtt_entries']} pages now: no access will "
                                   "fault" if e.args["mtt_entries"] else
                                   "nothing is mapped yet: the NIC's first touch of each page faults"),
    "BufferPinned": lambda e, bed: ("the importer cannot be told to let go (static, or CONFIG_DMABUF_MOVE_NOTIFY off), "
                                    "so the map pinned the buffer: the exporter can no longer move it"),
    "BufferPinnedIn": lambda e, bed: e.args["reason"] + (
        "; the pin first moved the buffer to system memory, so the NIC reads host memory and its VRAM is free"
        if e.args["migrated"] else ""),
    "FencesWaited": _fences,
    "AllocationFailed": _allocation_failed,
    "MemoryAllocated": lambda e, bed: f"the allocation fit: {format_size(e.args['free'])} still free",
    "BufferEvicted": lambda e, bed: f"the exporter evicts '{e.args['tag']}' to make room; its importers must let go",
    "MappingInvalidated": lambda e, bed: (
        f"{e.args['callback']}: {e.args['dev']}, a pinned importer, takes it as a permanent revocation: its revoke "
        "callback runs, then it unmaps and unpins" if _pinned_importer(e.args["dev"], bed) else
        f"{e.args['callback']}: nothing of {e.args['dev']}'s is mapped yet, so its callback returns at once "
        "(mlx5_ib_dmabuf_invalidate_cb: no umem_dmabuf->sgt): no zap, nothing will fault"
        if not e.args["live_mappings"] else
        f"{e.args['callback']}: {e.args['dev']} zaps its translation (mlx5: a UMR with the ZAP flag); its next access "
        "faults"),
    "BufferMoved": lambda e, bed: (f"the copy {e.args['src']} -> {e.args['dst']} ends at "
                                   f"{us(e.args['copy_done_ps'])}; the new pages are usable when its fence signals"),
    "PageFaulted": lambda e, bed: ("the NIC found its translation zapped: the driver re-maps the whole MR under "
                                   "the lock"),
    "PageFaultFailed": lambda e, bed: (f"the re-map failed ({e.args['errno']}): the driver resumes the fault with an "
                                       f"error, {SEND_QUEUE_STOPS}"),
    "AccessRefused": lambda e, bed: f"the NIC cannot translate the access ({e.args['reason']}): {SEND_QUEUE_STOPS}",
    "MappingRestored": lambda e, bed: f"the MTT points at the buffer's pages: the NIC may use them from "
                                      f"{us(e.args['ready_ps'])}",
    "AccessStalled": lambda e, bed: f"the requester's send queue stalls until the translation is ready, at "
                                    f"{us(e.args['until_ps'])}",
    "RnrNakSent": lambda e, bed: ("the responder answers RNR NAK while it faults (a modelling choice); the requester "
                                  f"retries at {us(e.args['retry_at_ps'])}"),
    "PeerMemoryReclaimed": lambda e, bed: ("the GPU driver freed the memory: its free callback invalidated the MR, "
                                           "later accesses complete in error (no re-fault)"),
    "KernelWarned": lambda e, bed: "the kernel WARNed and let the call continue",
    "KeyInvalidated": lambda e, bed: ("the driver's revoke callback invalidated the MR's key in hardware (irdma: "
                                      "irdma_hwdereg_mr); the key stays allocated until ibv_dereg_mr and every "
                                      "later access completes in error"),
    "BufferRevoked": lambda e, bed: (f"the exporter returned without waiting (before 7.1): {e.args['left_mapped']} "
                                     "importer(s) still mapped the buffer" if e.args.get("left_mapped") else
                                     "every importer has unmapped and the fences have signalled: no device reaches "
                                     "the memory any more; later maps fail with ENODEV"),
    "BufferReleased": lambda e, bed: "the last reference was dropped: the exporter's release frees the buffer",
    "FaultBatchServiced": lambda e, bed: (f"the unified-memory driver serviced {e.args['faults']} of the job's GPU "
                                          f"page faults, migrating {e.args['pages_migrated']} pages to the GPU"),
    "ManagedMemoryGrew": lambda e, bed: (f"the managed job's memory on the GPU grew by {format_size(e.args['bytes'])}"
                                         f": {format_size(e.args['free'])} of VRAM left"),
    "BlocksEvicted": lambda e, bed: (f"the unified-memory driver pushed {e.args['blocks']} of the job's own blocks "
                                     "back to the host to make room (oversubscription)"),
}
"""Per outcome: one line of why, from the event and the testbed."""


def _repeat(entry: Entry) -> str:
    if entry.count == 1:
        return ""
    if entry.queued:
        return f"  (×{entry.count}: accesses queued behind it)"
    if entry.last_ps == entry.event.time_ps:
        return f"  (×{entry.count} at once)"
    return f"  (×{entry.count}, the last at {us(entry.last_ps)})"


def render(section: Section, bed: Testbed) -> list[str]:
    """The lines of one section."""
    lines = [section.title, "-" * len(section.title)]
    if section.registration is not None:
        lines += [mode_note(section.registration, bed), footprint(section.registration)]
    width = max((len(entry.event.component) for entry in section.entries), default=0)
    locks: dict[str, int] = {}
    open_slices: dict[str, list[int]] = {}
    for entry in section.entries:
        event = entry.event
        stack = open_slices.setdefault(event.component, [])
        while stack and stack[-1] <= event.time_ps:
            stack.pop()
        if event.name == "LockReleased":
            locks[event.component] = max(0, locks.get(event.component, 0) - 1)
        indent = "  " * (len(stack) + locks.get(event.component, 0))
        if event.name in LOCK_EVENTS:
            text = f"{'lock' if event.name == 'LockAcquired' else 'unlock'} {event.args['lock']}"
        else:
            text = describe(event) + _repeat(entry)
        head = f"{event.time_ps / 1e6:12.3f} µs  {event.component:<{width}}  "
        lines.append(head + indent + text)
        if event.name in WHY:
            lines.append(" " * len(head) + indent + "  why: " + WHY[event.name](event, bed))
        if event.name == "LockAcquired":
            locks[event.component] = locks.get(event.component, 0) + 1
        if event.dur_ps:
            stack.append(event.time_ps + event.dur_ps)
    if section.note:
        lines.append(section.note)
    return lines


def explain(result: RunResult, variants: list[str] | None = None) -> str:
    """The timeline of a traced run (``run_scenario(..., trace=True)``); ``variants`` are the scenario's
    variant names, when it has several (the first line says which one this is and how to pick another)."""
    bed = result.testbed
    lines = []
    if variants and len(variants) > 1:
        lines += [f"Variant '{result.variant}' ({variants.index(result.variant) + 1} of {len(variants)}: "
                  f"{', '.join(variants)}; --variant NAME explains another)", ""]
    for section in sections(bed):
        lines += render(section, bed) + [""]
    return "\n".join(lines).rstrip("\n")


def first_accesses_only(scenario: Scenario) -> Scenario:
    """``scenario`` on the event engine (whose events a trace records), each workload at its first message size
    only when it has no events: without a memory event, the timeline ends with the first faulting accesses, and
    the first size makes them."""
    scenario = scenario.model_copy(update={"engine": "event"})
    if scenario.events:
        return scenario
    return scenario.model_copy(update={"workload": [w.model_copy(update={"sizes": w.size_list()[:1]})
                                                    for w in scenario.workload]})

"""The scenario events' outcomes as ``run`` prints them, with why an allocation found nothing to evict when the
reason lies in how the GPU's buffers are held (a peer-memory pin, an exporter that never moves memory) rather than
in the workload."""

from __future__ import annotations

from models.presets import GPU_VENDOR
from sim.engine.events import NOTHING_TO_EVICT

STATIC_EXPORTERS = {"nvidia": "static (nv_dma_buf): it never moves memory",
                    "vfio": "a PCI BAR (vfio-pci): it never moves memory"}
"""Exporter profiles that never move a buffer, and what they are; under them every dma-buf MR stays where it was
registered, dynamic or not."""


def never_moves(scenarios) -> dict[tuple[str, str], str]:
    """Why, for each (variant, GPU) whose registered buffers cannot be evicted for a reason of their own, nothing
    there could be: a peer-memory MR pins its pages for its life (``nvidia_p2p_get_pages``); a dynamic dma-buf MR
    on an exporter that never moves memory stays where it is. ``{("base", "a.gpu0"): "src is pinned ..."}``.
    ``scenarios`` is (variant name, scenario) pairs."""
    why = {}
    for variant, scenario in scenarios:
        for node in scenario.nodes:
            for gpu, name in zip(node.gpus, node.gpu_names()):
                target = f"{node.name}.{name}"
                exporter = gpu.exporter or GPU_VENDOR[gpu.preset]
                held = [_held(b.name, b.registration, target, exporter) for b in scenario.buffers if b.on == target]
                if any(held):
                    why[(variant, target)] = "; ".join(reason for reason in held if reason)
    return why


def _held(buffer: str, registration: str, gpu: str, exporter: str) -> str | None:
    """Why ``buffer`` (on ``gpu``, registered as ``registration``) cannot be evicted, or None."""
    if registration == "peermem":
        return f"{buffer} is pinned in VRAM by the peer-memory client (nvidia_p2p_get_pages) for its MR's life"
    if registration == "dmabuf" and exporter in STATIC_EXPORTERS:
        return (f"{gpu}'s exporter, {exporter}, is {STATIC_EXPORTERS[exporter]}, so {buffer}'s dynamic dma-buf MR "
                "keeps it in VRAM (a GPU with exporter amd would evict it)")
    return None


def format_events(events, why: dict[tuple[str, str], str] | None = None) -> str:
    """The scenario events' outcomes, one line each: time since the first post (ms), variant, kind, target; an
    allocation that found nothing to evict says why where ``why`` (:func:`never_moves`) knows."""
    from sim.engine.events import BOOKKEEPING_KINDS

    why = why or {}
    shown = events[~events["kind"].isin(BOOKKEEPING_KINDS)]
    lines = []
    for r in shown.itertuples():
        reason = why.get((r.variant, r.target)) if r.outcome == NOTHING_TO_EVICT else None
        lines.append(f" {r.time_ms:10.3f} ms  " + ("" if r.variant == "base" else f"[{r.variant}] ")
                     + f"{r.kind} on {r.target}: {r.outcome}" + (f": {reason}" if reason else ""))
    return "\n".join([" events:", *lines]) if lines else ""

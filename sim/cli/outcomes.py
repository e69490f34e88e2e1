"""The scenario events' outcomes as ``run`` prints them, with why an allocation found nothing to evict when the
reason lies in the GPU's exporter profile rather than in the workload."""

from __future__ import annotations

from models.presets import GPU_VENDOR
from sim.engine.events import NOTHING_TO_EVICT

STATIC_EXPORTERS = {"nvidia": "static (nv_dma_buf): it never moves memory",
                    "vfio": "a PCI BAR (vfio-pci): it never moves memory"}
"""Exporter profiles that never move a buffer, and what they are; under them every dma-buf MR stays where it was
registered, dynamic or not."""


def never_moves(scenarios) -> dict[tuple[str, str], str]:
    """Why, for each (variant, GPU) whose exporter never moves memory, nothing there could be evicted:
    ``{("base", "a.gpu0"): "a.gpu0's exporter, nvidia, is static (nv_dma_buf): ..."}``. ``scenarios`` is
    (variant name, scenario) pairs."""
    why = {}
    for variant, scenario in scenarios:
        for node in scenario.nodes:
            for gpu, name in zip(node.gpus, node.gpu_names()):
                exporter = gpu.exporter or GPU_VENDOR[gpu.preset]
                if exporter in STATIC_EXPORTERS:
                    why[(variant, f"{node.name}.{name}")] = (
                        f"{node.name}.{name}'s exporter, {exporter}, is {STATIC_EXPORTERS[exporter]}, so even a "
                        "dynamic dma-buf MR stays pinned in VRAM (exporter: amd evicts unpinned buffers)")
    return why


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

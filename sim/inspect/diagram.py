"""Sequence diagrams of a traced run: the timeline of :mod:`sim.inspect.timeline` drawn as swimlanes.

Columns are the layers a registration crosses: the application, uverbs and ib_core, the NIC's driver (the dma-buf
importer), the dma-buf core (with its reservation lock) or the peer-memory client, the exporter (the GPU driver) and
the NIC, where the UMRs that write or zap the MR's translation and the stale accesses of a broken importer run.
Rows are the timeline's entries in order, each labelled with its simulated time in µs (rows are in order, not to
scale). A call is an arrow from its caller's lane to its own, with an activation box as long as it runs; a lock
hold is a bar beside the dma-buf core's lifeline; a fence wait a dotted line ending where the wait ended; an
instant a dot with its name, coloured by what it means (red: a fault, a zap, a stale access, a failure; green: a
translation ready; blue: a fence; purple: a pin; orange: a move).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from sim.engine.build import Testbed
from sim.core.trace import TraceEvent
from sim.inspect.explain import describe, us
from sim.store.outdir import OutputError, claim_file, write_file
from sim.inspect.timeline import LOCK_EVENTS, Entry, Section

APP, UVERBS, IMPORTER, DMABUF, EXPORTER, NIC = range(6)
LANE_OF = {
    **dict.fromkeys(("ibv_reg_mr", "ibv_reg_dmabuf_mr", "mlx5dv_reg_dmabuf_mr", "ibv_dereg_mr", "pin_user_pages"),
                    UVERBS),
    **dict.fromkeys(("pagefault_dmabuf_mr", "mlx5_umr_revoke_mr_with_lock", "mlx5r_umr_revoke_mr", "MkeyCreated",
                     "MappingRestored", "PageFaulted", "MappingInvalidated", "mlx5_ib_dmabuf_invalidate_cb",
                     "ib_umem_dmabuf_unsupported_move_notify", "ib_umem_dmabuf_revoke_locked"), IMPORTER),
    "nv_mem_get_pages": DMABUF, "nvidia_p2p_get_pages": EXPORTER,
    **dict.fromkeys(("dma_buf_export", "dma_buf_fd", "dma_buf_get", "dma_buf_put", "dma_buf_attach",
                     "dma_buf_dynamic_attach", "dma_buf_detach", "dma_buf_pin", "dma_buf_unpin",
                     "dma_buf_map_attachment", "dma_buf_unmap_attachment", "dma_buf_move_notify", "FencesWaited",
                     "BufferPinned", "KernelWarned", *LOCK_EVENTS), DMABUF),
    **dict.fromkeys(("AccessStalled", "RnrNakSent", "mlx5r_umr_update_mr_pas", "StaleAccess"), NIC),
}
"""The lane of each traced call or event; any other runs in the exporter (GPU driver) when it is on a GPU's
track, on the NIC when on a NIC's hardware track, else in the importer. The peer-memory client's call shares the
dma-buf core's column (a run with peer memory titles it so)."""
CALLED_FROM_NIC = ("pagefault_dmabuf_mr",)
"""Top-level calls the NIC sets off (a fault interrupt); other top-level calls come from the application."""
COLOURS = {
    **dict.fromkeys(("PageFaulted", "MappingInvalidated", "AccessStalled", "RnrNakSent", "AllocationFailed",
                     "BufferEvicted", "PeerMemoryReclaimed", "KernelWarned", "StaleAccess"), "tab:red"),
    **dict.fromkeys(("MappingRestored", "MkeyCreated", "MemoryAllocated"), "tab:green"),
    "FencesWaited": "tab:blue", "BufferPinned": "tab:purple", "BufferMoved": "tab:orange",
}
SPACING = 2.6
"""Distance between lifelines (data units; a row is 1)."""
MARGIN = 7.0
"""Room right of the last lifeline for its labels (data units)."""
LABEL_BOX = dict(boxstyle="square,pad=0.05", fc="white", ec="none", alpha=0.85)
"""Labels hide the lifelines they cross."""
LEGEND = ("Rows are in time order, not to scale. Arrow: a call, from its caller's layer; box: the call running, "
          "[its duration]; brown bar: the reservation lock held; blue dots: a fence wait. Red: a fault, zap, stale "
          "access or failure; green: a translation ready; orange: a move; purple: a pin.")
CREATOR = "rdmasim sequence diagram"
"""Written into every diagram's metadata (SVG dc:creator, PNG Software): how rdmasim recognises its files."""
FORMATS = {".svg": f"<dc:title>{CREATOR}</dc:title>".encode(), ".png": f"Software\0{CREATOR}".encode()}
"""Per file suffix: the bytes its metadata holds when rdmasim drew it."""
SAVE = {".svg": dict(metadata={"Creator": CREATOR, "Date": None}),
        ".png": dict(metadata={"Software": CREATOR}, dpi=110)}
SVG_STYLE = {"svg.hashsalt": "rdmasim", "svg.fonttype": "none"}
"""Same drawing, same bytes; text stays text (searchable, small)."""


def lane(event: TraceEvent) -> int:
    """The swimlane ``event`` is drawn in."""
    if event.name in LANE_OF:
        return LANE_OF[event.name]
    if event.component.endswith(".hw"):
        return NIC
    return EXPORTER if ".gpu" in event.component else IMPORTER


def lane_titles(bed: Testbed) -> list[str]:
    """Column headings, naming the importer and exporter styles present in ``bed``: a dma-buf importer's kind and
    the dma-buf core only where a buffer is registered from a dma-buf, the peer-memory client where one is
    registered through it."""
    modes = {reg.mode for reg in bed.registrations.values()}
    dmabuf = any(mode.startswith("dmabuf") for mode in modes)
    importers = sorted({"mlx5_ib (dynamic importer)" if n.nic.params.dmabuf == "dynamic" else "EFA-style (pins)"
                        for n in bed.nodes.values() if n.nic.params.dmabuf and dmabuf})
    exporters = sorted({f"{g.vendor} GPU driver" for g in bed.gpus.values()}) or ["GPU driver"]
    middle = [title for title, shown in (("dma-buf core\n(reservation lock)", dmabuf or "peermem" not in modes),
                                         ("peer-memory client\nnvidia-peermem", "peermem" in modes)) if shown]
    return ["application", "uverbs / ib_core", "NIC driver\n" + ", ".join(importers or ["mlx5_ib"]),
            "\n".join(middle), "exporter\n" + ", ".join(exporters), "NIC"]


@dataclass
class _Row:
    """A drawn row of a section: where, and what."""

    y: float
    event: TraceEvent


def _label(entry: Entry, nodes: bool) -> str:
    """A call's or an instant's label: described as explain prints it, its node first when there are several."""
    text = describe(entry.event)
    if entry.count > 1:
        text += f"  ×{entry.count}" + (" queued" if entry.queued else "")
    return f"{entry.event.component.split('.')[0]}: {text}" if nodes else text


def draw(bed: Testbed, parts: list[Section], title: str) -> Figure:
    """The sequence diagram of ``parts`` (sections of ``bed``'s timeline), one after the other."""
    rows = sum(len(p.entries) + 2 for p in parts) + 1
    fig = plt.figure(figsize=(18, 1.6 + 0.27 * rows))
    ax = fig.add_axes((0.075, 0.01, 0.92, 1 - 1.1 / (1.6 + 0.27 * rows)))
    ax.set_xlim(-0.9, SPACING * 5 + MARGIN)
    ax.set_ylim(-rows - 0.5, 0.8)
    ax.axis("off")
    fig.suptitle(title, x=0.5, y=1 - 0.25 / (1.6 + 0.27 * rows), fontsize=11, fontweight="bold")
    for index, name in enumerate(lane_titles(bed)):
        ax.text(index * SPACING, 0.5, name, ha="center", va="bottom", fontsize=8.5, fontweight="bold")
        ax.plot([index * SPACING] * 2, [-rows - 0.3, 0.3], color="0.75", lw=0.8, ls="--", zorder=0)
    several_nodes = len(bed.nodes) > 1
    y = 0.0
    for part in parts:
        y -= 1
        ax.text(-0.9, y, part.title, fontsize=9, fontweight="bold", va="center")
        ax.axhline(y - 0.45, color="0.85", lw=0.6)
        y = _draw_section(ax, part, y, several_nodes)
        y -= 1
    ax.text(-0.9, y - 0.2, LEGEND, fontsize=7, color="0.3", va="center")
    return fig


def _draw_section(ax, part: Section, y: float, several_nodes: bool) -> float:
    rows: list[_Row] = []
    open_slices: dict[str, list[tuple[int, int]]] = {}
    locks: dict[str, float] = {}
    last_time = None
    for entry in part.entries:
        y -= 1
        event, x = entry.event, lane(entry.event) * SPACING
        if event.time_ps != last_time:
            ax.text(-0.5, y, us(event.time_ps), ha="right", va="center", fontsize=7, color="0.3")
            last_time = event.time_ps
        stack = open_slices.setdefault(event.component, [])
        while stack and stack[-1][0] <= event.time_ps:
            stack.pop()
        if event.name in LOCK_EVENTS:
            _lock(ax, event, x, y, locks)
        elif event.dur_ps is not None:
            caller = stack[-1][1] if stack else (NIC if event.name in CALLED_FROM_NIC else APP)
            nested = sum(1 for _, column in stack if column == lane(event))
            _call(ax, caller * SPACING, x, y, _label(entry, several_nodes), depth=nested)
            stack.append((event.time_ps + event.dur_ps, lane(event)))
        else:
            colour = COLOURS.get(event.name, "0.35")
            ax.plot([x], [y], "o", ms=4.5, color=colour, zorder=3)
            ax.text(x + 0.15, y, _label(entry, several_nodes), va="center", fontsize=7, color=colour,
                    bbox=LABEL_BOX)
            if event.name == "FencesWaited" and event.args["waited_ps"]:
                _fence(ax, rows, event, x, y)
        rows.append(_Row(y, event))
    _activations(ax, rows)
    return y


def _call(ax, x0: float, x1: float, y: float, text: str, depth: int) -> None:
    """An arrow from the caller's lane to the callee's with the call's label above it; a call within one
    layer is a short hook with its label beside it."""
    if x0 == x1:
        ax.annotate("", (x1 + 0.08 * (depth + 1), y - 0.15), (x1 + 0.08 * depth, y + 0.15),
                    arrowprops=dict(arrowstyle="->", color="0.2", lw=0.7, connectionstyle="arc3,rad=-0.6"))
        ax.text(x1 + 0.3, y, text, va="center", fontsize=7)
        return
    ax.annotate("", (x1, y - 0.12), (x0, y - 0.12), arrowprops=dict(arrowstyle="-|>", color="0.2", lw=0.8,
                                                                    shrinkA=0, shrinkB=2))
    ax.text(min(x0, x1) + 0.12, y - 0.02, text, va="bottom", fontsize=7, bbox=LABEL_BOX)


def _lock(ax, event: TraceEvent, x: float, y: float, locks: dict[str, float]) -> None:
    """A lock hold: a bar left of the dma-buf core's lifeline from the lock row to the unlock row."""
    key = f"{event.args['lock']}:{event.component}"
    if event.name == "LockAcquired":
        locks[key] = y
        ax.text(x - 0.25, y, f"lock {event.args['lock']} ({event.component})", ha="right", va="center",
                fontsize=7, color="tab:brown")
        return
    start = locks.pop(key, y)
    ax.fill_between([x - 0.2, x - 0.08], y, start, color="tab:brown", alpha=0.6, lw=0, zorder=4)
    ax.text(x - 0.25, y, f"unlock {event.args['lock']} ({event.component})", ha="right", va="center",
            fontsize=7, color="tab:brown")


def _fence(ax, rows: list[_Row], event: TraceEvent, x: float, y: float) -> None:
    """A fence wait: a dotted line beside the lifeline from the row where it began to the row where it ended."""
    began = event.time_ps - event.args["waited_ps"]
    start = max((r.y for r in rows if r.event.time_ps <= began), default=y, key=lambda row_y: -row_y)
    ax.plot([x + 0.22] * 2, [start, y], color="tab:blue", ls=":", lw=1.6, zorder=4)


def _activations(ax, rows: list[_Row]) -> None:
    """Each call's box on its lane, from its row to the last row before it returned."""
    depth: dict[int, list[float]] = {}
    for i, row in enumerate(rows):
        event = row.event
        if not event.dur_ps:
            continue
        end = event.time_ps + event.dur_ps
        last = min((r.y for r in rows[i:] if r.event.time_ps < end), default=row.y)
        column = lane(event)
        nested = [b for b in depth.setdefault(column, []) if b < row.y]
        depth[column] = nested + [last]
        x = column * SPACING + 0.07 * (len(nested) - 0.5)
        ax.add_patch(Rectangle((x - 0.05, last - 0.35), 0.1, row.y - last + 0.7, fc="0.92",
                                                  ec="0.4", lw=0.6, zorder=2))


def diagram_path(out: str | os.PathLike, *, force: bool = False) -> Path:
    """Check, before any work, that a diagram may be drawn at ``out`` (see :func:`sim.store.outdir.claim_file`).

    :raises OutputError: not an .svg or .png path, or the path is refused.
    """
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise OutputError(f"{out}: a diagram is drawn as .svg or .png, not as '{suffix or 'a file without suffix'}'")
    return claim_file(out, FORMATS[suffix], force=force)


def write_diagram(fig: Figure, out: str | os.PathLike, *, force: bool = False) -> Path:
    """Save ``fig`` at ``out`` (.svg or .png) by the output rules, then close it; returns the path written.

    :raises OutputError: as :func:`diagram_path`, or writing failed.
    """
    suffix = diagram_path(out, force=force).suffix.lower()
    try:
        with plt.rc_context(SVG_STYLE):
            return write_file(out, FORMATS[suffix], lambda path: fig.savefig(path, format=suffix[1:],
                                                                             **SAVE[suffix]), force=force)
    finally:
        plt.close(fig)

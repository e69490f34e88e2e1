"""Requests a link outage loses, on the vectorized core: each is sent again when its requester's ACK timer fires.

A link flap that loses frames (``frames: lost``) drops every frame on the link meanwhile
(:meth:`models.nic.retransmit.Retransmission._request_wire`); the outages are known before the run
(:attr:`models.nic.nic.Nic.outages`). Which requests meet one depends on when they reach the wire: the requests
lost, or whose acknowledgement was, are settled against the solve (:meth:`Losses.settle`, from the head and tail
each frame reached the far port with: the checks on the wire are labelled ``wire0``, ``reply0``..., with
``edges``), and such a request takes the steps of :func:`models.nic.retransmit.timed_out`: it waits for its ACK
timer from when the frame left and goes again. The core follows that only where nothing else wakes the waiting
requests (:meth:`Losses.confirm`): no frame sent again is lost, no acknowledgement arrives while an earlier request
whose own was lost waits, and no request reaches the responder while another is missing (which would draw a NAK PSN
sequence error); otherwise the event engine simulates the run.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from models.nic.datapath import ACK_TIMER, REPLY_WIRE, REQUEST_WIRE, Path
from models.nic.retransmit import frame_lost, timed_out
from models.nic.transport import QP_RC
from sim.core.steps import Check
from sim.engine.planner.retries import REMOTE
from sim.engine.planner.settling import Settling

WIRE, REPLY = "wire", "reply"
"""The label prefixes of a request's checks on the wire, and of its acknowledgement's or response's."""


def wires_labelled(steps: tuple) -> tuple:
    """``steps`` with their checks on the wire labelled :data:`WIRE` or :data:`REPLY` and their number, in order,
    each reporting its head and tail (:attr:`sim.core.steps.Check.edges`), the model's decision taken from them;
    ``steps`` as they are where a request crosses the wire in more than one claim (before the responder's check, or
    the ACK timer's of a request lost)."""
    sent = False
    for step in steps:
        if isinstance(step, Check) and step.name in (REQUEST_WIRE, "responder", ACK_TIMER):
            if sent and step.name == REQUEST_WIRE:
                return steps
            sent = step.name == REQUEST_WIRE
    out, count = [], {WIRE: 0, REPLY: 0}
    for step in steps:
        if isinstance(step, Check) and step.name in (REQUEST_WIRE, REPLY_WIRE):
            kind = WIRE if step.name == REQUEST_WIRE else REPLY
            step = replace(step, label=f"{kind}{count[kind]}", edges=True, decides=None)
            count[kind] += 1
        out.append(step)
    return tuple(out)


class _Link:
    """What a stream's frames cross: the requester's and the responder's NICs and the fabric's latency (ps)."""

    def __init__(self, end) -> None:
        self.near, self.far = end.src.qp.node.nic, end.dst.qp.node.nic
        self.latency = end.src.qp.pd.context.fabric.params.latency_ps
        self.timeout = end.src.qp.ack_timeout_ps

    def lost(self, head: np.ndarray, tail: np.ndarray, forward: bool) -> np.ndarray:
        """Which frames whose first and last bits reached the far port at ``head`` and ``tail`` (-1: none went)
        met an outage of either link (``forward``: a request, from the requester; else a reply), as
        :func:`models.nic.retransmit.frame_lost` decides each."""
        sender, receiver = (self.near, self.far) if forward else (self.far, self.near)
        return np.asarray(frame_lost(sender, receiver, self.latency, head, tail)) & (head >= 0)


class Losses(Settling):
    """The frames link outages lose, by (stream, size), for the streams whose losses the core follows: per
    operation 1 (its request lost), 2 (its acknowledgement lost) or 0 (:data:`_FRAMES`)."""

    what = "the frames a link outage loses"

    def __init__(self, ends) -> None:
        super().__init__()
        self.links = {k: _Link(end) for k, end in enumerate(ends) if followed(end)}

    def parts(self, key: tuple[int, int], lo: int, hi: int, found: Path):
        """Operations ``lo..hi-1`` of ``key`` of path ``found`` as ``(lo, hi, steps)`` runs, a lost frame's
        request's steps :func:`~models.nic.retransmit.timed_out`."""
        link = self.links[key[0]]
        return [(a, b, timed_out(found, _FRAMES[lost], link.latency, link.timeout) if lost else found.steps)
                for a, b, lost in self.runs(key, lo, hi)]

    def total(self, stream: int) -> int:
        """The frames ``stream`` lost."""
        return int(sum((lost > 0).sum() for (k, _), lost in self.decided.items() if k == stream))

    def settle(self, marks: dict[tuple[int, int], dict[str, np.ndarray]], depth: dict[int, int]) -> bool:
        """Check which frames a complete solve's ``marks`` say the outages lost (a request's first, else its
        acknowledgement's) against those solved so; where they differ the solve's answer goes to the next solve
        (:meth:`~sim.engine.planner.settling.Settling.revise`; ``depth``: each stream's window): True then."""
        changed = False
        for (k, size), labelled in marks.items():
            link = self.links.get(k)
            if link is None or f"{WIRE}0.head" not in labelled:
                continue
            request = link.lost(labelled[f"{WIRE}0.head"], labelled[f"{WIRE}0.tail"], True)
            reply = link.lost(labelled[f"{REPLY}0.head"], labelled[f"{REPLY}0.tail"], False)
            changed = self.revise((k, size), np.where(request, 1, np.where(reply, 2, 0)).astype(np.int8),
                                  depth[k]) or changed
        return self.counted(changed)

    def confirm(self, marks: dict[tuple[int, int], dict[str, np.ndarray]]) -> str | None:
        """Why a settled solve may not stand: a frame lost but the first of a request's or its acknowledgement's,
        an acknowledgement that reaches the requester while an earlier request whose own was lost waits for its
        timer (it would end the wait), or a request the responder takes out of PSN order (one ahead of a lost one
        draws a NAK PSN sequence error)."""
        for (k, size), labelled in marks.items():
            link, lost = self.links.get(k), self.decided.get((k, size))
            if link is None or lost is None or not lost.any():
                continue
            arrived = []
            for label in [label[:-5] for label in labelled if label.endswith(".head")]:
                head, tail = labelled[label + ".head"], labelled[label + ".tail"]
                missed = link.lost(head, tail, label.startswith(WIRE))
                missed &= ~((lost == 1) & (label == f"{WIRE}0")) & ~((lost == 2) & (label == f"{REPLY}0"))
                if missed.any():
                    return "a link outage loses a frame sent again, which the vectorized core does not follow"
                if label.startswith(REPLY):
                    arrived.append(np.where((head >= 0) & ~((lost == 2) & (label == f"{REPLY}0")), tail, -1))
            if _out_of_sequence(labelled[f"{WIRE}0"], labelled[f"{REMOTE}0"], lost == 1):
                return ("after a link outage a request reaches the responder while the one it misses is still lost "
                        "(a NAK PSN sequence error wakes the requests waiting for their timers), which the vectorized "
                        "core does not follow")
            sent = labelled[f"{REPLY}0.tail"] - link.latency
            for i in np.flatnonzero(lost == 2):
                later = np.concatenate([a[i + 1:] for a in arrived])
                if ((later >= sent[i]) & (later < sent[i] + link.timeout)).any():
                    return ("an acknowledgement reaches the requester while an earlier request whose own a link "
                            "outage lost waits for its timer, which the vectorized core does not follow")
        return None


def _out_of_sequence(lost_at: np.ndarray, arrived: np.ndarray, lost: np.ndarray) -> bool:
    """Whether a request reaches the responder (``arrived``: each request's accepted arrival) while another is
    missing, or at the very time one goes missing or comes: a request whose frame is lost (``lost``, at
    ``lost_at``) goes missing when none is, and stops when it arrives sent again
    (:meth:`~models.nic.retransmit.Retransmission._request_wire`; the responder's check of ``missing``)."""
    losses = sorted((int(lost_at[i]), int(i)) for i in np.flatnonzero(lost))
    k = 0
    while k < len(losses):
        start, missing = losses[k]
        end = int(arrived[missing])
        others = np.delete(arrived, missing)
        if ((others >= start) & (others <= end)).any():
            return True
        k = next((j for j in range(k, len(losses)) if losses[j][0] >= end), len(losses))
        if k < len(losses) and losses[k][0] == end:
            return True
    return False


_FRAMES = {1: REQUEST_WIRE, 2: REPLY_WIRE}
"""The check of the frame each code of :attr:`Losses.lost` says was lost."""


def followed(end) -> bool:
    """Whether the vectorized core follows the frames a link outage loses in stream ``end``: an RC WRITE stream of a
    bandwidth workload for a count, whose ACK timer fires (``timeout`` above 0) and may send a request again
    (``retry_cnt`` above 0), on a link whose frames an outage loses."""
    qp, work = end.src.qp, end.work
    return (qp.qp_type is QP_RC and work.rule.verb == "write" and work.rule.streams and work.duration is None
            and qp.ack_timeout_ps is not None and qp.attr.retry_cnt > 0
            and bool(qp.node.nic.outages or end.dst.qp.node.nic.outages))

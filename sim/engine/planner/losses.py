"""Frames a link outage loses under a WRITE stream, on the vectorized core, and what the requester's transport does
about them (:mod:`models.nic.retransmit`).

A link flap that loses frames (``frames: lost``) drops every frame on the link meanwhile
(:meth:`~models.nic.retransmit.Retransmission._request_wire`); the outages are known before the run
(:attr:`models.nic.nic.Nic.outages`). The checks on the wire are labelled ``wire0``, ``reply0``... with ``edges``
(the head and tail each frame reached the far port with), so each solve says which requests and acknowledgements
an outage lost (:func:`~models.nic.retransmit.frame_lost`), and the responder's state replayed over it
(:func:`_responder`) says which requests arrived out of sequence: the first carries a NAK PSN sequence error back
(its ``nak`` check), which wakes the requests waiting for their timers, and those arriving behind it later wait
until the missing request arrives sent again. Each request takes the steps of its case
(:func:`~models.nic.retransmit.timed_out`, :func:`~models.nic.retransmit.woken`,
:func:`~models.nic.retransmit.out_of_sequence`), settled against the solve
(:mod:`sim.engine.planner.settling`), each as soon as the solve has passed every time it depends on
(:meth:`Losses.settle_early`: a decision that differs then stops the solve). The core follows one gap's NAK at a
time (outages one after the other); a frame lost again, an acknowledgement that wakes a waiting request, or a
request sent again that arrives while another is missing sends the run to the event engine
(:meth:`Losses.confirm`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from models.nic.datapath import ACK_TIMER, REPLY_WIRE, REQUEST_WIRE, SEQUENCE_NAK, Path
from models.nic.retransmit import frame_lost, out_of_sequence, timed_out, woken
from models.nic.transport import QP_RC
from sim.core.steps import Check
from sim.engine.planner.retries import REMOTE
from sim.engine.planner.settling import Settling
from sim.fast import NEVER

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
        elif isinstance(step, Check) and step.name == SEQUENCE_NAK:
            step = replace(step, label="nak")
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

    def loses_after(self, at_ps: int) -> bool:
        """Whether a frame whose first bit reaches the far port from ``at_ps`` on may meet an outage."""
        return any(up > at_ps - self.latency for nic in (self.near, self.far) for _, up in nic.outages)


REQUEST_LOST, REPLY_LOST, NAK_SENT, BEHIND = 1, 2, 3, 4
"""What each request's decision (``code | wake << 3``: :class:`Losses`) says happened to it: its request lost, its
acknowledgement lost, it arrived out of sequence and carried the NAK PSN sequence error back, or it arrived out of
sequence behind that."""


class Losses(Settling):
    """The frames link outages lose and the requests that arrive out of sequence behind them, by (stream, size),
    for the streams the core follows: per operation a code (:data:`REQUEST_LOST`...) and the time a NAK or the
    missing request's arrival wakes it (``code | wake << 3``; wake 0: its own timer fires)."""

    what = "the frames a link outage loses"

    def __init__(self, ends, depth: dict[int, int]) -> None:
        super().__init__(depth)
        self.links = {k: _Link(end) for k, end in enumerate(ends) if followed(end)}
        self.iterations = {k: ends[k].work.iterations for k in self.links}
        """Per stream followed: its operations at each size (its workload runs for a count)."""
        self.broken: str | None = None
        """Why the last settled solve's decisions do not follow the responder's state (None: they do)."""
        self.open = True
        """Some decision of the operations solved so far may still change, or a later frame be lost: the prefix is
        worth settling again as the solve goes on (:meth:`settle_early`)."""

    def parts(self, key: tuple[int, int], lo: int, hi: int, found: Path):
        """Operations ``lo..hi-1`` of ``key`` of path ``found`` as ``(lo, hi, steps)`` runs of one decision."""
        link = self.links[key[0]]

        def steps(decision: int) -> tuple:
            code, wake = decision & 7, decision >> 3
            if code in (REQUEST_LOST, REPLY_LOST):
                frame = REQUEST_WIRE if code == REQUEST_LOST else REPLY_WIRE
                return woken(found, frame, link.latency, wake) if wake else timed_out(found, frame, link.latency,
                                                                                      link.timeout)
            return out_of_sequence(found, code == NAK_SENT, wake) if code else found.steps

        return [(a, b, steps(decision)) for a, b, decision in self.runs(key, lo, hi)]

    def total(self, stream: int, size: int | None = None) -> int:
        """The frames ``stream`` lost (at message ``size`` alone, where given)."""
        return int(sum(np.isin(decided & 7, (REQUEST_LOST, REPLY_LOST)).sum() for decided in self.of(stream, size)))

    def settle(self, marks: dict[tuple[int, int], dict[str, np.ndarray]]) -> bool:
        """Decide from a complete solve's ``marks`` which frames the outages lost (a request's first, else its
        acknowledgement's), which requests arrive out of sequence (:func:`_responder`) and when each is woken;
        where that differs from what the solve was made with, the solve's answer goes to the next solve
        (:meth:`~sim.engine.planner.settling.Settling.revise`): True then."""
        changed, self.broken = False, None
        for key, labelled in marks.items():
            decided = self._decide(key, labelled)
            if decided is not None:
                wanted, broken, _ = decided
                self.broken = self.broken or broken
                changed = self.revise(key, wanted) or changed
        return self.counted(changed)

    def settle_early(self, marks: dict[tuple[int, int], dict[str, np.ndarray]], horizon: int) -> bool:
        """As :meth:`settle`, on the operations solved so far (``marks``; no operation still to solve marks anything
        before ``horizon``, ps): where a decision that no later operation can change differs from what the solve is
        made with, the solve's answer goes to the next solve at once, and the rest of this one need not be solved:
        True then. Decisions that do not follow the responder are left to the complete solve. Sets :attr:`open`."""
        self.open = any(link.loses_after(horizon) for link in self.links.values())
        for key, labelled in marks.items():
            decided = self._decide(key, labelled, horizon)
            if decided is None:
                continue
            wanted, broken, known = decided
            self.open = self.open or broken is not None or known < len(wanted)
            if broken:
                continue
            old = self.decided.get(key)
            mine = old[:len(wanted)] if old is not None else np.zeros(len(wanted), np.int64)
            if (wanted[:known] != mine[:known]).any():
                whole = np.zeros(self.iterations[key[0]], np.int64) if old is None else old.copy()
                whole[:len(wanted)] = wanted
                return self.counted(self.revise(key, whole))
        return False

    def _decide(self, key: tuple[int, int], labelled: dict[str, np.ndarray], horizon: int = NEVER):
        """The decisions of ``key``'s operations in ``labelled`` (:func:`_responder`), None where the core does not
        follow ``key``'s stream."""
        link = self.links.get(key[0])
        if link is None or f"{WIRE}0.head" not in labelled:
            return None
        request = link.lost(labelled[f"{WIRE}0.head"], labelled[f"{WIRE}0.tail"], True)
        reply = link.lost(labelled[f"{REPLY}0.head"], labelled[f"{REPLY}0.tail"], False) & ~request
        old = self.decided.get(key, np.zeros(len(request), np.int64))[:len(request)]
        return _responder(labelled, request, reply, old, horizon, horizon < NEVER and link.loses_after(horizon))

    def confirm(self, marks: dict[tuple[int, int], dict[str, np.ndarray]]) -> str | None:
        """Why a settled solve may not stand: its decisions do not follow the responder (:attr:`broken`), a woken
        request's ACK timer fires first, a frame is lost but the first of a request's or its acknowledgement's, or an
        acknowledgement reaches the requester while an earlier request whose own was lost waits (it would end the
        wait)."""
        if self.broken:
            return self.broken
        for (k, size), labelled in marks.items():
            link, decided = self.links.get(k), self.decided.get((k, size))
            if link is None or decided is None or not decided.any():
                continue
            code, arrived = decided & 7, []
            wake = decided >> 3
            started = np.select([code == REQUEST_LOST, code == REPLY_LOST, code == BEHIND],
                                [labelled[f"{WIRE}0.tail"] - link.latency, labelled[f"{REPLY}0.tail"] - link.latency,
                                 labelled[f"{WIRE}0.tail"]], -1)  # (a request behind: no later than its arrival)
            if ((wake > 0) & (wake >= started + link.timeout)).any():
                return ("a request's ACK timer fires before the NAK PSN sequence error or the missing request wakes "
                        "it, which the vectorized core does not follow")
            for label in [label[:-5] for label in labelled if label.endswith(".head")]:
                head, tail = labelled[label + ".head"], labelled[label + ".tail"]
                missed = link.lost(head, tail, label.startswith(WIRE))
                missed &= ~((code == REQUEST_LOST) & (label == f"{WIRE}0"))
                missed &= ~((code == REPLY_LOST) & (label == f"{REPLY}0"))
                if missed.any():
                    return "a link outage loses a frame sent again, which the vectorized core does not follow"
                if label.startswith(REPLY):
                    own = (label == f"{REPLY}0") & np.isin(code, (REPLY_LOST, NAK_SENT))  # lost, or the NAK itself
                    arrived.append(np.where((head >= 0) & ~own, tail, -1))
            sent = labelled[f"{REPLY}0.tail"] - link.latency
            for i in np.flatnonzero(code == REPLY_LOST):
                until = int(decided[i] >> 3) or int(sent[i]) + link.timeout
                later = np.concatenate([a[i + 1:] for a in arrived])
                if ((later >= sent[i]) & (later < until)).any():
                    return ("an acknowledgement reaches the requester while an earlier request whose own a link "
                            "outage lost waits for its timer, which the vectorized core does not follow")
        return None


def _responder(labelled: dict[str, np.ndarray], request: np.ndarray, reply: np.ndarray, old: np.ndarray,
               horizon: int = NEVER, later: bool = False):
    """The decisions a solve's ``labelled`` times give (``request``, ``reply``: whose first request or
    acknowledgement an outage lost; ``old``: the decisions it was solved with), replaying the responder's state
    (:meth:`~models.nic.work_request.WorkRequestRun._responder`): a request whose frame is lost goes missing when
    none is and stops when it arrives sent again; one arriving meanwhile is out of sequence, the first carrying the
    NAK PSN sequence error back (its ``nak`` check: when it wakes the requests waiting for their timers), the later
    ones waiting behind until then, or until the missing one arrives. Each gap's NAK wakes the requests lost since
    the gap before it ended (one that starts before the last NAK reached the requester is not followed).

    ``labelled`` may hold the operations solved so far, no operation still to solve marking anything before
    ``horizon`` (ps): a gap that ends or whose NAK comes back no earlier may yet take in later operations, and
    where it does, or a request solved later may still be lost (``later``), a request whose acknowledgement was
    lost after the last gap closed may yet be woken by a NAK to come.

    Returns the decisions, why they do not follow the responder where they do not (None), and how many leading
    operations have decisions that no operation still to solve can change."""
    arrived, lost_at, replied = labelled[f"{REMOTE}0"], labelled[f"{WIRE}0"], labelled[f"{REPLY}0"]
    code = np.where(request, REQUEST_LOST, np.where(reply, REPLY_LOST, 0)).astype(np.int64)
    wake = np.zeros(len(code), np.int64)
    losses = sorted((int(lost_at[i]), int(i)) for i in np.flatnonzero(request))
    since, last_nak = np.iinfo(np.int64).min, None  # the end of the gap before; its NAK's arrival (None: none)
    known = len(code)
    k = 0
    while k < len(losses):
        start, missing = losses[k]
        end = int(arrived[missing])
        if end >= horizon:  # later operations may still arrive inside
            known, later = min(missing, int(np.argmax(arrived >= start))), True
            break
        inside = np.flatnonzero((arrived >= start) & (arrived <= end))
        inside = inside[inside != missing]
        if len(inside):
            inside = inside[np.argsort(arrived[inside], kind="stable")]
            ties = np.isin(arrived[inside], (start, end)).any() or (np.diff(arrived[inside]) == 0).any()
            if (last_nak is not None and start <= last_nak) or ties or (code[inside] == REQUEST_LOST).any():
                return code, ("after a link outage the responder's missing requests and NAKs come in an order the "
                              "vectorized core does not follow"), 0
            first = int(inside[0])
            mark = labelled.get("nak")
            at = int(mark[first]) if mark is not None and old[first] & 7 == NAK_SENT else end
            if at >= horizon:  # requests lost later may yet wait for it
                known, later = min(missing, int(np.argmax(arrived >= start))), True
                break
            code[first], code[inside[1:]], last_nak = NAK_SENT, BEHIND, at
            if (arrived[inside[1:]] == at).any():
                return code, ("a request arrives out of sequence at the very time the NAK PSN sequence error reaches "
                              "the requester, an order the vectorized core does not follow"), 0
            wake[inside[1:]] = np.where(arrived[inside[1:]] < at, at, end)
            # The NAK wakes the gap's requests waiting for their timers (those of a gap before went by theirs).
            waiting = (code == REQUEST_LOST) & (lost_at >= since) & (lost_at < at)
            waiting |= (code == REPLY_LOST) & (replied >= since) & (replied < at) & (np.arange(len(code)) < missing)
            wake[waiting] = at
        since = end
        k = next((j for j in range(k, len(losses)) if losses[j][0] > end), len(losses))
    if later:  # an acknowledgement lost since the last gap ended: a later NAK may wake it
        open_reply = np.flatnonzero((code == REPLY_LOST) & (replied >= since))
        known = min(known, int(open_reply[0])) if len(open_reply) else known
    return code | (wake << 3), None, known


def followed(end) -> bool:
    """Whether the vectorized core follows the frames a link outage loses in stream ``end``: an RC WRITE stream of a
    bandwidth workload for a count, whose ACK timer fires (``timeout`` above 0) and may send a request again
    (``retry_cnt`` above 0), on a link whose frames an outage loses."""
    qp, work = end.src.qp, end.work
    return (qp.qp_type is QP_RC and work.rule.verb == "write" and work.rule.streams and work.duration is None
            and qp.ack_timeout_ps is not None and qp.attr.retry_cnt > 0
            and bool(qp.node.nic.outages or end.dst.qp.node.nic.outages))

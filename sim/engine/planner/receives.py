"""Whether a ``send_bw``'s receives are always posted before its SENDs arrive on the vectorized core
(:mod:`sim.engine.planner.plan`): where one might not be, the event engine decides what the SENDs that find none
meet (RNR NAKs; drops on UC and UD)."""

from __future__ import annotations

import numpy as np

from models.nic.datapath import ARRIVED, RECEIVED
from models.nic.transport import acknowledged
from sim.fast import Finished


class ReceivesShort(Exception):
    """A send_bw's receives might not have been posted in time: the event engine decides what the SENDs that find
    none meet (:func:`short_receive_consequence`)."""


def short_receive_consequence(qp) -> str:
    """What a SEND that finds no receive posted at ``qp``, its responder, meets, in words: an RNR NAK where the
    service acknowledges requests (:func:`~models.nic.transport.acknowledged`), else a drop without a word back
    (:func:`~models.nic.receive.unacknowledged_refusal`)."""
    return "RNR NAKs may occur" if acknowledged(qp.qp_type) else "a SEND that finds none is dropped"


class ReceivesAhead:
    """Whether each send_bw SEND of a solve finds a receive posted when it arrives at the responder (the time of
    its first check there, :data:`~models.nic.datapath.ARRIVED`; where a piece has none, when it is posted).

    The server (:func:`models.verbs.workloads.send_bandwidth`) tops its queue up to ``ahead`` (``rx_depth``, at
    most the iterations) receives at the start of a size; the ``u`` receives of the previous size whose CQEs land
    after that are not free yet, so ``ahead - u`` are posted then. It then posts one receive for each completion it
    polls, in the order they land (the previous size's late ones first), at most its host's poll period after the
    CQE: receive ``i >= ahead - u`` is posted by completion ``i - ahead + u`` of that sequence plus the period.
    Where that bound is not before SEND ``i`` arrives, the receive may come too late.
    Pieces of each (workload, size) come in order; the last ``ahead`` completion times are kept across them.
    """

    def __init__(self, ends: list) -> None:  # the run's streams (sim.engine.planner.plan.Stream)
        self.ahead = {k: (min(e.work.rx_depth, e.work.iterations), e.dst.qp.node.host.params.poll_period_ps)
                      for k, e in enumerate(ends) if e.work.rule.loop == "send_bandwidth"}
        self.consequence = {k: short_receive_consequence(ends[k].dst.qp) for k in self.ahead}
        """Per send_bw workload: what its SENDs that find no receive meet (:func:`short_receive_consequence`)."""
        self.sequence: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        """Per (workload, size): the latest completions of its sequence, and how many late ones lead it."""
        self.last: dict[int, np.ndarray] = {}
        """Per workload: the receive completions of its latest size's last ``ahead`` SENDs (ps)."""

    def __call__(self, k: int, size: int, piece: Finished) -> None:
        """Check ``piece`` of workload ``k`` at ``size``.

        :raises ReceivesShort: a SEND might arrive before its receive is posted.
        """
        if k not in self.ahead:
            return
        depth, poll = self.ahead[k]
        if (k, size) not in self.sequence:
            before, start = self.last.get(k, np.empty(0, dtype=np.int64)), piece.post[0]
            if np.any(before == start):
                raise ReceivesShort(f"rx_depth {depth}: a receive completes as the next size starts",
                                    self.consequence[k])
            late = np.sort(before[before > start])
            self.sequence[k, size] = (late, len(late))
        kept, late = self.sequence[k, size]
        received = piece.marks[RECEIVED]
        sequence = np.concatenate((kept, received))
        ops = np.arange(piece.lo, piece.lo + len(piece.post))
        follows = ops >= depth - late  # posted after a completion, not at the start
        reposted = sequence[ops[follows] - depth - piece.lo + len(kept)] + poll
        if np.any(reposted >= piece.marks.get(ARRIVED, piece.post)[follows]):
            raise ReceivesShort(f"rx_depth {depth}", self.consequence[k])
        self.sequence[k, size] = (sequence[-depth:], late)
        self.last[k] = np.concatenate((self.last.get(k, np.empty(0, dtype=np.int64))
                                       if piece.lo else np.empty(0, dtype=np.int64), received))[-depth:]

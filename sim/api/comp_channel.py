"""``CompChannel`` in pyverbs' shape (pyverbs/cq.pyx) over :mod:`models.verbs.cq_events`: the completion events of
the CQs made with it, read on the simulated clock."""

from __future__ import annotations

from models.verbs.cq_events import ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_get_cq_event
from sim.api.device import CQ, Context
from sim.api.resource import Resource
from sim.core import DeadlockError, ProtocolError


class CompChannel(Resource):
    """A completion channel (``ibv_create_comp_channel``) of ``context``.

    :raises VerbsError: from :meth:`close`: ``EBUSY`` while CQs made with it are open
        (``ibv_destroy_comp_channel``).
    """

    def __init__(self, context: Context) -> None:
        context._check_open("ibv_create_comp_channel")
        self.context = context
        self.channel = ibv_create_comp_channel(context.ctx)
        """The verbs layer's channel (:class:`models.verbs.cq_events.CompChannel`)."""
        context._adopt(self)

    def get_cq_event(self, expected_cq: CQ, timeout: str | int | None = None) -> None:
        """``ibv_get_cq_event``: read the oldest event, which must be ``expected_cq``'s (pyverbs checks that too).
        The read blocks: the simulation runs until an event arrives, at most ``timeout`` of simulated time
        (``"10us"`` or int ps; ``0``: the fd non-blocking), or with no timeout as long as anything can still raise
        one. Acknowledge it with ``expected_cq.ack_events``.

        :raises VerbsError: ``EAGAIN`` when the timeout passed with no event.
        :raises DeadlockError: no timeout and nothing left to simulate can raise an event.
        :raises ProtocolError: the event is another CQ's.
        """
        call = "ibv_get_cq_event"
        self._check_open(call)
        if not self.context.testbed._block(lambda: bool(self.channel.events), timeout):
            raise DeadlockError(f"{call} on {self.context.name}: no completion event is pending and nothing left to "
                                "simulate can raise one (arm a CQ with req_notify and post first)")
        cq = ibv_get_cq_event(self.channel)
        if cq is not expected_cq.cq:
            raise ProtocolError(f"{call}: the event is another CQ's than the one expected")

    def _destroy(self) -> None:
        ibv_destroy_comp_channel(self.channel)

"""One stage of a message's path: a claim on a FIFO server with its service, head and tail times, then a delay.

See :mod:`models.nic.stages` for how a message streams through a list of them.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.core import FifoServer


class Stage(NamedTuple):
    """A claim on ``server`` (None: a pure delay) followed by ``latency_ps`` (all times in ps)."""

    server: FifoServer | None
    service_ps: int
    """How long the message occupies the server."""
    head_ps: int
    """Store-and-forward delay of the first unit before the next stage may start on it."""
    tail_ps: int
    """What the last unit still needs after it arrives."""
    latency_ps: int
    """Pure delay after the server."""
    eager: bool
    """Claimed at once, without waiting for the head (a server whose only feeder is the previous stage)."""

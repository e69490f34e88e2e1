"""One stage of a message's path: a claim on a FIFO server with its service, head and tail times, then a delay.

See :mod:`models.nic.datapath` for how a message streams through a list of them.
"""

from __future__ import annotations

from sim.core import FifoServer

Stage = tuple[FifoServer | None, int, int, int, int, bool]
"""``(server, service_ps, head_ps, tail_ps, latency_ps, eager)``; ``server`` None: a pure delay."""

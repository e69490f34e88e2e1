"""Each workload kind's posting rule, written once: perftest's test it stands for, the verb it posts, whether it
streams (a bandwidth loop) or measures one operation at a time, whether it is a ping-pong, whether it posts
receives, and what it inlines by default. The schema, both engines, the tables and the command line read these
records; adding a kind that posts with one of the loops below is one entry in :data:`KINDS`.

The loops themselves (:mod:`models.verbs.workloads`) are chosen by :meth:`WorkloadKind.loop`:

* ``bandwidth``: ``tx_depth`` work requests outstanding, a new one posted as each completion is polled
  (``ib_write_bw``, ``ib_read_bw``, ``ib_atomic_bw``); ``send_bandwidth`` does the same with the server's receives
  topped up (``ib_send_bw``);
* ``write_latency`` and ``send_latency``: a ping-pong, each end answering what lands; one iteration is a round
  trip and its latency half of it (``ib_write_lat``, ``ib_send_lat``);
* ``read_latency``: one work request at a time, its latency from post to completion (``ib_read_lat``,
  ``ib_atomic_lat``).

>>> KINDS["write_lat"].loop, KINDS["write_lat"].latency_ps(0, 10)
('write_latency', 5)
>>> KINDS["atomic_bw"].window(tx_depth=128), KINDS["read_lat"].window(tx_depth=128)
(128, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

VERB_TRANSPORTS = {"write": ("rc", "uc", "xrc"), "read": ("rc", "xrc"), "atomic": ("rc", "xrc"),
                   "send": ("rc", "uc", "ud", "xrc")}
"""The services that carry each verb (perftest refuses the others: UC carries RDMA WRITE and SEND, UD only SEND;
XRC what RC carries)."""


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind's posting rule."""

    name: str
    """The scenario's ``kind``."""
    test: str
    """perftest's program it stands for."""
    verb: str
    """What each work request posts: ``write``, ``read``, ``send`` or ``atomic`` (perftest's ``-A`` picks which)."""
    streams: bool
    """A bandwidth loop: ``tx_depth`` outstanding, several QPs, buffer pairs, post lists, ``cq_mod`` and both
    directions allowed; False: one operation at a time on one QP."""
    ping_pong: bool = False
    """Each end answers what lands from the other: both ends' buffers are written, both poll, and one iteration is
    a round trip whose latency is half of it."""
    inline_by_default: bool = False
    """perftest inlines small messages without ``-I`` (its latency tests of WRITE and SEND)."""

    @property
    def receives(self) -> bool:
        """Whether the loop posts receives (``rx_depth`` of them): the SEND tests."""
        return self.verb == "send"

    @property
    def reads_remote(self) -> bool:
        """Whether its work requests read the responder's memory (READs and atomics: ``max_rd_atomic`` applies)."""
        return self.verb in ("read", "atomic")

    @property
    def transports(self) -> tuple[str, ...]:
        """The QP services that carry it."""
        return VERB_TRANSPORTS[self.verb]

    @property
    def loop(self) -> str:
        """The name of its loop in :mod:`models.verbs.workloads`."""
        if self.streams:
            return "send_bandwidth" if self.receives else "bandwidth"
        if self.ping_pong:
            return "send_latency" if self.receives else "write_latency"
        return "read_latency"

    def window(self, tx_depth: int) -> int:
        """Work requests outstanding on one QP."""
        return tx_depth if self.streams else 1

    def latency_ps(self, posted, completed):
        """An operation's latency from its post and completion (ps, scalars or arrays)."""
        return half_round_trip_ps(posted, completed) if self.ping_pong else completed - posted


def measures_between_margins(duration, margin) -> bool:
    """perftest's check of a run for a duration (``force_dependecies``: "please check that DURATION > 2*MARGIN"):
    the duration outlasts a margin at each end, so something is measured between them (both in one unit)."""
    return duration > 2 * margin


def half_round_trip_ps(posted, completed):
    """A ping-pong iteration's latency: half its round trip (ps, rounded down to a whole picosecond)."""
    return (completed - posted) // 2


KINDS: dict[str, WorkloadKind] = {kind.name: kind for kind in (
    WorkloadKind("write_bw", "ib_write_bw", "write", streams=True),
    WorkloadKind("read_bw", "ib_read_bw", "read", streams=True),
    WorkloadKind("write_lat", "ib_write_lat", "write", streams=False, ping_pong=True, inline_by_default=True),
    WorkloadKind("read_lat", "ib_read_lat", "read", streams=False),
    WorkloadKind("send_bw", "ib_send_bw", "send", streams=True),
    WorkloadKind("send_lat", "ib_send_lat", "send", streams=False, ping_pong=True, inline_by_default=True),
    WorkloadKind("atomic_bw", "ib_atomic_bw", "atomic", streams=True),
    WorkloadKind("atomic_lat", "ib_atomic_lat", "atomic", streams=False),
)}
"""Every workload kind by name, in the schema's order."""
BANDWIDTH_KINDS = tuple(name for name, kind in KINDS.items() if kind.streams)
"""The kinds whose results are bandwidths (a summary row's ``bw_*`` columns)."""
LATENCY_KINDS = tuple(name for name, kind in KINDS.items() if not kind.streams)
"""The kinds whose results are latencies."""

"""The vectorized core's accelerations, each switchable by one flag.

None of them changes an answer: the solver's passes reach the event engine's solution from the pace's first
guesses as from a pass over free servers (:mod:`sim.fast.guesses`), however each server's jobs are found
(tests/sim/fast/test_speedups.py holds every setting to the same times). Each saves work:
``python bench/speedups.py`` shows how much.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Speedups:
    """Which accelerations :func:`sim.fast.solve` uses (all by default)."""

    pace: bool = True
    """A group that queued throughout its last block takes its first guesses from that block's pace, without a
    pass over free servers (:mod:`sim.fast.pace`)."""
    calm: bool = True
    """Claims proven never to wait for their server (:func:`sim.fast.spacing.never_queue`) start when their head
    arrives, with no server solve."""
    hints: bool = True
    """A server's solve starts from whether the same position queued last time (a probe for a queue, or
    pass-through first; :func:`sim.fast.server.serve`)."""
    merge_reuse: bool = True
    """A shared server's merged service order is reused when a later position of the pass serves the same claims,
    and its claims joined end to end are patched, not joined again, where only a few positions' claims changed
    (:mod:`sim.fast.merge_reuse`)."""
    own_waits: bool = True
    """A stream alone in its round that posts one operation at a time takes what each operation waited beyond its
    idle latency in the last pass as its own (its claims queued behind each other), whenever it is posted: the
    next pass's posts and shared claims move with it (:func:`sim.fast.block._guess`), instead of crawling one
    operation per pass (a SEND's receive completion queues behind its payload on the responder's PCIe link)."""

    crawl: bool = True
    """A block of the solver's smallest size whose passes still move their earliest disagreement later goes on
    passing past the solver's ``max_passes`` while they would keep under a quarter of it, instead of keeping that
    little: the next block would hold the same operations and repeat the passes (:func:`sim.fast.crawl.repeats`;
    streams crossing rails in ``rail_server.yaml``)."""
    chain: bool = True
    """Streams that each claim one server at two positions, the later one's claims following from the earlier one's
    start, take their next guesses of the later positions from serving all the server's claims one at a time
    (:mod:`sim.fast.chain`; a READ's response and completion entry on the NIC's switch uplink to a GPU, on one QP or
    several; a SEND's payload and receive completion on the responder's PCIe link), instead of settling one more link
    of that chain per pass."""
    tail_apart: bool = True
    """A block in which a stream changes its steps stops passing once the slices before the change have been
    settled in two passes running and only the stream's tail still disagrees: the next block solves the tail alone,
    without walking the changed steps in every pass (:func:`sim.fast.crawl.tail_crawls`; a window of requests
    RNR-NAKed dozens of times while their buffer is re-mapped, ``gpu_pressure.yaml``)."""


ALL = Speedups()
"""Every acceleration: the default."""
NONE = Speedups(pace=False, calm=False, hints=False, merge_reuse=False, own_waits=False, crawl=False, chain=False,
                tail_apart=False)
"""The exact solver alone."""


class NoHints(dict):
    """The hints of a solve with ``hints`` off: none is kept, so every server solve starts without one."""

    def __setitem__(self, key, value) -> None:
        pass

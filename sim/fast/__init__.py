"""The vectorized core: streams of operations through pipelines of FIFO servers, solved with numpy arrays.

Part of the simulation core: it knows nothing of RDMA and never imports ``models``. Its answers are the
event engine's (same recurrences, the same ordering rule, integer picoseconds); see :mod:`sim.fast.solver`.

The exact solver:

* :func:`solve` (:mod:`sim.fast.solver`) — whole streams, block by block; :mod:`sim.fast.block` — one block's
  passes, what it keeps and carries over; :mod:`sim.fast.block_pass` — one pass over every step;
* :mod:`sim.fast.server` — one server over many jobs (cumulative sum and running maximum; stall intervals;
  pools of identical servers), on the scans of :mod:`sim.fast.scans`;
* :mod:`sim.fast.merge` — claims of several positions on one server in the ordering rule's order;
  :mod:`sim.fast.turns` — claims made in a turn;
* :mod:`sim.fast.steps` — servers and groups of operations walking :mod:`sim.core.steps` lists;
* :mod:`sim.fast.guesses` — a block's first guesses: idle latencies, from below;

what it solves, decided before solving: :mod:`sim.fast.limits`; and its accelerations, each switchable by one flag
of :class:`Speedups` (none changes an answer): the pace of a saturated stream (:mod:`sim.fast.pace`,
:mod:`sim.fast.pace_lanes`), the claims proven never to queue (:mod:`sim.fast.spacing`), a server solve's hints
(:mod:`sim.fast.speedups`), a merge's reuse (:mod:`sim.fast.merge_reuse`), a stream's own waits
(:mod:`sim.fast.block`), and a smallest block's passes past the limit and a stream's crawling tail solved apart
(:mod:`sim.fast.crawl`). :mod:`sim.fast.draws` gives the drawn delays as arrays.

>>> from sim.core.steps import Claim, Rebase
>>> servers = [Server("link")]
>>> group = Group((Claim(0, service_ps=10), Rebase(from_tail=True)), ops=4, window=2)
>>> [(p.post.tolist(), p.done.tolist()) for p in solve(servers, [group])]
[([0, 0, 10, 20], [10, 20, 30, 40])]
"""

from sim.fast.block import NEVER
from sim.fast.draws import UniformSeries
from sim.fast.server import cut_through, pool
from sim.fast.solver import Finished, Unsolvable, solve
from sim.fast.speedups import ALL, NONE, Speedups
from sim.fast.steps import Group, Server

__all__ = ["ALL", "NEVER", "NONE", "Finished", "Group", "Server", "Speedups", "UniformSeries", "Unsolvable",
           "cut_through", "pool", "solve"]

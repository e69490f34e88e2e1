"""The vectorized core: streams of operations through pipelines of FIFO servers, solved with numpy arrays.

Part of the simulation core: it knows nothing of RDMA and never imports ``models``. Its answers are the
event engine's (same recurrences, the same ordering rule, integer picoseconds); see :mod:`sim.fast.solver`.

* :mod:`sim.fast.server` — one server over many jobs (cumulative sum and running maximum; stall intervals;
  pools of identical servers);
* :mod:`sim.fast.steps` — servers and groups of operations walking :mod:`sim.core.steps` lists;
* :mod:`sim.fast.merge` — claims of several positions on one server in the ordering rule's order;
* :mod:`sim.fast.spacing` — claims proven from the pipeline's shape never to wait for their server;
* :func:`solve` — whole streams, block by block, exact;
* :mod:`sim.fast.guesses` — the first guesses of a block's passes;
* :mod:`sim.fast.speedups` — its accelerations, each switchable (none changes an answer); the pace in
  :mod:`sim.fast.pace`, the claims that never queue in :mod:`sim.fast.spacing`.

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

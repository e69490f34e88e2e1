"""The vectorized core: streams of operations through pipelines of FIFO servers, solved with numpy arrays.

Part of the simulation core: it knows nothing of RDMA and never imports ``models``. Its answers are the
event engine's (same recurrences, same tie rules, integer picoseconds); see :mod:`sim.fast.solver`.

* :mod:`sim.fast.server` — one server over many jobs (cumulative sum and running maximum; stall intervals;
  pools of identical servers);
* :mod:`sim.fast.steps` — what an operation does (:class:`Claim`, :class:`Delay`, :class:`Gate`...);
* :mod:`sim.fast.spacing` — claims proven from the pipeline's shape never to wait for their server;
* :func:`solve` — whole streams, block by block, exact.

>>> import numpy as np
>>> servers = [Server("link")]
>>> group = Group((Claim(0, service_ps=10), Rebase(from_tail=True)), ops=4, window=2)
>>> [(p.post.tolist(), p.done.tolist()) for p in solve(servers, [group])]
[([0, 0, 10, 20], [10, 20, 30, 40])]
"""

from sim.fast.draws import UniformSeries
from sim.fast.server import cut_through, pool
from sim.fast.solver import Finished, UndecidableOrder, solve
from sim.fast.steps import Claim, Delay, Fork, Gate, Group, Rebase, Server, Sleep, Wait, Wake

__all__ = ["Claim", "Delay", "Finished", "Fork", "Gate", "Group", "Rebase", "Server", "Sleep", "UndecidableOrder",
           "UniformSeries", "Wait", "Wake", "cut_through", "pool", "solve"]

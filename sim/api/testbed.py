"""A testbed built in Python: nodes, NICs, GPUs and a fabric from the scenario presets, and its clock.

The testbed is what :func:`sim.engine.build.wire` builds from a scenario's ``nodes`` and ``fabric`` (same keys, same
presets, same checks), without buffers or workloads: the script creates those through the verbs objects.

Clock: simulated time moves only as the script's calls say. A control-path call (registration,
deregistration) returns after its simulated cost, so the clock has advanced by it when the call returns;
posting a work request is asynchronous (the clock does not move); :meth:`CQ.poll <sim.api.device.CQ.poll>`
runs the simulation until a completion arrives or its timeout passes; :meth:`Testbed.run` lets time pass.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from models.ib.mr_backing import migrate_pages
from models.nic.wqe import WcOpcode, WcStatus
from sim.engine.build import settle, wire
from sim.core import PS_PER_US, ConfigError, ProtocolError
from sim.core.errors import ConfigErrors
from sim.api.durations import duration_ps
from sim.core.units import MAX_CLOCK_PS, BoundError, format_time
from sim.scenario.loader import validate
from sim.scenario.refs import port_problems
from sim.scenario.fields import check_seed
from sim.scenario.schema import TestbedSpec
from sim.scenario.yaml_reader import PositionMap, format_path

TESTBED = "<testbed>"
"""How errors name a testbed's description (it has no file)."""


class Testbed:
    """Nodes, their NICs and GPUs, and the fabric between them, with one simulated clock.

    :param nodes: node names (each a node with the default NIC, ``connectx7``), or a mapping of name to the
        node's scenario keys (``{"a": {"nic": {"preset": "connectx6"}, "gpus": [{"preset": "h200"}]}}``), or
        a list of complete node mappings as in a scenario.
    :param fabric: the scenario's ``fabric`` keys (``rate``, ``latency``, ``mtu``, ``transport``).
    :param seed: run seed: the same script and seed give the same times.
    :param data: data mode: memory holds real bytes that RDMA moves, so the CPU can read and write them
        (``MR.read``/``MR.write``); off is faster and refuses CPU access to bytes.
    :param trace: record the protocol's events (slower).
    :raises ConfigError: a key or value the scenario schema refuses (``<testbed> nodes[0].nic.preset: ...``), or a
        seed outside a scenario's ``0 <= seed < 2**63``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, nodes=("a", "b"), fabric: dict | None = None, *, seed: int = 0, data: bool = True,
                 trace: bool = False) -> None:
        try:
            self.spec = validate(TestbedSpec, {"nodes": _node_list(nodes), "fabric": fabric or {}, "data": data},
                                 PositionMap(), TESTBED)
        except ConfigErrors as exc:  # no file, so no line and column to show
            raise ConfigErrors([ConfigError(e.reason, file=TESTBED, key=e.key) for e in exc.errors]) from None
        problems = port_problems(self.spec)
        try:
            self.seed = check_seed(seed)
        except ValueError as exc:
            problems.append((("seed",), str(exc)))
        if problems:
            raise ConfigErrors([ConfigError(reason, file=TESTBED, key=format_path(key)) for key, reason in problems])
        self.bed = wire(self.spec, seed, trace=trace)
        """The wired models (:class:`sim.engine.build.Testbed`): nodes, contexts, GPUs, the environment."""
        self.lids = {name: i + 1 for i, name in enumerate(self.bed.nodes)}
        """Each node's port LID, as a subnet manager would hand them out (1, 2, ... in node order)."""
        self.completions: list[tuple] = []
        """Every send completion polled through the API with its work request's size, as
        :data:`sim.api.results.RECORDED` names the fields: the results' rows."""
        self.registrations: list = []
        """Every MR the script registered (:class:`~sim.api.mr.MR`, closed ones too), in order: the results' rows."""
        self._qps: dict[tuple[int, int], object] = {}
        self._posted: dict[tuple[int, int], deque] = {}
        self._gpus: dict[str, object] = {}

    @property
    def env(self):
        """The simulation environment (:class:`sim.core.Environment`); scripts need not touch it."""
        return self.bed.env

    @property
    def now_ps(self) -> int:
        """Simulated time now (integer ps)."""
        return self.bed.env.now

    @property
    def now_us(self) -> float:
        """Simulated time now (us)."""
        return self.bed.env.now / PS_PER_US

    def run(self, duration: str | int) -> None:
        """Let ``duration`` of simulated time pass (a string with a unit, ``"10us"``, or integer ps): work in
        flight progresses, completions arrive in their CQs.

        :raises UnitError: a duration without a unit, negative, finer than a picosecond or longer than a day
            (``BoundError``, as a scenario's durations are), or one that would take the clock past its int64
            picoseconds.
        """
        env = self.bed.env
        passing = duration_ps(duration)
        if env.now + passing > MAX_CLOCK_PS:
            raise BoundError(f"Testbed.run: {format_time(passing)} from {format_time(env.now)} would take the clock "
                             f"past its end ({format_time(MAX_CLOCK_PS)}: int64 picoseconds)")
        if passing:  # no time passes: nothing to simulate
            env.run(until=env.now + passing)

    def gpu(self, name: str):
        """The GPU ``name`` (``"a.gpu0"``: node, then the GPU's name in the node's ``gpus``), as a
        :class:`~sim.api.gpu.GPU`.

        :raises ConfigError: no such GPU.
        """
        from sim.api.gpu import GPU

        if name not in self.bed.gpus:
            raise ConfigError(f"no GPU {name!r}; the testbed has {sorted(self.bed.gpus) or 'none'}", file=TESTBED,
                              key="gpus")
        if name not in self._gpus:
            self._gpus[name] = GPU(self, self.bed.gpus[name])
        return self._gpus[name]

    def migrate_host_pages(self, mr) -> str:
        """The kernel migrates the host pages under ``mr`` now (NUMA balancing, compaction; a scenario's
        ``host-page-migration``): an ODP MR's MMU notifier zaps their translation and the NIC re-faults on the next
        access; an MR that pins its pages (a long-term pin) blocks the migration. Returns what happened, as a
        scenario's event log says it.

        :raises ProtocolError: ``mr`` is closed, or not an MR of host memory.
        """
        mr._check_open("migrate_host_pages")
        if mr.location != "host":
            raise ProtocolError(f"migrate_host_pages: the MR's memory is on {mr.location}, not host memory")
        host = mr.context.ctx.node.host
        held = next((b for b in host.buffers.values() if b.addr <= mr.buf < b.addr + b.size), None)
        if held is None:
            raise ProtocolError("migrate_host_pages: no memory of the process is at the MR's buf")
        start = max(held.addr, mr.mr.iova)  # an implicit MR covers the whole space: the buffer at its buf moves
        return migrate_pages(mr.mr, start, min(held.addr + held.size, mr.mr.iova + mr.mr.length) - start)

    def node_of_lid(self, lid: int) -> str | None:
        """The node whose port has LID ``lid``, or None."""
        return next((name for name, value in self.lids.items() if value == lid), None)

    def write_results(self, out: str | os.PathLike, *, name: str, script: str | os.PathLike | None = None,
                      force: bool = False) -> Path:
        """Write this run as a results directory (see :func:`sim.api.results.write_script_results`)."""
        from sim.api.results import write_script_results

        return write_script_results(self, out, name=name, script=script, force=force)

    def _record(self, context, wcs: list) -> None:
        """Keep the send completions among ``wcs`` polled on ``context``'s node, each with its work request's size:
        the oldest size its QP posted (RC completes a QP's work requests in posting order, a signaled one's
        completion freeing the successful unsignaled ones before it). Receive completions are not kept: a
        receive's completion carries no time of its own post, so it has no latency to report."""
        for wc in wcs:
            if wc.opcode & WcOpcode.RECV:
                continue
            posted = self._posted[(context.lid, wc.qp_num)]
            while wc.status is WcStatus.SUCCESS and not posted[0][0]:
                posted.popleft()
            self.completions.append((context.name, wc.qp_num, wc.wr_id, wc.opcode.name, posted.popleft()[1],
                                     wc.posted_ps, wc.completed_ps, wc.status.value))

    def _run_until(self, done, deadline_ps: int | None) -> bool:
        """Simulate event by event until ``done()`` holds or the clock reaches ``deadline_ps`` (None: as long as
        events remain). Returns False when the events ran out first without a deadline.

        Stepping leaves nothing behind in the event queue (no timeout event that would fire later).
        """
        env = self.bed.env
        while not done():
            upcoming = env.peek()
            if deadline_ps is not None and upcoming > deadline_ps:
                if env.now < deadline_ps:
                    env.run(until=deadline_ps)
                return True
            if upcoming == float("inf"):
                return False
            env.step()
        return True

    def _block(self, done, timeout: str | int | None) -> bool:
        """A blocking call's wait: simulate until ``done()`` holds, at most ``timeout`` (``"10us"`` or int ps; ``0``:
        not at all; None: as long as events remain). False when, without a timeout, the events ran out first."""
        if done() or timeout == 0:
            return True
        return self._run_until(done, None if timeout is None else self.now_ps + duration_ps(timeout))

    def _advance(self, cost_ps: int) -> None:
        """A blocking control-path call of ``cost_ps`` returned: the clock moves past it."""
        settle(self.bed, cost_ps)


def _node_list(nodes) -> list:
    """The scenario's ``nodes`` list from names, a name -> keys mapping or the list itself."""
    if isinstance(nodes, dict):
        return [{"name": name, **(keys or {})} for name, keys in nodes.items()]
    return [{"name": node} if isinstance(node, str) else node for node in nodes]

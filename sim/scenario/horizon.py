"""The simulated-time horizon: a scenario whose run could pass the engines' int64-picosecond clock is refused.

Each key is bounded on its own (:mod:`sim.core.units`, the schema), but products of keys are not: a billion
2 GiB messages at 1 Mb/s, or a hundred thousand storms a day apart, would run past the clock. Before a run,
every workload's simulated time is estimated from above -- each operation moves its bytes at the slowest
rate on its path (the fabric, either PCIe link), waits for its source's DMA read round trips, and pays every
fixed latency of the path twice, as an unpipelined round trip would -- and every event's last action is
placed. Workloads run one after another; the estimate of the run must stay below :data:`HORIZON_PS`.
"""

from __future__ import annotations

from models.pcie.link import PcieParams
from sim.core.units import MAX_CLOCK_PS, PS_PER_S, transfer_ps
from sim.scenario.resolve import fabric_params, host_params, nic_params, pcie_params
from sim.scenario.nodes import NodeSpec
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec

HORIZON_PS = MAX_CLOCK_PS // 4
"""About 26 days: a quarter of the clock, headroom for what the estimate leaves out (header bytes, faults,
registrations, retries)."""

Problem = tuple[tuple, str]


def _days(ps: int) -> str:
    return f"{ps / (86_400 * PS_PER_S):,.1f} days"


def _node_latency_ps(node: NodeSpec) -> int:
    """Every fixed latency one operation meets in a node: doorbell, NIC stages, PCIe flights, the poll."""
    nic, pcie = nic_params(node), pcie_params(node)
    return (nic.doorbell_ps + nic.tx_process_ps + nic.tx_latency_ps + nic.rx_process_ps + nic.rx_latency_ps
            + pcie.read_latency_ps + pcie.write_latency_ps + host_params(node).poll_period_ps)


def _dma_read_ps(pcie: PcieParams, nbytes: int) -> int:
    """Read round trips to fetch ``nbytes`` with ``read_tags`` requests of ``mrrs`` bytes in flight."""
    requests = -(-nbytes // pcie.mrrs)
    return -(-requests // (pcie.read_tags or requests)) * pcie.read_latency_ps


def _path(scenario: Scenario, work: WorkloadSpec) -> tuple[list[NodeSpec], list[PcieParams], int, float]:
    """The requester's and responder's nodes and PCIe links, the fabric's latency (ps) and the slowest rate on the
    path (B/s); the workload's buffers must exist."""
    places = {b.name: b.on.split(".")[0] for b in scenario.buffers}
    nodes = [next(n for n in scenario.nodes if n.name == places[name]) for name in (work.from_, work.to)]
    links = [pcie_params(n) for n in nodes]
    fabric = fabric_params(scenario)
    return nodes, links, fabric.latency_ps, min([fabric.rate_Bps] + [link.tlp_Bps for link in links])


def _window(work: WorkloadSpec) -> int:
    """Work requests one stream has in flight at most: ``tx_depth`` (at least 2, as the QPs are made:
    :func:`sim.engine.harness.endpoints`), one for a latency test's ping-pong."""
    return max(work.tx_depth, 2) if work.rule.streams else 1


def workload_operations(scenario: Scenario, work: WorkloadSpec) -> list[int]:
    """Per size of ``work``, the operations all its streams post: ``iterations`` each, or, for a run of
    ``duration``, at most as many as the path lets its QPs complete in it plus their windows still in flight.
    The QPs of one buffer pair and direction share its path (each pair and direction counted as a path of its
    own); the lowest of three bounds is taken: one operation per service time of the slowest rate on the path (the
    payload), per engine the QPs use of the requester's per-WQE processing and of the responder's, and
    ``tx_depth`` operations per QP per lifetime of one (the requester's doorbell and send pipeline, for RC the
    fabric both ways and the responder's receive pipeline before the acknowledgement, and the completion's PCIe
    write)."""
    if work.duration is None:
        return [work.iterations * work.streams()] * len(work.size_list())
    (src, dst), (link, _), latency_ps, rate = _path(scenario, work)
    requester, responder = nic_params(src), nic_params(dst)
    lifetime = (requester.doorbell_ps + requester.tx_latency_ps + link.write_latency_ps
                + (2 * latency_ps + responder.rx_latency_ps if work.transport == "rc" else 0))
    window, qps, duration = _window(work), work.qps, work.duration
    engines = min(min(qps, requester.tx_engines) * duration // max(requester.tx_process_ps, 1),
                  min(qps, responder.rx_engines) * duration // max(responder.rx_process_ps, 1))
    paths = work.streams() // qps
    return [paths * (min(duration // max(transfer_ps(size, rate), 1), engines,
                         qps * window * (duration // max(lifetime, 1))) + qps * window)
            for size in work.size_list()]


def workload_ps(scenario: Scenario, work: WorkloadSpec) -> int:
    """An upper estimate of the simulated time of one workload (ps); its buffers must exist. A run of
    ``duration`` posts for that long per size, then waits for its windows in flight."""
    nodes, links, latency_ps, rate = _path(scenario, work)
    fixed = 2 * (latency_ps + sum(_node_latency_ps(n) for n in nodes))
    ops = (work.iterations if work.duration is None else _window(work)) * work.qps
    return sum((work.duration or 0) + ops * (transfer_ps(size, rate) + fixed
                                             + max(_dma_read_ps(link, size) for link in links))
               for size in work.size_list())


def check_horizon(scenario: Scenario) -> list[Problem]:
    """The workload or event that would take the run past :data:`HORIZON_PS`, if any."""
    problems: list[Problem] = []
    elapsed = 0
    for i, work in enumerate(scenario.workload):
        elapsed += workload_ps(scenario, work)
        if elapsed > HORIZON_PS:
            key = "iterations" if work.duration is None else "duration"
            problems.append((("workload", i, key), f"the run would simulate about {_days(elapsed)} by the end of "
                             f"this workload, past the {_days(HORIZON_PS)} the engines' int64-picosecond clock "
                             f"allows; lower {key}, sizes or qps, or raise the rates"))
            break
    for i, event in enumerate(scenario.events):
        if event.last_ps() > HORIZON_PS:
            problems.append((("events", i), f"{event.kind} acts until about {_days(event.last_ps())}, past the "
                             f"{_days(HORIZON_PS)} the engines' int64-picosecond clock allows"))
    return problems

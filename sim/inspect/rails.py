"""Per-rail bandwidth of a run with rails nodes: what each stream of each workload delivered, beside the
closed-form estimate of :func:`models.pcie.server.flow_rates` for the same flows on the same topologies."""

from __future__ import annotations

import pandas as pd

from models.fabric import RETH
from models.nic.stages import memory_target
from models.pcie.server import flow_rates, topo_matrix
from sim.engine.build import Testbed
from sim.core import PS_PER_S
from sim.inspect.tables import blocks, cell, header
from sim.engine.harness import workload_opcode
from sim.engine.tables import RunResult


def has_rails(bed: Testbed) -> bool:
    """Whether a node of ``bed`` has several NICs."""
    return bool(bed.rails)


def topo_matrices(bed: Testbed) -> str:
    """The ``nvidia-smi topo -m`` matrix of every rails node, each under its name."""
    return "\n\n".join(f"{name}:\n{topo_matrix(bed.nodes[name].topology)}" for name in bed.rails)


def rail_table(result: RunResult) -> pd.DataFrame:
    """One row per stream of each (workload, size) of bandwidth tests: the NIC and memory at each end, the rate it
    delivered (``bw_GBps``: its bytes over its first post to its last completion) and the estimate
    (``estimate_GBps``): the least of the DMA reads at the data's source and the DMA writes at its sink, each
    :func:`~models.pcie.server.flow_rates` over the streams that run at once on that node, and the wire, shared
    by the streams of one NIC port. Worked out at the first call and kept on ``result`` (a finished run does not
    change), so its outputs and what ``rdmasim run`` prints share one."""
    if result.rails is None:
        result.rails = _rail_rows(result)
    return result.rails


def _rail_rows(result: RunResult) -> pd.DataFrame:
    bed, scenario = result.testbed, result.scenario
    ops = result.table.frame(["workload", "bytes", "qp", "posted_ps", "completed_ps", "ok"])
    rows = []
    for work in scenario.workload:
        label = work.name or work.kind
        if not work.rule.streams:
            continue
        flows = bed.flows[label]
        directions = flows + ([(b, a) for a, b in flows] if work.bidirectional else [])
        reads_remote = workload_opcode(work).reads_remote
        for size in work.size_list():
            mine = ops[(ops["workload"] == label) & (ops["bytes"] == size)]
            legs = [(dst, src) if reads_remote else (src, dst) for src, dst in directions]
            estimate = _estimates(bed, legs, size)
            for k, ((req, resp), (source, sink)) in enumerate(zip(directions, legs)):
                done = mine[(mine["qp"] == k) & mine["ok"]]
                span = done["completed_ps"].max() - done["posted_ps"].min() if len(done) else 0
                rows.append({"variant": result.variant, "workload": label, "bytes": size, "stream": k,
                             "requester": f"{req.qp.node.name}.{req.qp.node.device}",
                             "responder": f"{resp.qp.node.name}.{resp.qp.node.device}",
                             "source": _place(source), "sink": _place(sink),
                             "bw_GBps": len(done) * size * PS_PER_S / span / 1e9 if span else float("nan"),
                             "estimate_GBps": estimate[k] / 1e9})
    return pd.DataFrame(rows)


def _place(end) -> str:
    """'<node>.<memory vertex>' of an endpoint's buffer as its NIC reaches it now ('host' on a node without a
    topology)."""
    return f"{end.qp.node.name}.{_target(end)}"


def _target(end) -> str:
    return memory_target(end.mr, end.qp.pd.context.env.now) or "host"


def _estimates(bed: Testbed, legs, size: int) -> list[float]:
    """Bytes/s of each (source end, sink end) stream running at once (see :func:`rail_table`)."""
    read = _node_rates(legs, size, 0, read=True)
    write = _node_rates(legs, size, 1, read=False)
    fabric = bed.fabric.params
    ports: dict[str, int] = {}
    for source, sink in legs:
        for end in (source, sink):
            ports[end.qp.node.nic.name] = ports.get(end.qp.node.nic.name, 0) + 1
    wire = [fabric.efficiency(size, RETH) / max(ports[s.qp.node.nic.name], ports[t.qp.node.nic.name])
            for s, t in legs]
    return [min(r, w, x) for r, w, x in zip(read, write, wire)]


def _node_rates(legs, size: int, side: int, *, read: bool) -> list[float]:
    """:func:`flow_rates` of each stream's ``side`` end (0: its source, read; 1: its sink, written), the
    streams of each node together; infinite for an end on a node without a topology."""
    rates = [float("inf")] * len(legs)
    by_node: dict[str, list[int]] = {}
    for k, leg in enumerate(legs):
        by_node.setdefault(leg[side].qp.node.name, []).append(k)
    for indices in by_node.values():
        ends = [legs[k][side] for k in indices]
        graph = ends[0].qp.node.topology
        if graph is None:
            continue
        got = flow_rates(graph, [(e.qp.node.device, _target(e)) for e in ends], size, read=read)
        for k, rate in zip(indices, got):
            rates[k] = rate
    return rates


def format_rails(results: list[RunResult]) -> str:
    """What ``rdmasim run`` prints for rails nodes: each one's ``nvidia-smi topo -m`` matrix, then every stream's
    NICs, memories, delivered bandwidth and estimate; empty when no node has several NICs."""
    if not results or not has_rails(results[0].testbed):
        return ""
    table = pd.concat([rail_table(r) for r in results], ignore_index=True)
    lines = [topo_matrices(results[0].testbed), ""]
    if len(table):
        shown = table.assign(bw_Gbps=table["bw_GBps"] * 8, estimate_Gbps=table["estimate_GBps"] * 8)
        columns = ["variant", "workload", "bytes", "stream", "requester", "responder", "source", "sink", "bw_Gbps",
                   "estimate_Gbps"]
        rows = [[cell(c, r[c]) for c in columns] for r in shown.to_dict("records")]
        lines.append(blocks([header(c) for c in columns], rows, 3))
    return "\n".join(lines).rstrip()

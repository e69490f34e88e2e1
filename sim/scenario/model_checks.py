"""The reference checks that ask the devices' models, run once every name in a scenario resolves
(:func:`sim.scenario.refs.check_references`): a peermem buffer's GPU has a peer-memory client, each workload's queues
and transport are ones the NICs of its ends create, its QPs on a rails node open NICs its buffers are registered
on, a library study fits its GPU's memory, and the run's simulated time fits the clock."""

from __future__ import annotations

from models.gpu import gpu_params
from models.nic.transport import qp_type_of
from models.pcie.server import buffer_nics, build_rail_server, qp_nic, rail_nics
from models.presets import GPU_VENDOR
from models.verbs.peermem import no_peer_memory_client
from models.verbs.qp import check_qp_type
from sim.core import VerbsError
from sim.scenario.horizon import Problem, check_horizon
from sim.scenario.resolve import nic_params
from sim.scenario.schema import Scenario


def model_problems(scenario: Scenario) -> list[Problem]:
    """Every problem the models find in ``scenario``, whose names all resolve; the simulated time's only when there
    is none other."""
    problems = (peermem_problems(scenario) + queue_problems(scenario) + transport_problems(scenario)
                + rail_problems(scenario) + capacity_problems(scenario))
    return problems or check_horizon(scenario)


def gpu_vendors(scenario: Scenario) -> dict[str, str]:
    """'<node>.<gpu>' -> the driver profile of that GPU (its ``exporter``, else its preset's vendor)."""
    return {f"{n.name}.{name}": gpu.exporter or GPU_VENDOR[gpu.preset]
            for n in scenario.nodes for gpu, name in zip(n.gpus, n.gpu_names())}


def peermem_problems(scenario: Scenario) -> list[Problem]:
    """A buffer registered with peermem is on a GPU whose driver registers a peer-memory client."""
    vendors, problems = gpu_vendors(scenario), []
    for i, buf in enumerate(scenario.buffers):
        if buf.registration == "peermem" and (unclaimed := no_peer_memory_client(vendors[buf.on])):
            problems.append((("buffers", i, "register"), f"peermem: {unclaimed}"))
    return problems


def _workload_ends(scenario: Scenario) -> list[tuple]:
    """Each workload with the names of the nodes its buffers are on, in the nodes' order."""
    node_of = {b.name: b.on.split(".")[0] for b in scenario.buffers}
    return [(work, [n.name for n in scenario.nodes
                    if n.name in {node_of.get(b) for pair in work.buffer_pairs() for b in pair}])
            for work in scenario.workload]


def queue_problems(scenario: Scenario) -> list[Problem]:
    """Each workload's queues fit the NICs of both its ends: ibv_create_qp refuses a send queue (tx_depth) or a
    SEND test's receive queue (rx_depth) deeper than the device's max_qp_wr."""
    nodes = {n.name: n for n in scenario.nodes}
    problems = []
    for i, (work, ends) in enumerate(_workload_ends(scenario)):
        depths = [("tx_depth", work.tx_depth)] + ([("rx_depth", work.rx_depth)] if work.rule.receives else [])
        for key, depth in depths:
            short = [(name, nic_params(nodes[name]).max_qp_wr) for name in ends
                     if depth > nic_params(nodes[name]).max_qp_wr]
            if short:
                name, limit = short[0]
                problems.append((("workload", i, key), f"{key} {depth} is deeper than the {nodes[name].nic.preset} NIC"
                                 f" of node '{name}' takes: max_qp_wr {limit} (ibv_create_qp fails with EINVAL)"))
    return problems


def transport_problems(scenario: Scenario) -> list[Problem]:
    """Each workload's transport is one the NICs of both its ends create QPs of (:func:`check_qp_type`)."""
    nodes = {n.name: n for n in scenario.nodes}
    problems = []
    for i, (work, ends) in enumerate(_workload_ends(scenario)):
        for name in ends:
            try:
                check_qp_type(nic_params(nodes[name]), qp_type_of(work.transport))
            except VerbsError as exc:
                problems.append((("workload", i, "transport"), f"the {nodes[name].nic.preset} NIC of node '{name}' "
                                 f"refuses it: {exc}"))
                break
    return problems


def rail_problems(scenario: Scenario) -> list[Problem]:
    """On a rails node each QP of a workload opens the NIC its ``rails`` policy picks (:func:`qp_nic`); the buffer
    at that end must be registered there (its ``nics``, :func:`buffer_nics`), or the run fails at that QP."""
    nodes, buffers = {n.name: n for n in scenario.nodes}, {b.name: b for b in scenario.buffers}
    graphs, problems = {}, []
    for i, work in enumerate(scenario.workload):
        for name in dict.fromkeys(b for pair in work.buffer_pairs() for b in pair):
            buf = buffers[name]
            node = nodes[buf.on.split(".")[0]]
            if node.rails is None:
                continue
            layout = node.rails.layout()
            g = graphs[node.name] = graphs.get(node.name) or build_rail_server(layout)
            home = rail_nics(g, node.vertex(buf.on.split(".")[1]), layout)
            registered = buffer_nics(g, home, buf.nics)
            missed = [(k, nic) for k in range(work.qps) if (nic := qp_nic(g, home, work.rails, k)) not in registered]
            if missed:
                (k, nic), listed = missed[0], buf.nics if isinstance(buf.nics, str) else ", ".join(buf.nics)
                problems.append((("workload", i, "rails"), f"'{work.rails}' opens QP {k} of '{name}' on "
                                 f"{node.name}.{nic}, where its nics ({listed}) do not register it (only on "
                                 f"{', '.join(registered)}): give '{name}' nics: all, or a list with {nic}"))
                break
    return problems


def capacity_problems(scenario: Scenario) -> list[Problem]:
    """What a library study holds at once, with the scenario's buffers on the same GPU, fits in that GPU's memory."""
    capacity = {f"{n.name}.{name}": g.memory or gpu_params(g.preset).hbm_bytes
                for n in scenario.nodes for name, g in zip(n.gpu_names(), n.gpus)}
    problems = []
    for i, study in enumerate(scenario.library):
        held = _study_bytes(study)
        if held and study.on in capacity:
            held += sum(b.size for b in scenario.buffers if b.on == study.on)
            if held > capacity[study.on]:
                key = "sizes" if study.kind == "rcache-churn" else "buffers"
                problems.append((("library", i, key), f"{held} bytes live at once (with the scenario's buffers) do "
                                 f"not fit the {capacity[study.on]} bytes of {study.on}"))
    return problems


def _study_bytes(study) -> int:
    """GPU memory a study holds at once (0: one buffer at a time, or none of the scenario's GPUs)."""
    if study.kind == "rcache-churn":
        return sum(study.sizes)
    if study.kind == "registration-order" and study.memory == "device":
        return sum(study.buffer_sizes())
    return 0

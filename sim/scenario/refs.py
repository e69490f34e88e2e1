"""Cross-reference checks the schema cannot express: names unique, references resolve, sizes and the run's
simulated time fit."""

from __future__ import annotations

import difflib

from models.gpu import gpu_params
from models.nic.transport import qp_type_of, receive_overhead
from models.nic.port_rates import PORT_RATES
from models.pcie.server import buffer_nics, build_rail_server, qp_nic, rail_nics
from models.verbs.qp import check_qp_type
from models.presets import GPU_VENDOR
from models.verbs.peermem import no_peer_memory_client
from models.versions import MOVE_NOTIFY_ALWAYS_BUILT, KernelBehaviour, Version
from sim.core import VerbsError
from sim.scenario.horizon import check_horizon
from sim.scenario.resolve import nic_params
from sim.scenario.nodes import NodeSpec
from sim.scenario.schema import Scenario, TestbedSpec

Problem = tuple[tuple, str]
"""A key path into the scenario and the reason it is wrong."""
HOST_MODES = ("pinned", "odp")
"""Registration modes of host memory; the others register GPU memory."""


def gpu_places(scenario: Scenario) -> list[str]:
    """'<node>.<gpu>' of every GPU (unnamed GPUs are gpu0, gpu1, ...)."""
    return [f"{n.name}.{name}" for n in scenario.nodes for name in n.gpu_names()]


def gpu_vendors(scenario: Scenario) -> dict[str, str]:
    """'<node>.<gpu>' -> the driver profile of that GPU (its ``exporter``, else its preset's vendor)."""
    return {f"{n.name}.{name}": gpu.exporter or GPU_VENDOR[gpu.preset]
            for n in scenario.nodes for gpu, name in zip(n.gpus, n.gpu_names())}


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(choices) or 'none'})"


def _duplicates(items, section: str) -> list[Problem]:
    """A name given twice in ``section`` (an item without a name, a workload's, names nothing: a variant's
    ``set`` reaches it by index)."""
    seen: set[str] = set()
    problems = []
    for i, item in enumerate(items):
        if item.name is not None and item.name in seen:
            problems.append(((section, i, "name"), f"duplicate {section.removesuffix('s')} name '{item.name}'"))
        seen.add(item.name)
    return problems


def nic_names(node: NodeSpec) -> list[str]:
    """The NICs of a node: ``nic0`` and, on a rails node, one per NIC of its layout."""
    count = 1 if node.rails is None else node.rails.layout().nics
    return [f"nic{k}" for k in range(count)]


def _nic_problems(path: tuple, names: list[str], known: list[str]) -> list[Problem]:
    return [((*path, k), f"no NIC named '{name}'{_suggest(name, known)}") for k, name in enumerate(names)
            if name not in known]


def check_references(scenario: Scenario) -> list[Problem]:
    """Every broken reference in a schema-valid scenario, with the key path that holds it."""
    problems = (_duplicates(scenario.nodes, "nodes") + _duplicates(scenario.buffers, "buffers")
                + _duplicates(scenario.variants, "variants") + _duplicates(scenario.workload, "workload"))
    nodes = [n.name for n in scenario.nodes]
    places = {f"{n.name}.host" for n in scenario.nodes} | set(gpu_places(scenario))
    buffers = {b.name: b for b in scenario.buffers}
    for i, buf in enumerate(scenario.buffers):
        node = buf.on.split(".")[0]
        if node not in nodes:
            problems.append((("buffers", i, "on"), f"no node named '{node}'{_suggest(node, nodes)}"))
        elif buf.on not in places:
            problems.append((("buffers", i, "on"), f"no memory named '{buf.on}'{_suggest(buf.on, sorted(places))}"))
        elif buf.on.endswith(".host") and buf.registration not in HOST_MODES:
            problems.append((("buffers", i, "register"), f"'{buf.registration}' registers GPU memory; "
                             f"'{buf.name}' is host memory: use one of {', '.join(HOST_MODES)}"))
        elif not buf.on.endswith(".host") and buf.registration in HOST_MODES:
            problems.append((("buffers", i, "register"), f"GPU memory cannot be registered as '{buf.registration}': "
                             "get_user_pages cannot pin or fault device memory (no struct pages); use dmabuf, "
                             "dmabuf-pinned or peermem"))
        elif buf.registration == "peermem" and (unclaimed := no_peer_memory_client(gpu_vendors(scenario)[buf.on])):
            problems.append((("buffers", i, "register"), f"peermem: {unclaimed}"))
        if node in nodes and isinstance(buf.nics, list):
            problems += _nic_problems(("buffers", i, "nics"), buf.nics, nic_names(scenario.nodes[nodes.index(node)]))
    for i, node in enumerate(scenario.nodes):
        behaviour = KernelBehaviour(Version.parse(node.kernel.version))
        if behaviour.move_notify_always_on and node.kernel.dmabuf_move_notify is False:
            problems.append((("nodes", i, "kernel", "dmabuf_move_notify"), f"kernel {node.kernel.version} always "
                             "builds CONFIG_DMABUF_MOVE_NOTIFY; it cannot be turned off "
                             f"(since {MOVE_NOTIFY_ALWAYS_BUILT})"))
    for i, event in enumerate(scenario.events):
        if event.kind in ("qp-error", "nic-reset", "process-exit", "link-flap"):
            if event.node not in nodes:
                problems.append((("events", i, "node"), f"no node named '{event.node}'{_suggest(event.node, nodes)}"))
        elif event.kind in ("gpu-memory-pressure", "gpu-job-grows", "managed-job", "eviction-storm"):
            if event.on not in gpu_places(scenario):
                problems.append((("events", i, "on"), f"no GPU named '{event.on}'"
                                 f"{_suggest(event.on, sorted(gpu_places(scenario)))}"))
        elif event.buffer not in buffers:
            problems.append((("events", i, "buffer"), f"no buffer named '{event.buffer}'"
                             f"{_suggest(event.buffer, list(buffers))}"))
        elif event.kind == "peermem-reclaim" and buffers[event.buffer].registration != "peermem":
            problems.append((("events", i, "buffer"), f"'{event.buffer}' is not registered with peermem"))
        elif event.kind == "host-page-migration" and not buffers[event.buffer].on.endswith(".host"):
            problems.append((("events", i, "buffer"), f"'{event.buffer}' is not in host memory"))
        elif event.kind in ("dmabuf-revoke", "exporter-fault") and not buffers[event.buffer].registration.startswith(
                "dmabuf"):
            problems.append((("events", i, "buffer"), f"'{event.buffer}' is not registered from a dma-buf "
                             "(register: dmabuf or dmabuf-pinned)"))
    for i, work in enumerate(scenario.workload):
        for j, (source, sink) in enumerate(work.buffer_pairs()):
            path = ("workload", i) if j == 0 else ("workload", i, "pairs", j - 1)
            ends = []
            for key, name in (("from", source), ("to", sink)):
                if name not in buffers:
                    problems.append(((*path, key), f"no buffer named '{name}'{_suggest(name, list(buffers))}"))
                else:
                    ends.append(buffers[name])
            if len(ends) == 2:
                node = ends[0].on.split(".")[0]
                if ends[1].on.split(".")[0] == node:
                    problems.append(((*path, "to"), f"'{source}' and '{sink}' are both on node {node};"
                                     " a measurement needs buffers on two different nodes"))
                largest = max(work.size_list())
                overhead = receive_overhead(qp_type_of(work.transport))
                for key, buf, extra in (("from", ends[0], 0), ("to", ends[1], overhead)):
                    if largest + extra > buf.size:
                        grh = f" + {extra} (the GRH)" if extra else ""
                        problems.append((("workload", i, "sizes"), f"message size {largest}{grh} does not fit "
                                         f"buffer '{buf.name}' ({buf.size} bytes, referenced by '{key}')"))
        if work.transport == "ud" and max(work.size_list()) > scenario.fabric.mtu:
            problems.append((("workload", i, "sizes"), f"a UD message is one packet: {max(work.size_list())} bytes is "
                             f"more than the fabric's MTU {scenario.fabric.mtu} (perftest: Max message size in UD "
                             "cannot be greater than MTU)"))
    problems += library_problems(scenario) + port_problems(scenario) + queue_problems(scenario)
    problems += transport_problems(scenario) + rail_problems(scenario)
    return problems or check_horizon(scenario)


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
            buf = buffers.get(name)
            node = nodes.get(buf.on.split(".")[0]) if buf is not None else None
            vertex = node.vertex(buf.on.split(".")[1]) if node is not None and node.rails is not None else None
            if vertex is None or isinstance(buf.nics, list) and not set(buf.nics) <= set(nic_names(node)):
                continue  # a memory or NIC named that is not there (reported by check_references)
            layout = node.rails.layout()
            g = graphs[node.name] = graphs.get(node.name) or build_rail_server(layout)
            home = rail_nics(g, vertex, layout)
            registered = buffer_nics(g, home, buf.nics)
            missed = [(k, nic) for k in range(work.qps) if (nic := qp_nic(g, home, work.rails, k)) not in registered]
            if missed:
                (k, nic), listed = missed[0], buf.nics if isinstance(buf.nics, str) else ", ".join(buf.nics)
                problems.append((("workload", i, "rails"), f"'{work.rails}' opens QP {k} of '{name}' on "
                                 f"{node.name}.{nic}, where its nics ({listed}) do not register it (only on "
                                 f"{', '.join(registered)}): give '{name}' nics: all, or a list with {nic}"))
                break
    return problems


LINK_LAYER = {"ib": "InfiniBand", "roce": "Ethernet"}


def port_problems(scenario: Scenario | TestbedSpec) -> list[Problem]:
    """The ports the nodes name share one link layer, and a transport given with them runs on it."""
    named = [(i, PORT_RATES[n.nic.port]) for i, n in enumerate(scenario.nodes) if n.nic.port]
    if not named:
        return []
    (first_i, first), problems = named[0], []
    for i, port in named[1:]:
        if port.transport != first.transport:
            problems.append((("nodes", i, "nic", "port"), f"'{port.name}' is an {LINK_LAYER[port.transport]} port "
                             f"but node '{scenario.nodes[first_i].name}' has '{first.name}' "
                             f"({LINK_LAYER[first.transport]}): one fabric has one link layer"))
    fabric = scenario.fabric
    if not problems and fabric.transport != first.transport:
        problems.append((("fabric", "transport"), f"'{fabric.transport}' does not run on the "
                         f"{LINK_LAYER[first.transport]} port '{first.name}' of node '{scenario.nodes[first_i].name}':"
                         f" use '{first.transport}' or leave it out"))
    return problems


def library_problems(scenario: Scenario) -> list[Problem]:
    """The library studies name GPUs that exist, and what a study holds at once, with the scenario's buffers on
    the same GPU, fits in that GPU's memory."""
    capacity = {f"{n.name}.{name}": g.memory or gpu_params(g.preset).hbm_bytes
                for n in scenario.nodes for name, g in zip(n.gpu_names(), n.gpus)}
    problems, names = [], set()
    for i, study in enumerate(scenario.library):
        if study.name is not None and study.name in names:
            problems.append((("library", i, "name"), f"duplicate study name '{study.name}'"))
        names.add(study.name)
        if study.kind == "fallback-chain":
            seen = set()
            for j, stack in enumerate(study.stacks):
                if stack in seen:
                    problems.append((("library", i, "stacks", j), f"stack {stack.on} is listed twice"))
                seen.add(stack)
        for path, place in _study_gpus(study):
            if place not in capacity:
                problems.append((("library", i, *path), f"no GPU named '{place}'{_suggest(place, sorted(capacity))}"))
        held = _study_bytes(study)
        if held and study.on in capacity:
            held += sum(b.size for b in scenario.buffers if b.on == study.on)
            if held > capacity[study.on]:
                key = "sizes" if study.kind == "rcache-churn" else "buffers"
                problems.append((("library", i, key), f"{held} bytes live at once (with the scenario's buffers) do "
                                 f"not fit the {capacity[study.on]} bytes of {study.on}"))
    return problems


def _study_gpus(study) -> list[tuple[tuple, str]]:
    """The GPUs a library study names, with their key paths inside it (none for a server of its own)."""
    if study.kind == "fallback-chain":
        return [(("stacks", j, "on"), s.on) for j, s in enumerate(study.stacks)]
    return [] if study.kind == "multi-nic" else [(("on",), study.on)]


def _study_bytes(study) -> int:
    """GPU memory a study holds at once (0: one buffer at a time, or none of the scenario's GPUs)."""
    if study.kind == "rcache-churn":
        return sum(study.sizes)
    if study.kind == "registration-order" and study.memory == "device":
        return sum(study.buffer_sizes())
    return 0

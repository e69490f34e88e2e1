"""Cross-reference checks the schema cannot express: names unique, references resolve, messages fit their buffers.
Once every name resolves, :mod:`sim.scenario.model_checks` asks the devices' models (queues, QP types, rails, GPU
memory, the run's simulated time)."""

from __future__ import annotations

import difflib

from models.nic.transport import qp_type_of, receive_overhead
from models.nic.port_rates import PORT_RATES
from models.versions import MOVE_NOTIFY_ALWAYS_BUILT, KernelBehaviour, Version
from sim.scenario.nodes import NodeSpec
from sim.scenario.schema import Scenario, TestbedSpec

Problem = tuple[tuple, str]
"""A key path into the scenario and the reason it is wrong."""
HOST_MODES = ("pinned", "odp")
"""Registration modes of host memory; the others register GPU memory."""


def gpu_places(scenario: Scenario) -> list[str]:
    """'<node>.<gpu>' of every GPU (unnamed GPUs are gpu0, gpu1, ...)."""
    return [f"{n.name}.{name}" for n in scenario.nodes for name in n.gpu_names()]


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
    problems += library_problems(scenario) + port_problems(scenario)
    if problems:
        return problems
    # The devices' models (numpy with them) are imported once every name resolves: a misspelt name is told sooner.
    from sim.scenario.model_checks import model_problems

    return model_problems(scenario)


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
    """The library studies' names are unique and the GPUs they name exist."""
    places = sorted(gpu_places(scenario))
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
            if place not in places:
                problems.append((("library", i, *path), f"no GPU named '{place}'{_suggest(place, places)}"))
    return problems


def _study_gpus(study) -> list[tuple[tuple, str]]:
    """The GPUs a library study names, with their key paths inside it (none for a server of its own)."""
    if study.kind == "fallback-chain":
        return [(("stacks", j, "on"), s.on) for j, s in enumerate(study.stacks)]
    return [] if study.kind == "multi-nic" else [(("on",), study.on)]

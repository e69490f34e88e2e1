"""Wire models into one simulated testbed from a validated scenario (the helper layer over ``models``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from models.fabric import Fabric
from models.host import HostBuffer
from models.node import Node
from models.verbs import (Context, MemoryRegion, ProtectionDomain, ibv_alloc_pd, ibv_open_device, ibv_reg_mr)
from sim.core import Environment, SimError
from sim.scenario.resolve import access_flags, fabric_params, host_params, nic_params, pcie_params
from sim.scenario.schema import Scenario


@dataclass
class Registration:
    """How one scenario buffer was registered and what it cost."""

    buffer: str
    node: str
    size_bytes: int
    mode: str
    mr: MemoryRegion


@dataclass
class Testbed:
    """Everything a run needs: the clock, the nodes, their opened devices and the registered buffers."""

    env: Environment
    fabric: Fabric
    nodes: dict[str, Node]
    contexts: dict[str, Context]
    pds: dict[str, ProtectionDomain]
    buffers: dict[str, HostBuffer] = field(default_factory=dict)
    registrations: dict[str, Registration] = field(default_factory=dict)


class RegistrationFailed(SimError):
    """A scenario buffer could not be registered; the message names the buffer and the verbs error."""


def build(scenario: Scenario, seed: int, *, trace: bool = False) -> Testbed:
    """Create the nodes, open their devices, allocate and register every buffer.

    :raises RegistrationFailed: a buffer's registration failed (e.g. ENOMEM past RLIMIT_MEMLOCK).
    """
    env = Environment(seed, trace=trace)
    fabric = Fabric(fabric_params(scenario))
    nodes, contexts, pds = {}, {}, {}
    for spec in scenario.nodes:
        node = Node.create(spec.name, host_params(spec), pcie_params(spec), nic_params(spec))
        fabric.attach(node.nic.name)
        nodes[spec.name] = node
        contexts[spec.name] = ibv_open_device(node, env, fabric)
        pds[spec.name] = ibv_alloc_pd(contexts[spec.name])
    bed = Testbed(env, fabric, nodes, contexts, pds)
    for i, spec in enumerate(scenario.buffers):
        node_name = spec.on.split(".")[0]
        buf = nodes[node_name].host.allocate(spec.name, spec.size)
        try:
            mr = ibv_reg_mr(pds[node_name], buf.addr, buf.size, access_flags(spec.access))
        except SimError as exc:
            raise RegistrationFailed(f"buffers[{i}] '{spec.name}' on {spec.on}: {exc}") from exc
        bed.buffers[spec.name] = buf
        bed.registrations[spec.name] = Registration(spec.name, node_name, spec.size, spec.registration, mr)
    return bed

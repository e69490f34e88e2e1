"""An opened device and its protection domains: ``ibv_open_device``, ``ibv_alloc_pd``."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from models.fabric import Fabric
from models.node import Node
from sim.core import Environment


@dataclass(eq=False)
class Context:
    """An opened device (``ibv_open_device``) on one node."""

    node: Node
    env: Environment
    fabric: Fabric
    async_events: deque = field(default_factory=deque)
    """Asynchronous events not yet read (:func:`models.verbs.recv.ibv_get_async_event`)."""
    cap_net_raw: bool = False
    """The process that opened it holds CAP_NET_RAW, so it may set controlled Q_Keys (the system's
    privileged-qkey mode, which lets every process, counts the same). Default False: an ordinary user's program."""


@dataclass(eq=False)
class ProtectionDomain:
    """``struct ibv_pd``."""

    context: Context
    handle: int
    usecnt: int = 0
    """Objects that use it (MRs, QPs): the kernel's ``pd->usecnt``; :func:`~models.verbs.destroy.ibv_dealloc_pd`
    refuses while it is not 0."""
    destroyed: bool = False


def ibv_open_device(node: Node, env: Environment, fabric: Fabric, *, cap_net_raw: bool = False) -> Context:
    """Open the NIC of ``node``, attached to ``fabric`` (datagrams to its port's LID reach it from then on), for a
    process with CAP_NET_RAW or without (:attr:`Context.cap_net_raw`)."""
    if fabric is not None and node.nic.name in fabric.endpoints:  # (a test bed may open a device off any fabric)
        fabric.ports[fabric.lid(node.nic.name)] = node
    return Context(node, env, fabric, cap_net_raw=cap_net_raw)


def ibv_alloc_pd(context: Context) -> ProtectionDomain:
    """Allocate a protection domain."""
    return ProtectionDomain(context, context.node.nic.new_handle())

"""The scenario file schema (pydantic, YAML boundary only): a :class:`Scenario` and its parts, unknown keys errors.

The parts are :mod:`sim.scenario.nodes` (hardware), :mod:`~sim.scenario.buffers`, :mod:`~sim.scenario.workloads`,
:mod:`~sim.scenario.events` and :mod:`~sim.scenario.studies`, on the field types of :mod:`sim.scenario.fields`
(where units are parsed). Field docstrings become the JSON Schema descriptions that ``rdmasim schema`` prints for
editors.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from models.nic.port_rates import PORT_RATES
from sim.scenario.buffers import BufferSpec
from sim.scenario.events import Event
from sim.scenario.fields import Name, Seed, Strict
from sim.scenario.nodes import FabricSpec, NodeSpec
from sim.scenario.studies import LibraryStudy
from sim.scenario.workloads import WorkloadSpec


class Variant(Strict):
    """One arm of a comparison: the scenario with some keys replaced."""

    name: Name
    set: dict[str, Any]
    """Dotted key paths into the scenario and their values, e.g. {'buffers.src.register': 'dmabuf'}:
    list items may be named by index or by their 'name'."""


def _transport_of_ports(data: Any) -> Any:
    """Raw scenario or testbed data with the fabric's transport defaulting to that of the ports the nodes name
    (RoCE for Ethernet ports), so the resolved scenario says which one runs; mixed or absent ports leave it."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return data
    fabric = data.get("fabric", {})
    if not isinstance(fabric, dict) or "transport" in fabric:
        return data
    nics = [node.get("nic") for node in data["nodes"] if isinstance(node, dict)]
    named = {PORT_RATES[nic["port"]].transport for nic in nics
             if isinstance(nic, dict) and nic.get("port") in PORT_RATES}
    return {**data, "fabric": {**fabric, "transport": named.pop()}} if len(named) == 1 else data


class TestbedSpec(Strict):
    """The hardware of a scenario without its buffers and workloads: a testbed built in Python (:mod:`sim.api`)."""

    nodes: Annotated[list[NodeSpec], Field(min_length=1, max_length=1024)]
    fabric: FabricSpec = FabricSpec()
    data: bool = False
    """Data mode (as a scenario's ``data``): memory holds real bytes that RDMA moves."""

    @model_validator(mode="before")
    @classmethod
    def _port_transport(cls, data):
        return _transport_of_ports(data)


class Scenario(Strict):
    """A complete rdmasim scenario."""

    schema_version: Literal[1] = Field(alias="schema")
    """Scenario format version: 1."""
    name: Name
    """Scenario name (default results directory)."""
    description: str = ""
    seed: Seed = 0
    """Run seed: the same seed gives byte-identical results."""
    engine: Literal["event", "fast", "auto"] = "auto"
    """Simulation engine: 'auto' (the vectorized core where it gives the event engine's answers, else the event
    engine, saying why), 'event' (simpy, every work request: the reference) or 'fast' (the vectorized core only:
    a scenario outside its domain is refused)."""
    nodes: Annotated[list[NodeSpec], Field(min_length=2, max_length=1024)]
    fabric: FabricSpec = FabricSpec()
    buffers: Annotated[list[BufferSpec], Field(min_length=1)]
    workload: Annotated[list[WorkloadSpec], Field(min_length=1)]
    """One measurement or a list of them, run in order."""
    events: list[Event] = []
    """Things that happen during the run (memory pressure, page migration, reclaim)."""
    data: bool = False
    """Data mode: buffers hold real (seeded random) bytes that RDMA and evictions move; the run checks that
    every destination ends up equal to its source (slower; for correctness demonstrations)."""
    invariants: Literal["raise", "record"] = "raise"
    """On a DMA-safety violation: stop with an error, or record it and keep going (teaching mode)."""
    variants: list[Variant] = []
    """Run the scenario once per variant and compare them (each variant's 'set' applied to this file)."""
    library: list[LibraryStudy] = []
    """What communication libraries do above the verbs, run after the workloads on the same testbed: a
    registration cache's buffer churn, fallback chains, a registration order experiment."""
    outputs: list[Literal["bw_vs_size", "latency_vs_size", "bw_over_time", "latency_cdf", "gpu_memory",
                          "rail_bw"]] = [
        "bw_vs_size", "latency_vs_size"]
    """Figures to draw."""

    @model_validator(mode="before")
    @classmethod
    def _port_transport(cls, data):
        return _transport_of_ports(data)

    @field_validator("workload", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return [value] if isinstance(value, dict) else value

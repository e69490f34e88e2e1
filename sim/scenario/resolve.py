"""Turn validated scenario objects into the frozen parameter objects the models take (presets + overrides)."""

from __future__ import annotations

from dataclasses import replace

from models.fabric import FabricParams
from models.host import HostParams
from models.nic.nic import NicParams
from models.pcie.link import PcieParams
from models.nic.port_rates import PORT_RATES, PortRate
from models.pcie.presets import PCIE_PRESETS
from models.presets import NIC_PCIE, NIC_PORT, NIC_PRESETS
from models.nic.wqe import Access
from sim.scenario.nodes import FabricSpec, NodeSpec
from sim.scenario.rates import format_Gbps
from sim.scenario.schema import Scenario, TestbedSpec


def _overrides(spec, mapping: dict[str, str]) -> dict:
    """Scenario keys that were set, renamed to parameter-object fields."""
    return {field: getattr(spec, key) for key, field in mapping.items() if getattr(spec, key) is not None}


def host_params(spec: NodeSpec) -> HostParams:
    """Host parameters of a node."""
    host = spec.host
    limit = None if host.memlock_limit == "unlimited" else host.memlock_limit
    return replace(HostParams(memlock_limit=limit, prefaulted=host.prefaulted, pages=host.pages),
                   **_overrides(host, {"poll_period": "poll_period_ps", "memory": "memory"}))


def pcie_params(spec: NodeSpec) -> PcieParams:
    """PCIe link parameters of a node's NIC."""
    pcie = spec.pcie
    base = PCIE_PRESETS[pcie.preset or NIC_PCIE[spec.nic.preset]]
    tags = {} if pcie.read_tags is None else {"read_tags": None if pcie.read_tags == "unlimited" else pcie.read_tags}
    return PcieParams(**{**base, **_overrides(pcie, {"gen": "gen", "lanes": "lanes", "read_latency": "read_latency_ps",
                                                      "write_latency": "write_latency_ps",
                                                      "write_issue": "dma_write_issue_ps",
                                                      "read_latency_per_byte": "read_latency_ps_per_byte"}),
                         "mps": pcie.mps, "mrrs": pcie.mrrs, "ecrc": pcie.ecrc, **tags})


def nic_params(spec: NodeSpec) -> NicParams:
    """NIC parameters of a node."""
    nic = spec.nic
    return NicParams(**{**NIC_PRESETS[nic.preset], **_overrides(nic, {
        "doorbell": "doorbell_ps", "tx_process": "tx_process_ps", "tx_latency": "tx_latency_ps",
        "rx_process": "rx_process_ps", "rx_latency": "rx_latency_ps", "blueflame": "blueflame",
        "tx_engines": "tx_engines", "rx_engines": "rx_engines",
        "max_rd_atomic": "max_rd_atomic", "max_translations": "max_translations", "atomic": "atomic_ps"}),
        "ignore_move_notify": nic.ignore_move_notify, "dmabuf_revocable": nic.dmabuf_revocable,
        "pcie_tph": nic.pcie_tph, "qp_data_in_order": nic.qp_data_in_order,
        "data_polling_128": nic.data_polling_128})


def node_port(spec: NodeSpec) -> PortRate:
    """The port generation of a node's NIC: its ``port`` or its preset's."""
    return PORT_RATES[spec.nic.port or NIC_PORT[spec.nic.preset]]


def _slowest_port(scenario: Scenario | TestbedSpec) -> tuple[NodeSpec, float]:
    """The node whose NIC port is slowest (the first of equals) and that port's data rate (bytes/s)."""
    node = min(scenario.nodes, key=lambda n: node_port(n).data_Gbps)
    return node, node_port(node).data_Gbps * 1e9 / 8


def fabric_params(scenario: Scenario | TestbedSpec) -> FabricParams:
    """Fabric parameters. The rate is the slower of the fabric's and the slowest NIC port's (the fabric's
    default): a link runs at the lower rate of its ends, so no message leaves a port faster than its line rate."""
    spec: FabricSpec = scenario.fabric
    _, port = _slowest_port(scenario)
    rate = port if spec.rate is None else min(spec.rate, port)
    return FabricParams(rate_Bps=rate, latency_ps=spec.latency, mtu=spec.mtu, transport=spec.transport)


def fabric_rate_notice(scenario: Scenario | TestbedSpec) -> str | None:
    """One line when the fabric is faster than a NIC port, naming both rates and the one links run at: ``fabric
    800 Gb/s is faster than node a's NIC port (connectx7, ndr 400 Gb/s): links run at 400 Gb/s``; else None."""
    rate = scenario.fabric.rate
    node, port = _slowest_port(scenario)
    if rate is None or rate <= port:
        return None
    nic = node.nic
    return (f"fabric {format_Gbps(rate)} is faster than node {node.name}'s NIC port ({nic.preset}, "
            f"{node_port(node).name} {format_Gbps(port)}): links run at {format_Gbps(port)}")


def access_flags(names: list[str]) -> Access:
    """ibv_access_flags from the scenario's names."""
    flags = Access(0)
    for name in names:
        flags |= Access[name.upper()]
    return flags

"""Named hardware presets: data with a cited source, overridable key by key from a scenario.

Each preset is a dict of constructor arguments for a parameter dataclass; ``SOURCES`` says where each
number comes from.
"""

from __future__ import annotations

from sim.core import PS_PER_NS

NIC_PRESETS: dict[str, dict] = {
    "connectx7": {"tx_process_ps": 3 * PS_PER_NS, "rx_process_ps": 3 * PS_PER_NS, "max_rd_atomic": 16},
    "connectx6": {"tx_process_ps": 4650, "rx_process_ps": 4650, "max_rd_atomic": 16},
    "connectx5": {"tx_process_ps": 5 * PS_PER_NS, "rx_process_ps": 5 * PS_PER_NS, "max_rd_atomic": 16},
    "efa": {"tx_process_ps": 10 * PS_PER_NS, "rx_process_ps": 10 * PS_PER_NS, "max_rd_atomic": 16,
            "odp": None, "dmabuf": "pinned"},
}
PCIE_PRESETS: dict[str, dict] = {
    "gen5x16": {"gen": 5, "lanes": 16},
    "gen4x16": {"gen": 4, "lanes": 16},
    "gen3x16": {"gen": 3, "lanes": 16},
    "gen3x8": {"gen": 3, "lanes": 8},
}
NIC_PCIE = {"connectx7": "gen5x16", "connectx6": "gen4x16", "connectx5": "gen3x16", "efa": "gen4x16"}
"""The host interface each NIC preset ships with."""
NIC_RATE = {"connectx7": "400Gb/s", "connectx6": "200Gb/s", "connectx5": "100Gb/s", "efa": "100Gb/s"}
"""Port rate of each NIC preset."""

SOURCES = {
    "connectx7": "400 Gb/s NDR, PCIe Gen5 x16: docs.nvidia.com/networking/display/ConnectX7VPI/Introduction. "
                 "Message rate ~330 M msg/s is the vendor brief's figure (not verified): 3 ns per WQE.",
    "connectx6": "200 Gb/s, PCIe Gen4 x16, 215 M msg/s: docs.nvidia.com/networking/display/ConnectX6EN/"
                 "Introduction -> 4.65 ns per WQE.",
    "connectx5": "100 Gb/s EDR, PCIe Gen3 x16, 200 M msg/s (vendor brief) -> 5 ns per WQE.",
    "efa": "EFA-like: no NIC page faults (no ODP), dma-buf MRs through ib_umem_dmabuf_get_pinned (efa_verbs.c); "
           "100 Gb/s; message rate not published: 10 ns per WQE is a placeholder.",
    "latencies": "doorbell 200 ns, send/receive pipelines 150 ns each and PCIe write flight 150 ns give about "
                 "0.65 us of NIC+PCIe time per one-way 2 B write, consistent with the vendors' 'sub-600 ns' "
                 "NIC latency; with a 300 ns fabric hop ib_write_lat 2 B is about 1 us.",
    "pcie": "encoding, rates, header and DLLP constants: pcie-model (Neugebauer et al., SIGCOMM'18); "
            "read round trip 550 ns: pcie-bench data, Xeon E5 64 B DMA read median.",
}

GPU_VENDOR = {"h200": "nvidia", "h100": "nvidia", "mi300x": "amd"}
"""Which dma-buf exporter profile each GPU preset (models.gpu.presets) gets by default."""

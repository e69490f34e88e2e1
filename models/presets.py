"""Named hardware presets: data with a cited source, overridable key by key from a scenario.

Each preset is a dict of constructor arguments for a parameter dataclass; ``SOURCES`` says where each
number comes from.
"""

from __future__ import annotations

from models.nic.device import AtomicCap, DeviceAttrs, DeviceCap
from models.nic.port_rates import PORT_RATES
from sim.core import PS_PER_NS

MLX5_LIMITS = {"max_rd_atomic": 16, "max_qp_wr": 32768, "max_mr_size": 2**64 - 1}
"""What mlx5_ib_query_device reports on ConnectX-5 and later: max_qp_rd_atom 16, max_qp_wr 32768,
max_mr_size ~0ull (``ibv_devinfo -v``, github.com/open-mpi/ompi/pull/6137)."""

NIC_PRESETS: dict[str, dict] = {
    "connectx8": {"tx_process_ps": 3 * PS_PER_NS, "rx_process_ps": 3 * PS_PER_NS, **MLX5_LIMITS, "data_direct": True,
                  "max_dm_size": 256 * 1024, "device": DeviceAttrs(fw_ver="40.0.0", vendor_part_id=4131)},
    "connectx7": {"tx_process_ps": 3 * PS_PER_NS, "rx_process_ps": 3 * PS_PER_NS, **MLX5_LIMITS,
                  "max_dm_size": 256 * 1024, "device": DeviceAttrs(fw_ver="28.0.0", vendor_part_id=4129)},
    "connectx6": {"tx_process_ps": 4650, "rx_process_ps": 4650, **MLX5_LIMITS, "max_dm_size": 128 * 1024,
                  "device": DeviceAttrs(fw_ver="20.0.0", vendor_part_id=4123)},
    "connectx5": {"tx_process_ps": 5 * PS_PER_NS, "rx_process_ps": 5 * PS_PER_NS, **MLX5_LIMITS,
                  "max_dm_size": 128 * 1024, "device": DeviceAttrs()},
    "efa": {"tx_process_ps": 10 * PS_PER_NS, "rx_process_ps": 10 * PS_PER_NS, "max_rd_atomic": 16,
            "odp": None, "dmabuf": "pinned", "max_dm_size": 0,
            "device": DeviceAttrs(fw_ver="0.0.0", vendor_id=0x1D0F, vendor_part_id=0xEFA0, max_sge=2, max_sge_rd=1,
                                  atomic_cap=AtomicCap.ATOMIC_NONE, cap_flags=DeviceCap(0), max_srq=0, max_srq_wr=0,
                                  max_srq_sge=0)},
}
NIC_PCIE = {"connectx8": "gen6x16", "connectx7": "gen5x16", "connectx6": "gen4x16", "connectx5": "gen3x16",
            "efa": "gen4x16"}
"""The host interface each NIC preset ships with (:data:`models.pcie.presets.PCIE_PRESETS`)."""
NIC_PORT = {"connectx8": "xdr", "connectx7": "ndr", "connectx6": "hdr", "connectx5": "edr", "efa": "100gbe"}
"""The port generation each NIC preset ships with (:data:`models.nic.port_rates.PORT_RATES`)."""
NIC_RATE = {nic: f"{PORT_RATES[port].data_Gbps:g}Gb/s" for nic, port in NIC_PORT.items()}
"""Port rate of each NIC preset (its port's data rate)."""

SOURCES = {
    "connectx8": "800 Gb/s XDR, PCIe Gen6 x16 (ConnectX-8 SuperNIC brief); PCI id 0x1023 (4131, mlx5_core_pci_table "
                 "in drivers/net/ethernet/mellanox/mlx5/core/main.c), firmware family 40. Its data-direct PCI "
                 "function (0x2100) is the one device mlx5_data_direct_pci_table lists "
                 "(drivers/infiniband/hw/mlx5/data_direct.c): only this preset can register with "
                 "mlx5dv_reg_dmabuf_mr(DATA_DIRECT). Message rate not published: ConnectX-7's 3 ns per WQE kept "
                 "(an assumption); limits and ODP capabilities as ConnectX-7's (assumed, no device dump read).",
    "connectx7": "400 Gb/s NDR, PCIe Gen5 x16: docs.nvidia.com/networking/display/ConnectX7VPI/Introduction. "
                 "Message rate ~330 M msg/s is the vendor brief's figure (not verified): 3 ns per WQE.",
    "connectx6": "200 Gb/s, PCIe Gen4 x16, 215 M msg/s: docs.nvidia.com/networking/display/ConnectX6EN/"
                 "Introduction -> 4.65 ns per WQE.",
    "connectx5": "100 Gb/s EDR, PCIe Gen3 x16, 200 M msg/s (vendor brief) -> 5 ns per WQE.",
    "efa": "EFA-like: no NIC page faults (no ODP), dma-buf MRs through ib_umem_dmabuf_get_pinned (efa_verbs.c); "
           "100 Gb/s Ethernet; message rate not published: 10 ns per WQE is a placeholder.",
    "ports": "lane rates, line codes and data rates per generation: models.nic.port_rates.",
    "device": "ibv_query_device: ConnectX-5 as ibv_devinfo -v prints it (vendor_part_id 4119, fw 16.23; "
              "github.com/open-mpi/ompi/pull/6137; named cap flags from github.com/ofiwg/libfabric/issues/8256). "
              "ConnectX-6 (4123) and ConnectX-7 (4129) are assumed to report the same limits (mlx5_ib_query_device "
              "derives them from the same firmware caps; no public dump found); their fw_ver gives only the "
              "firmware family (20 and 28). EFA: vendor 0x1d0f, part 0xefa0 (efa driver's PCI ids); its limits come "
              "from the device and are not published: max_sge 2, max_sge_rd 1 are assumptions, no atomics, "
              "max_qp_wr stays the model default 8192, the other limits are mlx5's.",
    "max_dm_size": "mlx5_ib_query_device reports MLX5_CAP_DEV_MEM(max_memic_size) as max_dm_size when the device "
                   "has MEMIC. ibv_devinfo -v of a ConnectX-6 (4123, fw 20.37.1700, in a UCX bug report) and of "
                   "ConnectX-6 Dx (4125, fw 22.36.1010, two public notes) print 131072 bytes; a ConnectX-7's "
                   "mlxconfig shows MEMIC_SIZE_LIMIT _256KB "
                   "(github.com/k8snetworkplumbingwg/sriov-network-device-plugin/issues/601): 262144. ConnectX-5 "
                   "(128 KiB, as ConnectX-6) and ConnectX-8 (256 KiB, as ConnectX-7) are "
                   "assumptions: no dump of theirs was read. EFA has no device memory (0).",
    "latencies": "doorbell 200 ns, send/receive pipelines 150 ns each and PCIe write flight 150 ns give about "
                 "0.65 us of NIC+PCIe time per one-way 2 B write, consistent with the vendors' 'sub-600 ns' "
                 "NIC latency; with a 300 ns fabric hop ib_write_lat 2 B is about 1 us.",
}

GPU_VENDOR = {"h200": "nvidia", "h100": "nvidia", "a100": "nvidia", "mi300x": "amd"}
"""Which dma-buf exporter profile each GPU preset (models.gpu.presets) gets by default."""

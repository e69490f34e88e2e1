"""PCIe link presets: data with a cited source (``SOURCES``), overridable key by key from a scenario; each is a dict
of :class:`~models.pcie.link.PcieParams` arguments. The NIC presets name theirs in :data:`models.presets.NIC_PCIE`,
the GPU presets in :attr:`models.gpu.presets.GpuParams.pcie`."""

from __future__ import annotations

PCIE_PRESETS: dict[str, dict] = {
    "gen6x16": {"gen": 6, "lanes": 16},
    "gen5x16": {"gen": 5, "lanes": 16},
    "gen4x16": {"gen": 4, "lanes": 16},
    "gen3x16": {"gen": 3, "lanes": 16},
    "gen3x8": {"gen": 3, "lanes": 8},
    "nfp6000": {"gen": 3, "lanes": 8, "read_tags": 35, "read_latency_ps": 536_220, "read_latency_ps_per_byte": 149.06,
                "dma_write_issue_ps": 21_097},
}

SOURCES = {
    "pcie": "encoding, rates, header and DLLP constants: pcie-model (Neugebauer et al., SIGCOMM'18); "
            "read round trip 550 ns: pcie-bench data, Xeon E5 64 B DMA read median. The NICs' DMA engines have no "
            "issue or read-size limit beyond the link: none is published for ConnectX.",
    "nfp6000": "pcie-bench's device (Netronome NFP-6000 on Gen3 x8, Xeon E5-2620v3; github.com/pcie-bench/data, "
               "Neugebauer et al., SIGCOMM'18), fitted by models.pcie.dma_engine: one posted write per 21.097 ns "
               "(the 64 B write rate, 47.4 M/s), read round trip 536.22 ns plus 0.149 ns per byte beyond the "
               "completions' link time (read latency 8 B .. 2 KiB), 35 outstanding reads (the 64 B read rate).",
}

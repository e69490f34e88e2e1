"""GPU presets: data with a cited source, overridable key by key (``gpu_params("h200", hbm_bytes=...)``).

``SOURCES`` names where each number comes from; "measured" means our H200 host (models/data/README.md),
"datasheet" the vendor's published figure (NVIDIA H100/H200 datasheets), "recalled" a figure
not verified from a stored source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True, slots=True)
class GpuParams:
    """One GPU's memory system (sizes in bytes, rates in bytes per second)."""

    name: str
    """Preset name."""
    hbm_bytes: int
    """Device memory the allocator may hand out (usable, not raw stack capacity)."""
    hbm_bw_Bps: float
    """Peak HBM bandwidth (read + write traffic)."""
    pcie: str
    """Host link, a key of ``models.pcie.presets.PCIE_PRESETS`` (``"gen5x16"``)."""
    page_sizes: tuple[int, ...] = (64 * KiB, 2 * MiB)
    """GPU page-table page sizes (small/big pages; the allocator's granularity is the largest)."""
    alloc_granularity: int = 2 * MiB
    """cudaMalloc-like allocation granularity: every allocation is rounded up to this."""
    bar1_bytes: int | None = None
    """Size of the BAR that exposes device memory to peers (the GPUDirect RDMA window, :mod:`models.gpu.bar1`);
    None: not a limit (unknown, or a resizable BAR that covers the memory)."""
    copy_preset: str = "h200"
    """Key of ``models.gpu.copy_engine.COPY_PRESETS`` for host <-> device copies."""
    uvm_preset: str = "h200"
    """Key of ``models.gpu.managed.UVM_PRESETS`` for unified memory."""
    alloc_preset: str = "h200"
    """Key of ``models.gpu.alloc_cost.ALLOC_PRESETS`` for what allocating and freeing device memory cost."""
    scrub_preset: str | None = "h200"
    """Key of ``models.gpu.scrub.SCRUB_PRESETS`` for how long freed memory is cleared before an allocation that
    needs it may have it; None: not modeled (no wait)."""


GPU_PRESETS: dict[str, dict] = {
    "h200": {"hbm_bytes": 143771 * MiB, "hbm_bw_Bps": 4.8e12, "pcie": "gen5x16", "bar1_bytes": 256 * GiB},
    "h100": {"hbm_bytes": 80 * GiB, "hbm_bw_Bps": 3.35e12, "pcie": "gen5x16", "bar1_bytes": 128 * GiB,
             "alloc_preset": "h100", "scrub_preset": "h100"},
    "a100": {"hbm_bytes": 40 * GiB, "hbm_bw_Bps": 1.555e12, "pcie": "gen4x16", "copy_preset": "a100"},
    "mi300x": {"hbm_bytes": 192 * GiB, "hbm_bw_Bps": 5.3e12, "pcie": "gen5x16",
               "page_sizes": (4 * KiB, 64 * KiB, 2 * MiB), "scrub_preset": None},
}

SOURCES = {
    "h200": "hbm_bytes: measured, nvidia-smi memory.total 143771 MiB (models/data/h200_host.json); bar1_bytes: "
            "measured, BAR1 Total 262144 MiB (same file); PCIe Gen5 x16 current = max (same file); 4.8 TB/s: "
            "datasheet; measured device-to-device copy 4250 GB/s read+write "
            "(models/data/h200_copy_bw.json); allocation costs: measured, cudaMalloc/cudaFree and the VMM "
            "calls 2 MiB..64 GiB (models/data/h200_gpu_alloc.json); freed memory cleared at 2.9 ms per GiB "
            "and taken back at 0.29 ms per GiB, measured (models/data/gpu_scrub.json, gpu_reclaim.json); "
            "pages 64 KiB / 2 MiB: NVIDIA big/huge GPU pages.",
    "h100": "80 GB HBM3 at 3.35 TB/s: datasheet, taken as 80 GiB of stacks (5 x 16 GiB) with "
            "no reserve; BAR1 128 GiB: commonly reported, NOT verified (no source read, the H100 "
            "PCIe product brief PB-11133 included, states it); PCIe Gen5 x16: "
            "NVIDIA's H100 specification. Copy and UVM costs reuse the H200 fit (same link and driver); allocation "
            "costs: measured, cudaMalloc/cudaFree and the VMM calls 2 MiB..32 GiB on two H100s "
            "(models/data/h100_gpu_alloc.json); freed memory cleared at 2.8 ms per GiB and taken back at 0.26 ms "
            "per GiB, measured on H100s (models/data/gpu_scrub.json, gpu_reclaim.json); "
            "the copy rate agrees with a published H100 copy-engine rate (models/data/nvbandwidth_copy.json).",
    "a100": "A100-SXM4-40GB: 40 GB HBM2 at 1.555 TB/s and PCIe Gen4 x16: NVIDIA's A100 datasheet, the card of "
            "NVIDIA/nvbandwidth issue #42 (taken as 40 GiB of stacks, no reserve); BAR1 not set (bar1_bytes None: "
            "no source read states it). Copies: the H200 fit scaled to the Gen4 link and HBM2 "
            "(models.gpu.copy_engine.scaled_costs), checked against published nvbandwidth rates "
            "(models/data/nvbandwidth_copy.json); UVM and allocation costs and the clearing of freed memory reuse the "
            "H200 fit (not calibrated on an A100).",
    "mi300x": "192 GB HBM3 (8 x 24 GiB stacks) at 5.3 TB/s, PCIe Gen5 x16: AMD Instinct MI300X datasheet, "
              "recalled, NOT verified from a stored source; BAR size not a limit (bar1_bytes None): amdgpu "
              "resizes the BAR to cover VRAM where the platform allows (resizable BAR), and its peer maps are "
              "not modelled against it; 4 KiB / 64 KiB / 2 MiB GPU page fragments: amdgpu VM, recalled. Copy, "
              "UVM and allocation costs reuse the H200 fit (same link; HMM-based migration and hipMalloc/hipFree "
              "on AMD are not separately calibrated); no clearing of freed memory before reuse is modelled "
              "(amdgpu wipes VRAM on release only where asked; not measured).",
}


def gpu_params(preset: str, **overrides) -> GpuParams:
    """The parameters of ``preset`` with ``overrides`` applied key by key.

    :raises KeyError: unknown preset (the message lists the known ones).
    :raises TypeError: an override names no field.

    >>> gpu_params("h200").hbm_bytes // MiB
    143771
    >>> gpu_params("h100", hbm_bytes=40 * GiB).hbm_bytes // GiB
    40
    """
    if preset not in GPU_PRESETS:
        raise KeyError(f"unknown GPU preset {preset!r}; known: {', '.join(sorted(GPU_PRESETS))}")
    return replace(GpuParams(name=preset, **GPU_PRESETS[preset]), **overrides)

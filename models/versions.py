"""Kernel, rdma-core and GPU-driver versions, and the behaviour each one dates.

Sources: the version timeline of the project's protocol reference (kernel commits and rdma-core releases):

=========  ===============================================================================================
5.12       dma-buf MRs (``ib_umem_dmabuf``, ``UVERBS_METHOD_REG_DMABUF_MR``), dynamic importers only
5.16       pinned dma-buf importers (``ib_umem_dmabuf_get_pinned``, EFA)
5.19       importers wait for ``DMA_RESV_USAGE_KERNEL`` fences (before: the exclusive fence)
6.2        dynamic locking convention: every importer maps and unmaps with the reservation lock held
           (before: static importers mapped without it)
6.12       ``ib_umem_dmabuf_revoke`` (revoked umems refuse maps)
7.0        ``CONFIG_DMABUF_MOVE_NOTIFY`` always built (before: a build option, default off)
7.1        ``move_notify`` renamed ``invalidate_mappings`` (``dma_buf_invalidate_mappings``)
=========  ===============================================================================================

rdma-core: ``ibv_reg_dmabuf_mr`` from v34, ``mlx5dv_reg_dmabuf_mr`` (data-direct) from v55. NVIDIA driver:
dma-buf export of device memory (``cuMemGetHandleForAddressRange``) needs the open kernel modules 515+.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering


@total_ordering
@dataclass(frozen=True, slots=True)
class Version:
    """A dotted version, compared numerically: ``Version.parse("6.2") < Version.parse("6.12")``."""

    parts: tuple[int, ...]

    @classmethod
    def parse(cls, text: str | int | float) -> "Version":
        """Parse ``"6.12"``, ``"v50"`` or ``515``.

        :raises ValueError: not a dotted number.
        """
        match = re.fullmatch(r"v?(\d+(?:\.\d+)*)", str(text).strip())
        if not match:
            raise ValueError(f"expected a version such as '6.12' or 'v50', got {text!r}")
        return cls(tuple(int(p) for p in match[1].split(".")))

    def __lt__(self, other: "Version") -> bool:
        return self.parts < other.parts

    def __str__(self) -> str:
        return ".".join(map(str, self.parts))


def _v(text: str) -> Version:
    return Version.parse(text)


@dataclass(frozen=True, slots=True)
class KernelBehaviour:
    """What one kernel version does, for the behaviours the simulator dates."""

    version: Version

    @property
    def has_dmabuf_mr(self) -> bool:
        """``ibv_reg_dmabuf_mr`` reaches a kernel handler (5.12+)."""
        return self.version >= _v("5.12")

    @property
    def has_pinned_dmabuf(self) -> bool:
        """``ib_umem_dmabuf_get_pinned`` exists (5.16+)."""
        return self.version >= _v("5.16")

    @property
    def waits_kernel_fences(self) -> bool:
        """Importers wait for KERNEL-usage fences (5.19+) rather than the exclusive fence."""
        return self.version >= _v("5.19")

    @property
    def static_importers_lock(self) -> bool:
        """Static importers must hold the reservation lock to map and unmap (6.2+)."""
        return self.version >= _v("6.2")

    @property
    def has_mlx5_dmabuf_access_attr(self) -> bool:
        """mlx5's ``MLX5_IB_ATTR_REG_DMABUF_MR_ACCESS_FLAGS`` attribute and its data-direct path exist (6.12+)."""
        return self.version >= _v("6.12")

    @property
    def has_revoke(self) -> bool:
        """``ib_umem_dmabuf_revoke`` exists (6.12+)."""
        return self.version >= _v("6.12")

    @property
    def move_notify_always_on(self) -> bool:
        """``CONFIG_DMABUF_MOVE_NOTIFY`` is no longer optional (7.0+)."""
        return self.version >= _v("7.0")

    @property
    def invalidate_name(self) -> str:
        """The importer callback's name: ``invalidate_mappings`` from 7.1, ``move_notify`` before."""
        return "invalidate_mappings" if self.version >= _v("7.1") else "move_notify"


DEFAULT_KERNEL = "6.18"
"""The calibration host's kernel (models/data/h200_host.json)."""
RDMA_CORE_DMABUF = _v("34")
RDMA_CORE_MLX5DV_DMABUF = _v("55")
NVIDIA_DMABUF_EXPORT = _v("515")

"""Kernel, rdma-core and GPU-driver versions, and the behaviour each one dates.

Each boundary, with what was read to date it (commits in torvalds/linux as the code index and the mailing-list
archives hold them):

=========  ===============================================================================================
5.7-6.14   ``dma_buf_attach`` maps (and pins) at attach time and caches the sg table when importer and exporter
           disagree on being dynamic; removed by "dma-buf: stop mapping sg_tables on attach v2" (de68b17d5d07)
           and "dma-buf: drop caching of sg_tables" (b72f66f22c0e), February 2025, merged for 6.15
5.12       dma-buf MRs (``ib_umem_dmabuf``, ``UVERBS_METHOD_REG_DMABUF_MR``), dynamic importers only
5.13-6.13  mlx5's deregistration revokes a dynamic dma-buf MR's mkey (``mlx5_revoke_mr``) without the reservation
           lock and leaves ``umem_dmabuf->private`` set, so a ``move_notify`` between that revoke and the umem's
           release zaps the freed mkey: "RDMA/mlx5: Consolidate MR destruction to mlx5_ib_dereg_mr()"
           (e6fb246ccafb, 5.13) dropped 5.12's ``mlx5_ib_fence_dmabuf_mr``, which revoked and cleared ``private``
           under the lock. "RDMA/mlx5: Fix a race for DMABUF MR which can lead to CQE with error" (Yishai Hadas,
           cc668a11e6ac, posted to rdma-rc on 2025-02-03, in Linus' tree for 6.14, in 6.12.y and 6.13.y stable
           from March 2025) takes the lock around the revoke and clears ``private``;
           ``mlx5_ib_dmabuf_invalidate_cb`` then finds no MR (``!mr``) and returns
5.16       pinned dma-buf importers (``ib_umem_dmabuf_get_pinned``, 1e4df4a21c5a; EFA's
           ``reg_user_mr_dmabuf``, "RDMA/efa: Add support for dmabuf memory regions"); its map-failure path
           unpins, then releases the umem, which unpins again
6.4        ``modify_qp`` (drivers/infiniband/core/uverbs_cmd.c) refuses a controlled Q_Key (``IB_QP_SET_QKEY``, the
           high bit) with EPERM unless the process is ``capable(CAP_NET_RAW)`` ("RDMA/uverbs: Restrict usage of
           privileged QKEYs", Edward Srouji, 0cadb4db79e1, merged after 6.4-rc5 and sent to the stable trees);
           6.5's ``rdma_nl_get_privileged_qkey()`` lets the administrator allow every process ("RDMA/nldev: Add
           support to set privileged qkey parameter"), and 28ea058a2979 (2025) checks CAP_NET_RAW in the device's
           network namespace. Dated here by the mainline release: a stable kernel older than 6.4 may have it too
5.19       importers wait for ``DMA_RESV_USAGE_KERNEL`` fences (before: the exclusive fence), and
           ``ib_umem_dmabuf_map_pages`` returns ``dma_resv_wait_timeout()``'s value ("RDMA: use dma_resv_wait()
           instead of extracting the fence", f30bceab16d1): every map reports a failure
6.0        that return value fixed (Jason Gunthorpe, "ib_umem_dmabuf_map_pages() returns 0 on success", August
           2022, on v6.0-rc1)
6.2        dynamic locking convention: every importer maps and unmaps with the reservation lock held
           (before: static importers mapped without it)
6.12       ``ib_umem_dmabuf_revoke`` (revoked umems refuse maps); mlx5's data-direct path and its
           ``MLX5_IB_ATTR_REG_DMABUF_MR_ACCESS_FLAGS`` attribute (rdma-core's kernel headers follow ec7ad6530909)
6.15       ``amdgpu_dma_buf_pin`` pins into VRAM when every attachment can do peer-to-peer, else into GTT (system
           memory); before, it always pinned into GTT ("drm/amdgpu: allow pinning DMA-bufs into VRAM if all
           importers can do P2P", Christian König, f5e7fabd1f5c, merged for 6.15; read as posted for 6.14 stable,
           AUTOSEL of 2025-04-14 on 6.14.2). Its fix "drm/amdgpu: Disable VRAM pinning if move notifiers are
           disabled" (Felix Kuehling, 2025-04-16) keeps GTT while ``CONFIG_DMABUF_MOVE_NOTIFY`` is off; both are
           dated 6.15 here (the stored torvalds/linux copy, 2ce542e517ab, predates them; the code with both was
           read in a ROCm tree). The 7.1 series that always builds move_notify drops that condition.
7.0        the double unpin fixed ("RDMA/umem: Fix double dma_buf_unpin in failure path", Jacob Moroni, in the
           RDMA pull for 7.0-rc1)
7.0        NIC device memory exported as a dma-buf: ``UVERBS_OBJECT_DMABUF`` ("RDMA/uverbs: Add DMABUF object type
           and operations", Yishai Hadas, 0ac6f4056c4a, applied 2026-02-08 and in the mainline tree before the 7.1
           merge window): peer-to-peer importers only, pinned ones refused, revoked when the memory is freed
7.1        Leon Romanovsky's "dmabuf-revoke" series (v5 of 2026-01-24; its first three patches, the rename and
           "dma-buf: Always build with DMABUF_MOVE_NOTIFY", taken into drm-misc-next on 2026-01-27, after the
           drm cut-off for 7.0): ``move_notify`` renamed ``invalidate_mappings``, ``CONFIG_DMABUF_MOVE_NOTIFY``
           always built, and ``invalidate_mappings`` optional (the pinned importers' stub removed). No tagged
           tree of 2026 could be read, so 7.1 rests on those dates
7.1        the rest of that series (v7 of 2026-01-31, in drm-misc-next-2026-02-26, "drm-misc-next for v7.1"):
           ``dma_buf_attach_revocable()`` ("dma-buf: Add dma_buf_attach_revocable()": an importer with an
           ``invalidate_mappings`` op promises to unmap in bounded time after it), VFIO waiting for the
           invalidation ("vfio: Wait for dma-buf invalidation to complete": fences, then every unmap) and
           admitting revocable pinned importers while refusing the others at attach ("vfio: Permit VFIO to work
           with pinned importers", 6ffe939bf94f)
7.1        pinned importers that accept revocation (Jacob Moroni, "RDMA/umem: Add pinned revocable dmabuf import
           interface", ff85a2ebacbd, and "RDMA/irdma: Add support for revocable pinned dmabuf import", applied to
           rdma-next on 2026-03-08, after 7.0-rc1): ``ib_umem_dmabuf_get_pinned_revocable_and_lock`` returns with
           the lock held, ``ib_umem_dmabuf_set_revoke_locked`` installs the driver's revoke callback; irdma
           invalidates the key in hardware and keeps it allocated until ``ibv_dereg_mr``
=========  ===============================================================================================

rdma-core: ``ibv_reg_dmabuf_mr`` from v34, ``mlx5dv_reg_dmabuf_mr`` (data-direct) from v54,
``ibv_dm_export_dmabuf_fd`` from v62 ("verbs: Introduce ibv_dm_export_dmabuf_fd() verb", 60917319bfd1, December
2025; the first tag holding it is v62.0). NVIDIA driver:
dma-buf export of device memory (``cuMemGetHandleForAddressRange``) needs the open kernel modules 515+; its
PCIe mapping type (``CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE``, BAR1 mappings on coherent platforms) arrives
with CUDA 12.8 (570).
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
    def odp_registration_snapshot(self) -> bool:
        """mlx5 maps the pages the CPU already has when an ODP MR is registered (``mlx5_ib_init_odp_mr``, a
        snapshot that faults nothing; "RDMA/mlx5: Sync device with CPU pages upon ODP MR registration", 5.10+)."""
        return self.version >= _v("5.10")

    @property
    def restricts_controlled_qkey(self) -> bool:
        """``modify_qp`` refuses an unprivileged process a controlled Q_Key with EPERM (6.4+, 0cadb4db79e1)."""
        return self.version >= RESTRICTED_QKEY

    @property
    def maps_at_attach(self) -> bool:
        """``dma_buf_attach`` maps and caches the sg table when importer and exporter disagree on being dynamic
        (5.7 to 6.14)."""
        return _v("5.7") <= self.version < _v("6.15")

    @property
    def has_pinned_dmabuf(self) -> bool:
        """``ib_umem_dmabuf_get_pinned`` exists (5.16+)."""
        return self.version >= _v("5.16")

    @property
    def waits_kernel_fences(self) -> bool:
        """Importers wait for KERNEL-usage fences (5.19+) rather than the exclusive fence."""
        return self.version >= _v("5.19")

    @property
    def map_pages_returns_wait_value(self) -> bool:
        """``ib_umem_dmabuf_map_pages`` returns ``dma_resv_wait_timeout()``'s value (5.19 only)."""
        return _v("5.19") <= self.version < _v("6.0")

    @property
    def pinned_map_failure_unpins_twice(self) -> bool:
        """``ib_umem_dmabuf_get_pinned`` unpins on a map failure and its release unpins again (5.16 to 6.19)."""
        return _v("5.16") <= self.version < _v("7.0")

    @property
    def mlx5_dereg_races_invalidate(self) -> bool:
        """mlx5 revokes a dynamic dma-buf MR's mkey without the reservation lock and leaves the MR for
        ``mlx5_ib_dmabuf_invalidate_cb`` to find (5.13 to 6.13; fixed by cc668a11e6ac)."""
        return _v("5.13") <= self.version < MLX5_DMABUF_DEREG_LOCKED

    @property
    def static_importers_lock(self) -> bool:
        """Static importers must hold the reservation lock to map and unmap (6.2+)."""
        return self.version >= _v("6.2")

    @property
    def has_mlx5_dmabuf_access_attr(self) -> bool:
        """mlx5's ``MLX5_IB_ATTR_REG_DMABUF_MR_ACCESS_FLAGS`` attribute and its data-direct path exist (6.12+)."""
        return self.version >= _v("6.12")

    @property
    def has_reg_mr_ioctl(self) -> bool:
        """``UVERBS_METHOD_REG_MR`` and DMA handles (``UVERBS_OBJECT_DMAH``) exist (6.17+: "RDMA/core: Introduce a
        DMAH object and its alloc/free APIs", d83edab562a4, sent to rdma-next in July 2025 with rdma-core PR
        #1623)."""
        return self.version >= _v("6.17")

    @property
    def has_revoke(self) -> bool:
        """``ib_umem_dmabuf_revoke`` exists (6.12+)."""
        return self.version >= _v("6.12")

    @property
    def move_notify_always_on(self) -> bool:
        """``CONFIG_DMABUF_MOVE_NOTIFY`` is no longer optional (7.1+)."""
        return self.version >= MOVE_NOTIFY_ALWAYS_BUILT

    @property
    def invalidate_optional(self) -> bool:
        """A dynamic importer may leave ``invalidate_mappings`` out (7.1+): attach no longer refuses it,
        invalidation skips it, and the pinned RDMA importers drop their warning stub."""
        return self.version >= _v("7.1")

    @property
    def amdgpu_pins_into_vram(self) -> bool:
        """``amdgpu_dma_buf_pin`` may pin into VRAM (6.15+, f5e7fabd1f5c); before, every pin lands in GTT."""
        return self.version >= AMDGPU_VRAM_PIN

    @property
    def has_uverbs_dmabuf_export(self) -> bool:
        """``UVERBS_OBJECT_DMABUF`` exists: device memory can be exported as a dma-buf (7.0+)."""
        return self.version >= _v("7.0")

    @property
    def has_attach_revocable(self) -> bool:
        """``dma_buf_attach_revocable()`` exists and VFIO admits revocable pinned importers (7.1+)."""
        return self.version >= DMABUF_REVOKE_CONTRACT

    @property
    def has_pinned_revocable_umem(self) -> bool:
        """``ib_umem_dmabuf_get_pinned_revocable_and_lock`` and ``ib_umem_dmabuf_set_revoke_locked`` exist (7.1+)."""
        return self.version >= PINNED_REVOCABLE_UMEM

    @property
    def invalidate_name(self) -> str:
        """The importer callback's name: ``invalidate_mappings`` from 7.1, ``move_notify`` before."""
        return "invalidate_mappings" if self.version >= _v("7.1") else "move_notify"


RESTRICTED_QKEY = _v("6.4")
"""The first kernel whose ``modify_qp`` refuses an unprivileged process a controlled Q_Key (0cadb4db79e1)."""
AMDGPU_VRAM_PIN = _v("6.15")
"""The first kernel whose ``amdgpu_dma_buf_pin`` can pin into VRAM (f5e7fabd1f5c)."""
MLX5_DMABUF_DEREG_LOCKED = _v("6.14")
"""The first kernel whose mlx5 revokes a dma-buf MR under the reservation lock and clears ``umem_dmabuf->private``
(cc668a11e6ac), so a late ``move_notify`` finds no MR."""
MOVE_NOTIFY_ALWAYS_BUILT = _v("7.1")
"""The first kernel that always builds ``CONFIG_DMABUF_MOVE_NOTIFY``."""
DMABUF_REVOKE_CONTRACT = _v("7.1")
"""The first kernel with ``dma_buf_attach_revocable()`` (the revocation contract of the dmabuf-revoke series)."""
PINNED_REVOCABLE_UMEM = _v("7.1")
"""The first kernel whose RDMA core imports pinned dma-bufs revocably
(``ib_umem_dmabuf_get_pinned_revocable_and_lock``)."""
DEFAULT_KERNEL = "6.18"
"""The calibration host's kernel (models/data/h200_host.json)."""
RDMA_CORE_DMABUF = _v("34")
RDMA_CORE_MLX5DV_DMABUF = _v("54")
"""The first rdma-core whose providers/mlx5/libmlx5.map exports ``mlx5dv_reg_dmabuf_mr`` (MLX5_1.25, v54.0)."""
RDMA_CORE_DM_DMABUF = _v("62")
RDMA_CORE_REG_MR_EX = _v("59")
"""The first rdma-core with ``ibv_reg_mr_ex`` and ``ibv_alloc_dmah`` (libibverbs.map.in IBVERBS_1.15, v59.0)."""
NVIDIA_DMABUF_EXPORT = _v("515")
NVIDIA_PCIE_MAPPING = _v("570")
"""The NVIDIA branch of CUDA 12.8, which brings ``CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE``."""


def node_kernel(node) -> KernelBehaviour:
    """The dated behaviours of ``node``'s kernel (:data:`DEFAULT_KERNEL`'s when the node models none)."""
    return node.kernel.config.behaviour if node.kernel is not None else KernelBehaviour(Version.parse(DEFAULT_KERNEL))

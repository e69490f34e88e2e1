"""The checks an ``IBV_ACCESS_ON_DEMAND`` registration meets after uverbs' access check, in mlx5's order:
``create_user_odp_mr`` (drivers/infiniband/hw/mlx5/mr.c) and the ``ib_umem_odp_get`` it calls
(drivers/infiniband/core/umem_odp.c, ``ib_init_umem_odp``), read at torvalds/linux of the 6.x series.

An ODP registration looks at no page: no RLIMIT_MEMLOCK charge, no ``can_do_mlock`` check, no lookup of the
range in the process's mappings (``mmu_interval_notifier_insert`` takes any range), so an unmapped range
registers and fails only when the NIC touches it.
"""

from __future__ import annotations

from models.ib.implicit_odp import is_implicit_request, odp_supports_implicit
from models.ib.mr_backing import OdpBacking
from models.ib.mr_checks import PAGE_SIZE, U64, mlx5r_umr_can_load_pas
from models.versions import node_kernel
from sim.core import VerbsError


def create_user_odp_mr(node, addr: int, length: int, iova: int, call: str) -> bool:
    """``create_user_odp_mr``'s checks for ``node``'s NIC; returns whether the MR is implicit.

    The kernel built without ``CONFIG_INFINIBAND_ON_DEMAND_PAGING`` -> EOPNOTSUPP; address 0 and length
    ``U64_MAX`` ask for an implicit MR: a non-zero iova or a device without ``IB_ODP_SUPPORT_IMPLICIT`` -> EINVAL;
    otherwise :func:`~models.ib.mr_checks.mlx5r_umr_can_load_pas` (EINVAL), then :func:`ib_umem_odp_get`.

    :raises VerbsError: as above.
    """
    if node.kernel is not None and not node.kernel.config.on_demand_paging:
        raise VerbsError("EOPNOTSUPP", "the kernel is built without CONFIG_INFINIBAND_ON_DEMAND_PAGING", call=call)
    if is_implicit_request(addr, length):
        if iova != 0:
            raise VerbsError("EINVAL", f"an implicit ODP MR has iova 0, not 0x{iova:x} (create_user_odp_mr)",
                             call=call)
        if not odp_supports_implicit(node.nic.params):
            raise VerbsError("EINVAL", "address 0 and length SIZE_MAX ask for an implicit ODP MR, which the device "
                             "does not support (no IBV_ODP_SUPPORT_IMPLICIT)", call=call)
        return True
    mlx5r_umr_can_load_pas(node.nic, length, call)
    ib_umem_odp_get(addr, length, call)
    return False


def ib_umem_odp_get(addr: int, length: int, call: str) -> None:
    """``ib_init_umem_odp``'s checks of an explicit ODP range: ``addr + length`` wraps past 2**64, or rounding it
    up to a page does (``end < page_size`` after ``ALIGN``, which an end of 0 meets too) -> EOVERFLOW; no page
    between the aligned start and end (length 0 at a page boundary) -> EINVAL. A length 0 inside a page covers
    that page and registers.

    :raises VerbsError: as above.
    """
    end = addr + length
    aligned_end = -(-end // PAGE_SIZE) * PAGE_SIZE
    if addr < 0 or length < 0 or end >= U64 or not PAGE_SIZE <= aligned_end < U64:
        raise VerbsError("EOVERFLOW", f"addr 0x{addr:x} + length {length} overflows (ib_init_umem_odp)", call=call)
    if -(-end // PAGE_SIZE) == addr // PAGE_SIZE:
        raise VerbsError("EINVAL", "the range covers no page (ib_init_umem_odp: no pages)", call=call)


def mlx5_ib_init_odp_mr(node, backing: OdpBacking, length: int, now_ps: int) -> int:
    """The end of ``create_user_odp_mr`` from 5.10 (``mlx5_ib_init_odp_mr``): one snapshot run of the fault path
    (``MLX5_PF_FLAGS_SNAPSHOT``) maps the pages the CPU already has, faulting none, so a buffer touched before
    registration takes no NIC fault on first access. Returns its time (ps); before 5.10 nothing runs and the
    MTT starts empty."""
    if not node_kernel(node).odp_registration_snapshot:
        return 0
    return backing.prefetch(now_ps, 0, length, fault=False)

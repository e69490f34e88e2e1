"""NIC device memory as rdma-core and the kernel give it: ``ibv_alloc_dm`` (providers/mlx5/verbs.c ``_mlx5dv_alloc_dm``,
``alloc_dm_memic``; drivers/infiniband/hw/mlx5/dm.c ``handle_alloc_dm_memic``, ``mlx5_cmd_alloc_memic``),
``ibv_memcpy_to_dm``/``ibv_memcpy_from_dm`` (``mlx5_access_dm``), ``ibv_reg_dm_mr`` (``mlx5_reg_dm_mr``,
libibverbs/cmd_dm.c ``ibv_cmd_reg_dm_mr``, drivers/infiniband/core/uverbs_std_types_mr.c
``UVERBS_HANDLER(UVERBS_METHOD_DM_MR_REG)``, drivers/infiniband/hw/mlx5/mr.c ``mlx5_ib_reg_dm_mr``) and
``ibv_free_dm`` (drivers/infiniband/core/uverbs_std_types_dm.c ``uverbs_free_dm``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models.nic.memic import MLX5_MEMIC_BASE_SIZE, PAGE_SIZE
from models.nic.nic import NicParams
from models.nic.wqe import Access
from models.presets import NIC_PRESETS
from models.verbs.destroy import ibv_dealloc_pd
from models.verbs.device import ibv_alloc_pd
from models.verbs.dm import ibv_alloc_dm, ibv_free_dm, ibv_memcpy_from_dm, ibv_memcpy_to_dm
from models.verbs.dm_mr import ibv_reg_dm_mr
from models.verbs.mr import REREG_CHANGE_ACCESS, ibv_dereg_mr, ibv_rereg_mr
from models.verbs.query import ibv_query_device_ex
from sim.core import VerbsError
from tests.models.verbs.test_device_query import _context

ZB_RW = Access.ZERO_BASED | Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def context(preset: str = "connectx6", **changes):
    return _context(dataclasses.replace(NicParams(**NIC_PRESETS[preset]), **changes))


def refusal(call, *args, **kwargs) -> tuple[str, str]:
    """The errno ``call`` fails with and its message (the test fails when it succeeds)."""
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno, str(info.value)


@pytest.mark.parametrize("preset, expected", [("connectx6", 131072), ("connectx7", 262144), ("efa", 0)])
def test_max_dm_size_per_device(preset, expected):
    """``mlx5_ib_query_device``: ``max_dm_size`` is the firmware's ``max_memic_size``; ConnectX-6's ibv_devinfo -v
    prints 131072 bytes, a ConnectX-7's mlxconfig MEMIC_SIZE_LIMIT _256KB; EFA has none."""
    assert ibv_query_device_ex(context(preset)).max_dm_size == expected


@pytest.mark.parametrize("preset, changes, length, args, errno, says", [
    ("efa", {}, 4096, {}, "EOPNOTSUPP", "no alloc_dm"),                 # libibverbs' dummy alloc_dm
    ("connectx6", {}, 1 << 30, {"comp_mask": 1}, "EINVAL", "comp_mask"),  # check_comp_mask before the length
    ("connectx6", {}, 131073, {}, "EINVAL", "max_dm_size"),            # alloc_dm_memic
    ("connectx6", {}, -1, {}, "EINVAL", "max_dm_size"),                # a size_t: wraps above every limit
    ("connectx6", {"max_dm_size": 0}, 64, {}, "EINVAL", "max_dm_size"),  # no MEMIC: mlx5's max_dm_size is 0
    ("connectx6", {"max_dm_size": 0}, 0, {}, "EOPNOTSUPP", "no MEMIC"),  # then the kernel's handle_alloc_dm_memic
    ("connectx6", {}, 0, {}, "EINVAL", "length 0"),                     # mlx5_cmd_alloc_memic: !length
    ("connectx6", {}, 64, {"log_align_req": 13}, "EINVAL", "log_align_req"),  # 13 - 6 > the device's 6
])
def test_alloc_dm_refusals_in_mlx5s_order(preset, changes, length, args, errno, says):
    code, message = refusal(ibv_alloc_dm, context(preset, **changes), length, **args)
    assert code == errno and says in message


def test_an_allocation_takes_whole_memic_pages_and_needs_a_free_run_of_them():
    """``handle_alloc_dm_memic`` rounds to 64 bytes and ``mlx5_cmd_alloc_memic`` takes ``DIV_ROUND_UP(size,
    PAGE_SIZE)`` contiguous BAR pages (``bitmap_find_next_zero_area``): ENOMEM when no run fits, even with bytes to
    spare in between."""
    ctx = context()
    pages = ctx.node.nic.params.max_dm_size // PAGE_SIZE
    small = [ibv_alloc_dm(ctx, MLX5_MEMIC_BASE_SIZE + 1) for _ in range(pages)]   # one page each
    assert refusal(ibv_alloc_dm, ctx, 4)[0] == "ENOMEM"
    ibv_free_dm(small[1])
    ibv_free_dm(small[3])
    assert refusal(ibv_alloc_dm, ctx, PAGE_SIZE + 4)[0] == "ENOMEM"            # two pages free, not side by side
    assert ibv_alloc_dm(ctx, PAGE_SIZE, log_align_req=12).offset == PAGE_SIZE  # the first free run
    ibv_free_dm(small[2])
    assert ibv_alloc_dm(ctx, PAGE_SIZE + 4).offset == 2 * PAGE_SIZE


def test_memcpy_bounds_before_alignment():
    """``mlx5_access_dm``: past the end EFAULT (checked first), an offset or length not a multiple of 4 EINVAL; the
    bytes copied in come back out."""
    dm = ibv_alloc_dm(context(), 100)
    data = np.arange(100, dtype=np.uint8)
    ibv_memcpy_to_dm(dm, 0, data)
    assert ibv_memcpy_from_dm(dm, 4, 8).tolist() == list(range(4, 12))
    assert refusal(ibv_memcpy_to_dm, dm, 104, data[:4])[0] == "EFAULT"
    assert refusal(ibv_memcpy_from_dm, dm, 97, 5)[0] == "EFAULT"               # unaligned too: EFAULT comes first
    assert refusal(ibv_memcpy_to_dm, dm, 1, data[:4])[0] == "EINVAL"
    assert refusal(ibv_memcpy_from_dm, dm, 4, 3)[0] == "EINVAL"


@pytest.mark.parametrize("offset, length, access, says", [
    (0, 100, Access.LOCAL_WRITE, "ZERO_BASED"),                                  # ibv_cmd_reg_dm_mr
    (0, 100, ZB_RW | Access.MW_BIND, "MLX5_DM_ALLOWED_ACCESS"),                 # mlx5_reg_dm_mr
    (0, 100, ZB_RW | Access.ON_DEMAND, "MLX5_DM_ALLOWED_ACCESS"),
    (0, 100, Access.ZERO_BASED | Access.REMOTE_WRITE, "ib_check_mr_access"),  # remote write needs local write
    (0, 104, ZB_RW, "past the 100 bytes"),                                     # rdma-core's test_dm_bad_registration
    (104, 0, ZB_RW, "past the 100 bytes"),
    (4, 100, ZB_RW, "past the 100 bytes"),
    (0, 100, ZB_RW | Access.RELAXED_ORDERING, "mlx5_ib_reg_dm_mr"),  # rdma-core's optional range: the kernel refuses
])
def test_reg_dm_mr_refusals(offset, length, access, says):
    ctx = context()
    dm = ibv_alloc_dm(ctx, 100)
    errno, message = refusal(ibv_reg_dm_mr, ibv_alloc_pd(ctx), dm, offset, length, access)
    assert errno == "EINVAL" and says in message
    assert dm.usecnt == 0


def test_reg_dm_mr_is_zero_based_and_may_be_empty():
    """rdma-core's ``ibv_cmd_reg_dm_mr`` sets ``addr`` NULL; its ``test_create_dm_mr`` registers 0 bytes of 4."""
    ctx = context()
    dm = ibv_alloc_dm(ctx, 4096)
    mr = ibv_reg_dm_mr(ibv_alloc_pd(ctx), dm, 1024, 2048, ZB_RW)
    assert (mr.addr, mr.iova, mr.length, mr.mtt_entries) == (0, 0, 2048, 0)
    assert mr.allows(0, 2048, int(Access.REMOTE_WRITE)) and not mr.allows(1024, 2048, int(Access.REMOTE_WRITE))
    assert ibv_reg_dm_mr(ibv_alloc_pd(ctx), ibv_alloc_dm(ctx, 4), 0, 0, ZB_RW).length == 0


def test_reg_dm_mr_needs_an_mlx5_provider():
    mlx5 = context()
    errno, _ = refusal(ibv_reg_dm_mr, ibv_alloc_pd(context("efa")), ibv_alloc_dm(mlx5, 64), 0, 64, ZB_RW)
    assert errno == "EOPNOTSUPP"


def test_the_mr_holds_the_memory_and_its_pd():
    """``DM_MR_REG`` raises ``dm->usecnt`` and ``pd->usecnt``: ``uverbs_free_dm`` and ``uverbs_free_pd`` refuse with
    EBUSY until the MR is deregistered; the memory's pages come back only when it is freed."""
    ctx = context()
    pd = ibv_alloc_pd(ctx)
    limit = ctx.node.nic.params.max_dm_size
    dm = ibv_alloc_dm(ctx, limit)
    mr = ibv_reg_dm_mr(pd, dm, 0, limit, ZB_RW)
    assert refusal(ibv_free_dm, dm)[0] == "EBUSY"
    assert refusal(ibv_dealloc_pd, pd)[0] == "EBUSY"
    assert refusal(ibv_alloc_dm, ctx, 64)[0] == "ENOMEM"
    ibv_dereg_mr(mr)
    ibv_free_dm(dm)
    ibv_dealloc_pd(pd)
    assert ibv_alloc_dm(ctx, limit).length == limit
    assert refusal(ibv_reg_dm_mr, ibv_alloc_pd(ctx), dm, 0, 64, ZB_RW)[0] == "ENOENT"   # the freed handle


def test_a_dm_mr_cannot_be_reregistered():
    """``ib_uverbs_rereg_mr``: ``if (mr->dm)`` EINVAL."""
    ctx = context()
    mr = ibv_reg_dm_mr(ibv_alloc_pd(ctx), ibv_alloc_dm(ctx, 64), 0, 64, ZB_RW)
    errno, message = refusal(ibv_rereg_mr, mr, REREG_CHANGE_ACCESS, access=ZB_RW)
    assert errno == "EINVAL" and "mr->dm" in message

"""Errno and order of checks of each registration call, per device profile and kernel: every case breaks two rules
at once, so only the kernel's order of checks gives the expected errno."""

from dataclasses import replace

import pytest

from models.dmabuf import DmaBufCore, KernelConfig, MovableExporter, dma_buf_fd
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams
from models.nic.wqe import Access
from models.node import Node
from models.pcie.link import PcieParams
from models.presets import NIC_PRESETS
from models.verbs.dmabuf import MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, ibv_reg_dmabuf_mr, mlx5dv_reg_dmabuf_mr
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from sim.core import Environment, VerbsError

LW, RW = Access.LOCAL_WRITE, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 1 << 20
BAD_FD = 99
DD = MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT
EFA = NicParams(**NIC_PRESETS["efa"])
MLX5 = NicParams(**NIC_PRESETS["connectx7"])
CX8 = NicParams(**NIC_PRESETS["connectx8"])
"""The one device with a data-direct function (``mlx5_data_direct_pci_table``, drivers/infiniband/hw/mlx5/
data_direct.c, lists only ConnectX-8's 0x2100)."""


def _pd(nic=MLX5, kernel=KernelConfig(move_notify_enabled=True), memlock=None, rdma_core="57"):
    env = Environment(1)
    node = Node.create("b", HostParams(poll_period_ps=0, memlock_limit=memlock), PcieParams(), nic)
    node.kernel = DmaBufCore(env, kernel)
    node.rdma_core = rdma_core
    fabric = Fabric(FabricParams())
    fabric.attach(node.nic.name)
    return ibv_alloc_pd(ibv_open_device(node, env, fabric))


def _errno(call, pd, **kw):
    gpu = MovableExporter(pd.context.node.kernel, SIZE, name="b.gpu0")
    fd = dma_buf_fd(gpu.dmabuf, pd.context.node.fds)
    args = {"offset": 0, "length": SIZE, "iova": 0x10000, "fd": fd, "access": RW} | kw
    try:
        call(pd, **args)
    except VerbsError as err:
        assert gpu.dmabuf.refcount == 1  # every failed path dropped the reference it took
        return err.errno, err.rule
    return "ok", ""


def _dv(mlx5_access):
    return lambda pd, **kw: mlx5dv_reg_dmabuf_mr(pd, mlx5_access=mlx5_access, **kw)


@pytest.mark.parametrize("case, pd_kw, kw, errno, words", [
    ("old kernel before a bad iova", {"kernel": KernelConfig(version="5.11")}, {"iova": 1}, "EOPNOTSUPP", "5.12"),
    ("no driver op before a bad iova", {"nic": replace(MLX5, dmabuf=None)}, {"iova": 1}, "EOPNOTSUPP", "DMA-BUF"),
    ("page offset before access bits", {}, {"iova": 1, "access": RW | Access.MW_BIND}, "EINVAL", "page offsets"),
    ("access bits before the fd", {}, {"access": RW | Access.ON_DEMAND, "fd": BAD_FD}, "EINVAL", "only LOCAL_WRITE"),
    ("ib_check_mr_access before the fd", {}, {"access": Access.REMOTE_WRITE, "fd": BAD_FD}, "EINVAL",
     "requires LOCAL_WRITE"),
    ("kernel without ODP config before the fd", {"kernel": KernelConfig(on_demand_paging=False)}, {"fd": BAD_FD},
     "EOPNOTSUPP", "CONFIG_INFINIBAND_ON_DEMAND_PAGING"),
    ("a device without ODP registers (mlx5 asks the kernel configuration)", {"nic": replace(MLX5, odp=None)}, {},
     "ok", ""),
    ("UMR page-list limit before the fd", {"nic": replace(MLX5, umr_extended_translation_offset=False)},
     {"length": 256 << 20, "fd": BAD_FD}, "EINVAL", "mlx5r_umr_can_load_pas"),
    ("no max_mr_size check: the range past the buffer is next", {"nic": replace(MLX5, max_mr_size=4096)}, {},
     "ok", ""),
    ("overflow before the fd", {}, {"offset": 2**64 - 4096, "iova": 0, "fd": BAD_FD}, "EINVAL", "overflows"),
    ("bad fd before length 0", {}, {"fd": BAD_FD, "length": 0}, "EBADF", "not open"),
    ("past the buffer", {}, {"offset": 4096}, "EINVAL", "past the dma-buf"),
])
def test_ibv_reg_dmabuf_mr_on_mlx5(case, pd_kw, kw, errno, words):
    got, rule = _errno(ibv_reg_dmabuf_mr, _pd(**pd_kw), **kw)
    assert (got, words in rule) == (errno, True), (case, rule)


@pytest.mark.parametrize("case, pd_kw, kw, errno, words", [
    ("no pinned importer before 5.16, before the fd and size", {"kernel": KernelConfig(version="5.15")},
     {"fd": BAD_FD, "length": 0}, "EOPNOTSUPP", "5.16"),
    ("page offset first", {}, {"iova": 1, "access": RW | Access.REMOTE_ATOMIC}, "EINVAL", "page offsets"),
    ("efa_alloc_mr refuses atomics before the fd", {}, {"access": RW | Access.REMOTE_ATOMIC, "fd": BAD_FD},
     "EOPNOTSUPP", "efa_alloc_mr"),
    ("a device without RDMA write", {"nic": replace(EFA, remote_access=Access.REMOTE_READ)}, {}, "EOPNOTSUPP",
     "efa_alloc_mr"),
    ("RELAXED_ORDERING is optional: dropped, not refused", {}, {"access": RW | Access.RELAXED_ORDERING}, "ok", ""),
    ("no ODP kernel configuration needed", {"kernel": KernelConfig(on_demand_paging=False)}, {}, "ok", ""),
    ("umem get after efa_alloc_mr", {}, {"fd": BAD_FD}, "EBADF", "not open"),
])
def test_ibv_reg_dmabuf_mr_on_efa(case, pd_kw, kw, errno, words):
    got, rule = _errno(ibv_reg_dmabuf_mr, _pd(**({"nic": EFA} | pd_kw)), **kw)
    assert (got, words in rule) == (errno, True), (case, rule)


@pytest.mark.parametrize("case, mlx5_access, pd_kw, kw, errno, words", [
    ("rdma-core before v54 (libmlx5.map: MLX5_1.25 is v54.0's)", DD, {"rdma_core": "53"}, {"iova": 1}, "EOPNOTSUPP",
     "rdma-core v53"),
    ("not an mlx5 device", DD, {"nic": EFA}, {"iova": 1}, "EOPNOTSUPP", "mlx5_get_dv_ops"),
    ("kernel before 6.12 lacks the mandatory attribute, even for 0", 0, {"kernel": KernelConfig(version="6.11")},
     {"iova": 1}, "EPROTONOSUPPORT", "6.12"),
    ("uverbs page offset before the mlx5 flags", 2, {}, {"iova": 1}, "EINVAL", "page offsets"),
    ("uverbs access before the mlx5 flags", 2, {}, {"access": Access.REMOTE_WRITE}, "EINVAL", "requires LOCAL_WRITE"),
    ("kernel configuration before the mlx5 flags", 2, {"kernel": KernelConfig(on_demand_paging=False)}, {},
     "EOPNOTSUPP", "CONFIG_INFINIBAND_ON_DEMAND_PAGING"),
    ("mlx5 flags before the UMR limit", 2, {"nic": replace(MLX5, umr_extended_translation_offset=False)},
     {"length": 256 << 20}, "EINVAL", "unknown mlx5_access"),
    ("UMR limit before the data-direct iova", DD, {"nic": replace(MLX5, umr_extended_translation_offset=False)},
     {"length": 256 << 20, "offset": 1, "iova": 1}, "EINVAL", "mlx5r_umr_can_load_pas"),
    ("unaligned iova before the missing device", DD, {"nic": MLX5},
     {"offset": 1, "iova": 0x10001}, "EOPNOTSUPP", "page-aligned iova"),
    ("no data-direct device before the fd", DD, {"nic": MLX5}, {"fd": BAD_FD},
     "EINVAL", "no data-direct device"),
    ("a ConnectX-8 has its data-direct device", DD, {"nic": CX8}, {}, "ok", ""),
    ("mlx5_access 0 is the dynamic path", 0, {}, {}, "ok", ""),
])
def test_mlx5dv_reg_dmabuf_mr(case, mlx5_access, pd_kw, kw, errno, words):
    got, rule = _errno(_dv(mlx5_access), _pd(**pd_kw), **kw)
    assert (got, words in rule) == (errno, True), (case, rule)


@pytest.mark.parametrize("ro_mkey, kept", [(False, False), (True, True)])
def test_data_direct_masks_relaxed_ordering_without_a_relaxed_ordering_mkey(ro_mkey, kept):
    pd = _pd(nic=replace(CX8, data_direct_mkey_ro=ro_mkey))
    gpu = MovableExporter(pd.context.node.kernel, SIZE, name="b.gpu0")
    fd = dma_buf_fd(gpu.dmabuf, pd.context.node.fds)
    mr = mlx5dv_reg_dmabuf_mr(pd, 0, SIZE, 0x10000, fd, RW | Access.RELAXED_ORDERING, DD)
    assert mr.backing.umem.pinned
    assert bool(mr.access & Access.RELAXED_ORDERING) is kept and mr.access & RW == RW


def test_data_direct_registers_the_same_on_both_sides_of_6_12_only_from_it():
    for version, errno in (("6.11", "EPROTONOSUPPORT"), ("6.12", "ok")):
        assert _errno(_dv(DD), _pd(nic=CX8, kernel=KernelConfig(version=version)))[0] == errno


@pytest.mark.parametrize("case, pd_kw, addr_off, length, access, errno, words", [
    ("access before overflow", {}, 2**64, 4096, Access.REMOTE_WRITE, "EINVAL", "requires LOCAL_WRITE"),
    ("access before length 0", {}, 0, 0, Access.REMOTE_ATOMIC, "EINVAL", "requires LOCAL_WRITE"),
    ("addr + length == 2**64 overflows", {}, None, 4096, LW, "EINVAL", "overflows"),
    ("overflow before EPERM", {"memlock": 0}, None, 4096, LW, "EINVAL", "overflows"),
    ("EPERM when RLIMIT_MEMLOCK is 0, before length 0", {"memlock": 0}, 0, 0, LW, "EPERM", "can_do_mlock"),
    ("length 0", {}, 0, 0, LW, "EINVAL", "length 0"),
    ("RLIMIT before pinning an unmapped range", {"memlock": 4096}, 1 << 40, 8192, LW, "ENOMEM", "RLIMIT_MEMLOCK"),
    ("unmapped range", {}, 1 << 40, 8192, LW, "EFAULT", "not mapped"),
    ("ON_DEMAND needs no mlock rights", {"memlock": 0}, 0, 4096, LW | Access.ON_DEMAND, "ok", ""),
])
def test_ibv_reg_mr(case, pd_kw, addr_off, length, access, errno, words):
    pd = _pd(**pd_kw)
    buf = pd.context.node.host.allocate("buf", 1 << 20)
    addr = 2**64 - length if addr_off is None else buf.addr + addr_off
    try:
        ibv_reg_mr(pd, addr, length, access)
        got, rule = "ok", ""
    except VerbsError as err:
        got, rule = err.errno, err.rule
    assert (got, words in rule) == (errno, True), (case, rule)
    if got != "ok":
        assert pd.context.node.host.pinned_pages == 0


@pytest.mark.parametrize("access, memlock, errno", [
    (LW | Access.REMOTE_ATOMIC, 0, "EOPNOTSUPP"),   # efa_alloc_mr runs before ib_umem_get's EPERM
    (Access.REMOTE_ATOMIC, None, "EINVAL"),         # after uverbs' ib_check_mr_access
    (LW | Access.RELAXED_ORDERING, None, "ok"),      # optional: dropped
])
def test_ibv_reg_mr_on_efa(access, memlock, errno):
    pd = _pd(nic=EFA, memlock=memlock)
    buf = pd.context.node.host.allocate("buf", 1 << 20)
    try:
        ibv_reg_mr(pd, buf.addr, 4096, access)
        got = "ok"
    except VerbsError as err:
        got = err.errno
    assert got == errno


@pytest.mark.parametrize("nic, kept", [(EFA, False), (MLX5, True)])
def test_host_mr_keeps_relaxed_ordering_only_where_the_driver_does(nic, kept):
    """efa_reg_mr drops the optional bits (efa_alloc_mr) and the MR records the rights it kept; mlx5 keeps
    RELAXED_ORDERING on a host MR."""
    pd = _pd(nic=nic)
    buf = pd.context.node.host.allocate("buf", 1 << 20)
    mr = ibv_reg_mr(pd, buf.addr, 4096, LW | Access.RELAXED_ORDERING)
    assert bool(mr.access & Access.RELAXED_ORDERING) is kept and mr.access & LW

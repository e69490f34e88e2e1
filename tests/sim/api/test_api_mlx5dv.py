"""mlx5dv where rdma-core's tests/test_mlx5_dmabuf.py uses it: ``mlx5dv_get_data_direct_sysfs_path``
(drivers/infiniband/hw/mlx5/std_types.c: ENODEV without a data-direct device, ENOSPC for a short buffer) and
``mlx5dv_reg_dmabuf_mr`` with and without the data-direct access flag (a ConnectX-8 has the function,
mlx5_data_direct_pci_table; a ConnectX-7 has none: reg_user_mr_dmabuf_by_data_direct's EINVAL)."""

from sim.api import SGE, Context, DmaBuf, Mlx5DmaBufMR, Opcode, SendWR, Testbed, WcStatus
from tests.sim.api.test_api import RW, errno_of, rc_pair

DATA_DIRECT = 1  # MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT
GPU_NODE = {"rdma_core": "61", "gpus": [{"preset": "h200"}]}


def test_the_data_direct_sysfs_path_exists_only_on_a_connectx8():
    testbed = Testbed({"a": {"nic": {"preset": "connectx8"}}, "b": {}})
    path = Context(testbed, "a").get_data_direct_sysfs_path()
    assert path.startswith("/devices/pci")
    assert errno_of(Context(testbed, "a").get_data_direct_sysfs_path, 5) == "ENOSPC"  # test_..._bad_length
    assert errno_of(Context(testbed, "b").get_data_direct_sysfs_path) == "ENODEV"     # a ConnectX-7
    efa = Testbed({"a": {"nic": {"preset": "efa"}}, "b": {"nic": {"preset": "efa"}}})
    assert errno_of(Context(efa, "a").get_data_direct_sysfs_path) == "EOPNOTSUPP"


def test_dv_dmabuf_mr_with_and_without_data_direct_carries_writes():
    """test_dv_dmabuf_mr and test_dv_dmabuf_mr_data_direct: RDMA WRITEs into the GPU through both kinds of MR."""
    for preset, mlx5_access, mode in (("connectx7", 0, "dmabuf"), ("connectx8", DATA_DIRECT, "dmabuf-pinned")):
        testbed = Testbed({"a": {}, "b": {**GPU_NODE, "nic": {"preset": preset}}})
        (_, _, cq, src, qp), (ctx_b, pd_b, _, _, _) = rc_pair(testbed)
        fd = DmaBuf(ctx_b, 1 << 16)
        dst = Mlx5DmaBufMR(pd_b, 0, 1 << 16, iova=0, fd=fd, access=RW, mlx5_access=mlx5_access)
        assert dst.mr.backing.mode == mode
        src.write(b"via dv", 6)
        wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 6, src.lkey)])
        wr.set_wr_rdma(dst.rkey, 0)
        qp.post_send(wr)
        assert cq.poll()[1][0].status is WcStatus.SUCCESS and fd.buffer.read(6) == b"via dv"


def test_data_direct_on_a_connectx7_is_einval():
    testbed = Testbed({"a": {}, "b": GPU_NODE})
    _, (ctx_b, pd_b, _, _, _) = rc_pair(testbed)
    assert errno_of(Mlx5DmaBufMR, pd_b, 0, 1 << 16, fd=DmaBuf(ctx_b, 1 << 16), access=RW,
                    mlx5_access=DATA_DIRECT) == "EINVAL"

"""``ibv_reg_mr_ex`` and DMA handles through the API, held to rdma-core's and the kernel's rules: libibverbs/cmd_mr.c
``ibv_cmd_reg_mr_ex``, providers/mlx5/verbs.c ``mlx5_alloc_dmah``, drivers/infiniband/core/uverbs_std_types_dmah.c
and uverbs_std_types_mr.c, drivers/infiniband/hw/mlx5/dmah.c and mr.c ``mlx5_ib_reg_user_mr``; rdma-core's
tests/test_dmah.py cases named where they match."""

import pytest

from sim.api import (SGE, Access, DMAHandle, DmaBuf, DmaHandleInitAttr, MREx, Opcode, SendWR, Testbed, VerbsError,
                     WcStatus)
from tests.sim.api.test_api import RW, errno_of, rc_pair

ALL_FIELDS = 1 | 2 | 4  # IBV_DMAH_INIT_ATTR_MASK_CPU_ID | _PH | _TPH_MEM_TYPE
NEW = {"kernel": {"version": "6.18"}, "rdma_core": "61"}


def bed(node_a: dict | None = None, **kwargs) -> Testbed:
    return Testbed({"a": {**NEW, **(node_a or {})}, "b": {**NEW, "gpus": [{"preset": "h200"}]}}, **kwargs)


def test_a_handle_with_a_steering_tag_registers_an_mr_that_moves_data():
    """test_dmah_with_mrex and the RC traffic test: an MREx with a DMA handle carries WRITEs."""
    testbed = bed({"nic": {"pcie_tph": True}})
    (ctx_a, pd_a, cq, _, qp), (_, _, _, dst, _) = rc_pair(testbed)
    handle = DMAHandle(ctx_a, DmaHandleInitAttr(ALL_FIELDS, cpu_id=3, ph=2, tph_mem_type=0))
    mr = MREx(pd_a, 1 << 16, RW, dmah=handle)
    mr.write(b"hinted", 6)
    wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf, 6, mr.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    qp.post_send(wr)
    assert cq.poll()[1][0].status is WcStatus.SUCCESS and dst.read(6, 0) == b"hinted"
    assert mr.mr.dmah is handle.dmah and handle.dmah.usecnt == 1


def test_freeing_a_handle_in_use_is_ebusy_and_close_frees_its_mrs_first():
    """uverbs_free_dmah: ``atomic_read(&dmah->usecnt)`` -> EBUSY; pyverbs' DMAHandle.close closes its MRs first."""
    from models.verbs.dmah import ibv_dealloc_dmah

    (ctx, pd, _, _, _), _ = rc_pair(bed())
    handle = DMAHandle(ctx, DmaHandleInitAttr(2, ph=1))
    mr = MREx(pd, 4096, RW, dmah=handle)
    assert errno_of(ibv_dealloc_dmah, handle.dmah) == "EBUSY"
    handle.close()
    assert mr.closed and handle.dmah.freed and handle.dmah.usecnt == 0


@pytest.mark.parametrize("attr, errno", [
    (DmaHandleInitAttr(2, ph=4), "EINVAL"),                          # test_dmah_invalid_ph: ph & 0xFC
    (DmaHandleInitAttr(1 | 4, cpu_id=0), "EINVAL"),                  # mlx5_alloc_dmah: PH is a must
    (DmaHandleInitAttr(2 | 1, cpu_id=0, ph=1), "EINVAL"),            # a steering tag needs both fields
    (DmaHandleInitAttr(2 | 8, ph=1), "EOPNOTSUPP"),                  # check_comp_mask: an unknown bit
    (DmaHandleInitAttr(ALL_FIELDS, cpu_id=0xFFFF, ph=3), "EINVAL"),  # test_dmah_inval_cpu_id: >= nr_cpu_ids
    (DmaHandleInitAttr(ALL_FIELDS, ph=1, tph_mem_type=0xFE), "EOPNOTSUPP"),  # test_dmah_invalid_mem_type
])
def test_dma_handle_argument_checks(attr, errno):
    ctx = rc_pair(bed({"nic": {"pcie_tph": True}}))[0][0]
    assert errno_of(DMAHandle, ctx, attr) == errno


def test_a_steering_tag_needs_pcie_tph_and_the_handle_a_new_kernel_and_mlx5():
    """mlx5_st_alloc_index without an ST table -> EOPNOTSUPP; before 6.17 the ioctl method is unknown
    (ib_uverbs_cmd_verbs -> EPROTONOSUPPORT); EFA's provider has no alloc_dmah (rdma-core's dummy op)."""
    tagged = DmaHandleInitAttr(ALL_FIELDS, cpu_id=1, ph=1, tph_mem_type=1)
    ctx = rc_pair(bed())[0][0]
    assert errno_of(DMAHandle, ctx, tagged) == "EOPNOTSUPP"
    assert DMAHandle(ctx, DmaHandleInitAttr(2, ph=1)).dmah.cpu_id is None  # a hint alone needs no tag
    old = rc_pair(bed({"kernel": {"version": "6.12"}}))[0][0]
    assert errno_of(DMAHandle, old, DmaHandleInitAttr(2, ph=1)) == "EPROTONOSUPPORT"
    efa = rc_pair(Testbed({"a": {**NEW, "nic": {"preset": "efa"}}, "b": {**NEW, "nic": {"preset": "efa"}}}))[0][0]
    assert errno_of(DMAHandle, efa, DmaHandleInitAttr(2, ph=1)) == "EOPNOTSUPP"


def test_a_handle_with_on_demand_paging_is_refused():
    """test_dmah_mrex_odp_bad_flow: mlx5_ib_reg_user_mr refuses ON_DEMAND with a DMA handle (EOPNOTSUPP)."""
    testbed = bed()
    (ctx, pd, _, _, _), _ = rc_pair(testbed)
    handle = DMAHandle(ctx, DmaHandleInitAttr(2, ph=1))
    assert errno_of(MREx, pd, 4096, RW | Access.ON_DEMAND, dmah=handle) == "EOPNOTSUPP"
    assert handle.dmah.usecnt == 0


def test_an_mr_with_a_processing_hint_cannot_be_reregistered():
    """mlx5_ib_rereg_user_mr: an mkey with a PH (kernel_vendor_key's PH bits) -> EOPNOTSUPP."""
    testbed = bed()
    (ctx, pd, _, _, _), _ = rc_pair(testbed)
    mr = MREx(pd, 4096, RW, dmah=DMAHandle(ctx, DmaHandleInitAttr(2, ph=1)))
    assert errno_of(mr.rereg, 4, access=int(Access.LOCAL_WRITE)) == "EOPNOTSUPP"  # IBV_REREG_MR_CHANGE_ACCESS


def test_an_iova_keys_the_mr_and_must_share_its_page_offset():
    """The keys work at the iova for the memory at the address (ibv_reg_mr_iova through ibv_reg_mr_ex); an iova at
    another offset in its page is EINVAL (``(addr & ~PAGE_MASK) != (iova & ~PAGE_MASK)``)."""
    testbed = bed()
    (_, pd_a, cq, src, qp), (_, _, _, dst, _) = rc_pair(testbed)
    keyed = MREx(pd_a, 4096, RW, address=src.buf, iova=0x4000_0000)
    src.write(b"by iova", 7)
    wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(0x4000_0000, 7, keyed.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    qp.post_send(wr)
    assert cq.poll()[1][0].status is WcStatus.SUCCESS and dst.read(7, 0) == b"by iova" and keyed.buf == src.buf
    assert errno_of(MREx, pd_a, 4096, RW, address=src.buf, iova=0x4000_0010) == "EINVAL"


def test_a_dma_buf_through_reg_mr_ex_needs_an_iova_and_a_new_kernel():
    """ibv_cmd_reg_mr_ex: a dma-buf request without an iova is EINVAL ("iova is a must from kernel point of
    view"); a kernel without the REG_MR ioctl takes no dma-buf through it (the write fallback: EOPNOTSUPP)."""
    testbed = bed()
    _, (ctx_b, pd_b, _, _, _) = rc_pair(testbed)
    fd = DmaBuf(ctx_b, 1 << 16)
    assert errno_of(MREx, pd_b, 1 << 16, RW, fd=fd) == "EINVAL"
    mr = MREx(pd_b, 1 << 16, RW, fd=fd, iova=0)
    assert mr.mr.mr_type == "DMABUF_MR" and mr.location == "b.gpu0"
    old = Testbed({"a": {}, "b": {"kernel": {"version": "6.12"}, "rdma_core": "61", "gpus": [{"preset": "h200"}]}})
    _, (ctx_old, pd_old, _, _, _) = rc_pair(old)
    assert errno_of(MREx, pd_old, 1 << 16, RW, fd=DmaBuf(ctx_old, 1 << 16), iova=0) == "EOPNOTSUPP"
    assert MREx(pd_old, 4096, RW).mr.mr_type == "MR"  # an address-based request falls back to REG_MR


def test_reg_mr_ex_needs_rdma_core_59():
    """libibverbs.map.in: ibv_reg_mr_ex and ibv_alloc_dmah are IBVERBS_1.15, first in v59.0."""
    testbed = Testbed({"a": {"rdma_core": "58"}, "b": {}})
    (ctx, pd, _, _, _), _ = rc_pair(testbed)
    assert errno_of(MREx, pd, 4096, RW) == "EOPNOTSUPP"
    assert errno_of(DMAHandle, ctx, DmaHandleInitAttr(2, ph=1)) == "EOPNOTSUPP"

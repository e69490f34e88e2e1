"""Implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND) registers only where the device reports
IBV_ODP_SUPPORT_IMPLICIT; accesses fault per 1 GiB child MR as mlx5 creates them (closed form of each cost)."""

from dataclasses import replace

import pytest

from models.dmabuf import DmaBufCore, KernelConfig
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.ib.implicit_odp import (MLX5_IMR_KSM_ENTRIES, MLX5_IMR_MTT_SIZE, SIZE_MAX, child_create_ps,
                                    ksm_update_ps, parent_create_ps)
from models.ib.mr_backing import migrate_pages
from models.ib.umem_odp import create_user_odp_mr
from models.nic.nic import NicParams
from models.nic.translation import Fault
from models.nic.wqe import Access, Opcode, SendWR, Sge, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.advise import ADVISE_MR_IOCTL_PS, IBV_ADVISE_MR_FLAG_FLUSH, AdviseMrAdvice, ibv_advise_mr
from models.verbs.query import OdpGeneralCaps, ibv_query_device_ex
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import REG_MR_FIXED_PS, ibv_dereg_mr, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.core import Environment, VerbsError

PAGE = 4096
MLX5 = NicParams(max_mr_size=SIZE_MAX)
ODP = MLX5.odp
UMR = MLX5.umr
LW = Access.LOCAL_WRITE | Access.ON_DEMAND
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def _pd(nic=MLX5, env=None, fabric=None, name="a", kernel=None):
    env = env or Environment(1)
    node = Node.create(name, HostParams(poll_period_ps=0), PcieParams(), nic)
    if kernel is not None:
        node.kernel = DmaBufCore(env, kernel)
    if fabric is not None:
        fabric.attach(node.nic.name)
    return ibv_alloc_pd(ibv_open_device(node, env, fabric))


def _errno(call):
    try:
        call()
        return "ok"
    except VerbsError as err:
        return err.errno


@pytest.mark.parametrize("case, nic, addr, length, access, errno", [
    ("implicit on mlx5", MLX5, 0, SIZE_MAX, LW, "ok"),
    ("no IBV_ODP_SUPPORT_IMPLICIT", replace(MLX5, odp=replace(ODP, implicit=False)), 0, SIZE_MAX, LW, "EINVAL"),
    ("no umr_extended_translation_offset", replace(MLX5, umr_extended_translation_offset=False), 0, SIZE_MAX, LW,
     "EINVAL"),
    ("no ODP at all", replace(MLX5, odp=None), 0, SIZE_MAX, LW, "EOPNOTSUPP"),
    ("without ON_DEMAND it is a pin of everything", MLX5, 0, SIZE_MAX, Access.LOCAL_WRITE, "EINVAL"),
    ("SIZE_MAX from a non-zero address overflows", MLX5, PAGE, SIZE_MAX, LW, "EOVERFLOW"),
    ("SIZE_MAX - 1 from 0 is explicit and overflows its last page", MLX5, 0, SIZE_MAX - 1, LW, "EOVERFLOW"),
    ("explicit length 0 at a page boundary", MLX5, PAGE, 0, LW, "EINVAL"),
    ("explicit length 0 inside a page covers the page", MLX5, PAGE + 1, 0, LW, "ok"),
    ("explicit at address 0 and length 0", MLX5, 0, 0, LW, "EOVERFLOW"),
    ("access rights checked first", replace(MLX5, odp=replace(ODP, implicit=False)), 0, SIZE_MAX,
     Access.REMOTE_WRITE | Access.ON_DEMAND, "EINVAL"),
])
def test_reg_mr_errno(case, nic, addr, length, access, errno):
    pd = _pd(nic)
    assert _errno(lambda: ibv_reg_mr(pd, addr, length, access)) == errno, case


def test_the_kernel_configuration_and_the_iova_come_before_implicit_support():
    pd = _pd(kernel=KernelConfig(on_demand_paging=False))
    assert _errno(lambda: ibv_reg_mr(pd, 0, SIZE_MAX, LW)) == "EOPNOTSUPP"
    node = _pd().context.node
    assert _errno(lambda: create_user_odp_mr(node, 0, SIZE_MAX, PAGE, "t")) == "EINVAL"
    assert create_user_odp_mr(node, 0, SIZE_MAX, 0, "t") is True


@pytest.mark.parametrize("odp, implicit", [(ODP, True), (replace(ODP, implicit=False), False), (None, False)])
def test_query_device_ex_reports_implicit_odp(odp, implicit):
    caps = ibv_query_device_ex(_pd(replace(MLX5, odp=odp)).context).odp_caps.general_caps
    assert bool(caps & OdpGeneralCaps.SUPPORT_IMPLICIT) is implicit


def test_registration_costs_the_parent_ksm_and_holds_no_translations():
    pd = _pd()
    mr = ibv_reg_mr(pd, 0, SIZE_MAX, LW)
    assert (mr.addr, mr.iova, mr.length) == (0, 0, SIZE_MAX) and pd.context.node.host.pinned_pages == 0
    assert mr.reg_ps == REG_MR_FIXED_PS + UMR.fixed_ps + MLX5_IMR_KSM_ENTRIES * UMR.entry_ps
    assert mr.reg_ps - REG_MR_FIXED_PS == parent_create_ps(UMR) and pd.context.node.nic.translations == 0
    ibv_dereg_mr(mr)
    assert pd.context.node.nic.translations == 0


def test_faults_create_one_child_per_gib_with_the_closed_form_cost():
    pd = _pd()
    host = pd.context.node.host
    buf = host.allocate("buf", 3 * MLX5_IMR_MTT_SIZE)
    backing = ibv_reg_mr(pd, 0, SIZE_MAX, LW).backing
    grain_pages = ODP.fault_granularity // PAGE
    first = backing.translate(0, buf.addr, PAGE)
    child = UMR.fixed_ps + MLX5_IMR_MTT_SIZE // PAGE * UMR.entry_ps
    assert first == Fault(child + UMR.fixed_ps + UMR.entry_ps + ODP.fault_ps + grain_pages * ODP.fault_page_ps,
                          grain_pages)
    assert child == child_create_ps(UMR, PAGE) and backing.children_created == 1
    same_child = backing.translate(first.ready_ps, buf.addr + (1 << 20), PAGE)
    assert same_child == Fault(first.ready_ps + ODP.fault_ps + grain_pages * ODP.fault_page_ps, grain_pages)
    boundary = (buf.addr // MLX5_IMR_MTT_SIZE + 1) * MLX5_IMR_MTT_SIZE
    across = backing.translate(0, boundary - PAGE, 2 * PAGE)  # one page each side of a child boundary
    assert backing.children_created == 2 and len(backing.children) == 2 and across.pages == 2 * grain_pages
    assert across.ready_ps == child + ksm_update_ps(UMR, 1) + ODP.fault_cost_ps(2 * grain_pages)
    assert backing.faults == 3
    assert backing.translate(across.ready_ps, boundary - PAGE, 2 * PAGE) is None


def test_an_unmapped_address_fails_and_creates_no_child():
    pd = _pd()
    backing = ibv_reg_mr(pd, 0, SIZE_MAX, LW).backing
    assert backing.translate(0, 1 << 40, PAGE) is WcStatus.LOC_PROT_ERR and not backing.children


def test_a_child_emptied_by_migration_is_destroyed_and_created_again():
    pd = _pd()
    buf = pd.context.node.host.allocate("buf", 1 << 20)
    mr = ibv_reg_mr(pd, 0, SIZE_MAX, LW)
    ready = mr.backing.translate(0, buf.addr, PAGE).ready_ps
    assert migrate_pages(mr, buf.addr, buf.size).startswith("invalidated") and not mr.backing.children
    again = mr.backing.translate(ready, buf.addr, PAGE)
    assert again.ready_ps - ready == child_create_ps(UMR, PAGE) + ksm_update_ps(UMR, 1) + ODP.fault_cost_ps(16)
    assert mr.backing.children_created == 2


def test_prefetch_through_an_implicit_mr_creates_the_child_before_returning():
    pd = _pd()
    buf = pd.context.node.host.allocate("buf", 1 << 20)
    mr = ibv_reg_mr(pd, 0, SIZE_MAX, LW)
    whole = [Sge(buf.addr, buf.size, mr.lkey)]
    took = ibv_advise_mr(pd, AdviseMrAdvice.PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, whole)
    assert took == ADVISE_MR_IOCTL_PS + child_create_ps(UMR, PAGE) + ksm_update_ps(UMR, 1) + ODP.fault_cost_ps(256)
    assert mr.backing.translate(took, buf.addr, buf.size) is None and mr.backing.faults == 0
    beyond = [Sge(MLX5_IMR_KSM_ENTRIES * MLX5_IMR_MTT_SIZE, PAGE, mr.lkey)]
    assert _errno(lambda: ibv_advise_mr(pd, AdviseMrAdvice.PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, beyond)) == "EFAULT"


def test_rdma_write_through_implicit_mrs_on_both_sides_and_child_creation_is_traced():
    env, fabric = Environment(1, trace=True), Fabric(FabricParams())
    pds = [_pd(env=env, fabric=fabric, name=name) for name in "ab"]
    bufs = [pd.context.node.host.allocate("buf", 1 << 20) for pd in pds]
    mrs = [ibv_reg_mr(pd, 0, SIZE_MAX, RW | Access.ON_DEMAND) for pd in pds]
    qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 8), 4) for pd in pds]
    qps[0].connect(qps[1])
    ibv_post_send(qps[0], SendWR(1, Opcode.RDMA_WRITE, bufs[0].addr, 8192, mrs[0].lkey, bufs[1].addr, mrs[1].rkey))
    env.run()
    (wc,) = ibv_poll_cq(qps[0].send_cq, 1)
    assert wc.status is WcStatus.SUCCESS and qps[0].rnr_naks == 1
    created = [e for e in env.trace.events if e.name == "ImplicitChildCreated"]
    assert sorted(e.component for e in created) == ["a.nic", "b.nic"]
    assert {e.args["child"] for e in created} == {bufs[0].addr >> 30} == {bufs[1].addr >> 30}

"""On-demand paging: nothing pinned, faults on first touch, RNR NAK on the responder, invalidation re-faults."""

import pytest

from models.dmabuf import DmaBufCore, KernelConfig
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import OdpParams
from models.nic.nic import NicParams
from models.node import Node
from models.pcie.link import PcieParams
from models.nic.wqe import Access, Opcode, QpState, SendWR, WcStatus
from models.verbs.qp_state import QPAttr, QpAttrMask
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import REG_MR_FIXED_PS, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send
from sim.core import PS_PER_US, Environment, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
ODP = OdpParams()


def _bed(odp=ODP, memlock=None, prefaulted=False, kernel=None):
    """Two nodes with 1 MiB buffers; by default untouched by the process, so ODP registration maps nothing."""
    env = Environment(1)
    fabric = Fabric(FabricParams())
    out = []
    for name in "ab":
        node = Node.create(name, HostParams(memlock_limit=memlock, poll_period_ps=0, prefaulted=prefaulted),
                           PcieParams(), NicParams(odp=odp))
        if kernel is not None:
            node.kernel = DmaBufCore(env, KernelConfig(version=kernel))
        fabric.attach(node.nic.name)
        pd = ibv_alloc_pd(ibv_open_device(node, env, fabric))
        out.append((node, pd, node.host.allocate("buf", 1 << 20)))
    qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 64), 16) for _, pd, _ in out]
    qps[0].connect(qps[1])
    return env, out, qps


def _write(env, qp, src, dst, size=4096, offset=0):
    start = env.now
    ibv_post_send(qp, SendWR(0, Opcode.RDMA_WRITE, src.addr + offset, size, src.lkey, dst.addr + offset, dst.rkey))
    env.run()
    (wc,) = ibv_poll_cq(qp.send_cq, 1)
    return wc.status, wc.completed_ps - start


def test_odp_pins_nothing_and_ignores_memlock():
    env, out, _ = _bed(memlock=4096)
    (node, pd, buf) = out[0]
    mr = ibv_reg_mr(pd, buf.addr, buf.size, RW | Access.ON_DEMAND)
    assert node.host.pinned_pages == 0 and mr.backing.mode == "odp"
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pd, buf.addr, buf.size, RW)
    assert info.value.errno == "ENOMEM"


def test_odp_on_a_nic_without_page_faults_is_eopnotsupp():
    _, out, _ = _bed(odp=None)
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(out[0][1], out[0][2].addr, 4096, RW | Access.ON_DEMAND)
    assert info.value.errno == "EOPNOTSUPP" and "ODP" in str(info.value)


def test_requester_fault_stalls_once_then_runs_at_full_speed():
    env, out, (qa, _) = _bed()
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(out[1][1], out[1][2].addr, 1 << 20, RW)
    status, first = _write(env, qa, src, dst)
    status2, second = _write(env, qa, src, dst)
    assert status is status2 is WcStatus.SUCCESS
    pages = ODP.fault_granularity // 4096
    assert first - second == pytest.approx(ODP.fault_ps + pages * ODP.fault_page_ps, rel=0.01)
    assert src.backing.faults == 1 and qa.rnr_naks == 0


def test_responder_fault_costs_an_rnr_nak_round():
    env, out, (qa, _) = _bed()
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW)
    dst = ibv_reg_mr(out[1][1], out[1][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    status, first = _write(env, qa, src, dst)
    _, second = _write(env, qa, src, dst)
    assert status is WcStatus.SUCCESS and qa.rnr_naks == 1
    assert first - second > qa.min_rnr_timer_ps and first - second < qa.min_rnr_timer_ps + 10 * PS_PER_US


def test_invalidation_forces_a_new_fault():
    env, out, (qa, _) = _bed()
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(out[1][1], out[1][2].addr, 1 << 20, RW)
    _write(env, qa, src, dst)
    _, warm = _write(env, qa, src, dst)
    assert src.backing.invalidate(0, 4096) > 0
    _, again = _write(env, qa, src, dst)
    assert again > warm + ODP.fault_ps and src.backing.faults == 2 and src.backing.invalidations == 1


def test_rnr_retry_exhaustion_completes_in_error():
    env, out, (qa, _) = _bed()
    sqd, mask = QpAttrMask.STATE, QpAttrMask.STATE | QpAttrMask.RNR_RETRY
    ibv_modify_qp(qa, QPAttr(qp_state=QpState.SQD), sqd)
    ibv_modify_qp(qa, QPAttr(qp_state=QpState.SQD, rnr_retry=0), mask)
    ibv_modify_qp(qa, QPAttr(qp_state=QpState.RTS), sqd)
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW)
    dst = ibv_reg_mr(out[1][1], out[1][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    status, _ = _write(env, qa, src, dst)
    assert status is WcStatus.RNR_RETRY_EXC_ERR


@pytest.mark.parametrize("kernel, faults", [("5.10", 0), ("5.9", 1)])
def test_registration_maps_the_pages_the_cpu_has_from_5_10(kernel, faults):
    env, out, (qa, _) = _bed(prefaulted=True, kernel=kernel)
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(out[1][1], out[1][2].addr, 1 << 20, RW)
    snapshot = ODP.fault_ps + 256 * ODP.fault_page_ps if faults == 0 else 0
    assert src.reg_ps == REG_MR_FIXED_PS + snapshot and bool(src.backing.mapped.all()) is (faults == 0)
    env.run(until=env.now + src.reg_ps)
    status, _ = _write(env, qa, src, dst)
    assert status is WcStatus.SUCCESS and src.backing.faults == faults


def test_registration_of_untouched_pages_maps_none_and_faults_none():
    _, out, _ = _bed()
    src = ibv_reg_mr(out[0][1], out[0][2].addr, 1 << 20, RW | Access.ON_DEMAND)
    assert src.reg_ps == REG_MR_FIXED_PS + ODP.fault_ps and not src.backing.mapped.any() and src.backing.faults == 0

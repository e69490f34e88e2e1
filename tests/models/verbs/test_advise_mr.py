"""ibv_advise_mr: the kernel's and mlx5's errno for each bad call, and prefetch removing the first NIC faults
(synchronous: before the call returns; asynchronous: in the background, which a too-early access waits for)."""

import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.ib.mr_backing import migrate_pages
from models.nic.nic import NicParams, OdpParams
from models.nic.wqe import Access, Opcode, SendWR, Sge, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.advise import ADVISE_MR_IOCTL_PS, IBV_ADVISE_MR_FLAG_FLUSH, AdviseMrAdvice, ibv_advise_mr
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.core import Environment, VerbsError

ODP = OdpParams()
PAGE = 4096
SIZE = 1 << 20
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
FLUSH = IBV_ADVISE_MR_FLAG_FLUSH
PREFETCH, PREFETCH_WRITE, NO_FAULT = AdviseMrAdvice


def _bed(odp=ODP, prefaulted=False):
    """Two nodes whose buffers the process has not touched, so ODP registration maps none of their pages."""
    env, fabric, out = Environment(1), Fabric(FabricParams()), []
    for name in "ab":
        node = Node.create(name, HostParams(poll_period_ps=0, prefaulted=prefaulted), PcieParams(), NicParams(odp=odp))
        fabric.attach(node.nic.name)
        pd = ibv_alloc_pd(ibv_open_device(node, env, fabric))
        out.append((pd, node.host.allocate("buf", SIZE)))
    qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 64), 16) for pd, _ in out]
    qps[0].connect(qps[1])
    return env, out, qps[0]


def _errno(pd, advice, flags, sges):
    try:
        ibv_advise_mr(pd, advice, flags, sges)
        return "ok"
    except VerbsError as err:
        return err.errno


def _cases():
    env, ((pd, buf), (pd_b, buf_b)), _ = _bed()
    other_pd = ibv_alloc_pd(pd.context)
    odp = ibv_reg_mr(pd, buf.addr, SIZE // 2, RW | Access.ON_DEMAND)
    read_only = ibv_reg_mr(pd, buf.addr, PAGE, Access.REMOTE_READ | Access.ON_DEMAND)
    pinned = ibv_reg_mr(pd, buf.addr + SIZE // 2, PAGE, RW)
    other = ibv_reg_mr(other_pd, buf.addr, PAGE, RW | Access.ON_DEMAND)
    gone = ibv_reg_mr(pd, buf.addr, PAGE, RW | Access.ON_DEMAND)
    ibv_dereg_mr(gone)
    one = [Sge(buf.addr, PAGE, odp.lkey)]
    end = buf.addr + SIZE // 2
    return pd, {
        "ok": (PREFETCH_WRITE, FLUSH, one, "ok"),
        "async ok": (PREFETCH, 0, one, "ok"),
        "no-fault ok": (NO_FAULT, FLUSH, one, "ok"),
        "unknown flag": (PREFETCH, 2, one, "EINVAL"),
        "empty SGE list": (PREFETCH, FLUSH, [], "EINVAL"),
        "unknown advice": (3, FLUSH, one, "EOPNOTSUPP"),
        "flags checked before the advice": (3, 2, one, "EINVAL"),
        "non-ODP MR": (PREFETCH, FLUSH, [Sge(pinned.addr, PAGE, pinned.lkey)], "ENOENT"),
        "never-registered lkey": (PREFETCH, FLUSH, [Sge(buf.addr, PAGE, 0xDEAD00)], "ENOENT"),
        "deregistered MR": (PREFETCH, 0, [Sge(buf.addr, PAGE, gone.lkey)], "ENOENT"),
        "MR of another PD": (PREFETCH, FLUSH, [Sge(buf.addr, PAGE, other.lkey)], "EPERM"),
        "PREFETCH_WRITE without write rights": (PREFETCH_WRITE, FLUSH, [Sge(buf.addr, PAGE, read_only.lkey)], "EPERM"),
        "PREFETCH without write rights": (PREFETCH, FLUSH, [Sge(buf.addr, PAGE, read_only.lkey)], "ok"),
        "below the MR": (PREFETCH, FLUSH, [Sge(buf.addr - 1, PAGE, odp.lkey)], "EFAULT"),
        "past the MR's last page": (PREFETCH, FLUSH, [Sge(end - PAGE, PAGE + 1, odp.lkey)], "EFAULT"),
        "async range errors are silent": (PREFETCH, 0, [Sge(end - PAGE, PAGE + 1, odp.lkey)], "ok"),
        "async checks every lkey first": (PREFETCH, 0, [*one, Sge(buf.addr, PAGE, pinned.lkey)], "ENOENT"),
    }


CASES = _cases()[1]


@pytest.mark.parametrize("case", CASES)
def test_ibv_advise_mr_errno(case):
    pd, cases = _cases()
    advice, flags, sges, errno = cases[case]
    assert _errno(pd, advice, flags, sges) == errno, case


def test_a_device_without_odp_has_no_advise_mr():
    _, ((pd, buf), _), _ = _bed(odp=None)
    mr = ibv_reg_mr(pd, buf.addr, PAGE, RW)
    assert _errno(pd, PREFETCH, FLUSH, [Sge(buf.addr, PAGE, mr.lkey)]) == "EOPNOTSUPP"


def test_an_unmapped_range_of_an_odp_mr_is_efault_only_when_synchronous_and_faulting():
    _, ((pd, buf), _), _ = _bed()
    mr = ibv_reg_mr(pd, buf.addr, SIZE + PAGE, RW | Access.ON_DEMAND)  # its last page is the guard page
    guard = [Sge(buf.addr + SIZE, PAGE, mr.lkey)]
    got = {(advice, flags): _errno(pd, advice, flags, guard) for advice in (PREFETCH, NO_FAULT) for flags in (0, FLUSH)}
    assert got == {(PREFETCH, 0): "ok", (PREFETCH, FLUSH): "EFAULT", (NO_FAULT, 0): "ok", (NO_FAULT, FLUSH): "ok"}
    assert not mr.backing.mapped[-1]


def test_a_failing_sge_leaves_the_earlier_ones_prefetched():
    _, ((pd, buf), _), _ = _bed()
    mr = ibv_reg_mr(pd, buf.addr, SIZE, RW | Access.ON_DEMAND)
    with pytest.raises(VerbsError):
        ibv_advise_mr(pd, PREFETCH, FLUSH, [Sge(buf.addr, PAGE, mr.lkey), Sge(buf.addr, PAGE, 0xDEAD00)])
    assert mr.backing.mapped[0] and mr.backing.mapped.sum() == 1


def _write(env, qp, src, dst, offset=0, size=PAGE):
    start = env.now
    ibv_post_send(qp, SendWR(0, Opcode.RDMA_WRITE, src.addr + offset, size, src.lkey, dst.addr + offset, dst.rkey))
    env.run()
    (wc,) = ibv_poll_cq(qp.send_cq, 1)
    assert wc.status is WcStatus.SUCCESS
    return wc.completed_ps - start


@pytest.mark.parametrize("advice", [PREFETCH, PREFETCH_WRITE])
def test_synchronous_prefetch_costs_the_fault_path_and_removes_the_first_faults(advice):
    env, ((pa, ba), (pb, bb)), qp = _bed()
    src = ibv_reg_mr(pa, ba.addr, SIZE, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(pb, bb.addr, SIZE, RW)
    half = SIZE // 2
    took = ibv_advise_mr(pa, advice, FLUSH, [Sge(ba.addr, half, src.lkey), Sge(ba.addr + half, half, src.lkey)])
    assert took == ADVISE_MR_IOCTL_PS + 2 * (ODP.fault_ps + half // PAGE * ODP.fault_page_ps)
    env.run(until=env.now + took)
    first = _write(env, qp, src, dst)
    assert _write(env, qp, src, dst) == first  # no fault on the first write: as fast as a warm one
    assert src.backing.faults == 0 and qp.rnr_naks == 0


def test_without_prefetch_the_first_write_pays_one_fault():
    env, ((pa, ba), (pb, bb)), qp = _bed()
    src = ibv_reg_mr(pa, ba.addr, SIZE, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(pb, bb.addr, SIZE, RW)
    first, warm = _write(env, qp, src, dst), _write(env, qp, src, dst)
    assert first - warm == pytest.approx(ODP.fault_ps + ODP.fault_granularity // PAGE * ODP.fault_page_ps, rel=0.01)
    assert src.backing.faults == 1


def test_asynchronous_prefetch_returns_after_the_ioctl_and_maps_in_the_background():
    env, ((pa, ba), (pb, bb)), qp = _bed()
    src = ibv_reg_mr(pa, ba.addr, SIZE, RW | Access.ON_DEMAND)
    dst = ibv_reg_mr(pb, bb.addr, SIZE, RW)
    assert ibv_advise_mr(pa, PREFETCH_WRITE, 0, [Sge(ba.addr, SIZE, src.lkey)]) == ADVISE_MR_IOCTL_PS
    done = env.now + ADVISE_MR_IOCTL_PS + ODP.fault_ps + SIZE // PAGE * ODP.fault_page_ps
    assert src.backing.mapped.all() and int(src.backing.ready_ps.max()) == done
    early = _write(env, qp, src, dst)  # posted at once: waits for the work, takes no fault of its own
    assert env.now >= done and src.backing.faults == 0
    assert early > _write(env, qp, src, dst, offset=PAGE)


@pytest.mark.parametrize("prefaulted, mapped", [(True, True), (False, False)])
def test_no_fault_prefetch_maps_only_pages_the_cpu_has(prefaulted, mapped):
    _, ((pd, buf), _), _ = _bed(prefaulted=prefaulted)
    mr = ibv_reg_mr(pd, buf.addr, SIZE, RW | Access.ON_DEMAND)
    assert bool(mr.backing.mapped.all()) is mapped  # registration's snapshot maps what the CPU has
    migrate_pages(mr, buf.addr, SIZE)  # the migrated pages stay present for the CPU, not for the NIC
    assert not mr.backing.mapped.any()
    took = ibv_advise_mr(pd, NO_FAULT, FLUSH, [Sge(buf.addr, SIZE, mr.lkey)])
    assert bool(mr.backing.mapped.all()) is mapped and not (mr.backing.mapped.any() and not mapped)
    assert took == ADVISE_MR_IOCTL_PS + ODP.fault_ps + (SIZE // PAGE if mapped else 0) * ODP.fault_page_ps

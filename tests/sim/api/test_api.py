"""The public API (sim.api): same errno as the free functions underneath, the kernel's destroy rules, the clock,
the GPU side and a script's results directory."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from models.verbs.destroy import ibv_dealloc_pd, ibv_destroy_cq, ibv_destroy_qp
from models.verbs.dmabuf import ibv_reg_dmabuf_mr
from models.verbs.cq import ibv_create_cq
from models.verbs.mr import DEREG_MR_FIXED_PS, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_modify_qp, ibv_post_send
from models.nic.nic import UmrParams
from models.nic.wqe import SendWR as WorkRequest
from sim.api import (CQ, MR, PD, QP, SGE, AHAttr, Access, ConfigError, Context, DeadlockError, DmaBuf, DmaBufMR,
                     Opcode, ProtocolError, QPAttr, QPCap, QpAttrMask, QPInitAttr, QpState, SendWR, Testbed,
                     VerbsError, WcStatus)
from sim.store.outdir import OutputError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def errno_of(call, *args, **kwargs) -> str:
    """The errno name ``call`` fails with (the test fails when it succeeds)."""
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno


def rc_pair(bed: Testbed, depth: int = 8):
    """Contexts, PDs, CQs, MRs (4 KiB) and connected RC QPs on nodes a and b."""
    ends = []
    for name in ("a", "b"):
        ctx = Context(bed, name)
        pd = PD(ctx)
        cq = CQ(ctx, 2 * depth)
        ends.append((ctx, pd, cq, MR(pd, 4096, RW), QP(pd, QPInitAttr(scq=cq, rcq=cq, cap=QPCap(max_send_wr=depth)))))
    for (_, _, _, _, qp), (peer_ctx, _, _, _, peer) in ((ends[0], ends[1]), (ends[1], ends[0])):
        qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=peer_ctx.lid),
                         max_dest_rd_atomic=1, max_rd_atomic=1, min_rnr_timer=12, timeout=14, retry_cnt=7,
                         rnr_retry=7))
    return ends


def write_wr(src: MR, dst: MR, length: int = 64, wr_id: int = 1) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, length, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    return wr


# --- the same illegal call gets the same errno through the API and through the free functions ---

@pytest.mark.parametrize("node, length, access, errno", [
    ({}, 4096, Access.REMOTE_WRITE, "EINVAL"),                                   # REMOTE_WRITE needs LOCAL_WRITE
    ({}, 0, Access.LOCAL_WRITE, "EINVAL"),                                       # no pages
    ({}, 4096, Access.LOCAL_WRITE | Access.FLUSH_GLOBAL, "EOPNOTSUPP"),          # no flush on the device
    ({"host": {"memlock_limit": "64KiB"}}, 1 << 20, Access.LOCAL_WRITE, "ENOMEM"),  # past RLIMIT_MEMLOCK
    ({"nic": {"preset": "efa"}}, 4096, Access.LOCAL_WRITE | Access.ON_DEMAND, "EOPNOTSUPP"),  # no ODP
])
def test_mr_errors_match_ibv_reg_mr(node, length, access, errno):
    api = Testbed({"a": node, "b": {}})
    assert errno_of(MR, PD(Context(api, "a")), length, access) == errno
    free = Testbed({"a": node, "b": {}})
    host = free.bed.nodes["a"].host
    buf = host.allocate("x", max(length, 1))
    host.fill("x", lambda: np.zeros(max(length, 1), dtype=np.uint8))
    assert errno_of(ibv_reg_mr, free.bed.pds["a"], buf.addr, length, access) == errno


def test_unmapped_address_is_efault_in_both():
    bed = Testbed()
    assert errno_of(MR, PD(Context(bed, "a")), 4096, Access.LOCAL_WRITE, address=0x1000) == "EFAULT"
    assert errno_of(ibv_reg_mr, bed.bed.pds["a"], 0x1000, 4096, Access.LOCAL_WRITE) == "EFAULT"


def test_queue_errors_match_the_free_functions():
    bed = Testbed()
    ctx, pd = Context(bed, "a"), bed.bed.pds["a"]
    assert errno_of(CQ, ctx, 0) == errno_of(ibv_create_cq, ctx.ctx, 0) == "EINVAL"
    cq = CQ(ctx, 4)
    too_deep = bed.bed.nodes["a"].nic.params.max_qp_wr + 1
    assert errno_of(QP, PD(ctx), QPInitAttr(scq=cq, cap=QPCap(max_send_wr=too_deep))) \
        == errno_of(ibv_create_qp, pd, cq.cq, too_deep) == "EINVAL"
    qp, free_qp = QP(PD(ctx), QPInitAttr(scq=cq)), ibv_create_qp(pd, cq.cq, 1)
    rtr = QPAttr(qp_state=QpState.RTR)
    assert errno_of(qp.modify, rtr, QpAttrMask.STATE) == errno_of(ibv_modify_qp, free_qp, rtr, QpAttrMask.STATE) \
        == "EINVAL"                                                               # RESET -> RTR is illegal
    mr = MR(PD(ctx), 64, RW)
    wr = write_wr(mr, mr)
    assert errno_of(qp.post_send, wr) == errno_of(ibv_post_send, free_qp, WorkRequest(
        1, Opcode.RDMA_WRITE, mr.buf, 64, mr.lkey, mr.buf, mr.rkey)) == "ENOMEM"  # never in RTS


def test_dmabuf_mr_errors_match_ibv_reg_dmabuf_mr():
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}, "b": {}})
    ctx = Context(bed, "a")
    pd = PD(ctx)
    assert errno_of(DmaBufMR, pd, 4096, RW, dmabuf=99) == errno_of(
        ibv_reg_dmabuf_mr, pd.pd, 0, 4096, 0, 99, RW) == "EBADF"
    dmabuf = DmaBuf(ctx, 1 << 16)
    assert errno_of(DmaBufMR, pd, 1 << 20, RW, dmabuf=dmabuf) == errno_of(
        ibv_reg_dmabuf_mr, pd.pd, 0, 1 << 20, 0, dmabuf.fd, RW) == "EINVAL"    # past the dma-buf


def test_errno_as_number_and_name():
    err = pytest.raises(VerbsError, MR, PD(Context(Testbed(), "a")), 4096, Access.REMOTE_WRITE).value
    assert (err.errno, err.errno_value) == ("EINVAL", 22)


# --- destroy rules ---

@pytest.mark.parametrize("victim, user", [("pd", "mr"), ("pd", "qp"), ("cq", "qp")])
def test_closing_an_object_in_use_closes_its_users_first_as_pyverbs_does(victim, user):
    """pyverbs' ``close`` (``close_weakrefs``: a PD its QPs and MRs, a CQ its QPs) before the destroy verb, which
    itself still refuses an object in use (``EBUSY``: ``uverbs_free_pd``, ``ib_destroy_cq_user``)."""
    bed = Testbed()
    ctx = Context(bed, "a")
    objects = {"pd": PD(ctx), "cq": CQ(ctx, 4)}
    objects["mr" if user == "mr" else "qp"] = MR(objects["pd"], 64, RW) if user == "mr" else \
        QP(objects["pd"], QPInitAttr(scq=objects["cq"]))
    verbs = {"pd": (ibv_dealloc_pd, objects["pd"].pd), "cq": (ibv_destroy_cq, objects["cq"].cq)}[victim]
    assert errno_of(*verbs) == "EBUSY"
    objects[victim].close()
    assert objects[victim].closed and objects[user].closed
    assert all(not obj.closed for name, obj in objects.items() if name not in (victim, user))


def test_free_destroy_functions_refuse_in_use_and_twice():
    bed = Testbed()
    pd, ctx = bed.bed.pds["a"], bed.bed.contexts["a"]
    cq = ibv_create_cq(ctx, 4)
    qp = ibv_create_qp(pd, cq, 1)
    assert errno_of(ibv_dealloc_pd, pd) == errno_of(ibv_destroy_cq, cq) == "EBUSY"
    ibv_destroy_qp(qp)
    assert errno_of(ibv_destroy_qp, qp) == "EINVAL"
    ibv_destroy_cq(cq)
    ibv_dealloc_pd(pd)
    assert errno_of(ibv_dealloc_pd, pd) == errno_of(ibv_destroy_cq, cq) == "EINVAL"


def test_context_close_destroys_everything_and_close_is_idempotent():
    bed = Testbed()
    (ctx, pd, cq, mr, qp), _ = rc_pair(bed)
    host = ctx.ctx.node.host
    assert host.pinned_pages == 1
    ctx.close()
    assert all(o.closed for o in (pd, cq, mr, qp)) and host.pinned_pages == 0
    ctx.close()
    mr.close()
    with pytest.raises(ProtocolError, match="used after close"):
        mr.read(4, 0)
    with pytest.raises(ProtocolError):
        PD(ctx)


def test_context_managers_close_in_reverse():
    bed = Testbed()
    with Context(bed, "a") as ctx, PD(ctx) as pd, MR(pd, 4096, RW) as mr:
        assert not pd.closed
    assert mr.closed and pd.closed and ctx.closed


def test_closed_work_requests_are_not_posted():
    bed = Testbed()
    (_, _, _, mr, qp), (_, _, _, dst, _) = rc_pair(bed)
    with write_wr(mr, dst) as wr:
        pass
    with pytest.raises(ProtocolError, match="SendWR used after close"):
        qp.post_send(wr)
    wr = write_wr(mr, dst)
    wr.sg[0].close()
    with pytest.raises(ProtocolError, match="SGE used after close"):
        qp.post_send(wr)


def test_destroyed_qp_delivers_no_completion():
    bed = Testbed()
    (_, _, cq, mr, qp), (_, _, _, dst, _) = rc_pair(bed)
    qp.post_send(write_wr(mr, dst))
    qp.close()
    assert cq.poll(timeout="100us") == (0, [])
    cq.close()


# --- the clock ---

def test_registration_advances_the_clock_by_its_traced_cost():
    bed = Testbed(trace=True)
    pd = PD(Context(bed, "a"))
    before = bed.now_ps
    mr = MR(pd, 1 << 20, RW)
    (reg,) = [e for e in bed.env.trace.events if e.name == "ibv_reg_mr"]
    assert bed.now_ps - before == reg.dur_ps == mr.mr.reg_ps > 0
    before = bed.now_ps
    mr.close()
    unpin = bed.bed.nodes["a"].host.params.unpin_cost_ps(1 << 20)
    assert bed.now_ps - before == DEREG_MR_FIXED_PS + unpin + 256 * UmrParams().pinned_release_entry_ps


def test_dmabuf_registration_advances_the_clock_by_its_cost():
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}, "b": {}})
    ctx = Context(bed, "a")
    pd = PD(ctx)
    dmabuf = DmaBuf(ctx, 1 << 21)
    before = bed.now_ps
    mr = DmaBufMR(pd, 1 << 21, RW, dmabuf=dmabuf)
    assert bed.now_ps - before == mr.mr.reg_ps > 0


def test_posting_is_asynchronous_and_poll_runs_to_the_completion():
    bed = Testbed()
    (_, _, cq, src, qp), (_, _, _, dst, _) = rc_pair(bed)
    src.write(b"rdmasim", 7)
    posted = bed.now_ps
    qp.post_send(write_wr(src, dst, 7, wr_id=42))
    assert bed.now_ps == posted and dst.read(7, 0) == bytes(7)
    n, (wc,) = cq.poll()
    assert n == 1 and wc.wr_id == 42 and wc.status is WcStatus.SUCCESS
    assert wc.posted_ps == posted < wc.completed_ps == bed.now_ps
    assert dst.read(7, 0) == b"rdmasim"


def test_poll_timeouts():
    bed = Testbed()
    (_, _, cq, src, qp), (_, _, _, dst, _) = rc_pair(bed)
    start = bed.now_ps
    assert cq.poll(timeout=0) == (0, []) and bed.now_ps == start
    assert cq.poll(timeout="3us") == (0, []) and bed.now_ps == start + 3_000_000
    with pytest.raises(DeadlockError, match="nothing left to simulate"):
        cq.poll()
    qp.post_send(write_wr(src, dst))
    posted = bed.now_ps
    assert cq.poll(timeout="1ns") == (0, []) and bed.now_ps == posted + 1000   # too short for a round trip
    n, (wc,) = cq.poll(timeout="1ms")
    assert n == 1 and bed.now_ps == wc.completed_ps < posted + 1_000_000_000
    bed.run("5us")
    assert bed.now_ps == wc.completed_ps + 5_000_000


def test_a_bad_timeout_is_a_typed_error():
    bed = Testbed()
    cq = CQ(Context(bed, "a"), 4)
    with pytest.raises(TypeError, match="unit"):
        cq.poll(timeout=1.5)


# --- testbed, GPU side, results ---

def test_testbed_from_presets_and_its_errors():
    bed = Testbed({"a": {"nic": {"preset": "connectx6"}, "gpus": [{"preset": "mi300x"}]}, "b": {}},
                  fabric={"rate": "200Gb/s"})
    assert bed.bed.nodes["a"].nic.params.tx_process_ps == 4650 and bed.gpu("a.gpu0").gpu.vendor == "amd"
    assert Context(bed, "a").query_port(1).rate_Gbps == 200
    with pytest.raises(ConfigError, match=r"^<testbed> nodes\[0\]\.nic\.preset: Input should be"):
        Testbed({"a": {"nic": {"preset": "cx9"}}})
    with pytest.raises(ConfigError, match="no node 'c'"):
        Context(bed, "c")


@pytest.mark.parametrize("seed", [-1, 2**63, "7", 1.0, True])
def test_a_testbed_seed_follows_the_scenario_seed_rule(seed):
    with pytest.raises(ConfigError, match=r"^<testbed> seed: a seed is an integer with 0 <= seed < 2\*\*63"):
        Testbed(seed=seed)
    assert Testbed(seed=2**63 - 1).seed == 2**63 - 1


def test_running_a_testbed_for_no_time_is_no_step():
    bed = Testbed()
    bed.run("1us")
    bed.run(0)
    bed.run("0ns")
    assert bed.now_ps == 1_000_000


def test_gpu_bytes_move_by_rdma_into_a_dmabuf_mr():
    bed = Testbed({"a": {}, "b": {"gpus": [{"preset": "h200"}]}})
    (_, _, cq, src, qp), (ctx_b, pd_b, _, _, _) = rc_pair(bed)
    gpu = bed.gpu("b.gpu0")
    buffer = gpu.alloc(1 << 16)
    dst = DmaBufMR(pd_b, 1 << 16, RW, dmabuf=buffer.export_dmabuf())
    src.write(b"to the GPU", 10)
    qp.post_send(write_wr(src, dst, 10))
    (n, (wc,)) = cq.poll()
    assert wc.status is WcStatus.SUCCESS and buffer.read(10) == b"to the GPU" == dst.read(10, 0)


def test_an_exported_range_maps_the_mr_onto_the_right_bytes():
    bed = Testbed({"a": {}, "b": {"gpus": [{"preset": "h200"}]}})
    (_, _, cq, src, qp), (_, pd_b, _, _, _) = rc_pair(bed)
    buffer = bed.gpu("b.gpu0").alloc(3 * 4096)
    dst = DmaBufMR(pd_b, 4096, RW, dmabuf=buffer.export_dmabuf(offset=4096, size=8192), offset=4096)
    src.write(b"third page", 10)
    qp.post_send(write_wr(src, dst, 10))
    cq.poll()
    assert buffer.read(10, 2 * 4096) == b"third page" == dst.read(10, 0) and buffer.read(10, 4096) == bytes(10)


def test_cpu_bytes_need_data_mode():
    pd = PD(Context(Testbed(data=False), "a"))
    with pytest.raises(ProtocolError, match="data mode"):
        MR(pd, 64, RW).read(4, 0)


def test_results_directory_of_a_script(tmp_path):
    bed = Testbed(seed=3)
    (_, _, cq, src, qp), (_, _, _, dst, _) = rc_pair(bed)
    for i, size in enumerate([64, 64, 256]):
        qp.post_send(write_wr(src, dst, size, wr_id=i))
        cq.poll()
    script = tmp_path / "lab.py"
    script.write_text("print('lab')\n")
    out = bed.write_results(tmp_path / "out", name="lab", script=script)
    ops = pd.read_parquet(out / "metrics.parquet")
    assert ops["bytes"].tolist() == [64, 64, 256] and ops["wr_id"].tolist() == [0, 1, 2] and ops["ok"].all()
    assert (ops["latency_ps"] == ops["completed_ps"] - ops["posted_ps"]).all()
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["bytes"], r["operations"]) for r in summary["results"]] == [(64, 2), (256, 1)]
    assert [(r["node"], r["mode"]) for r in summary["registrations"]] == [("a", "pinned"), ("b", "pinned")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["script_text"] == "print('lab')\n" and manifest["seed"] == 3
    assert [n["name"] for n in manifest["testbed"]["nodes"]] == ["a", "b"]
    assert (out / "figures" / "latency_cdf.png").exists()


def _one_write_results(out):
    """The results directory of a script that made one 64-byte WRITE, written as 'lab'."""
    bed = Testbed(seed=3)
    (_, _, cq, src, qp), (_, _, _, dst, _) = rc_pair(bed)
    qp.post_send(write_wr(src, dst, 64, wr_id=0))
    cq.poll()
    return bed.write_results(out, name="lab")


def test_repro_of_a_scripts_results_says_to_run_the_script(tmp_path):
    from typer.testing import CliRunner

    from sim.cli.app import app

    out = _one_write_results(tmp_path / "out")
    result = CliRunner().invoke(app, ["repro", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [text for text in result.output.splitlines() if text]
    assert "results of a Python script (lab)" in line and "running the script again" in line


def test_results_never_overwrite_foreign_files(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    bed = Testbed()
    with pytest.raises(OutputError):
        bed.write_results(foreign, name="lab")
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    out = bed.write_results(tmp_path / "out", name="lab")
    with pytest.raises(OutputError):
        bed.write_results(out, name="lab")
    assert bed.write_results(out, name="lab", force=True) == out


def test_same_script_same_seed_same_bytes(tmp_path):
    def lab(out):
        bed = Testbed({"a": {}, "b": {"gpus": [{"preset": "h200"}]}}, seed=9)
        (_, _, cq, src, qp), (_, pd_b, _, dst, _) = rc_pair(bed, depth=32)
        gpu_mr = DmaBufMR(pd_b, 1 << 16, RW)
        for i in range(20):
            qp.post_send(write_wr(src, gpu_mr if i % 2 else dst, 64 << (i % 4), wr_id=i))
        while cq.poll(20, timeout="1ms")[0]:
            pass
        return bed.write_results(out, name="lab")

    first, second = lab(tmp_path / "one"), lab(tmp_path / "two")
    for name in ("metrics.parquet", "summary.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert len(pd.read_parquet(first / "metrics.parquet")) == 20


def test_plotting_a_scripts_results_says_which_results_recipes_draw(tmp_path):
    from sim.plot.recipes import RecipeError, plot

    out = _one_write_results(tmp_path / "out")
    with pytest.raises(RecipeError, match=r"the results of a Python script \(lab\).*`rdmasim run` or `rdmasim sweep`"):
        plot(out, "latency_cdf", tmp_path / "figs")
    assert not (tmp_path / "figs").exists()

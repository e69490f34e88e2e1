# %% [markdown]
# # 02 — Memory registration basics: keys, access flags, errors and the cost of pinning
#
# **What this notebook teaches.** What `ibv_reg_mr` gives you (an MR with an `lkey` for your own work requests
# and an `rkey` for the peer), which access-flag combinations rdma-core refuses and with which errno, how
# `RLIMIT_MEMLOCK` limits pinning, what happens when a work request breaks the rules (a *completion* in error,
# not an exception), and what pinning costs: the model follows `pin_user_pages` measured on an H200 host
# through io_uring's fixed buffers (`models/data/h200_host_pinning_pages.json`). We call the verbs API of
# `models.verbs` directly on two simulated nodes.
#
# **Predict before running.** Which of these does rdma-core refuse, and with which errno: remote write rights
# without local write, a zero-length MR, a range that runs past the buffer, a registration past
# `RLIMIT_MEMLOCK`? And what does a WRITE into an MR without `REMOTE_WRITE` return?

# %%
from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams, OdpParams, UmrParams
from models.node import Node
from models.pcie.link import PcieParams
from models.nic.wqe import Access
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import DEREG_MR_FIXED_PS, REG_MR_FIXED_PS, ibv_dereg_mr, ibv_reg_mr
from sim.core import PS_PER_US, Environment, VerbsError

KiB, MiB = 1 << 10, 1 << 20
PAGE = 4096
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def testbed(memlock_limit=None, nic=NicParams()):
    """Nodes 'a' and 'b' on one fabric: an opened device, a PD and a 1 MiB host buffer each."""
    env = Environment(1)
    fabric = Fabric(FabricParams())
    nodes, pds, bufs = [], [], []
    for name in "ab":
        node = Node.create(name, HostParams(memlock_limit=memlock_limit), PcieParams(), nic)
        fabric.attach(node.nic.name)
        nodes.append(node)
        pds.append(ibv_alloc_pd(ibv_open_device(node, env, fabric)))
        bufs.append(node.host.allocate("buf", 1 * MiB))
    return env, nodes, pds, bufs


def expect(errno, call, *args, **kwargs):
    """Call ``call``; it must raise VerbsError with ``errno``, which is returned."""
    try:
        call(*args, **kwargs)
    except VerbsError as err:
        assert err.errno == errno, f"expected {errno}, got {err}"
        return err
    raise AssertionError(f"{call.__name__} succeeded; expected {errno}")


env, nodes, pds, bufs = testbed()
mr = ibv_reg_mr(pds[0], bufs[0].addr, bufs[0].size, RW)
small = ibv_reg_mr(pds[0], bufs[0].addr, PAGE, Access.LOCAL_WRITE)
for label, m in (("1 MiB, RW", mr), ("4 KiB, LOCAL_WRITE", small)):
    print(f"{label:<20} addr 0x{m.addr:x}  length {m.length:>7} B  lkey 0x{m.lkey:x}  rkey 0x{m.rkey:x}  "
          f"access {m.access!r}  registration {m.reg_ps / PS_PER_US:.1f} us")
print(f"pages pinned on node a: {nodes[0].host.pinned_pages}")

assert mr.lkey == mr.rkey and small.lkey != mr.lkey          # one key per MR (mlx5 style: lkey == rkey)
assert mr.reg_ps == REG_MR_FIXED_PS + HostParams().pin_cost_ps(1 * MiB) + 256 * UmrParams().pinned_entry_ps
assert nodes[0].host.pinned_pages == 256 + 1                  # the same page pinned twice counts twice


# %% [markdown]
# The registration time is a fixed 35 µs (uverbs ioctl and mkey creation) plus what `pin_user_pages` takes
# for 256 present 4 KiB pages (about 28 µs, the H200 host's curve below) plus 0.29 µs for each of the 256
# translation entries: `ib_umem_get`'s scatter list and DMA mapping and the MTT written with the mkey (fitted to
# Mooncake's sequential registration of 500 GB, three times what pinning costs). Pinned pages are counted per
# registration, like the kernel's `pinned_vm`: registering an overlapping range pins (and charges) its pages
# again.
#
# ## Access flags and registration errors
# `ibv_reg_mr` checks its arguments the way rdma-core and `ib_umem_get` do. A remote peer may only write
# (or do atomics) where the local side may write too, so `REMOTE_WRITE`/`REMOTE_ATOMIC` without `LOCAL_WRITE`
# is `EINVAL`; a read-only target (`REMOTE_READ` alone) is fine. The kernel's `ib_check_mr_access` also refuses
# bits outside `IB_ACCESS_SUPPORTED` (`EINVAL`) and the FLUSH rights on a device without flush support
# (`EOPNOTSUPP`). Errors are `VerbsError` with the errno name rdma-core would set.

# %%
def try_reg(pd_, addr, length, access):
    try:
        ibv_reg_mr(pd_, addr, length, access)
        return "ok", ""
    except VerbsError as err:
        return err.errno, str(err)


base = bufs[1].addr
cases = {
    "REMOTE_READ only (read-only target)": (pds[1], base, PAGE, Access.REMOTE_READ),
    "REMOTE_WRITE without LOCAL_WRITE": (pds[1], base, PAGE, Access.REMOTE_WRITE),
    "REMOTE_ATOMIC without LOCAL_WRITE": (pds[1], base, PAGE, Access.REMOTE_ATOMIC | Access.REMOTE_READ),
    "length 0": (pds[1], base, 0, Access.LOCAL_WRITE),
    "range runs past the buffer": (pds[1], base + 1 * MiB - PAGE, 2 * PAGE, Access.LOCAL_WRITE),
    "bit 12, outside IB_ACCESS_SUPPORTED": (pds[1], base, PAGE, Access.LOCAL_WRITE | (1 << 12)),
    "FLUSH_GLOBAL on a NIC without flush": (pds[1], base, PAGE, Access.LOCAL_WRITE | Access.FLUSH_GLOBAL),
}
_, _, no_odp_pds, no_odp_bufs = testbed(nic=NicParams(odp=None))
cases["ON_DEMAND on a NIC without ODP"] = (no_odp_pds[0], no_odp_bufs[0].addr, PAGE,
                                           Access.LOCAL_WRITE | Access.ON_DEMAND)
results = {case: try_reg(*args) for case, args in cases.items()}
for case, (errno, message) in results.items():
    print(f"{case:<38} {errno:<11} {message}")

assert [errno for errno, _ in results.values()] == ["ok", "EINVAL", "EINVAL", "EINVAL", "EFAULT", "EINVAL",
                                            "EOPNOTSUPP", "EOPNOTSUPP"]
assert all(message.startswith("ibv_reg_mr: ") for errno, message in results.values() if errno != "ok")

# %% [markdown]
# ## RLIMIT_MEMLOCK
# Pinned pages are charged to the process's `RLIMIT_MEMLOCK` (unless it is unlimited or the process has
# `CAP_IPC_LOCK`). With a 1 MiB limit, a 1 MiB MR uses it all and the next pin fails with `ENOMEM`. An ODP
# registration (`ON_DEMAND`) pins nothing and is not charged (from 5.10 mlx5 maps the pages the CPU already has,
# a snapshot that faults nothing); deregistering gives the pages back.

# %%
env, nodes, pds, bufs = testbed(memlock_limit=1 * MiB)
host, buf = nodes[0].host, bufs[0]
whole = ibv_reg_mr(pds[0], buf.addr, buf.size, Access.LOCAL_WRITE)
print(f"pinned {host.pinned_pages * PAGE // KiB} KiB of the 1024 KiB limit")
print(expect("ENOMEM", ibv_reg_mr, pds[0], buf.addr, PAGE, Access.LOCAL_WRITE))

odp = ibv_reg_mr(pds[0], buf.addr, buf.size, Access.LOCAL_WRITE | Access.ON_DEMAND)
print(f"ODP MR of the same 1 MiB: registration {odp.reg_ps / PS_PER_US:.0f} us, pinned pages {host.pinned_pages}")
assert host.pinned_pages == 256 and odp.reg_ps == REG_MR_FIXED_PS + OdpParams().fault_cost_ps(256)

dereg_ps = ibv_dereg_mr(whole)
print(f"ibv_dereg_mr: {dereg_ps / PS_PER_US:.1f} us (19 us fixed, unpinning, 0.081 us per entry unmapped); "
      f"pinned pages now {host.pinned_pages}")
assert host.pinned_pages == 0 and dereg_ps == (DEREG_MR_FIXED_PS + HostParams().unpin_cost_ps(1 * MiB)
                                               + 256 * UmrParams().pinned_release_entry_ps)
assert ibv_reg_mr(pds[0], buf.addr, PAGE, Access.LOCAL_WRITE).lkey != whole.lkey   # room again, new key
print(expect("EINVAL", ibv_dereg_mr, whole))                                        # double deregistration

# %% [markdown]
# ## Breaking the rules at run time: completions in error
# Keys and rights are checked again on every access, by the NICs. Those violations are not exceptions: the
# work request *completes* with an error status, the QP moves to the error state, and every work request
# still queued behind it completes with `IBV_WC_WR_FLUSH_ERR`. Below, node a posts two work requests to
# an 8 KiB MR on node b; only the first one breaks a rule.

# %%
import pandas as pd

from models.nic.wqe import Opcode, SendWR
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.qp import ibv_create_qp, ibv_post_send


def post_two(opcode, remote_access=RW, remote_offset=0, length=PAGE, lkey_delta=0, dereg_remote=False):
    """a posts a (possibly bad) work request and a good one to b's MR; return statuses and QP states."""
    env, nodes, pds, bufs = testbed()
    qps = [ibv_create_qp(pd_, ibv_create_cq(pd_.context, 16), 8) for pd_ in pds]
    qps[0].connect(qps[1])
    local = ibv_reg_mr(pds[0], bufs[0].addr, 2 * PAGE, RW)
    remote = ibv_reg_mr(pds[1], bufs[1].addr, 2 * PAGE, remote_access)
    if dereg_remote:
        ibv_dereg_mr(remote)
    ibv_post_send(qps[0], SendWR(0, opcode, local.addr, length, local.lkey + lkey_delta,
                                 remote.addr + remote_offset, remote.rkey))
    ibv_post_send(qps[0], SendWR(1, opcode, local.addr, PAGE, local.lkey, remote.addr, remote.rkey))
    env.run()
    wcs = ibv_poll_cq(qps[0].send_cq, 8)
    return {"first": wcs[0].status.name, "second": wcs[1].status.name, "bytes": wcs[0].byte_len,
            "requester QP": qps[0].state.name, "responder QP": qps[1].state.name}


W, R = Opcode.RDMA_WRITE, Opcode.RDMA_READ
runs = {
    "valid WRITE": post_two(W),
    "WRITE, remote MR lacks REMOTE_WRITE": post_two(W, remote_access=Access.LOCAL_WRITE | Access.REMOTE_READ),
    "READ, remote MR lacks REMOTE_READ": post_two(R, remote_access=Access.LOCAL_WRITE | Access.REMOTE_WRITE),
    "WRITE past the end of the remote MR": post_two(W, remote_offset=6000),
    "WRITE with a deregistered rkey": post_two(W, dereg_remote=True),
    "WRITE with a wrong lkey": post_two(W, lkey_delta=1),
    "WRITE longer than the local MR": post_two(W, length=2 * PAGE + 1),
}
statuses = pd.DataFrame.from_dict(runs, orient="index")
print(statuses.to_string())

assert tuple(statuses.loc["valid WRITE", ["first", "second", "bytes", "requester QP"]]) == ("SUCCESS", "SUCCESS", PAGE, "RTS")
remote_rows = [r for r in runs if "remote" in r or "rkey" in r]
assert (statuses.loc[remote_rows, "first"] == "REM_ACCESS_ERR").all()
assert (statuses.loc[["WRITE with a wrong lkey", "WRITE longer than the local MR"], "first"] == "LOC_PROT_ERR").all()
failed = statuses.drop(index="valid WRITE")
assert (failed["second"] == "WR_FLUSH_ERR").all() and (failed["bytes"] == 0).all()
assert (failed["requester QP"] == "ERR").all()
assert (statuses.loc[remote_rows, "responder QP"] == "ERR").all()   # a remote error breaks both ends

# %% [markdown]
# Remote violations are detected by the *responder* NIC (it owns the rkey) and reported back as
# `REM_ACCESS_ERR`; local ones (`lkey`, local bounds) by the requester as `LOC_PROT_ERR`. Either way the
# requester's QP is in `ERR` and must be reset and reconnected before it carries traffic again.
#
# ## What pinning costs: the H200 calibration
# Pinning walks the page tables and takes a reference on each page. `HostParams.pin_cost_ps` follows curves
# measured on an H200 host for three ways of pinning, `pin_user_pages` (what `ibv_reg_mr`'s `ib_umem_get`
# calls, measured through io_uring's fixed-buffer registration, which makes the same call), `mlock`, and
# `cudaHostRegister` (which also maps every page for the GPU), on 4 KiB pages, transparent huge pages and
# hugetlbfs, with the pages already present (*prefaulted*) or faulted in by the pin
# (`models/data/h200_host_pinning_pages.json`). A scenario picks the backing with `host: {pages: thp}`.

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from sim.core import PS_PER_S

calib = json.loads((Path("..") / "models" / "data" / "h200_host_pinning_pages.json").read_text())
points = pd.DataFrame(calib["points"])
fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
sizes = np.logspace(21, 32, 40, base=2)
for ax, prefaulted in zip(axes, (True, False)):
    for (path, pages), rows in points[points["prefaulted"] == prefaulted].groupby(["path", "pages"]):
        line = ax.plot(sizes, [HostParams(pages=pages, pin_path=path).pin_cost_ps(int(n), prefaulted=prefaulted)
                               / 1e9 for n in sizes], lw=1, label=f"{path}, {pages}")
        ax.scatter(rows["bytes"], rows["median_s"] * 1e3, s=12, color=line[0].get_color())
    ax.set(xscale="log", yscale="log", xlabel="bytes pinned",
           title="pages present (prefaulted)" if prefaulted else "pages faulted in by the pin")
    ax.grid(True, which="both", alpha=0.2)
axes[0].set_ylabel("pin time (ms): points measured, lines the model")
axes[1].legend(fontsize=7)
fig.tight_layout()

gib = 2**30
warm = {pages: HostParams(pages=pages).pin_cost_ps(gib) / 1e9 for pages in ("4k", "thp", "hugetlb")}
cold = HostParams().pin_cost_ps(gib, prefaulted=False) / 1e9
print(f"ibv_reg_mr-style pinning of 1 GiB: {warm['4k']:.1f} ms on 4 KiB pages, {warm['thp']:.1f} ms on THP, "
      f"{warm['hugetlb']:.1f} ms on hugetlbfs; {cold:.0f} ms when 4 KiB pages must be faulted in first")
assert warm["thp"] < warm["4k"] / 4 and warm["hugetlb"] < warm["4k"] / 4   # one folio per 2 MiB
assert 10 < cold / warm["4k"] < 25

# %% [markdown]
# ## What you saw
# * An MR is a range, access rights and a key pair; the local side uses the `lkey`, the peer the `rkey`.
#   Registering 1 MiB of prefaulted memory takes 35 µs + about 28 µs of pinning.
# * Bad arguments fail the call with rdma-core's errno: `EINVAL` for `REMOTE_WRITE`/`REMOTE_ATOMIC` without
#   `LOCAL_WRITE` and for length 0, `EFAULT` for an unmapped range, `EOPNOTSUPP` for ODP on a NIC without
#   it, `ENOMEM` past `RLIMIT_MEMLOCK` (ODP MRs are not charged).
# * Bad accesses fail the *work request*: `REM_ACCESS_ERR` (responder's rkey, rights or bounds) or
#   `LOC_PROT_ERR` (requester's lkey or bounds), then `WR_FLUSH_ERR` for everything queued behind, with the
#   QP in `ERR`.
# * Pinning cost follows the page backing and the path, as measured on an H200 host: `pin_user_pages` of
#   1 GiB of touched memory takes about 21 ms on 4 KiB pages and 4 ms on huge pages, 17 times more when
#   4 KiB pages must first be faulted in; `cudaHostRegister` costs about twice `pin_user_pages` and gains
#   little from huge pages.
#
# Next: `03_gpu_memory_and_dmabuf.ipynb` registers GPU memory, which is not pinned through page tables but
# exported by the GPU driver as a dma-buf.

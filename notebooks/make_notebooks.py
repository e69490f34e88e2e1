"""Write the teaching notebooks 01-07 with nbformat and run them (nbclient), so that they are committed with
their outputs.

Run from anywhere: ``python notebooks/make_notebooks.py``. Each notebook runs in a fresh ``python3`` kernel with
``notebooks/`` as its working directory (as Jupyter gives a notebook opened there), so repository files are reached as
``Path("..") / ...``. Every notebook says what it teaches, asserts what it claims on simulated results (a
regression fails the notebook), and ends with "What you saw". The written bytes depend only on the notebook and
the installed packages: cell ids come from the notebook name and cell index, no timing is recorded, string hashing
is seeded, the streams a cell printed are merged into one output per stream, and the kernel's ``language_info``
(the Python patch version) is left out. ``tests/test_notebooks.py`` runs them again and compares the bytes.
"""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}


def md(text: str) -> tuple[str, str]:
    """A markdown cell."""
    return "markdown", textwrap.dedent(text).strip("\n")


def code(text: str) -> tuple[str, str]:
    """A code cell."""
    return "code", textwrap.dedent(text).strip("\n")


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["01_quickstart.ipynb"] = [
    md("""
    # 01 — Quickstart: RDMA WRITE bandwidth and latency

    **What this notebook teaches.** How to run an rdmasim scenario from Python, read its perftest-style tables, and
    see the two regimes of RDMA performance: small messages are bound by per-message costs (doorbell, NIC pipeline,
    PCIe and wire latency), large messages by the slowest link's bandwidth. We run the quickstart scenario
    (`scenarios/quickstart.yaml`: two servers with ConnectX-7-class NICs on PCIe Gen5 x16, a 400 Gb/s fabric,
    pinned host memory) with fewer iterations so it finishes in seconds.

    **Predict before running.** How long will a 2-byte RDMA WRITE take, and from what message size on will the
    bandwidth stop growing? At what rate?
    """),
    code("""
    from pathlib import Path

    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario

    scenario, _ = load_scenario(Path("..") / "scenarios" / "quickstart.yaml")
    small = [w.model_copy(update={"iterations": 200}) for w in scenario.workload]
    scenario = scenario.model_copy(update={"workload": small})
    result = run_scenario(scenario)
    result.summary[["workload", "bytes", "bw_avg_Gbps", "msg_rate_Mpps", "t_typical_us", "p99_us"]]
    """),
    md("""
    ## Bandwidth against message size
    Each point is `ib_write_bw` for one size with 128 writes in flight. Below a few KiB the curve rises linearly:
    the NIC completes a roughly constant number of messages per second, so bandwidth is proportional to size.
    Above that it flattens at the line rate less the InfiniBand headers.
    """),
    code("""
    import matplotlib.pyplot as plt

    bw = result.summary[result.summary.kind == "write_bw"]
    lat = result.summary[result.summary.kind == "write_lat"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(bw.bytes, bw.bw_avg_Gbps, marker="o")
    left.set(xscale="log", xlabel="message size (bytes)", ylabel="Gb/s", title="ib_write_bw")
    right.plot(lat.bytes, lat.t_typical_us, marker="o")
    right.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="us", title="ib_write_lat (typical)")
    fig.tight_layout()
    """),
    md("""
    ## Checking the numbers against first principles
    The large-message plateau should be the 400 Gb/s line rate times the payload share of each 4 KiB packet
    (26 B of IB headers per packet plus a 16 B RETH in the first), and the small-message latency should sit near
    1 µs: doorbell, send pipeline, one fabric hop, receive pipeline and a PCIe write.
    """),
    code("""
    from models.fabric import RETH
    from sim.scenario.resolve import fabric_params

    fabric = fabric_params(scenario)
    expected_Gbps = fabric.efficiency(8 << 20, RETH) * 8 / 1e9
    measured_Gbps = bw.bw_avg_Gbps.iloc[-1]
    print(f"plateau: simulated {measured_Gbps:.1f} Gb/s, line rate less headers {expected_Gbps:.1f} Gb/s")
    assert abs(measured_Gbps - expected_Gbps) / expected_Gbps < 0.01
    print(f"2-byte write latency: {lat.t_typical_us.iloc[0]:.2f} us")
    assert 0.5 < lat.t_typical_us.iloc[0] < 2.0
    """),
    md("""
    ## What you saw
    * The scenario file describes nodes, fabric, buffers and workloads; `run_scenario` returns tidy tables.
    * Bandwidth grows with message size until the wire (or PCIe) saturates; the plateau matches the line rate less
      per-packet headers to within 1 %.
    * Small-message latency is about 1 µs and stays flat until the message no longer fits inline (220 B), where
      the NIC must first DMA-read the payload over PCIe; large-message latency is dominated by serialization.

    Next: `rdmasim run scenarios/quickstart.yaml` does the same from the shell and writes figures and a manifest.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["02_memory_registration_basics.ipynb"] = [
    md("""
    # 02 — Memory registration basics: keys, access flags, errors and the cost of pinning

    **What this notebook teaches.** What `ibv_reg_mr` gives you (an MR with an `lkey` for your own work requests
    and an `rkey` for the peer), which access-flag combinations rdma-core refuses and with which errno, how
    `RLIMIT_MEMLOCK` limits pinning, what happens when a work request breaks the rules (a *completion* in error,
    not an exception), and what pinning costs: the model follows `pin_user_pages` measured on an H200 host
    through io_uring's fixed buffers (`models/data/h200_host_pinning_pages.json`). We call the verbs API of
    `models.verbs` directly on two simulated nodes.

    **Predict before running.** Which of these does rdma-core refuse, and with which errno: remote write rights
    without local write, a zero-length MR, a range that runs past the buffer, a registration past
    `RLIMIT_MEMLOCK`? And what does a WRITE into an MR without `REMOTE_WRITE` return?
    """),
    code("""
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
        \"\"\"Nodes 'a' and 'b' on one fabric: an opened device, a PD and a 1 MiB host buffer each.\"\"\"
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
        \"\"\"Call ``call``; it must raise VerbsError with ``errno``, which is returned.\"\"\"
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
    """),
    md("""
    The registration time is a fixed 35 µs (uverbs ioctl and mkey creation) plus what `pin_user_pages` takes
    for 256 present 4 KiB pages (about 28 µs, the H200 host's curve below) plus 0.29 µs for each of the 256
    translation entries: `ib_umem_get`'s scatter list and DMA mapping and the MTT written with the mkey (fitted to
    Mooncake's sequential registration of 500 GB, three times what pinning costs). Pinned pages are counted per
    registration, like the kernel's `pinned_vm`: registering an overlapping range pins (and charges) its pages
    again.

    ## Access flags and registration errors
    `ibv_reg_mr` checks its arguments the way rdma-core and `ib_umem_get` do. A remote peer may only write
    (or do atomics) where the local side may write too, so `REMOTE_WRITE`/`REMOTE_ATOMIC` without `LOCAL_WRITE`
    is `EINVAL`; a read-only target (`REMOTE_READ` alone) is fine. The kernel's `ib_check_mr_access` also refuses
    bits outside `IB_ACCESS_SUPPORTED` (`EINVAL`) and the FLUSH rights on a device without flush support
    (`EOPNOTSUPP`). Errors are `VerbsError` with the errno name rdma-core would set.
    """),
    code("""
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
    """),
    md("""
    ## RLIMIT_MEMLOCK
    Pinned pages are charged to the process's `RLIMIT_MEMLOCK` (unless it is unlimited or the process has
    `CAP_IPC_LOCK`). With a 1 MiB limit, a 1 MiB MR uses it all and the next pin fails with `ENOMEM`. An ODP
    registration (`ON_DEMAND`) pins nothing and is not charged (from 5.10 mlx5 maps the pages the CPU already has,
    a snapshot that faults nothing); deregistering gives the pages back.
    """),
    code("""
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
    """),
    md("""
    ## Breaking the rules at run time: completions in error
    Keys and rights are checked again on every access, by the NICs. Those violations are not exceptions: the
    work request *completes* with an error status, the QP moves to the error state, and every work request
    still queued behind it completes with `IBV_WC_WR_FLUSH_ERR`. Below, node a posts two work requests to
    an 8 KiB MR on node b; only the first one breaks a rule.
    """),
    code("""
    import pandas as pd

    from models.nic.wqe import Opcode, SendWR
    from models.verbs.cq import ibv_create_cq, ibv_poll_cq
    from models.verbs.qp import ibv_create_qp, ibv_post_send


    def post_two(opcode, remote_access=RW, remote_offset=0, length=PAGE, lkey_delta=0, dereg_remote=False):
        \"\"\"a posts a (possibly bad) work request and a good one to b's MR; return statuses and QP states.\"\"\"
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
    """),
    md("""
    Remote violations are detected by the *responder* NIC (it owns the rkey) and reported back as
    `REM_ACCESS_ERR`; local ones (`lkey`, local bounds) by the requester as `LOC_PROT_ERR`. Either way the
    requester's QP is in `ERR` and must be reset and reconnected before it carries traffic again.

    ## What pinning costs: the H200 calibration
    Pinning walks the page tables and takes a reference on each page. `HostParams.pin_cost_ps` follows curves
    measured on an H200 host for three ways of pinning, `pin_user_pages` (what `ibv_reg_mr`'s `ib_umem_get`
    calls, measured through io_uring's fixed-buffer registration, which makes the same call), `mlock`, and
    `cudaHostRegister` (which also maps every page for the GPU), on 4 KiB pages, transparent huge pages and
    hugetlbfs, with the pages already present (*prefaulted*) or faulted in by the pin
    (`models/data/h200_host_pinning_pages.json`). A scenario picks the backing with `host: {pages: thp}`.
    """),
    code("""
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
    """),
    md("""
    ## What you saw
    * An MR is a range, access rights and a key pair; the local side uses the `lkey`, the peer the `rkey`.
      Registering 1 MiB of prefaulted memory takes 35 µs + about 28 µs of pinning.
    * Bad arguments fail the call with rdma-core's errno: `EINVAL` for `REMOTE_WRITE`/`REMOTE_ATOMIC` without
      `LOCAL_WRITE` and for length 0, `EFAULT` for an unmapped range, `EOPNOTSUPP` for ODP on a NIC without
      it, `ENOMEM` past `RLIMIT_MEMLOCK` (ODP MRs are not charged).
    * Bad accesses fail the *work request*: `REM_ACCESS_ERR` (responder's rkey, rights or bounds) or
      `LOC_PROT_ERR` (requester's lkey or bounds), then `WR_FLUSH_ERR` for everything queued behind, with the
      QP in `ERR`.
    * Pinning cost follows the page backing and the path, as measured on an H200 host: `pin_user_pages` of
      1 GiB of touched memory takes about 21 ms on 4 KiB pages and 4 ms on huge pages, 17 times more when
      4 KiB pages must first be faulted in; `cudaHostRegister` costs about twice `pin_user_pages` and gains
      little from huge pages.

    Next: `03_gpu_memory_and_dmabuf.ipynb` registers GPU memory, which is not pinned through page tables but
    exported by the GPU driver as a dma-buf.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["03_gpu_memory_and_dmabuf.ipynb"] = [
    md("""
    # 03 — GPU memory and dma-buf: export, `ibv_reg_dmabuf_mr`, attach, map and `move_notify`

    **What this notebook teaches.** How GPU memory reaches an RDMA NIC without `pin_user_pages`: the GPU driver
    *exports* a range of VRAM as a dma-buf file descriptor (`cuMemGetHandleForAddressRange`, with NVIDIA's rules
    as measured on an H200), the NIC driver *imports* it with `ibv_reg_dmabuf_mr` (which checks its arguments in
    the kernel's order), and the dma-buf core links the two: attach, map under the reservation lock, and
    `move_notify` when the exporter wants to move the buffer. We end with the protocol timeline of a whole run
    printed by `sim.inspect.explain.explain`.

    **Predict before running.** Does exporting an 8 GiB allocation as a dma-buf take longer than exporting 2
    MiB? Does registering the dma-buf pin any host page?
    """),
    code("""
    import json
    from pathlib import Path

    import pandas as pd

    from models.dmabuf import DmaBufCore, KernelConfig, dma_buf_is_dynamic
    from models.fabric import Fabric, FabricParams
    from models.gpu import gpu_params
    from models.dmabuf.gpu_export import EXPORT_PS, CudaError, Gpu
    from models.host import HostParams
    from models.nic.nic import NicParams
    from models.node import Node
    from models.pcie.link import PcieParams
    from models.nic.wqe import Access
    from models.verbs.device import ibv_alloc_pd, ibv_open_device
    from sim.core import PS_PER_US, Environment, VerbsError

    MiB, GiB = 1 << 20, 1 << 30
    RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


    def gpu_node(nic=NicParams(), kernel=KernelConfig(), rdma_core="57", driver="580", vendor="nvidia"):
        \"\"\"Node 'a': an mlx5-like NIC (dynamic dma-buf MRs by default), a kernel, and an H200 'a.gpu0'.\"\"\"
        env = Environment(1)
        node = Node.create("a", HostParams(), PcieParams(), nic)
        node.kernel = DmaBufCore(env, kernel)
        node.rdma_core = rdma_core
        fabric = Fabric(FabricParams())
        fabric.attach(node.nic.name)
        pd_ = ibv_alloc_pd(ibv_open_device(node, env, fabric))
        return node, pd_, Gpu("a.gpu0", vendor, gpu_params("h200"), node.kernel, driver=driver)


    node, pd_, gpu = gpu_node()
    alloc = gpu.malloc("buf", 64 * MiB)                  # cudaMalloc: 64 MiB of VRAM
    start = node.kernel.now_ps("a.gpu0")
    fd = gpu.export(alloc, node.fds)                     # cuMemGetHandleForAddressRange(DMA_BUF_FD)
    export_us = (node.kernel.now_ps("a.gpu0") - start) / PS_PER_US
    dmabuf = node.fds.fget(fd)
    print(f"fd {fd} -> {dmabuf.name}: {dmabuf.size // MiB} MiB, exporter '{dmabuf.exp_name}' "
          f"({type(alloc.exporter).__name__}), placement {dmabuf.placement.value}, references {dmabuf.refcount}, "
          f"export took {export_us:.1f} us")

    assert fd == 3                                        # lowest free fd after stdin, stdout, stderr
    assert dmabuf.size == 64 * MiB and dmabuf.placement.value == "VRAM" and dmabuf.refcount == 1
    assert not dma_buf_is_dynamic(dmabuf)                 # NVIDIA's exporter is static: it never moves memory
    """),
    md("""
    ## NVIDIA's export rules, replayed against the H200 measurement
    `models/data/h200_dmabuf_export.json` records what `cuMemGetHandleForAddressRange` returned for ranges of a
    64 MiB `cudaMalloc` allocation on an H200 (driver 580). The model's rules: start and size nonzero multiples
    of 4 KiB, inside one allocation, flags 0, and driver 515+ (open kernel modules). We replay every case on
    our 64 MiB allocation and compare results. (The measured "host pointer" case has no counterpart here: a
    host address is not a range of a device allocation.)
    """),
    code("""
    calib = json.loads((Path("..") / "models" / "data" / "h200_dmabuf_export.json").read_text())


    def try_export(gpu, alloc, fds, **kw):
        try:
            gpu.export(alloc, fds, **kw)
            return "CUDA_SUCCESS"
        except CudaError as err:
            return err.result


    rows = []
    for case in calib["cases"]:
        if case["case"] == "host pointer":
            continue
        measured = case["result"].split(".")[1].split(":")[0]          # '<CUresult.CUDA_SUCCESS: 0>'
        model = try_export(gpu, alloc, node.fds, offset=case["offset"], size=case["size"], flags=case["flags"])
        rows.append({"case": case["case"], "offset": case["offset"], "size": case["size"], "flags": case["flags"],
                     "H200": measured, "model": model})
    old_node, _, old_driver = gpu_node(driver="510")
    rows.append({"case": "driver 510 (before 515)", "offset": 0, "size": 2 * MiB, "flags": 0, "H200": "-",
                 "model": try_export(old_driver, old_driver.malloc("x", 2 * MiB), old_node.fds)})
    export_rules = pd.DataFrame(rows)
    print(export_rules.to_string(index=False))

    replayed = export_rules[export_rules["H200"] != "-"]
    assert len(replayed) == 10 and (replayed["H200"] == replayed["model"]).all()
    assert export_rules["model"].iloc[-1] == "CUDA_ERROR_NOT_SUPPORTED"
    """),
    code("""
    timing = []
    for row in calib["export_timing"]:
        node_t, _, g = gpu_node()
        a = g.malloc("t", row["bytes"])
        t0 = g.core.now_ps(g.name)
        g.export(a, node_t.fds)
        timing.append({"bytes": row["bytes"], "H200_us": row["export_s"] * 1e6,
                       "model_us": (g.core.now_ps(g.name) - t0) / PS_PER_US})
    timing = pd.DataFrame(timing)
    print(timing.to_string(index=False))
    assert timing["model_us"].nunique() == 1                      # export cost does not depend on the size
    assert ((timing["model_us"] / timing["H200_us"] - 1).abs() < 0.25).all()
    """),
    md("""
    Exporting costs the same ~20 µs for 2 MiB and 8 GiB: no page is touched or pinned; the exporter only
    creates a file that stands for the range (the model charges 18 µs of driver time plus the dma-buf core's
    `dma_buf_export` and `dma_buf_fd`, 2.2 µs; the H200 measured 17–18 µs).

    ## `ibv_reg_dmabuf_mr`: registering the fd
    The NIC driver takes a reference on the dma-buf behind the fd, attaches to it *dynamically* (it promises to
    handle `move_notify`), maps it under the reservation lock, waits for the exporter's fences and writes the
    NIC's translation table. Nothing is charged to `RLIMIT_MEMLOCK`, and rdma-core sets `mr.addr` to the
    *offset* in the dma-buf, while the keys are used with the `iova` the caller chose.
    """),
    code("""
    from models.verbs.dmabuf import ibv_reg_dmabuf_mr

    mr = ibv_reg_dmabuf_mr(pd_, 0, 64 * MiB, alloc.addr, fd, RW)
    print(f"mr_type {mr.mr_type}, addr (offset) {mr.addr}, iova 0x{mr.iova:x}, lkey 0x{mr.lkey:x}, "
          f"mode {mr.backing.mode}, registration {mr.reg_ps / PS_PER_US:.1f} us")
    print(f"host pages pinned: {node.host.pinned_pages}; dma-buf references: {dmabuf.refcount} (the fd's and the MR's)")

    assert mr.mr_type == "DMABUF_MR" and mr.addr == 0 and mr.iova == alloc.addr
    # nothing pinned in host memory; the buffer still never moves, because NVIDIA's exporter is static
    assert node.host.pinned_pages == 0 and mr.backing.pinned_bytes == 64 * MiB
    assert mr.backing.translation_valid and dmabuf.refcount == 2
    """),
    md("""
    ### The order of checks
    The kernel checks one rule after another and returns the first errno it hits, so a call that breaks two
    rules reports the earlier one. Each row below breaks the rule named first, and most also a later one (a
    bad fd, a range past the buffer): the errno shows which check ran first. Order: rdma-core and kernel
    versions → driver support → page offsets of `offset` and `iova` → allowed access bits → `REMOTE_WRITE` needs
    `LOCAL_WRITE` → mlx5 needs ODP for dynamic MRs → `ib_umem_dmabuf_get` (the fd, then the range).
    """),
    code("""
    BAD_FD = 99


    def reg_errno(pd_, exported_fd, **kw):
        args = {"offset": 0, "length": 64 * MiB, "iova": 0x10000, "fd": exported_fd, "access": RW} | kw
        try:
            ibv_reg_dmabuf_mr(pd_, **args)
            return "ok", ""
        except VerbsError as err:
            return err.errno, err.rule


    def fresh(**node_kw):
        \"\"\"A new node with a 64 MiB allocation exported as an fd.\"\"\"
        node, pd_, gpu = gpu_node(**node_kw)
        return node, pd_, gpu.export(gpu.malloc("buf", 64 * MiB), node.fds)


    checks = [  # (case, node options, call arguments, expected errno, words in the rule)
        ("rdma-core v33 (needs v34), bad fd", {"rdma_core": "33"}, {"fd": BAD_FD}, "EOPNOTSUPP", "rdma-core v33"),
        ("kernel 5.11 (needs 5.12), bad fd", {"kernel": KernelConfig(version="5.11")}, {"fd": BAD_FD}, "EOPNOTSUPP", "5.12"),
        ("NIC without dma-buf MRs, bad fd", {"nic": NicParams(dmabuf=None)}, {"fd": BAD_FD}, "EOPNOTSUPP", "DMA-BUF"),
        ("iova page offset != offset's, bad fd", {}, {"iova": 0x10001, "fd": BAD_FD}, "EINVAL", "page offsets"),
        ("ON_DEMAND bit, no LOCAL_WRITE", {}, {"access": Access.ON_DEMAND | Access.REMOTE_WRITE}, "EINVAL", "only LOCAL_WRITE"),
        ("REMOTE_WRITE without LOCAL_WRITE, bad fd", {}, {"access": Access.REMOTE_WRITE, "fd": BAD_FD}, "EINVAL", "requires LOCAL_WRITE"),
        ("kernel without CONFIG_INFINIBAND_ON_DEMAND_PAGING, bad fd", {"kernel": KernelConfig(on_demand_paging=False)}, {"fd": BAD_FD}, "EOPNOTSUPP", "ON_DEMAND_PAGING"),
        ("bad fd, length 0", {}, {"fd": BAD_FD, "length": 0}, "EBADF", "not open"),
        ("fd of a plain file", {}, {"fd": "plain"}, "EINVAL", "not a dma-buf"),
        ("range runs past the dma-buf", {}, {"offset": 4096}, "EINVAL", "past the dma-buf"),
        ("length 0", {}, {"length": 0}, "EINVAL", "length 0"),
    ]
    rows = []
    for case, node_kw, kw, errno, words in checks:
        node_, pd2, fd2 = fresh(**node_kw)
        if kw.get("fd") == "plain":
            kw = kw | {"fd": node_.fds.open("notes.txt")}
        got, rule = reg_errno(pd2, fd2, **kw)
        rows.append({"case": case, "errno": got, "rule": rule})
        assert got == errno and words in rule, (case, got, rule)
        assert node_.fds.fget(fd2).refcount == 1      # every failed path dropped the reference it took
    pd.set_option("display.max_colwidth", 90)
    print(pd.DataFrame(rows).to_string(index=False))
    """),
    md("""
    ## Underneath: attach, map under the lock, `move_notify`
    NVIDIA's exporter is static, so its buffers never move. A *dynamic* exporter (amdgpu-like, `vendor="amd"`
    in the scenarios, `MovableExporter` here) may move a buffer between VRAM and system memory whenever nobody
    pins it. The contract, with the calls of `models.dmabuf` (kernel names):

    1. the importer attaches with `dma_buf_dynamic_attach` and a `move_notify` callback;
    2. it maps with `dma_buf_map_attachment` **while holding the buffer's reservation lock**;
    3. before moving, the exporter takes the lock and calls `move_notify`: the importer must stop using
       (and here unmaps) its mapping;
    4. the importer maps again later and must not DMA before the exporter's copy fence has signaled.

    `check_dma` is the invariant the simulated NIC checks on every access.
    """),
    code("""
    from models.dmabuf import (DmaBufAttachOps, MovableExporter, Placement, check_dma, dma_buf_attach,
                               dma_buf_dynamic_attach, dma_buf_map_attachment, dma_buf_map_attachment_unlocked,
                               dma_buf_pin, dma_buf_unmap_attachment)
    from sim.core import InvariantViolation, ProtocolError

    def raises(kind, call, *args, **kwargs):
        \"\"\"Call ``call``; it must raise ``kind``, which is printed and returned.\"\"\"
        try:
            call(*args, **kwargs)
        except kind as err:
            print(f"{kind.__name__}: {err}")
            return err
        raise AssertionError(f"{call.__name__} did not raise {kind.__name__}")


    core = DmaBufCore(Environment(1), KernelConfig(move_notify_enabled=True))
    amd = MovableExporter(core, 64 * MiB, name="a.gpu1")
    notified = []


    def move_notify(attach):
        \"\"\"A correct importer: runs under the exporter's lock, drops its mappings.\"\"\"
        notified.append(core.now_ps("a.gpu1"))
        for sgt in list(attach.mappings):
            dma_buf_unmap_attachment(attach, sgt)


    attach = dma_buf_dynamic_attach(amd.dmabuf, "a.nic", DmaBufAttachOps(move_notify, allow_peer2peer=True))
    err = raises(ProtocolError, dma_buf_map_attachment, attach)          # without the lock
    assert "dma_resv_assert_held" in str(err)

    amd.dmabuf.resv.lock("a.nic")
    sgt = dma_buf_map_attachment(attach)
    amd.dmabuf.resv.unlock("a.nic")
    check_dma(sgt)                                       # fine: mapped, current placement
    print(f"mapped {sgt.nbytes // MiB} MiB in {sgt.placement.value}, generation {sgt.generation}, "
          f"DMA address 0x{sgt.segments[0][0]:x}")

    fence = amd.move(Placement.SYSTEM)                   # evict to system memory
    print(f"move_notify called at {notified[0] / 1e6:.1f} us; the copy's fence signals at {fence.signaled_at_ps / 1e6:.1f} us")
    assert len(notified) == 1 and sgt.unmapped
    assert "unmapped" in str(raises(InvariantViolation, check_dma, sgt))    # the old mapping is gone

    amd.dmabuf.resv.lock("a.nic")
    again = dma_buf_map_attachment(attach)
    amd.dmabuf.resv.unlock("a.nic")
    print(f"re-mapped in {again.placement.value}, generation {again.generation}, usable from {again.ready_at_ps / 1e6:.1f} us")
    assert again.placement is Placement.SYSTEM and again.ready_at_ps == fence.signaled_at_ps
    too_early = raises(InvariantViolation, check_dma, again, now_ps=core.now_ps("a.nic"))  # copy still running
    assert "must wait" in str(too_early)
    check_dma(again, now_ps=fence.signaled_at_ps)        # after the fence: safe
    """),
    md("""
    Two ways to keep a buffer in place, both of which make the exporter's move fail with `EBUSY`: an explicit
    `dma_buf_pin` by a dynamic importer (what the pinned dma-buf importers of EFA or mlx5 data-direct do), and a
    *static* importer (`dma_buf_attach`, no `move_notify`), whose map pins the buffer implicitly.
    """),
    code("""
    amd.dmabuf.resv.lock("a.nic")
    dma_buf_pin(attach)
    amd.dmabuf.resv.unlock("a.nic")
    assert raises(VerbsError, amd.move, Placement.VRAM).errno == "EBUSY"

    other = MovableExporter(core, 2 * MiB, name="a.gpu2")
    static = dma_buf_attach(other.dmabuf, "ahci0")
    mapping = dma_buf_map_attachment_unlocked(static)
    print(f"static importer's mapping pinned on map: {mapping.pinned_on_map}")
    assert mapping.pinned_on_map and raises(VerbsError, other.move, Placement.SYSTEM).errno == "EBUSY"
    """),
    md("""
    ## The whole protocol in one run: `sim.inspect.explain`
    `scenarios/pin_vs_dmabuf.yaml` streams RDMA WRITEs out of a 1 GiB buffer on an MI300X-class GPU (dynamic
    exporter, 8 GiB usable) while, 20 ms in, another job allocates 7.5 GiB. Its `dmabuf` variant registers the
    buffer with `ibv_reg_dmabuf_mr`. With `trace=True` the run records every call; `explain` prints each
    registration and the first memory event, each line with the simulated time (µs) and the acting component;
    calls made inside a call or under a lock are indented right, and each outcome says why.
    """),
    code("""
    from sim.inspect.explain import explain
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario_variants

    _, _, variants = load_scenario_variants(Path("..") / "scenarios" / "pin_vs_dmabuf.yaml")
    scn = dict(variants)["dmabuf"]
    result = run_scenario(scn, trace=True, variant="dmabuf")
    print(explain(result))
    """),
    md("""
    The same timeline as a sequence diagram (`sim.inspect.diagram.draw`; on the command line, `rdmasim explain FILE
    --diagram FILE.svg`): one column per layer — the application, uverbs/ib_core, the importer's driver, the
    dma-buf core with its reservation lock, the exporter, the NIC — and one row per call or event, in time order.
    """),
    code("""
    from sim.inspect.diagram import draw
    from sim.inspect.timeline import sections

    parts = sections(result.testbed)
    assert [p.registration.buffer for p in parts if p.registration] == ["src", "dst"]
    draw(result.testbed, parts, "pin_vs_dmabuf, variant dmabuf");
    """),
    code("""
    events = sorted(result.testbed.env.trace.events, key=lambda e: e.time_ps)
    first = lambda name, after=0: next(e for e in events if e.name == name and e.time_ps >= after)
    pressure = first("gpu_memory_pressure")
    sequence = ["dma_buf_move_notify", "mlx5_ib_dmabuf_invalidate_cb", "MappingInvalidated",
                "mlx5r_umr_update_mr_pas", "PageFaulted", "FencesWaited", "MappingRestored"]
    times = [first(name, pressure.time_ps).time_ps for name in sequence]
    assert times == sorted(times), list(zip(sequence, times))
    assert first("BufferMoved", pressure.time_ps).time_ps < first("FencesWaited", pressure.time_ps).time_ps

    moved, restored = first("BufferMoved", pressure.time_ps), first("MappingRestored", pressure.time_ps)
    copy_done = moved.args["copy_done_ps"]
    print(f"copy of 1 GiB to system memory done {(copy_done - pressure.time_ps) / 1e9:.1f} ms after the pressure; "
          f"NIC mapping restored {(restored.time_ps - copy_done) / 1e6:.0f} us after that")
    assert restored.time_ps >= copy_done                 # the NIC waited for the copy's fence
    assert result.counters["invalidations"] == 1 and result.counters["refaults"] == 1
    """),
    md("""
    ## What you saw
    * Exporting GPU memory creates a dma-buf fd in ~20 µs regardless of size; NVIDIA requires 4 KiB-aligned,
      nonzero ranges inside one allocation with flags 0 and driver 515+. The model reproduces all 10 measured
      H200 cases.
    * `ibv_reg_dmabuf_mr` pins no host pages, is not charged to `RLIMIT_MEMLOCK`, sets `mr.addr` to the
      offset, and reports the *first* rule broken in the kernel's order (versions, support, page offsets, access
      bits, ODP, then the fd and the range), leaking no reference on failure.
    * A dynamic importer maps under the reservation lock, is told by `move_notify` before the buffer moves, and
      may DMA again only through a new mapping whose fence has signaled; `check_dma` enforces it. Pins (explicit
      or by a static importer) make moves fail with `EBUSY`.
    * In a full run, eviction is: `move_notify` → the importer's callback zaps the MR with a UMR and unmaps →
      the NIC faults, and its handler waits for the lock while the exporter starts the copy to system memory →
      re-maps → waits for the copy's fence (the 1 GiB copy takes 19.4 ms) → rewrites the MTT; `explain` prints
      that timeline.

    Next: `04_pinned_vs_dynamic_under_pressure.ipynb` measures what this costs and what pinning costs instead.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["04_pinned_vs_dynamic_under_pressure.ipynb"] = [
    md("""
    # 04 — Pinned vs. dynamic GPU registration under memory pressure

    **What this notebook teaches.** The trade-off at the heart of dma-buf: a registration *pinned in VRAM*
    (legacy peer-memory, or a pinned dma-buf importer that amdgpu pins there) keeps full bandwidth but blocks the
    GPU from evicting the buffer, so another job's allocation fails; a *dynamic* registration lets the exporter
    evict it, and the RDMA stream stalls while the buffer is copied. A third outcome: on a kernel without
    `CONFIG_DMABUF_MOVE_NOTIFY` the map pins the buffer and amdgpu pins it into system memory (GTT), so the buffer
    leaves VRAM at registration and the other job's allocation succeeds. We run every variant of
    `scenarios/pin_vs_dmabuf.yaml` and `scenarios/gpu_pressure.yaml` (each run takes well under a second) and
    compare them with `sim.inspect.compare`.

    **Predict before running.** Another job wants 7.5 GiB of the 8 GiB GPU while 1 GiB of it is registered.
    With which of the four registrations can it allocate, and what does the RDMA stream pay in each case?
    """),
    code("""
    from pathlib import Path

    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from sim.inspect.compare import bandwidth_timeline, comparison_table, event_times
    from sim.engine.run import run_scenario
    from sim.scenario.scenario_file import load_scenario_variants

    GiB = 1 << 30
    SCENARIOS = Path("..") / "scenarios"
    pd.set_option("display.width", 200)


    def run_variants(file):
        _, _, variants = load_scenario_variants(SCENARIOS / file)
        return {name: run_scenario(scn, variant=name) for name, scn in variants}


    runs = run_variants("pin_vs_dmabuf.yaml")
    table = comparison_table(list(runs.values())).set_index("variant")
    columns = ["modes", "bw_avg_Gbps", "p50_us", "p99_us", "p99_9_us", "pinned_bytes", "evictions",
               "invalidations", "refaults", "failed_allocations"]
    table[columns]
    """),
    md("""
    All four variants stream 3000 RDMA WRITEs of 1 MiB (16 in flight) out of a 1 GiB GPU buffer into pinned
    host memory on node b; at 20 ms another job asks for 7.5 GiB of the GPU's 8 GiB. `pinned_bytes` counts both
    buffers (the 1 GiB host destination is pinned in every variant).
    """),
    code("""
    pinned = ["peermem", "dmabuf-pinned", "dmabuf-no-move-notify"]
    for name in pinned:
        row = table.loc[name]
        assert row.evictions == 0 and row.refaults == 0
        assert row.bw_avg_Gbps > 395 and row.p99_9_us < 1.01 * row.p50_us     # line rate, no tail
        assert row.pinned_bytes == 2 * GiB                                      # the buffer + host buffer
    assert table.loc["peermem"].failed_allocations == table.loc["dmabuf-pinned"].failed_allocations == 1
    assert table.loc["dmabuf-no-move-notify"].failed_allocations == 0          # pinned in GTT, VRAM free

    dyn = table.loc["dmabuf"]
    assert dyn.failed_allocations == 0 and dyn.evictions == 1 and dyn.invalidations == 1 and dyn.refaults == 1
    assert dyn.pinned_bytes == 1 * GiB                                          # only the host buffer
    assert dyn.bw_avg_Gbps < 0.8 * table.loc["peermem"].bw_avg_Gbps
    assert dyn.p99_us < 1.01 * dyn.p50_us and dyn.p99_9_us > 50 * dyn.p50_us      # the stall hits the top 0.1 %
    for name, result in runs.items():
        outcome = result.events.loc[result.events["kind"] == "gpu-memory-pressure", "outcome"].item()
        print(f"{name:<22} the other job's 7.5 GiB allocation: {outcome}")
    """),
    md("""
    **Why pinned registrations block eviction, or not.** `nvidia-peermem` pins the GPU pages for the MR's
    lifetime; a pinned dma-buf importer calls `dma_buf_pin`; and on a kernel built without
    `CONFIG_DMABUF_MOVE_NOTIFY` the dma-buf core pins every buffer on map because it cannot tell the importer
    about a move. A pinned buffer never moves. Where it is pinned is `amdgpu_dma_buf_pin`'s choice: VRAM only on
    6.15 or later with `CONFIG_DMABUF_MOVE_NOTIFY` on and every importer peer-to-peer (here: `dmabuf-pinned`),
    else GTT. Pinned in VRAM, the exporter has nothing to evict and the 7.5 GiB allocation fails: the RDMA stream
    is untouched, the other job is not. Pinned in GTT (`dmabuf-no-move-notify`), the buffer was copied to system
    memory when it was registered: the allocation fits and the NIC streams from host memory. The run's events
    say which setting decided:

    """),
    code("""
    for name in ("dmabuf-pinned", "dmabuf-no-move-notify"):
        events = runs[name].events
        print(f"{name:<22}", events.loc[events["kind"] == "registration", "outcome"].item())
    assert "CONFIG_DMABUF_MOVE_NOTIFY is off" in runs["dmabuf-no-move-notify"].events["outcome"].str.cat()
    """),
    md("""
    **Why dynamic registrations stall.** The exporter evicts the buffer: `move_notify` zaps the NIC's
    translations, the copy engine moves 1 GiB to system memory, and the NIC's next access faults and waits for
    the copy's fence before it re-maps. The 16 writes in flight wait for the whole copy.

    ## Registration cost per buffer
    """),
    code("""
    registrations = pd.concat([r.registrations for r in runs.values()], ignore_index=True)
    print(registrations.to_string(index=False))
    gpu_regs = registrations[registrations["location"] == "gpu0"].set_index("variant")
    host_reg = registrations[registrations["location"] == "host"]["register_us"]
    in_place = gpu_regs.drop("dmabuf-no-move-notify")["register_us"]           # no copy at registration
    assert host_reg.nunique() == 1 and host_reg.iloc[0] > 5 * in_place.max()
    assert gpu_regs.loc["dmabuf", "pinned_bytes"] == 0 and gpu_regs.loc["peermem", "pinned_bytes"] == GiB
    assert gpu_regs.loc["dmabuf-no-move-notify", "pinned_bytes"] == GiB
    assert gpu_regs.loc["dmabuf-no-move-notify", "register_us"] > 1e6 * GiB / 60e9    # the copy out of VRAM
    """),
    md("""
    Registering the 1 GiB of host memory (pinning 262,144 present 4 KiB pages) takes about 21 ms and dominates
    `register_us` in the comparison table, which sums all buffers. The GPU buffer costs 1.7 ms (peer-memory)
    to 3.2 ms (dynamic dma-buf: the whole MR is mapped and its translation written at registration). Note the
    `dmabuf-no-move-notify` row: the same dynamic registration, but its buffer is pinned on map, into system
    memory, so its registration also pays the 1 GiB copy out of VRAM (about 20 ms).

    ## Bandwidth over time
    `bandwidth_timeline` spreads the bytes of each successful operation over the time the wire needed for them,
    ending at its completion, and sums them per time bin (100 bins): no bin shows more than the link carried.
    `event_times` places the scenario's events on the same axis (ms since the first post).
    """),
    code("""
    from sim.plot.figures import curve_style, labelled

    fig, ax = plt.subplots(figsize=(10, 4))
    curves = {name: bandwidth_timeline(result, bins=100) for name, result in runs.items()}
    allocation = {name: r.events.loc[r.events["kind"] == "gpu-memory-pressure", "outcome"].item().split(":")[0]
                  for name, r in runs.items()}
    names = labelled([(name, curve["bw_Gbps"].to_numpy()) for name, curve in curves.items()])
    for i, (name, label) in enumerate(zip(curves, names)):  # equal curves say so, in their own style
        label = label.replace("identical to", "same stream as") + f"; the other job's allocation: {allocation[name]}"
        ax.plot(curves[name]["time_ms"], curves[name]["bw_Gbps"], label=label, **curve_style(i, len(curves[name])))
    for _, event in event_times(runs["dmabuf"]).iterrows():
        if event["kind"] != "workloads-start":
            ax.axvline(event["time_ms"], color="grey", lw=0.8, ls=":")
            ax.text(event["time_ms"], 20, f" {event['kind']}", fontsize=8, color="grey")
    ax.set(xlabel="time since first post (ms)", ylabel="delivered bandwidth (Gb/s)",
           title="pin_vs_dmabuf: RDMA WRITE stream, 7.5 GiB allocated at 20 ms")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()

    curve = bandwidth_timeline(runs["dmabuf"], bins=100)
    pressure_ms = event_times(runs["dmabuf"]).query("kind == 'gpu-memory-pressure'")["time_ms"].item()
    after = curve[curve["time_ms"] > pressure_ms]
    stalled_ms = (after["bw_Gbps"] == 0).sum() * (curve["time_ms"].iloc[1] - curve["time_ms"].iloc[0])
    print(f"dmabuf: no completion for about {stalled_ms:.1f} ms after the pressure; "
          f"last bins at {after['bw_Gbps'].tail(5).mean():.0f} Gb/s (now from system memory)")
    assert stalled_ms > 15 and after["bw_Gbps"].tail(5).mean() > 380
    pinned_curve = bandwidth_timeline(runs["peermem"], bins=100)["bw_Gbps"]
    assert pinned_curve.iloc[1:].min() > 390                      # the pinned stream never dips
    """),
    md("""
    ## The latency tail
    Per-operation latency (post to completion) for every variant, on a linear time axis so that the stall stands
    out (a log axis would squeeze 338 µs and 21 ms together). In the pinned variants every 1 MiB write takes
    338 µs (16 in flight at 397 Gb/s): their curves coincide and the legend says so. In the dynamic one, the
    writes in flight at the eviction wait for the zap, the copy and the re-map: about 21 ms.
    """),
    code("""
    from models.gpu import CopyEngines

    fig, ax = plt.subplots(figsize=(8, 4))
    tails = {name: np.sort(r.operations["latency_ps"].to_numpy()) / 1e9 for name, r in runs.items()}
    for i, (name, label) in enumerate(zip(tails, labelled(list(tails.items())))):
        ccdf = 1 - np.arange(len(tails[name])) / len(tails[name])
        ax.plot(tails[name], ccdf, label=label.replace("identical to", "same as"), **curve_style(i, len(ccdf)))
    ax.set(yscale="log", xlabel="latency (ms)", ylabel="fraction of writes this slow or slower (CCDF)",
           title="pin_vs_dmabuf: per-write latency tail")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()

    ops = runs["dmabuf"].operations
    slow = ops[ops["latency_ps"] > 1e9]                           # slower than 1 ms
    copy_ms = CopyEngines().copy_ps(GiB, "d2h") / 1e9
    print(f"{len(slow)} of {len(ops)} writes stalled, up to {slow['latency_ps'].max() / 1e9:.1f} ms; "
          f"copying 1 GiB GPU -> host takes {copy_ms:.1f} ms on the H200-calibrated copy engine")
    assert len(slow) == 16                                         # exactly the tx_depth writes in flight
    assert copy_ms < slow["latency_ps"].max() / 1e9 < copy_ms + 2
    """),
    md("""
    ## Who pays
    Pinning moves the cost, it does not remove it. Per variant, side by side: what the RDMA stream paid (its
    longest stall beyond a normal write, and the bandwidth it lost against the best variant), what registering
    the GPU buffer cost, and what the other job got.
    """),
    code("""
    pays = pd.DataFrame({
        "stall_ms": {n: (r.operations["latency_ps"].max() - r.operations["latency_ps"].median()) / 1e9
                     for n, r in runs.items()},
        "bw_lost_pct": 100 * (1 - table["bw_avg_Gbps"] / table["bw_avg_Gbps"].max()),
        "gpu_register_ms": table["gpu_register_us"] / 1e3,
        "allocation": allocation})
    print(pays.round(2).to_string())

    fig, axes = plt.subplots(1, 3, figsize=(12, 3), sharey=True)
    rows = np.arange(len(pays))
    failed = pays["allocation"] != "allocated"
    axes[0].barh(rows, pays["stall_ms"], color="tab:orange")
    for row, lost in zip(rows, pays["bw_lost_pct"]):
        axes[0].text(0.3, row, f"{lost:.0f}% bandwidth lost", va="center", fontsize=8)
    axes[0].set(xlabel="the stream's longest stall (ms)", yticks=rows, yticklabels=pays.index,
                title="the RDMA stream pays")
    axes[1].barh(rows, pays["gpu_register_ms"], color="tab:purple")
    axes[1].set(xlabel="registering the GPU buffer (ms)", title="the registration pays")
    axes[2].barh(rows, np.ones(len(rows)), color=np.where(failed, "tab:red", "tab:green"))
    for row, outcome in zip(rows, pays["allocation"]):
        axes[2].text(0.05, row, outcome, va="center", color="white", fontweight="bold")
    axes[2].set(xticks=[], title="the other job's 7.5 GiB")
    axes[0].invert_yaxis()
    fig.tight_layout()

    assert set(pays.index[failed]) == {"peermem", "dmabuf-pinned"}             # pinned in VRAM: the job pays
    assert pays["stall_ms"].idxmax() == "dmabuf" and pays.loc["dmabuf", "stall_ms"] > copy_ms   # evicted: the stream
    assert pays.drop("dmabuf")["stall_ms"].max() < 0.1 and pays.drop("dmabuf")["bw_lost_pct"].max() < 0.01
    assert pays["gpu_register_ms"].idxmax() == "dmabuf-no-move-notify"        # pinned into GTT: the registration
    """),
    md("""
    ## A job that keeps growing: `gpu_pressure.yaml`
    Here node b *reads* continuously from a 2 GiB buffer on node a's GPU (16 GiB usable) while, from 10 ms on, a
    training job allocates 1.5 GiB every 5 ms. With a pinned registration the job stops at its first failed
    allocation; with the dynamic one the exporter evicts the RDMA buffer once, which buys the job one more step.
    Because node a's NIC is the *responder*, the simulator answers its fault with RNR NAKs (a modelling choice,
    after mlx5's responder page faults on ODP MRs): the reader retries every `min_rnr_timer` (640 µs) until the
    mapping is back.
    """),
    code("""
    growth = run_variants("gpu_pressure.yaml")
    gtable = comparison_table(list(growth.values())).set_index("variant")
    print(gtable[["bw_avg_Gbps", "p50_us", "p99_9_us", "evictions", "refaults", "rnr_naks", "failed_allocations"]].to_string())

    steps = {name: int(((r.events["kind"] == "gpu-job-grows") & (r.events["outcome"] == "allocated")).sum())
             for name, r in growth.items()}
    print("job steps allocated before the first failure:", steps)
    assert steps["dmabuf"] == steps["peermem"] + 1 == steps["dmabuf-pinned"] + 1
    assert gtable.loc["dmabuf", "evictions"] == 1 and gtable.loc["dmabuf", "rnr_naks"] > 0
    assert gtable.loc["peermem", "rnr_naks"] == 0 and gtable.loc["peermem", "evictions"] == 0
    assert gtable.loc["dmabuf", "p99_9_us"] > 30_000               # a 2 GiB copy: tens of ms

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for (name, r), style in zip(growth.items(), ("--", "-", ":")):
        ev = event_times(r)
        grows = ev[ev["kind"] == "gpu-job-grows"]
        held = (grows["bytes"] * (grows["outcome"] == "allocated")).cumsum() / GiB
        line, = ax.step(grows["time_ms"], held, where="post", ls=style, lw=1.5, label=name)
        failed = grows[grows["outcome"] != "allocated"]
        ax.plot(failed["time_ms"], held[failed.index], "x", color=line.get_color(), ms=9)
    ax.set(xlabel="time since first post (ms)", ylabel="GiB held by the training job",
           title="gpu_pressure: the competing job's memory (x: first failed allocation)")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    """),
    md("""
    ## What you saw
    * Registrations pinned in VRAM (peer memory, and the pinned dma-buf importer amdgpu pins there) stream at
      line rate (397 Gb/s) with a flat latency tail and keep the buffer in VRAM: the competing 7.5 GiB
      allocation fails.
    * Without `CONFIG_DMABUF_MOVE_NOTIFY` the dynamic registration is pinned too, but amdgpu pins it into GTT:
      the registration copies the buffer out of VRAM (about 20 ms more), the stream reads host memory at the
      same line rate, and the allocation succeeds. Same bandwidth curve as peer memory, opposite outcome for
      the other job.
    * The dynamic dma-buf registration keeps nothing pinned on this dynamic (amd-like) exporter: the exporter
      evicts the buffer, the allocation succeeds, and the 16 writes in flight stall for the 1 GiB copy (19.4 ms)
      plus the zap before it and the re-map after it: p99 is unchanged, p99.9 is 21 ms, and average bandwidth
      drops to 299 Gb/s.
    * Who pays: the other job (pinned in VRAM), the registration (pinned into GTT: a 20 ms copy before the
      first write), or the stream (evicted: a 21 ms stall). Nothing is free.
    * After the eviction the stream continues at full rate from system memory.
    * With a growing job, the dynamic registration lets the job allocate one more 1.5 GiB step; on the
      responder side the re-fault shows up as RNR NAKs.

    Next: `05_pcie_efficiency.ipynb` looks at the link these bytes cross.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["05_pcie_efficiency.ipynb"] = [
    md("""
    # 05 — PCIe efficiency: the MPS sawtooth, reads vs. writes, generations and topology

    **What this notebook teaches.** Why a PCIe Gen5 x16 link that signals 64 GB/s delivers about 52 GB/s of DMA
    payload, why the bandwidth curve against transfer size is a sawtooth, why small DMA reads are slower than
    writes, which link generation a 400 Gb/s NIC needs, and what a GPU-to-NIC path costs through a PCIe switch,
    through the CPU's root complex, or across sockets. Numbers come from `models.pcie.closed_form` (the
    pcie-model formulas of Neugebauer et al., SIGCOMM'18), checked TLP by TLP against `models.pcie.tlp`, and from
    `models.pcie.topology`.

    **Predict before running.** Is a large DMA write more efficient with 128-byte or with 512-byte TLPs? Which
    needs more outstanding tags to fill the link, reads or writes?
    """),
    code("""
    from dataclasses import replace

    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from models.pcie import closed_form as cf
    from models.pcie.link import PcieParams

    GB = 1e9
    link = PcieParams()                 # Gen5 x16, MPS 256, MRRS 512, 64-bit addresses, 256 read tags, 550 ns reads
    print(f"raw rate per direction: {link.raw_Bps / GB:.2f} GB/s (16 lanes x 32 GT/s x 128/130 / 8)")
    print(f"left for TLPs after ACK/FC DLLPs and SKIPs: {link.tlp_Bps / GB:.2f} GB/s "
          f"({cf.dllp_overhead(5, 16, 256):.1%} overhead)")
    print(f"MWr TLP: 256 B payload + {cf.request_overhead(True, False)} B (8 framing + 16 header); "
          f"CplD: + {cf.completion_overhead(False)} B (8 framing + 12 header)")
    assert abs(link.raw_Bps / (16 * 32e9 * 128 / 130 / 8) - 1) < 1e-12
    assert cf.request_overhead(True, False) == 24 and cf.completion_overhead(False) == 20
    """),
    md("""
    (The DLLP share follows pcie-model, which reads the spec's ACK-interval tables, given in symbol times, as
    bytes; the module docstring explains why this is kept to agree with the published anchors.)

    ## The MPS sawtooth
    A DMA write is cut into MWr TLPs of at most MPS (max payload size) bytes, each carrying 24 B of framing and
    header. Transfers of exactly k × MPS bytes fill every TLP; one byte more needs a whole extra TLP for that
    byte, so efficiency drops and recovers until the next multiple.
    """),
    code("""
    sizes = np.arange(1, 2049)
    fig, ax = plt.subplots(figsize=(10, 4))
    for mps in (128, 256, 512):
        p = replace(link, mps=mps)
        ax.plot(sizes, [cf.write_Bps(p, int(n)) / GB for n in sizes], lw=1, label=f"MPS {mps}")
    ax.set(xlabel="DMA write size (bytes)", ylabel="payload bandwidth (GB/s)", title="Gen5 x16: DMA writes by MPS",
           xticks=range(0, 2049, 256), ylim=(0, None))
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()

    for mps in (128, 256, 512):
        p = replace(link, mps=mps)
        for edge in range(mps, 4096, mps):
            assert cf.write_Bps(p, edge + 1) < cf.write_Bps(p, edge)       # one byte more: one more TLP
        plateau = cf.write_Bps(p, 4096)
        assert abs(plateau / (p.tlp_Bps * mps / (mps + 24)) - 1) < 1e-12
        print(f"MPS {mps}: 4 KiB writes at {plateau / GB:.2f} GB/s = TLP rate x {mps}/{mps + 24}; "
              f"{mps + 1} B writes at {cf.write_Bps(p, mps + 1) / GB:.2f} GB/s")
    """),
    md("""
    ## Reads vs. writes
    Writes are *posted*: the NIC sends them and forgets them. Reads are *non-posted*: each MRd request (up to
    MRRS bytes) holds one of 256 tags until its completions come back, about 550 ns later. So small reads are
    limited by Little's law, tags × size / round trip, well below the link; large reads are link-bound, and then
    slightly *faster* than writes, because the data travels in CplD TLPs whose header is 12 B, not 16 B.
    """),
    code("""
    sizes = np.arange(8, 4097, 8)
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(sizes, [cf.write_Bps(link, int(n)) / GB for n in sizes], lw=1, label="write")
    ax.plot(sizes, [cf.read_Bps(link, int(n)) / GB for n in sizes], lw=1, label="read (256 tags, 550 ns)")
    ax.plot(sizes, [cf.read_link_Bps(link, int(n)) / GB for n in sizes], lw=0.8, ls=":", label="read, unlimited tags")
    ax.set(xlabel="DMA size (bytes)", ylabel="payload bandwidth (GB/s)", title="Gen5 x16, MPS 256, MRRS 512",
           ylim=(0, None), xticks=range(0, 4097, 512))
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()

    round_trip_s = (24 + 64 + 20) / link.tlp_Bps + link.read_latency_ps * 1e-12   # MRd + latency + CplD
    little = 256 * 64 / round_trip_s
    print(f"64 B: write {cf.write_Bps(link, 64) / GB:.1f} GB/s, read {cf.read_Bps(link, 64) / GB:.1f} GB/s "
          f"(256 tags x 64 B / {round_trip_s * 1e9:.0f} ns = {little / GB:.1f} GB/s)")
    print(f"4 KiB: write {cf.write_Bps(link, 4096) / GB:.2f} GB/s, read {cf.read_Bps(link, 4096) / GB:.2f} GB/s")
    assert cf.read_Bps(link, 64) < 0.75 * cf.write_Bps(link, 64)
    assert abs(cf.read_Bps(link, 64) / little - 1) < 1e-9
    assert abs(cf.read_Bps(link, 4096) / cf.write_Bps(link, 4096) - (4096 + 16 * 24) / (4096 + 16 * 20)) < 1e-9
    """),
    md("""
    ### The closed form against a TLP-by-TLP simulation
    `models.pcie.tlp.simulate_stream` cuts each transfer into TLPs by the spec's rules, sends them on two link
    directions with ACK/FC DLLPs and SKIPs interleaved, holds a tag per read request, and measures the steady
    state. The two agree within 0.1 % at every power of two and its neighbours up to 4 KiB.
    """),
    code("""
    from models.pcie.tlp import simulate_stream

    check = sorted({n for k in range(13) for n in (2**k - 1, 2**k, 2**k + 1) if 1 <= n <= 4096})
    rows = []
    for op, closed in (("write", cf.write_Bps), ("read", cf.read_Bps)):
        for n in check:
            sim = simulate_stream(link, op, n)
            rows.append({"op": op, "bytes": n, "closed_GBps": closed(link, n) / GB, "tlp_GBps": sim.Bps / GB,
                         "tlps": sim.up_tlps + sim.down_tlps})
    agreement = pd.DataFrame(rows)
    agreement["rel_diff"] = (agreement["tlp_GBps"] / agreement["closed_GBps"] - 1).abs()
    print(agreement.sort_values("rel_diff").tail(5).to_string(index=False))
    assert agreement["rel_diff"].max() < 1e-3
    """),
    md("""
    ### Tags in the event engine
    The event engine moves whole messages, not TLPs, so it holds the tags as a pool (`models.pcie.link.read_tags`):
    a read occupies it for its requests' summed round trips / tags, and at least as long as its completions
    take on the link. Streaming reads through the engine's stages traces Little's law: bandwidth grows with
    the tags until the link is the limit, and a longer round trip needs proportionally more tags.
    """),
    code("""
    from models.nic.stages import dma_read_stream_Bps

    counts = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for latency_ns in (550, 2000):
        p = replace(link, read_latency_ps=latency_ns * 1000)
        engine = [dma_read_stream_Bps(replace(p, read_tags=t), 4096) / GB for t in counts]
        tlp = [simulate_stream(replace(p, read_tags=t), "read", 4096).Bps / GB for t in counts]
        ax.plot(counts, engine, marker="o", label=f"event engine, {latency_ns} ns")
        ax.plot(counts, tlp, ls=":", color="black", lw=0.8)
        assert max(abs(e / t - 1) for e, t in zip(engine, tlp)) < 0.01   # the pool vs tag-by-tag: within 1 %
        print(f"{latency_ns} ns: " + ", ".join(f"{t} tags {e:.1f}" for t, e in zip(counts, engine)) + " GB/s")
    ax.set(xscale="log", xticks=counts, xticklabels=counts, xlabel="read tags", ylabel="4 KiB DMA reads (GB/s)",
           title="Read bandwidth vs. tags (dotted: TLP-by-TLP)", ylim=(0, None))
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    """),
    md("""
    ## Generations: what a 400 Gb/s NIC needs
    A 400 Gb/s port moves 50 GB/s. Each PCIe generation doubles the transfer rate per lane; Gen3 also changed
    the line code from 8b/10b to 128b/130b, and Gen6 moves to FLIT mode (242/256 here, as pcie-model has it).
    """),
    code("""
    rows = []
    for gen in cf.GT_PER_S:
        p = replace(link, gen=gen)
        rows.append({"gen": gen, "GT/s": cf.GT_PER_S[gen], "encoding": round(cf.ENCODING[gen], 4),
                     "raw_GBps": p.raw_Bps / GB, "tlp_GBps": p.tlp_Bps / GB,
                     "write_4KiB_GBps": cf.write_Bps(p, 4096) / GB, "read_4KiB_GBps": cf.read_Bps(p, 4096) / GB})
    gens = pd.DataFrame(rows).set_index("gen")
    print(gens.round(2).to_string())

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(gens.index - 0.2, gens["raw_GBps"], width=0.4, label="raw")
    ax.bar(gens.index + 0.2, gens["write_4KiB_GBps"], width=0.4, label="4 KiB DMA writes")
    ax.axhline(50, color="red", ls=":", lw=1)
    ax.text(0.6, 53, "400 Gb/s = 50 GB/s", color="red", fontsize=8)
    ax.set(xlabel="PCIe generation (x16)", ylabel="GB/s per direction", title="x16 links by generation")
    ax.legend(fontsize=8)
    fig.tight_layout()

    assert gens["raw_GBps"].is_monotonic_increasing and gens["write_4KiB_GBps"].is_monotonic_increasing
    assert gens.loc[4, "write_4KiB_GBps"] < 50 < gens.loc[5, "write_4KiB_GBps"]      # 400 Gb/s needs Gen5 x16
    assert abs(gens.loc[3, "raw_GBps"] / gens.loc[2, "raw_GBps"] - 1.6 * (128 / 130) / 0.8) < 1e-12
    """),
    md("""
    ## Topology: where the GPU sits relative to the NIC
    `models.pcie.topology.build_topology` builds a two-socket host with `nic0` and `gpu0` under one PCIe switch, on
    two root ports of one CPU, or on different sockets. `dma_path` gives the bandwidth of back-to-back 1 MiB DMAs
    from the NIC (the slowest hop) and their latency (the sum of the hops' delays). A switch forwards
    peer-to-peer at link rate but adds 110 ns each way (so the NIC's reads of host memory behind it take 770
    instead of 550 ns); a root complex forwards P2P at 0.46× the link rate (fitted to perftest issue #241);
    Intel client root complexes do not forward P2P reads at all.
    """),
    code("""
    from models.pcie.topology import LAYOUTS, RootComplexParams, build_topology, dma_path

    rows = []
    graphs = {layout: build_topology(layout) for layout in LAYOUTS}
    graphs["intel_client"] = build_topology("root_complex", root=RootComplexParams(p2p_read_supported=False))
    for layout, g in graphs.items():
        for target in ("gpu0", "mem0"):
            path = dma_path(g, "nic0", target, 1 << 20)
            rows.append({"layout": layout, "target": target, "p2p": path.p2p, "write_GBps": path.write_Bps / GB,
                         "read_GBps": path.read_Bps / GB,
                         "read_latency_ns": None if path.read_latency_ps is None else path.read_latency_ps / 1000,
                         "write_latency_ns": path.write_latency_ps / 1000})
    topo = pd.DataFrame(rows).set_index(["layout", "target"])
    print(topo.round(2).to_string())

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
    to_gpu = topo.xs("gpu0", level="target")
    left.bar(to_gpu.index, to_gpu["write_GBps"])
    left.set(ylabel="GB/s", title="NIC -> GPU DMA writes, 1 MiB")
    right.bar(to_gpu.index, to_gpu["read_latency_ns"].fillna(0))
    right.set(ylabel="ns", title="NIC reads GPU memory: latency (0 = refused)")
    fig.tight_layout()

    one_link = link.write_efficiency(1 << 20)
    assert abs(topo.loc[("switch", "gpu0"), "write_GBps"] * GB / one_link - 1) < 1e-6
    assert abs(topo.loc[("root_complex", "gpu0"), "write_GBps"] * GB / one_link - 0.46) < 1e-6
    assert topo.loc[("cross_socket", "gpu0"), "read_latency_ns"] == topo.xs("gpu0", level="target")["read_latency_ns"].max()
    assert topo.loc[("intel_client", "gpu0"), "read_GBps"] == 0 and topo.loc[("intel_client", "gpu0"), "write_GBps"] > 0
    assert topo.loc[("root_complex", "mem0"), "read_latency_ns"] == 550      # host memory: the link's round trip
    """),
    md("""
    ## What you saw
    * Gen5 x16 signals 63.0 GB/s per direction; after DLLPs 56.9 GB/s carry TLPs, and 4 KiB DMA writes with
      MPS 256 deliver 52.0 GB/s (256 of every 280 bytes are payload).
    * Bandwidth against size is a sawtooth with a tooth at every multiple of MPS: one byte past it costs a
      whole extra TLP. A larger MPS raises the plateau (MPS 512: 54.8 GB/s; MPS 128: 47.0 GB/s).
    * Small reads are tag-bound: 64 B reads reach 29.7 GB/s (256 tags × 64 B / 552 ns) against 41.3 GB/s for
      writes; large reads slightly beat writes (52.7 vs 52.0 GB/s) thanks to 12 B completion headers.
    * The closed form and the TLP-level simulation agree within 0.1 %.
    * A 400 Gb/s NIC needs Gen5 x16 (Gen4 x16 gives 26 GB/s).
    * GPU and NIC under one switch: P2P at link rate. Through the CPU: 0.46× (23.9 GB/s for 1 MiB writes);
      across sockets also the highest latency (1.05 µs per read); some client CPUs refuse P2P reads.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["06_why_move_notify_exists.ipynb"] = [
    md("""
    # 06 — Why `move_notify` exists: a broken importer caught in the act

    **What this notebook teaches.** What goes wrong if a NIC ignores `move_notify` and keeps using its old
    translations after the GPU's exporter moved a buffer: it reads (or writes) VRAM that now belongs to someone
    else. rdmasim's *data mode* (`data: true`) moves real bytes through RDMA and evictions, so we can see the
    stale bytes arrive; `invariants: record` counts each unsafe DMA instead of stopping, and `invariants: raise`
    stops at the first one with an `InvariantViolation`. The NIC option `ignore_move_notify: true` builds the
    deliberately broken importer (teaching only).

    **Predict before running.** An importer ignores `move_notify`. Is its stream faster or slower than a
    correct importer's, and which bytes reach node b?
    """),
    code("""
    import numpy as np
    import pandas as pd

    from models.dmabuf.gpu_export import NEW_OWNER_BYTE
    from sim.core import InvariantViolation
    from sim.engine.run import run_scenario
    from sim.scenario.schema import Scenario

    MiB = 1 << 20


    def scenario(kind="write_bw", broken=False, invariants="record"):
        \"\"\"Node a's GPU (MI300X-class, dynamic exporter, 8 GiB) holds a 16 MiB buffer registered with
        ibv_reg_dmabuf_mr; 600 transfers of 1 MiB move between it and node b's host memory while, 2 ms in,
        another job allocates 8180 MiB and forces the buffer out of VRAM.\"\"\"
        return Scenario.model_validate({
            "schema": 1, "name": "move-notify", "seed": 11, "data": True, "invariants": invariants,
            "nodes": [{"name": "a", "gpus": [{"preset": "mi300x", "memory": "8GiB"}],
                       "kernel": {"dmabuf_move_notify": True}, "nic": {"ignore_move_notify": broken}},
                      {"name": "b"}],
            "buffers": [{"name": "gpu", "on": "a.gpu0", "size": "16MiB", "register": "dmabuf"},
                        {"name": "host", "on": "b.host", "size": "16MiB"}],
            "workload": [{"kind": kind, "from": "gpu", "to": "host", "sizes": ["1MiB"], "iterations": 600,
                          "tx_depth": 8}],
            "events": [{"at": "2ms", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "8180MiB"}]})


    correct = run_scenario(scenario())
    broken = run_scenario(scenario(broken=True))
    counters = pd.DataFrame({"correct importer": correct.counters, "ignores move_notify": broken.counters})
    counters
    """),
    md("""
    Drawn from their traces (`sim.inspect.diagram.draw`), the first memory event of both runs: the exporter notifies both
    importers under the reservation lock, but only the correct one zaps its translation (the UMR on the NIC's
    lane), unmaps, faults on its next access and re-maps after the copy's fence; the broken one's kernel WARNs and
    its NIC carries on through the old translation: its stale accesses are the red dots on the NIC's lane.
    """),
    code("""
    from sim.inspect.diagram import draw
    from sim.inspect.timeline import sections

    for label, broken_nic in (("correct importer", False), ("ignores move_notify", True)):
        traced = run_scenario(scenario(broken=broken_nic), trace=True)
        first_event = sections(traced.testbed)[-1]
        names = {entry.event.name for entry in first_event.entries}
        assert "MappingInvalidated" in names and ("MappingRestored" in names) == (not broken_nic)
        assert ("PageFaulted" in names) == (not broken_nic) and ("KernelWarned" in names) == broken_nic
        assert ("StaleAccess" in names) == broken_nic and ("mlx5r_umr_update_mr_pas" in names) == (not broken_nic)
        draw(traced.testbed, [first_event], f"{label}: the first memory event");
    """),
    md("""
    Both runs write the GPU buffer's first MiB to node b 600 times (`write_bw`: the NIC on node a *reads* the GPU
    buffer), and both see the same eviction at 2 ms. At the end the run compares the destination's bytes with
    the source's *true* contents (wherever the exporter keeps them now).
    """),
    code("""
    c, b = correct.counters, broken.counters
    assert c["evictions"] == b["evictions"] == 1
    assert c["invalidations"] == 1 and c["refaults"] == 1
    assert c["invariant_violations"] == 0 and c["data_mismatched_bytes"] == 0
    assert b["invalidations"] == 0 and b["refaults"] == 0        # it never dropped its translation
    assert b["invariant_violations"] > 0 and b["data_mismatched_bytes"] > 0.99 * c["data_checked_bytes"] * 255 / 256


    def first_bytes(result, name, n=16):
        return " ".join(f"{x:02x}" for x in result.testbed.registrations[name].current_bytes()[:n])


    for label, result in (("correct", correct), ("broken", broken)):
        print(f"{label:<8} source (GPU buffer): {first_bytes(result, 'gpu')}")
        print(f"{label:<8} delivered (node b):  {first_bytes(result, 'host')}")
    delivered = broken.testbed.registrations["host"].current_bytes()[:MiB]
    share = np.count_nonzero(delivered == NEW_OWNER_BYTE) / MiB
    print(f"broken: {share:.1%} of the delivered MiB is 0x{NEW_OWNER_BYTE:X}, the new owner's data")
    assert share > 0.99
    """),
    md("""
    The correct importer's destination equals the source byte for byte. The broken importer delivered 0xEE
    bytes: after the eviction the exporter copied the buffer to system memory and handed its old VRAM to the job
    that asked for memory, which wrote its own data there (the model fills it with 0xEE so that stale reads are
    recognisable). The NIC, still translating through the old mapping, read that job's memory and sent it to
    another machine — a silent data leak. (`data_mismatched_bytes` is slightly below 1 MiB only because 1 in
    256 random source bytes happens to be 0xEE.)

    The kernel's log shows why: the importer was told and did nothing.
    """),
    code("""
    warnings = [w for node in broken.testbed.nodes.values() for w in node.kernel.warnings]
    violations = broken.testbed.registrations["gpu"].mr.backing.violations
    print("kernel warning:", warnings[0])
    print(f"{len(violations)} unsafe DMAs recorded; the first:", violations[0])
    assert any("deliberately broken" in w for w in warnings) and "stale mapping" in violations[0]
    assert len(violations) == b["invariant_violations"]
    """),
    md("""
    ## The other direction: corrupting someone else's memory
    With `read_bw` the NIC on node a *writes* into the GPU buffer (it reads node b's host memory into it). A
    broken importer then writes into VRAM that belongs to the other job. Here the destination check even
    passes — the evicted copy already held the right bytes — but the other job's memory (the old VRAM, which it
    had filled with 0xEE) has been overwritten. Only the invariant counter tells.
    """),
    code("""
    for broken_nic in (False, True):
        result = run_scenario(scenario(kind="read_bw", broken=broken_nic))
        exporter = result.testbed.registrations["gpu"].allocation.exporter
        old_vram = exporter.storage[0]                     # generation 0: the VRAM the buffer left
        overwritten = int(np.count_nonzero(old_vram != NEW_OWNER_BYTE))
        print(f"{'broken' if broken_nic else 'correct':<8} mismatched bytes {result.counters['data_mismatched_bytes']:>8}, "
              f"violations {result.counters['invariant_violations']:>4}, new owner's bytes overwritten {overwritten:>8}")
        assert result.counters["data_mismatched_bytes"] == 0
        if broken_nic:
            assert overwritten > 0.99 * MiB and result.counters["invariant_violations"] > 0
        else:
            assert overwritten == 0 and result.counters["invariant_violations"] == 0
    """),
    md("""
    ## `invariants: raise`: stop at the first unsafe DMA
    The default. The run stops with an `InvariantViolation` that names the device, the dma-buf, the placement
    generation the mapping was made for and where the buffer is now.
    """),
    code("""
    try:
        run_scenario(scenario(broken=True, invariants="raise"))
        raise AssertionError("the broken importer was not stopped")
    except InvariantViolation as err:
        message = str(err)
    print(message)
    assert "stale mapping" in message and "generation 0 (VRAM)" in message and "generation 1 (SYSTEM)" in message
    assert "re-map after move_notify" in message
    """),
    md("""
    ## What you saw
    * A correct dynamic importer drops its translation on `move_notify` (1 invalidation), faults once
      afterwards (1 re-fault) and delivers exactly the source bytes (0 mismatched, 0 violations).
    * An importer that ignores `move_notify` keeps DMA-ing through the old VRAM: reads leak the new owner's data
      (over 99 % of the delivered MiB is 0xEE), writes corrupt the new owner's memory even when the
      destination check passes. Hundreds of unsafe DMAs are recorded, none noticed by the data path.
    * With `invariants: raise` the simulator stops at the first one: "stale mapping: made for placement
      generation 0 (VRAM), the buffer moved to generation 1 (SYSTEM)".

    This is why a dynamic exporter may only move a buffer after notifying every importer under the reservation
    lock, and why kernels without `CONFIG_DMABUF_MOVE_NOTIFY` pin dynamic importers' buffers instead.
    """),
]


# --------------------------------------------------------------------------------------------------------------
NOTEBOOKS["07_design_space_sweeps.ipynb"] = [
    md("""
    # 07 — Design-space sweeps: message size × registration mode

    **What this notebook teaches.** How to explore a design space with a sweep file instead of one scenario:
    `scenarios/sweeps/msg_size_x_mode.yaml` runs the `pin_vs_dmabuf` scenario for every registration mode
    (its variants) and three message sizes, with fixed seeds. We plan it, run it with `sim.sweep.run_sweep`
    (serial executor, into a temporary directory), read its summary table, and draw a heatmap and a mode
    comparison with `sim.plot.recipes.plot`.

    **Predict before running.** Three message sizes times three registration modes, and memory pressure 2 ms
    into each run: which of the nine runs will notice it?
    """),
    code("""
    import shutil
    import tempfile
    from pathlib import Path

    import pandas as pd
    from IPython.display import Image, display

    from sim.sweep import load_sweep, read_table, run_sweep

    SWEEP = Path("..") / "scenarios" / "sweeps" / "msg_size_x_mode.yaml"
    print(SWEEP.read_text())
    plan = load_sweep(SWEEP)
    runs = pd.DataFrame([{"run": r.index, "variant": r.variant, **r.axes, "seed": r.seed, "key": r.key}
                         for r in plan.runs])
    print(runs.to_string(index=False))
    assert plan.axes == ["variant", "workload.stream.sizes.0"] and len(plan.runs) == 9
    assert runs["seed"].nunique() == 1        # one repetition: every point shares its random streams
    """),
    md("""
    The sweep shrinks the base scenario (600 writes per run, the 7.5 GiB allocation at 2 ms, held 4 ms), then
    crosses the base file's first three variants with three message sizes: 9 runs, each planned and validated
    before anything runs.
    """),
    code("""
    workdir = Path(tempfile.mkdtemp(prefix="rdmasim-sweep-"))
    out = workdir / "results"
    result = run_sweep(SWEEP, out, executor="serial", progress=False)
    table = result.table
    print(f"ran {result.ran}, skipped {result.skipped}, failed {result.failed}; files: "
          f"{sorted(p.name for p in out.iterdir())}, {len(list((out / 'runs').iterdir()))} run partitions")
    columns = ["variant", "bytes", "bw_avg_Gbps", "p50_us", "p99_9_us", "register_us", "pinned_bytes",
               "evictions", "refaults", "failed_allocations"]
    table[columns]
    """),
    code("""
    assert (result.ran, result.skipped, result.failed) == (9, 0, 0) and (table["status"] == "ok").all()
    bw = table.pivot(index="variant", columns="bytes", values="bw_avg_Gbps")
    print("average bandwidth (Gb/s):")
    print(bw.round(1).to_string())

    one_mib = table[table["bytes"] == 1 << 20].set_index("variant")
    assert one_mib.loc["dmabuf", "evictions"] == 1 and one_mib.loc["dmabuf", "refaults"] == 1
    assert one_mib.loc["peermem", "failed_allocations"] == one_mib.loc["dmabuf-pinned", "failed_allocations"] == 1
    assert bw.loc["dmabuf", 1 << 20] < 0.5 * bw.loc["peermem", 1 << 20]
    for size in (4096, 65536):             # 600 writes end long before the 2 ms event: the modes tie
        assert bw[size].nunique() == 1 and (table.loc[table["bytes"] == size, "evictions"] == 0).all()
    assert bw.loc["peermem", 65536] > 1.5 * bw.loc["peermem", 4096]     # 4 KiB: message-rate bound
    assert one_mib.loc["dmabuf", "pinned_bytes"] < one_mib.loc["dmabuf-pinned", "pinned_bytes"]
    """),
    md("""
    Only the 1 MiB runs last long enough (about 12 ms) to meet the memory pressure at 2 ms, so only they differ
    between modes: the dynamic registration is evicted and averages less than half the pinned modes' bandwidth
    over this short run, while the pinned modes make the other job's allocation fail. At 4 KiB and 64 KiB the
    three modes give identical results — a reminder that a sweep answers only what its runs can see.

    ## Figures by recipe
    `plot(results_dir, recipe)` writes PNG, PDF and the CSV of the plotted numbers. A `heatmap` averages a
    metric over two axes (default: the sweep's first two, and average bandwidth); `mode_comparison` compares like
    with like: bandwidth and p99.9 latency per variant for each workload kind and message size, then registration
    time, pinned memory and the competing job's failed allocations per variant. (The recipes draw off-screen, so
    we display the PNG files they write.)
    """),
    code("""
    from sim.plot.recipes import plot

    figures = workdir / "figures"
    bw_map = plot(out, "heatmap", figures)
    tail_map = plot(out, "heatmap", figures, metric="p99_9_us")
    modes = plot(out, "mode_comparison", figures)
    for paths in (bw_map, tail_map, modes):
        display(Image(filename=str(paths[0])))
    print([p.name for p in bw_map + tail_map + modes])
    """),
    code("""
    grid = pd.read_csv(bw_map[2])
    print(grid.to_string(index=False))
    merged = grid.merge(table[["variant", "workload.stream.sizes.0", "bw_avg_Gbps"]],
                        on=["variant", "workload.stream.sizes.0"], suffixes=("_plotted", "_table"))
    assert len(merged) == 9 and (merged["bw_avg_Gbps_plotted"] - merged["bw_avg_Gbps_table"]).abs().max() < 1e-9
    bars = pd.read_csv(modes[2])
    per_case = bars.merge(table[["variant", "kind", "bytes", "bw_avg_Gbps"]], on=["variant", "kind", "bytes"],
                          suffixes=("_plotted", "_table"))
    assert len(per_case) == 9 and (per_case["bw_avg_Gbps_plotted"] - per_case["bw_avg_Gbps_table"]).abs().max() < 1e-9
    costs = bars.drop_duplicates("variant").set_index("variant")
    assert costs.loc["dmabuf", "pinned_GiB"] == 1 and costs.loc["peermem", "pinned_GiB"] == 2
    """),
    md("""
    ## Results on disk, and resuming
    Each run's rows are stored as soon as it finishes (`runs/<key>.parquet`), and `summary.parquet` /
    `summary.csv` when the sweep ends, so `read_table` reads the same table back, and running the sweep again
    into the same directory simulates nothing.
    """),
    code("""
    pd.testing.assert_frame_equal(read_table(out), table)
    again = run_sweep(SWEEP, out, executor="serial", progress=False)
    print(f"second call: ran {again.ran}, skipped {again.skipped}")
    assert (again.ran, again.skipped) == (0, 9)
    pd.testing.assert_frame_equal(again.table, table)
    shutil.rmtree(workdir)
    """),
    md("""
    ## What you saw
    * A sweep file names a base scenario, fixed overrides (`set`) and axes (`grid`); `load_sweep` expands and
      validates every run with its seed before anything runs.
    * `run_sweep` stores one row per run and message size with perftest's columns, latency percentiles,
      registration time, pinned bytes and the protocol counters; a second call resumes (here: skips all 9).
    * Only the 1 MiB runs see the memory pressure: the dynamic dma-buf MR is evicted once and its bandwidth
      halves, the pinned modes keep their bandwidth and make the allocation fail.
    * `sim.plot.recipes.plot` draws a heatmap of any metric over two axes and a per-mode comparison, each with
      the CSV of the numbers it plots.
    """),
]


def cell_id(name: str, index: int) -> str:
    """A stable cell id: the same notebook and position give the same id."""
    return hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:8]


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """The notebook ``name`` from its (kind, source) cells, without outputs."""
    nb = new_notebook()
    for index, (kind, source) in enumerate(cells):
        cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
        cell["id"] = cell_id(name, index)
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.validate(nb)
    return nb


TIMEOUT_S = 600
"""Longest a cell may run (seconds)."""


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` run top to bottom in a fresh python3 kernel in ``notebooks/``, with its outputs in a stable form.

    :raises nbclient.exceptions.CellExecutionError: a cell raised (an assertion of the notebook failed).
    """
    NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(HERE)}},
                   record_timing=False).execute(env={**os.environ, "PYTHONHASHSEED": "0"})
    nb.metadata.pop("language_info", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    nbformat.validate(nb)
    return nb


def merge_streams(outputs: list) -> list:
    """``outputs`` with all the text a cell wrote to one stream joined into one output, stdout's before stderr's, where
    the first of them was: how the kernel cut the text into messages, and when each stream was flushed relative
    to the other, is timing, not content."""
    merged: list = []
    streams: dict = {}
    for output in outputs:
        if output.output_type != "stream":
            merged.append(output)
        elif not streams:
            streams[output.name] = output
            merged.append(streams)  # where the streams go, once all are joined
        elif output.name in streams:
            streams[output.name].text += output.text
        else:
            streams[output.name] = output
    at = next((i for i, item in enumerate(merged) if item is streams), None)
    if at is not None:
        merged[at:at + 1] = [streams[name] for name in ("stdout", "stderr") if name in streams]
    return merged


def text(name: str) -> str:
    """The file content of notebook ``name``: built, run, serialized (ending in a newline)."""
    return nbformat.writes(execute(build(name, NOTEBOOKS[name]))) + "\n"


def main() -> None:
    """Write every notebook, with its outputs, next to this script."""
    for name in NOTEBOOKS:
        (HERE / name).write_text(text(name))
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()

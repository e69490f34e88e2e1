# %% [markdown]
# # 03 — GPU memory and dma-buf: export, `ibv_reg_dmabuf_mr`, attach, map and `move_notify`
#
# **What this notebook teaches.** How GPU memory reaches an RDMA NIC without `pin_user_pages`: the GPU driver
# *exports* a range of VRAM as a dma-buf file descriptor (`cuMemGetHandleForAddressRange`, with NVIDIA's rules
# as measured on an H200), the NIC driver *imports* it with `ibv_reg_dmabuf_mr` (which checks its arguments in
# the kernel's order), and the dma-buf core links the two: attach, map under the reservation lock, and
# `move_notify` when the exporter wants to move the buffer. We end with the protocol timeline of a whole run
# printed by `sim.inspect.explain.explain`.
#
# **Predict before running.** Does exporting an 8 GiB allocation as a dma-buf take longer than exporting 2
# MiB? Does registering the dma-buf pin any host page?

# %%
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
    """Node 'a': an mlx5-like NIC (dynamic dma-buf MRs by default), a kernel, and an H200 'a.gpu0'."""
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

# %% [markdown]
# ## NVIDIA's export rules, replayed against the H200 measurement
# `models/data/h200_dmabuf_export.json` records what `cuMemGetHandleForAddressRange` returned for ranges of a
# 64 MiB `cudaMalloc` allocation on an H200 (driver 580). The model's rules: start and size nonzero multiples
# of 4 KiB, inside one allocation, flags 0, and driver 515+ (open kernel modules). We replay every case on
# our 64 MiB allocation and compare results. (The measured "host pointer" case has no counterpart here: a
# host address is not a range of a device allocation.)

# %%
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

# %%
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

# %% [markdown]
# Exporting costs the same ~20 µs for 2 MiB and 8 GiB: no page is touched or pinned; the exporter only
# creates a file that stands for the range (the model charges 18 µs of driver time plus the dma-buf core's
# `dma_buf_export` and `dma_buf_fd`, 2.2 µs; the H200 measured 17–18 µs).
#
# ## `ibv_reg_dmabuf_mr`: registering the fd
# The NIC driver takes a reference on the dma-buf behind the fd, attaches to it *dynamically* (it promises to
# handle `move_notify`), maps it under the reservation lock, waits for the exporter's fences and writes the
# NIC's translation table. Nothing is charged to `RLIMIT_MEMLOCK`, and rdma-core sets `mr.addr` to the
# *offset* in the dma-buf, while the keys are used with the `iova` the caller chose.

# %%
from models.verbs.dmabuf import ibv_reg_dmabuf_mr

mr = ibv_reg_dmabuf_mr(pd_, 0, 64 * MiB, alloc.addr, fd, RW)
print(f"mr_type {mr.mr_type}, addr (offset) {mr.addr}, iova 0x{mr.iova:x}, lkey 0x{mr.lkey:x}, "
      f"mode {mr.backing.mode}, registration {mr.reg_ps / PS_PER_US:.1f} us")
print(f"host pages pinned: {node.host.pinned_pages}; dma-buf references: {dmabuf.refcount} (the fd's and the MR's)")

assert mr.mr_type == "DMABUF_MR" and mr.addr == 0 and mr.iova == alloc.addr
# nothing pinned in host memory; the buffer still never moves, because NVIDIA's exporter is static
assert node.host.pinned_pages == 0 and mr.backing.pinned_bytes == 64 * MiB
assert mr.backing.translation_valid and dmabuf.refcount == 2

# %% [markdown]
# ### The order of checks
# The kernel checks one rule after another and returns the first errno it hits, so a call that breaks two
# rules reports the earlier one. Each row below breaks the rule named first, and most also a later one (a
# bad fd, a range past the buffer): the errno shows which check ran first. Order: rdma-core and kernel
# versions → driver support → page offsets of `offset` and `iova` → allowed access bits → `REMOTE_WRITE` needs
# `LOCAL_WRITE` → mlx5 needs ODP for dynamic MRs → `ib_umem_dmabuf_get` (the fd, then the range).

# %%
BAD_FD = 99


def reg_errno(pd_, exported_fd, **kw):
    args = {"offset": 0, "length": 64 * MiB, "iova": 0x10000, "fd": exported_fd, "access": RW} | kw
    try:
        ibv_reg_dmabuf_mr(pd_, **args)
        return "ok", ""
    except VerbsError as err:
        return err.errno, err.rule


def fresh(**node_kw):
    """A new node with a 64 MiB allocation exported as an fd."""
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

# %% [markdown]
# ## Underneath: attach, map under the lock, `move_notify`
# NVIDIA's exporter is static, so its buffers never move. A *dynamic* exporter (amdgpu-like, `vendor="amd"`
# in the scenarios, `MovableExporter` here) may move a buffer between VRAM and system memory whenever nobody
# pins it. The contract, with the calls of `models.dmabuf` (kernel names):
#
# 1. the importer attaches with `dma_buf_dynamic_attach` and a `move_notify` callback;
# 2. it maps with `dma_buf_map_attachment` **while holding the buffer's reservation lock**;
# 3. before moving, the exporter takes the lock and calls `move_notify`: the importer must stop using
#    (and here unmaps) its mapping;
# 4. the importer maps again later and must not DMA before the exporter's copy fence has signaled.
#
# `check_dma` is the invariant the simulated NIC checks on every access.

# %%
from models.dmabuf import (DmaBufAttachOps, MovableExporter, Placement, check_dma, dma_buf_attach,
                           dma_buf_dynamic_attach, dma_buf_map_attachment, dma_buf_map_attachment_unlocked,
                           dma_buf_pin, dma_buf_unmap_attachment)
from sim.core import InvariantViolation, ProtocolError

def raises(kind, call, *args, **kwargs):
    """Call ``call``; it must raise ``kind``, which is printed and returned."""
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
    """A correct importer: runs under the exporter's lock, drops its mappings."""
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

# %% [markdown]
# Two ways to keep a buffer in place, both of which make the exporter's move fail with `EBUSY`: an explicit
# `dma_buf_pin` by a dynamic importer (what the pinned dma-buf importers of EFA or mlx5 data-direct do), and a
# *static* importer (`dma_buf_attach`, no `move_notify`), whose map pins the buffer implicitly.

# %%
amd.dmabuf.resv.lock("a.nic")
dma_buf_pin(attach)
amd.dmabuf.resv.unlock("a.nic")
assert raises(VerbsError, amd.move, Placement.VRAM).errno == "EBUSY"

other = MovableExporter(core, 2 * MiB, name="a.gpu2")
static = dma_buf_attach(other.dmabuf, "ahci0")
mapping = dma_buf_map_attachment_unlocked(static)
print(f"static importer's mapping pinned on map: {mapping.pinned_on_map}")
assert mapping.pinned_on_map and raises(VerbsError, other.move, Placement.SYSTEM).errno == "EBUSY"

# %% [markdown]
# ## The whole protocol in one run: `sim.inspect.explain`
# `scenarios/pin_vs_dmabuf.yaml` streams RDMA WRITEs out of a 1 GiB buffer on an MI300X-class GPU (dynamic
# exporter, 8 GiB usable) while, 20 ms in, another job allocates 7.5 GiB. Its `dmabuf` variant registers the
# buffer with `ibv_reg_dmabuf_mr`. With `trace=True` the run records every call; `explain` prints each
# registration and the first memory event, each line with the simulated time (µs) and the acting component;
# calls made inside a call or under a lock are indented right, and each outcome says why.

# %%
from sim.inspect.explain import explain
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants

_, _, variants = load_scenario_variants(Path("..") / "scenarios" / "pin_vs_dmabuf.yaml")
scn = dict(variants)["dmabuf"]
result = run_scenario(scn, trace=True, variant="dmabuf")
print(explain(result))

# %% [markdown]
# The same timeline as a sequence diagram (`sim.inspect.diagram.draw`; on the command line, `rdmasim explain FILE
# --diagram FILE.svg`): one column per layer — the application, uverbs/ib_core, the importer's driver, the
# dma-buf core with its reservation lock, the exporter, the NIC — and one row per call or event, in time order.

# %%
from sim.inspect.diagram import draw
from sim.inspect.timeline import sections

parts = sections(result.testbed)
assert [p.registration.buffer for p in parts if p.registration] == ["src", "dst"]
draw(result.testbed, parts, "pin_vs_dmabuf, variant dmabuf");

# %%
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

# %% [markdown]
# ## What you saw
# * Exporting GPU memory creates a dma-buf fd in ~20 µs regardless of size; NVIDIA requires 4 KiB-aligned,
#   nonzero ranges inside one allocation with flags 0 and driver 515+. The model reproduces all 10 measured
#   H200 cases.
# * `ibv_reg_dmabuf_mr` pins no host pages, is not charged to `RLIMIT_MEMLOCK`, sets `mr.addr` to the
#   offset, and reports the *first* rule broken in the kernel's order (versions, support, page offsets, access
#   bits, ODP, then the fd and the range), leaking no reference on failure.
# * A dynamic importer maps under the reservation lock, is told by `move_notify` before the buffer moves, and
#   may DMA again only through a new mapping whose fence has signaled; `check_dma` enforces it. Pins (explicit
#   or by a static importer) make moves fail with `EBUSY`.
# * In a full run, eviction is: `move_notify` → the importer's callback zaps the MR with a UMR and unmaps →
#   the NIC faults, and its handler waits for the lock while the exporter starts the copy to system memory →
#   re-maps → waits for the copy's fence (the 1 GiB copy takes 19.4 ms) → rewrites the MTT; `explain` prints
#   that timeline.
#
# Next: `04_pinned_vs_dynamic_under_pressure.ipynb` measures what this costs and what pinning costs instead.

# %% [markdown]
# # 06 — Why `move_notify` exists: a broken importer caught in the act
#
# **What this notebook teaches.** What goes wrong if a NIC ignores `move_notify` and keeps using its old
# translations after the GPU's exporter moved a buffer: it reads (or writes) VRAM that now belongs to someone
# else. rdmasim's *data mode* (`data: true`) moves real bytes through RDMA and evictions, so we can see the
# stale bytes arrive; `invariants: record` counts each unsafe DMA instead of stopping, and `invariants: raise`
# stops at the first one with an `InvariantViolation`. The NIC option `ignore_move_notify: true` builds the
# deliberately broken importer (teaching only).
#
# **Predict before running.** An importer ignores `move_notify`. Is its stream faster or slower than a
# correct importer's, and which bytes reach node b?

# %%
import numpy as np
import pandas as pd

from models.dmabuf.gpu_export import NEW_OWNER_BYTE
from sim.core import InvariantViolation
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario

MiB = 1 << 20


def scenario(kind="write_bw", broken=False, invariants="record"):
    """Node a's GPU (MI300X-class, dynamic exporter, 8 GiB) holds a 16 MiB buffer registered with
    ibv_reg_dmabuf_mr; 600 transfers of 1 MiB move between it and node b's host memory while, 2 ms in,
    another job allocates 8180 MiB and forces the buffer out of VRAM."""
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

# %% [markdown]
# Drawn from their traces (`sim.inspect.diagram.draw`), the first memory event of both runs: the exporter notifies both
# importers under the reservation lock, but only the correct one zaps its translation (the UMR on the NIC's
# lane), unmaps, faults on its next access and re-maps after the copy's fence; the broken one's kernel WARNs and
# its NIC carries on through the old translation: its stale accesses are the red dots on the NIC's lane.

# %%
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

# %% [markdown]
# Both runs write the GPU buffer's first MiB to node b 600 times (`write_bw`: the NIC on node a *reads* the GPU
# buffer), and both see the same eviction at 2 ms. At the end the run compares the destination's bytes with
# the source's *true* contents (wherever the exporter keeps them now).

# %%
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

# %% [markdown]
# The correct importer's destination equals the source byte for byte. The broken importer delivered 0xEE
# bytes: after the eviction the exporter copied the buffer to system memory and handed its old VRAM to the job
# that asked for memory, which wrote its own data there (the model fills it with 0xEE so that stale reads are
# recognisable). The NIC, still translating through the old mapping, read that job's memory and sent it to
# another machine — a silent data leak. (`data_mismatched_bytes` is slightly below 1 MiB only because 1 in
# 256 random source bytes happens to be 0xEE.)
#
# The kernel's log shows why: the importer was told and did nothing.

# %%
warnings = [w for node in broken.testbed.nodes.values() for w in node.kernel.warnings]
violations = broken.testbed.registrations["gpu"].mr.backing.violations
print("kernel warning:", warnings[0])
print(f"{len(violations)} unsafe DMAs recorded; the first:", violations[0])
assert any("deliberately broken" in w for w in warnings) and "stale mapping" in violations[0]
assert len(violations) == b["invariant_violations"]

# %% [markdown]
# ## The other direction: corrupting someone else's memory
# With `read_bw` the NIC on node a *writes* into the GPU buffer (it reads node b's host memory into it). A
# broken importer then writes into VRAM that belongs to the other job. Here the destination check even
# passes — the evicted copy already held the right bytes — but the other job's memory (the old VRAM, which it
# had filled with 0xEE) has been overwritten. Only the invariant counter tells.

# %%
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

# %% [markdown]
# ## `invariants: raise`: stop at the first unsafe DMA
# The default. The run stops with an `InvariantViolation` that names the device, the dma-buf, the placement
# generation the mapping was made for and where the buffer is now.

# %%
try:
    run_scenario(scenario(broken=True, invariants="raise"))
    raise AssertionError("the broken importer was not stopped")
except InvariantViolation as err:
    message = str(err)
print(message)
assert "stale mapping" in message and "generation 0 (VRAM)" in message and "generation 1 (SYSTEM)" in message
assert "re-map after move_notify" in message

# %% [markdown]
# ## What you saw
# * A correct dynamic importer drops its translation on `move_notify` (1 invalidation), faults once
#   afterwards (1 re-fault) and delivers exactly the source bytes (0 mismatched, 0 violations).
# * An importer that ignores `move_notify` keeps DMA-ing through the old VRAM: reads leak the new owner's data
#   (over 99 % of the delivered MiB is 0xEE), writes corrupt the new owner's memory even when the
#   destination check passes. Hundreds of unsafe DMAs are recorded, none noticed by the data path.
# * With `invariants: raise` the simulator stops at the first one: "stale mapping: made for placement
#   generation 0 (VRAM), the buffer moved to generation 1 (SYSTEM)".
#
# This is why a dynamic exporter may only move a buffer after notifying every importer under the reservation
# lock, and why kernels without `CONFIG_DMABUF_MOVE_NOTIFY` pin dynamic importers' buffers instead.

# %% [markdown]
# # 01 — Quickstart: RDMA WRITE bandwidth and latency
#
# **What this notebook teaches.** How to run an rdmasim scenario from Python, read its perftest-style tables, and
# see the two regimes of RDMA performance: small messages are bound by per-message costs (doorbell, NIC pipeline,
# PCIe and wire latency), large messages by the slowest link's bandwidth. We run the quickstart scenario
# (`scenarios/quickstart.yaml`: two servers with ConnectX-7-class NICs on PCIe Gen5 x16, a 400 Gb/s fabric,
# pinned host memory) with fewer iterations so it finishes in seconds.
#
# **Predict before running.** How long will a 2-byte RDMA WRITE take, and from what message size on will the
# bandwidth stop growing? At what rate?

# %%
from pathlib import Path

from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario

scenario, _ = load_scenario(Path("..") / "scenarios" / "quickstart.yaml")
small = [w.model_copy(update={"iterations": 200}) for w in scenario.workload]
scenario = scenario.model_copy(update={"workload": small})
result = run_scenario(scenario)
result.summary[["workload", "bytes", "bw_avg_Gbps", "msg_rate_Mpps", "t_typical_us", "p99_us"]]

# %% [markdown]
# ## Bandwidth against message size
# Each point is `ib_write_bw` for one size with 128 writes in flight. Below a few KiB the curve rises linearly:
# the NIC completes a roughly constant number of messages per second, so bandwidth is proportional to size.
# Above that it flattens at the line rate less the InfiniBand headers.

# %%
import matplotlib.pyplot as plt

bw = result.summary[result.summary.kind == "write_bw"]
lat = result.summary[result.summary.kind == "write_lat"]
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
left.plot(bw.bytes, bw.bw_avg_Gbps, marker="o")
left.set(xscale="log", xlabel="message size (bytes)", ylabel="Gb/s", title="ib_write_bw")
right.plot(lat.bytes, lat.t_typical_us, marker="o")
right.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="us", title="ib_write_lat (typical)")
fig.tight_layout()

# %% [markdown]
# ## Checking the numbers against first principles
# The large-message plateau should be the 400 Gb/s line rate times the payload share of each 4 KiB packet
# (26 B of IB headers per packet plus a 16 B RETH in the first), and the small-message latency should sit near
# 1 µs: doorbell, send pipeline, one fabric hop, receive pipeline and a PCIe write.

# %%
from models.fabric import RETH
from sim.scenario.resolve import fabric_params

fabric = fabric_params(scenario)
expected_Gbps = fabric.efficiency(8 << 20, RETH) * 8 / 1e9
measured_Gbps = bw.bw_avg_Gbps.iloc[-1]
print(f"plateau: simulated {measured_Gbps:.1f} Gb/s, line rate less headers {expected_Gbps:.1f} Gb/s")
assert abs(measured_Gbps - expected_Gbps) / expected_Gbps < 0.01
print(f"2-byte write latency: {lat.t_typical_us.iloc[0]:.2f} us")
assert 0.5 < lat.t_typical_us.iloc[0] < 2.0

# %% [markdown]
# ## What you saw
# * The scenario file describes nodes, fabric, buffers and workloads; `run_scenario` returns tidy tables.
# * Bandwidth grows with message size until the wire (or PCIe) saturates; the plateau matches the line rate less
#   per-packet headers to within 1 %.
# * Small-message latency is about 1 µs and stays flat until the message no longer fits inline (220 B), where
#   the NIC must first DMA-read the payload over PCIe; large-message latency is dominated by serialization.
#
# Next: `rdmasim run scenarios/quickstart.yaml` does the same from the shell and writes figures and a manifest.

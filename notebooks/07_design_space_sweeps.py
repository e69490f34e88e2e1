# %% [markdown]
# # 07 — Design-space sweeps: message size × registration mode
#
# **What this notebook teaches.** How to explore a design space with a sweep file instead of one scenario:
# `scenarios/sweeps/msg_size_x_mode.yaml` runs the `pin_vs_dmabuf` scenario for every registration mode
# (its variants) and three message sizes, with fixed seeds. We plan it, run it with `sim.sweep.run_sweep`
# (serial executor, into a temporary directory), read its summary table, and draw a heatmap and a mode
# comparison with `sim.plot.recipes.plot`.
#
# **Predict before running.** Three message sizes times three registration modes, and memory pressure 2 ms
# into each run: which of the nine runs will notice it?

# %%
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

# %% [markdown]
# The sweep shrinks the base scenario (600 writes per run, the 7.5 GiB allocation at 2 ms, held 4 ms), then
# crosses the base file's first three variants with three message sizes: 9 runs, each planned and validated
# before anything runs.

# %%
workdir = Path(tempfile.mkdtemp(prefix="rdmasim-sweep-"))
out = workdir / "results"
result = run_sweep(SWEEP, out, executor="serial", progress=False)
table = result.table
print(f"ran {result.ran}, skipped {result.skipped}, failed {result.failed}; files: "
      f"{sorted(p.name for p in out.iterdir())}, {len(list((out / 'runs').iterdir()))} run partitions")
columns = ["variant", "bytes", "bw_avg_Gbps", "p50_us", "p99_9_us", "register_us", "pinned_bytes",
           "evictions", "refaults", "failed_allocations"]
table[columns]

# %%
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

# %% [markdown]
# Only the 1 MiB runs last long enough (about 12 ms) to meet the memory pressure at 2 ms, so only they differ
# between modes: the dynamic registration is evicted and averages less than half the pinned modes' bandwidth
# over this short run, while the pinned modes make the other job's allocation fail. At 4 KiB and 64 KiB the
# three modes give identical results — a reminder that a sweep answers only what its runs can see.
#
# ## Figures by recipe
# `plot(results_dir, recipe)` writes PNG, PDF and the CSV of the plotted numbers. A `heatmap` averages a
# metric over two axes (default: the sweep's first two, and average bandwidth); `mode_comparison` compares like
# with like: bandwidth and p99.9 latency per variant for each workload kind and message size, then registration
# time, pinned memory and the competing job's failed allocations per variant. (The recipes draw off-screen, so
# we display the PNG files they write.)

# %%
from sim.plot.recipes import plot

figures = workdir / "figures"
bw_map = plot(out, "heatmap", figures)
tail_map = plot(out, "heatmap", figures, metric="p99_9_us")
modes = plot(out, "mode_comparison", figures)
for paths in (bw_map, tail_map, modes):
    display(Image(filename=str(paths[0])))
print([p.name for p in bw_map + tail_map + modes])

# %%
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

# %% [markdown]
# ## Results on disk, and resuming
# Each run's rows are stored as soon as it finishes (`runs/<key>.parquet`), and `summary.parquet` /
# `summary.csv` when the sweep ends, so `read_table` reads the same table back, and running the sweep again
# into the same directory simulates nothing.

# %%
pd.testing.assert_frame_equal(read_table(out), table)
again = run_sweep(SWEEP, out, executor="serial", progress=False)
print(f"second call: ran {again.ran}, skipped {again.skipped}")
assert (again.ran, again.skipped) == (0, 9)
pd.testing.assert_frame_equal(again.table, table)
shutil.rmtree(workdir)

# %% [markdown]
# ## What you saw
# * A sweep file names a base scenario, fixed overrides (`set`) and axes (`grid`); `load_sweep` expands and
#   validates every run with its seed before anything runs.
# * `run_sweep` stores one row per run and message size with perftest's columns, latency percentiles,
#   registration time, pinned bytes and the protocol counters; a second call resumes (here: skips all 9).
# * Only the 1 MiB runs see the memory pressure: the dynamic dma-buf MR is evicted once and its bandwidth
#   halves, the pinned modes keep their bandwidth and make the allocation fail.
# * `sim.plot.recipes.plot` draws a heatmap of any metric over two axes and a per-mode comparison, each with
#   the CSV of the numbers it plots.

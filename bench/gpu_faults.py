"""Benchmark of the managed-memory model, one command: ``python bench/gpu_faults.py [--against REV ...]``.

Prints, for this checkout and side by side for each commit ``--against`` names (default ``main``, each in a
temporary git worktree), the wall time of each case and the ratio to this checkout's, with the simulated faults
(which must agree between the trees: the model's answers do not depend on its speed) and, for this checkout, peak
memory (tracemalloc, numpy included: the range's state and the run's temporaries). The cases:

* a 141 GB managed range (an H200's memory, 34 M pages of 4 KiB): a sequential sweep of 16 GiB, one access per
  thread, and 1 M uniformly random accesses;
* a thrashing sweep: 8 GiB on 4 GiB of GPU memory, twice;
* a scenario's managed job (``managed-job``, scenarios/managed_pressure.yaml): a grid-stride sweep of 2.5 GiB on
  2 GiB, 16,384 pages per kernel;
* a CPU reading back a 1 GiB range resident on the GPU, one byte in every 4 KiB page;
* the fit of the UVM constants to the H200 measurements (``models.gpu.um_calibration.fit``, what ``rdmasim
  calibrate`` and its tests replay).

Each figure is the best of ``--repeats`` runs in one process per case and tree. Machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from worktrees import checked_out

BASELINE = "main"
GiB = 1 << 30

CASES = {
    "141 GB range, sequential sweep of 16 GiB": (
        "mm = ManagedMemory(141 * 10**9)", "mm.gpu_access(sequential(16 * GiB // 4096))"),
    "141 GB range, 1 M random accesses": (
        "mm = ManagedMemory(141 * 10**9)",
        "mm.gpu_access(random_access(mm.n_pages, 1_000_000, rng=np.random.default_rng(7)))"),
    "8 GiB range on 4 GiB of GPU, 2 sweeps (thrash)": (
        "mm = ManagedMemory(8 * GiB, gpu_capacity=4 * GiB)", "mm.gpu_access(sequential(mm.n_pages, repetitions=2))"),
    "managed job: 2.5 GiB on 2 GiB, grid-stride kernels": (
        "mm = ManagedMemory(2560 << 20, gpu_capacity=2 * GiB); pages = sequential(mm.n_pages)",
        "for lo in range(0, pages.size, 16384): mm.gpu_access(pages[lo:lo + 16384], lanes=mm.params.sweep_lanes)"),
    "CPU reads back 1 GiB resident on the GPU": (
        "mm = ManagedMemory(GiB); mm.prefetch(0, mm.n_pages)", "mm.cpu_access(sequential(mm.n_pages))"),
    "fit of the UVM constants (um_calibration.fit)": (
        "from models.gpu import um_calibration as uc; cases = uc.load_cases(); mm = None",
        "uc.fit(cases)"),
}
"""Per case: the set-up (not timed; it makes ``mm``) and the timed statement."""

CHILD = """
import json, sys, time, tracemalloc
import numpy as np
from models.gpu.managed import ManagedMemory
from models.gpu.workloads import random_access, sequential
GiB = 1 << 30
setup, timed, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
best = float("inf")
for _ in range(repeats):
    exec(setup)
    began = time.perf_counter()
    exec(timed)
    best = min(best, time.perf_counter() - began)
faults = None if mm is None else mm.totals.faults + mm.totals.cpu_faults
tracemalloc.start()
exec(setup)
exec(timed)
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"best_s": best, "faults": faults, "peak_MB": peak / 1e6}))
"""


def measured(tree: Path, setup: str, timed: str, repeats: int) -> dict:
    """One case in a process of its own, importing the model from ``tree``."""
    done = subprocess.run([sys.executable, "-c", CHILD, setup, timed, str(repeats)], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", action="append", metavar="REV",
                        help=f"a commit to measure beside this checkout (repeatable; default {BASELINE})")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    revs = args.against or [BASELINE]
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch, checked_out(revs, scratch) as trees:
        print(f"managed-memory model, best of {args.repeats} (s); faults simulated; peak memory of this checkout")
        print(f"  {'':<52}" + "".join(f"{name:>16}" for name in trees))
        for label, (setup, timed) in CASES.items():
            found = {name: measured(tree, setup, timed, args.repeats) for name, tree in trees.items()}
            mine = found["this checkout"]
            cells = "".join(f"{found[name]['best_s']:>16.3f}" for name in trees)
            ratios = "".join(f"  {rev} / this = {found[rev]['best_s'] / mine['best_s']:.2f}" for rev in revs)
            same = all(found[rev]["faults"] == mine["faults"] for rev in revs)
            faults = "" if mine["faults"] is None else f"  {mine['faults']:,} faults" + ("" if same else " (DIFFER)")
            print(f"  {label:<52}{cells}{ratios}{faults}  peak {mine['peak_MB']:.0f} MB")


if __name__ == "__main__":
    main()

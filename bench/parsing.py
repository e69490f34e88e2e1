"""Benchmark of reading large inputs, one command: ``python bench/parsing.py [--against REV ...]``.

Prints the CPU time of :func:`sim.scenario.yaml_reader.parse_yaml` on a scenario with a one-line comment of 250 KB,
500 KB and 1 MB and on one with 2,500, 5,000 and 10,000 events, and the pixels and CPU time of a heatmap over a 40 x
40 and a 3 x 400 grid, for this checkout and for each commit ``--against`` names (default ``main``), each in a fresh
process started in a temporary git worktree of it (the first parse of a process is the one a command pays). Doubling
an input should double its time: a ratio near 4 is quadratic.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from worktrees import checked_out

BASE = ("schema: 1\nname: big\nseed: 1\nnodes:\n  - {name: a}\n  - {name: b}\nbuffers:\n"
        "  - {name: src, on: a.host, size: 64KiB}\n  - {name: dst, on: b.host, size: 64KiB}\n"
        "workload:\n  - {kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10}\n")


def comment(nbytes: int) -> str:
    return f"# {'x' * nbytes}\n{BASE}"


def events(count: int) -> str:
    return BASE + "events:\n" + "".join(f"  - {{at: {i + 1}us, kind: link-flap, node: a, duration: 100ns}}\n"
                                        for i in range(count))


CASES = {f"comment {n // 1000} KB": comment(n) for n in (250_000, 500_000, 1_000_000)}
CASES.update({f"{n:,} events": events(n) for n in (2_500, 5_000, 10_000)})
GRIDS = {"heatmap 40 x 40": (40, 40), "heatmap 3 x 400": (3, 400)}

PARSE = """
import sys, time
from sim.scenario.yaml_reader import parse_yaml
raw = open(sys.argv[1], 'rb').read()
start = time.process_time()
parse_yaml(raw, sys.argv[1])
print(time.process_time() - start)
"""
HEATMAP = """
import json, sys, time
import numpy as np, pandas as pd
import matplotlib.image as mpimg
from sim.plot.recipes import _SweepDir, heatmap
rows, cols = int(sys.argv[1]), int(sys.argv[2])
y, x = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
table = pd.DataFrame({"y": y.ravel(), "x": x.ravel(), "run": np.arange(rows * cols), "status": "ok",
                      "kind": "write_bw", "bw_avg_Gbps": np.random.default_rng(1).uniform(1, 400, rows * cols)})
start = time.process_time()
png = heatmap(_SweepDir("grid", table, ["y", "x"]), __import__("pathlib").Path(sys.argv[3]))[0]
spent = time.process_time() - start
print(json.dumps([spent, list(mpimg.imread(png).shape[:2])]))
"""


def measure(tree: Path, scratch: Path) -> dict[str, str]:
    """Each case's figure for the tree at ``tree``."""
    out = {}
    for name, text in CASES.items():
        path = scratch / f"{name.replace(' ', '_')}.yaml"
        path.write_text(text)
        done = subprocess.run([sys.executable, "-c", PARSE, str(path)], cwd=tree, capture_output=True, text=True,
                              check=True)
        out[name] = f"{float(done.stdout):.2f} s"
    for name, (rows, cols) in GRIDS.items():
        figures = scratch / f"{tree.name}-{rows}x{cols}"
        done = subprocess.run([sys.executable, "-c", HEATMAP, str(rows), str(cols), str(figures)], cwd=tree,
                              capture_output=True, text=True, check=True)
        spent, (height, width) = json.loads(done.stdout)
        out[name] = f"{spent:.2f} s, {width} x {height} px"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", nargs="*", default=["main"], metavar="REV", help="commits to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, checked_out(args.against, scratch) as trees:
        figures = {label: measure(tree, Path(scratch)) for label, tree in trees.items()}
    print(f"{'case':<20}" + "".join(f"{label:>34}" for label in figures))
    for case in [*CASES, *GRIDS]:
        print(f"{case:<20}" + "".join(f"{figures[label][case]:>34}" for label in figures))


if __name__ == "__main__":
    main()

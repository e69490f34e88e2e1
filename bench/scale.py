"""Scale, one command: ``python bench/scale.py [--ops N]``.

A 16-node scenario (8 pairs, one write_bw each) and a long single run of N RDMA WRITEs (default 10 M) on the
event engine; prints wall time, simulated operations per second and the peak resident memory of each (each
case runs in its own process so the peaks are separate).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario


def sixteen_nodes(iterations: int) -> Scenario:
    nodes = [{"name": f"n{i}"} for i in range(16)]
    buffers = [{"name": f"b{i}", "on": f"n{i}.host", "size": "64KiB"} for i in range(16)]
    workload = [{"kind": "write_bw", "name": f"pair{i}", "from": f"b{2 * i}", "to": f"b{2 * i + 1}",
                 "sizes": ["4KiB"], "iterations": iterations} for i in range(8)]
    return Scenario.model_validate({"schema": 1, "name": "sixteen", "nodes": nodes, "buffers": buffers,
                                    "workload": workload})


def long_run(iterations: int) -> Scenario:
    return Scenario.model_validate({
        "schema": 1, "name": "long", "nodes": [{"name": "a"}, {"name": "b"}],
        "buffers": [{"name": "s", "on": "a.host", "size": "64KiB"}, {"name": "d", "on": "b.host", "size": "64KiB"}],
        "workload": [{"kind": "write_bw", "from": "s", "to": "d", "sizes": ["4KiB"], "iterations": iterations}]})


def measure(label: str, scenario: Scenario, ops: int) -> None:
    started = time.perf_counter()
    result = run_scenario(scenario)
    wall = time.perf_counter() - started
    assert len(result.operations) == ops and result.operations["ok"].all()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{label:<40} {ops:>11,} ops  {wall:8.1f} s  {ops / wall:10,.0f} ops/s  peak RSS {peak:8.1f} MiB",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000_000, help="WRITEs in the long run")
    parser.add_argument("--case", choices=["sixteen", "long"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case == "sixteen":
        measure("16 nodes, 8 pairs x write_bw 4 KiB", sixteen_nodes(50_000), 8 * 50_000)
    elif args.case == "long":
        measure(f"2 nodes, one write_bw of {args.ops:,}", long_run(args.ops), args.ops)
    else:
        for case in ("sixteen", "long"):
            subprocess.run([sys.executable, __file__, "--case", case, "--ops", str(args.ops)], check=True)


if __name__ == "__main__":
    main()

"""Benchmark of the vectorized core's accelerations, one command: ``python bench/speedups.py``.

Solves the pipelines of a few scenario shapes (each built on its own testbed, as ``rdmasim run`` builds them) with
every acceleration (:data:`sim.fast.ALL`), with each switched off alone, and with none (:data:`sim.fast.NONE`, the
exact solver alone), checks that every setting gives the same times, and prints the solve's wall time per setting
and its ratio to the time with all of them: what each acceleration buys. Each figure is the best of ``--repeats``
solves after one unmeasured solve of the shape (these machines are shared and noisy); ``--shape TEXT`` solves only
the shapes whose name holds ``TEXT``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from sim.core.steps import Claim, Delay, Rebase, Wake  # noqa: E402
from sim.engine.harness import setup_run  # noqa: E402
from sim.fast import ALL, NONE, Group, Server, Speedups, solve  # noqa: E402
from sim.engine.planner.plan import pipelines  # noqa: E402
from sim.engine.planner.streams import streams  # noqa: E402
from sim.scenario.scenario_file import load_scenario_variants  # noqa: E402
from sim.scenario.schema import Scenario  # noqa: E402

NODES = [{"name": "a", "nic": {"preset": "connectx7"}}, {"name": "b", "nic": {"preset": "connectx7"}}]
BUFFERS = [{"name": "src", "on": "a.host", "size": "64MiB"}, {"name": "dst", "on": "b.host", "size": "64MiB"}]
SHAPES = {
    "write_bw 4KiB, one QP": {"kind": "write_bw", "sizes": ["4KiB"], "iterations": 200_000},
    "read_bw 64KiB (read tags, slots)": {"kind": "read_bw", "sizes": ["64KiB"], "iterations": 50_000},
    "write_bw 64KiB, CQ moderation 100 (pace)": {"kind": "write_bw", "sizes": ["64KiB"], "iterations": 100_000,
                                                 "cq_mod": 100},
    "write_bw 4KiB, 4 QPs (shared servers)": {"kind": "write_bw", "sizes": ["4KiB"], "iterations": 20_000, "qps": 4},
    "read_bw 64KiB, 4 QPs (slots, shared)": {"kind": "read_bw", "sizes": ["64KiB"], "iterations": 5_000, "qps": 4},
    "write_lat 2B..64KiB": {"kind": "write_lat", "sizes": {"from": "2B", "to": "64KiB"}, "iterations": 5_000},
    "send_lat 2B, 4KiB (own waits)": {"kind": "send_lat", "sizes": ["2B", "4KiB"], "iterations": 1_000},
    "rail_server.yaml, 8 QPs crossing (crawl)": ROOT / "scenarios" / "rail_server.yaml",
    "1MiB window NAK'd 20 times (tail_apart)": "naks",
    "read_bw 64KiB into a GPU (chain)": {"kind": "read_bw", "sizes": ["64KiB"], "iterations": 20_000,
                                         "nodes": [{**NODES[0], "gpus": [{"preset": "h200"}]}, NODES[1]],
                                         "buffers": [{**BUFFERS[0], "on": "a.gpu0"}, BUFFERS[1]]},
    "send_bw 64B (chain)": {"kind": "send_bw", "sizes": ["64B"], "iterations": 20_000},
    "read_bw 64KiB into a GPU, 2 QPs (chain)": {"kind": "read_bw", "sizes": ["64KiB"], "iterations": 10_000, "qps": 2,
                                                "nodes": [{**NODES[0], "gpus": [{"preset": "h200"}]}, NODES[1]],
                                                "buffers": [{**BUFFERS[0], "on": "a.gpu0"}, BUFFERS[1]]},
}
"""The workloads solved, between two ConnectX-7 hosts on a 400 Gb/s fabric (a workload's ``nodes`` and ``buffers``
replace theirs: an H200 under host a's PCIe switch, the requester's buffer on it), a shipped scenario's (its first
variant's), or ``naks``: the pipelines of :func:`naked_window`."""


def naked_window() -> tuple[list[Server], list[Group]]:
    """A stream of 3,000 1 MiB WRITEs, 16 in flight, on three servers (transmit port, receive port, the
    acknowledgements' way back), whose window from operation 1,200 on is answered with 20 RNR NAKs each (a request
    and its NAK, 200 us apart), as a buffer re-mapped under the responder answers them (``gpu_pressure.yaml``): the
    stream changes its steps twice."""
    def steps(naks: int) -> tuple:
        nak = (Claim(0, 60_000), Claim(1, 60_000, latency_ps=300_000), Rebase(False), Delay(300_000),
               Claim(2, 10_000), Rebase(False), Delay(200_000_000))
        return (Delay(1_000), *nak * naks, Claim(0, 20_000_000, latency_ps=300_000),
                Claim(1, 20_000_000, latency_ps=300_000), Rebase(True), Claim(2, 10_000), Rebase(True),
                Delay(0, "poll"), Wake())

    polls = np.random.default_rng(1).integers(0, 500_000, 3_000)
    draws = {"poll": lambda lo, hi: polls[lo:hi]}
    return ([Server("tx"), Server("rx"), Server("ack")],
            [Group(steps(0), 1_200, 16, draws), Group(steps(20), 1_216, 16, draws, first=1_200),
             Group(steps(0), 3_000, 16, draws, first=1_216)])


def solved(work: dict | Path | str, speedups: Speedups) -> tuple[float, list]:
    """Wall time of one solve of ``work``'s pipelines (a workload, a scenario file's first variant, or
    :func:`naked_window`'s) with ``speedups`` (s), and its posts and completions."""
    if work == "naks":
        servers, groups = naked_window()
        clock = time.perf_counter()
        times = [(p.group, p.post, p.done) for p in solve(servers, groups, speedups=speedups)]
        return time.perf_counter() - clock, times
    if isinstance(work, Path):
        scenario = load_scenario_variants(work)[2][0][1]
    else:
        work = dict(work)
        scenario = Scenario.model_validate({"schema": 1, "name": "bench", "seed": 1, "nodes": work.pop("nodes", NODES),
                                            "buffers": work.pop("buffers", BUFFERS),
                                            "fabric": {"rate": "400Gb/s", "latency": "300ns"},
                                            "workload": [{"from": "src", "to": "dst", **work}]})
    bed, started, _ = setup_run(scenario, 1, False)
    pipes = pipelines(streams(scenario, bed))
    clock = time.perf_counter()
    times = [(p.group, p.post, p.done) for p in solve(pipes.servers, pipes.groups, started, speedups=speedups)]
    return time.perf_counter() - clock, times


def same(a: list, b: list) -> bool:
    """Whether two solves give every operation the same post and completion."""
    def joined(pieces):
        out: dict = {}
        for group, post, done in pieces:
            out.setdefault(group, ([], []))[0].extend(post.tolist())
            out[group][1].extend(done.tolist())
        return out
    return joined(a) == joined(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="solves per figure (the best is shown)")
    parser.add_argument("--shape", default="", help="only the shapes whose name holds this text (say 'chain')")
    args = parser.parse_args()
    settings = {"all": ALL, **{f"without {f.name}": replace(ALL, **{f.name: False}) for f in fields(Speedups)},
                "none": NONE}
    print(f"{'pipeline':<40} {'setting':<22} {'solve s':>8} {'x all':>7}")
    for name, work in SHAPES.items():
        if args.shape not in name:
            continue
        solved(work, ALL)  # warm-up: the first solve of a shape pays for what later ones find ready
        reference = None
        for label, speedups in settings.items():
            runs = [solved(work, speedups) for _ in range(args.repeats)]
            wall, times = min(r[0] for r in runs), runs[0][1]
            if reference is None:
                reference = (wall, times)
            elif not same(times, reference[1]):
                raise SystemExit(f"{name}: '{label}' gives other times than every acceleration: a defect")
            print(f"{name:<40} {label:<22} {wall:8.3f} {wall / reference[0]:7.2f}")


if __name__ == "__main__":
    main()

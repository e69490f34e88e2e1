"""Benchmark of translation caches on the vectorized core, one command: ``python bench/translation_caches.py``.

Runs each case on the event engine and on the vectorized core, checks that their operation tables are identical,
and prints both CPU times and their ratio:

* ``write_bw`` of 4 KiB through the IOMMU's IO-TLB and the NIC's MPT/MTT caches at both ends (the first WRITE
  misses, and the next ones reach the transmit port first and wait there for it);
* each variant of ``scenarios/host_pages.yaml`` (READs of 1 MiB into a 6 GiB MR: 4 KiB pages past the MTT cache's
  reach, transparent and hugetlbfs 2 MiB pages within it).

Machines are shared and noisy: each figure is the best of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.engine.run import run_scenario  # noqa: E402
from sim.scenario.scenario_file import load_scenario_variants  # noqa: E402
from sim.scenario.schema import Scenario  # noqa: E402

CACHED = {"translation_cache": True}


def write_stream(iterations: int) -> Scenario:
    """write_bw at 4 KiB between two nodes with IO-TLBs and NIC translation caches."""
    nodes = [{"name": name, "iommu": "vtd", "nic": CACHED} for name in "ab"]
    return Scenario.model_validate({
        "schema": 1, "name": "cached-writes", "seed": 3, "nodes": nodes,
        "buffers": [{"name": "src", "on": "a.host", "size": "8MiB"}, {"name": "dst", "on": "b.host", "size": "8MiB"}],
        "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": iterations}]})


def best(scenario: Scenario, engine: str, repeats: int):
    """The fastest of ``repeats`` runs on ``engine``: (CPU seconds, result)."""
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        result = run_scenario(scenario.model_copy(update={"engine": engine}), notice=lambda line: None)
        runs.append((time.process_time() - started, result))
    return min(runs, key=lambda run: run[0])


def compare(label: str, scenario: Scenario, repeats: int) -> None:
    (event_s, event), (fast_s, fast) = best(scenario, "event", repeats), best(scenario, "fast", repeats)
    same = fast.operations.equals(event.operations) and fast.summary.equals(event.summary)
    print(f"{label:<44} event {event_s:8.2f} s  fast {fast_s:6.2f} s  ratio {event_s / fast_s:7.1f}  "
          f"identical {same}  ({len(fast.operations):,} operations)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args()
    compare(f"write_bw 4 KiB x {args.iterations:,}, caches at both ends", write_stream(args.iterations), args.repeats)
    _, _, variants = load_scenario_variants(ROOT / "scenarios" / "host_pages.yaml")
    for name, variant in variants:
        compare(f"host_pages.yaml ({name})", variant, args.repeats)


if __name__ == "__main__":
    main()

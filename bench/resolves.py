"""Benchmark of runs the vectorized core solves again as they go (scenario events, link outages, page faults), one
command: ``python bench/resolves.py``.

Each re-solve goes on from the latest block of the last solve that the change leaves as it was
(:mod:`sim.fast.resume`, :class:`sim.engine.planner.resumes.Resumes`). Prints, side by side in one run, each
variant's wall time by default, with every re-solve from the first operation (``hand_on`` off), under link outages
with their decisions settled on complete solves only (``whole``: :meth:`Losses.settle_early` off), and with
``--engine event``, their ratios, the engine that ran and whether all give the same tables and counters. Each figure
is the best of ``--repeats`` runs in this process.

The runs: ``scenarios/link_flap_retries.yaml`` with 100,000 WRITEs and four link flaps 30 ms apart (each flap's
decisions settled in turn) and the shipped scenarios that are solved again (their variants that are).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sim.engine.planner.plan as plan  # noqa: E402
from sim.engine.planner.losses import Losses  # noqa: E402
from sim.engine.planner.resumes import Resumes  # noqa: E402
from sim.engine.run import run_scenario  # noqa: E402
from sim.scenario.scenario_file import load_scenario_variants  # noqa: E402

FLAPS_PS = [ms * 10 ** 9 for ms in (1, 30, 60, 90)]
"""When the scaled runs' link flaps come (ps)."""
SHIPPED = ["dmabuf_revoke", "exporter_faults", "gpu_pressure", "link_flap_retries", "managed_pressure",
           "pinned_revocable", "pinned_vs_odp"]


def scaled_flaps(scenario):
    """``scenario`` (a link_flap_retries variant) with 100,000 WRITEs and its flap repeated at :data:`FLAPS_PS`."""
    work = scenario.workload[0].model_copy(update={"iterations": 100_000})
    events = [scenario.events[0].model_copy(update={"at": at}) for at in FLAPS_PS]
    return scenario.model_copy(update={"workload": [work], "events": events})


def best(scenario, variant: str, repeats: int, engine: str = "auto", hand_on: bool = True, early: bool = True):
    """The fastest of ``repeats`` runs (s) and the last run's result; without ``early``, a link outage's decisions
    are settled on complete solves only (:meth:`Losses.settle_early` never stops a solve)."""
    plan.Resumes = partial(Resumes, hand_on=hand_on)
    settle_early = Losses.settle_early
    if not early:
        Losses.settle_early = lambda self, marks, horizon: False
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run_scenario(scenario.model_copy(update={"engine": engine}), variant=variant, notice=lambda _: None)
        times.append(time.perf_counter() - started)
    plan.Resumes, Losses.settle_early = Resumes, settle_early
    return min(times), result


def same(a, b) -> bool:
    tables = ("operations", "summary", "events", "registrations")
    return a.counters == b.counters and all(getattr(a, t).equals(getattr(b, t)) for t in tables)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs = [(f"link flaps x4, 100k WRITEs: {name}", name, scaled_flaps(sc))
            for name, sc in load_scenario_variants(ROOT / "scenarios" / "link_flap_retries.yaml")[2]]
    for stem in SHIPPED:
        runs += [(f"{stem}: {name}", name, sc) for name, sc in load_scenario_variants(ROOT / "scenarios" /
                                                                                     f"{stem}.yaml")[2]
                 if sc.events]
    print(f"{'run':<48} {'default':>8} {'no hand-on':>10} {'ratio':>6} {'whole':>8} {'ratio':>6} {'event':>8} "
          f"{'ratio':>6}  engine  same")
    for label, variant, scenario in runs:
        on, a = best(scenario, variant, args.repeats)
        off, b = best(scenario, variant, args.repeats, hand_on=False)
        lossy = any(event.kind == "link-flap" and event.frames == "lost" for event in scenario.events)
        whole, d = best(scenario, variant, args.repeats, early=False) if lossy else (None, a)
        event, c = best(scenario, variant, 1, engine="event")
        settled = f"{whole:8.3f} {whole / on:6.2f}" if whole is not None else f"{'-':>8} {'-':>6}"
        print(f"{label:<48} {on:8.3f} {off:10.3f} {off / on:6.2f} {settled} {event:8.3f} {event / on:6.2f}  "
              f"{a.engine:<6}  {same(a, b) and same(a, c) and same(a, d)}", flush=True)


if __name__ == "__main__":
    main()

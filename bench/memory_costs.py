"""Measure the per-operation and per-byte memory costs that :mod:`sim.engine.budget` estimates with, one command:
``python bench/memory_costs.py``.

Each shape runs in its own process after a 10-iteration warm-up of the same shape; the peak RSS
(``resource.getrusage``) above the warm process's RSS before the run, per operation, is printed with the
estimate :mod:`sim.engine.budget` makes of the whole run beside it.
"""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {
    "event write_bw 4KiB x 400k": ("event", "write_bw", 400_000, {}),
    "event write_lat 64B x 100k": ("event", "write_lat", 100_000, {}),
    "event write_bw 64 QPs x 2000": ("event", "write_bw", 2000, {"qps": 64}),
    "fast write_lat 64B x 4M": ("fast", "write_lat", 4_000_000, {}),
    "fast write_bw 4KiB x 2M, link flap": ("fast", "write_bw", 2_000_000, {"flap": True}),
    "fast write_bw 4KiB x 20M": ("fast", "write_bw", 20_000_000, {}),
    "fast write_bw 4KiB x 2M, latency_cdf": ("fast", "write_bw", 2_000_000, {"outputs": ["latency_cdf"]}),
    "event write_bw 4KiB x 40k, traced": ("event", "write_bw", 40_000, {"trace": True}),
    "data mode, 2 x 512MiB buffers": ("event", "write_bw", 100, {"data": 512 * 2**20}),
    "managed job of 16GiB (managed_pressure)": ("event", "read_bw", 2000, {"managed": 16 * 2**30}),
}


def scenario(engine: str, kind: str, iterations: int, extra: dict):
    """The quickstart reduced to one ``kind`` workload at one size, shaped by ``extra``."""
    from sim.scenario.scenario_file import load_scenario, load_scenario_variants
    from sim.scenario.events import LinkFlapEvent

    if extra.get("managed"):
        _, _, variants = load_scenario_variants(ROOT / "scenarios" / "managed_pressure.yaml")
        base = variants[0][1]
        work = base.workload[0].model_copy(update={"iterations": iterations})
        job = base.events[0].model_copy(update={"size": extra["managed"]})
        return base.model_copy(update={"workload": [work], "events": [job]})
    base, _ = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    work = next(w for w in base.workload if w.kind == kind)
    work = work.model_copy(update={"sizes": [4096 if kind.endswith("_bw") else 64], "iterations": iterations,
                                   "qps": extra.get("qps", 1)})
    update = {"workload": [work], "engine": engine, "outputs": extra.get("outputs", base.outputs)}
    if extra.get("flap"):
        update["events"] = [LinkFlapEvent.model_validate({"kind": "link-flap", "node": "b", "at": "1ms",
                                                          "duration": "10us"})]
    if extra.get("data"):
        update["data"] = True
        update["buffers"] = [b.model_copy(update={"size": extra["data"]}) for b in base.buffers]
    return base.model_copy(update=update)


def measure(name: str) -> dict:
    """Peak RSS above a warm-up of ``name``'s shape, and the estimate of it."""
    from sim.engine.budget import estimate
    from sim.results.write import write_results
    from sim.engine.run import run_scenario

    engine, kind, iterations, extra = SHAPES[name]
    full = scenario(engine, kind, iterations, extra)
    run_scenario(scenario(engine, kind, 10, {**extra, "data": 4096 if extra.get("data") else None,
                                             "managed": 2**21 if extra.get("managed") else None}),
                 trace=bool(extra.get("trace")))
    gc.collect()
    before = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) * 1024
    trace = bool(extra.get("trace"))
    result = run_scenario(full, trace=trace)
    with tempfile.TemporaryDirectory() as scratch:
        write_results(result, Path(scratch) / "out", trace=trace)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    ops = sum(len(w.size_list()) * w.iterations * w.qps for w in full.workload)
    return {"peak": peak, "ops": ops, "estimate": estimate([("base", full)], trace).bytes}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2])))
        return
    print(f"{'shape':<38} {'peak above warm':>16} {'per op':>9} {'estimate':>10} {'peak/estimate':>14}")
    for name in SHAPES:
        out = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.splitlines()[-1])
        print(f"{name:<38} {m['peak'] / 2**20:13.0f} MiB {m['peak'] / m['ops']:7.0f} B "
              f"{m['estimate'] / 2**20:7.0f} MiB {m['peak'] / m['estimate']:13.2f}")


if __name__ == "__main__":
    main()

"""Write a run's results directory atomically: everything lands in a sibling temporary directory that
replaces the target only once complete, so a failed run leaves no half-written directory.

Layout: ``metrics.parquet`` (one row per work request), ``summary.json`` (perftest rows and registration
costs), ``manifest.json`` (resolved scenario, resolved parameters, seed, scenario hash, package versions)
and ``figures/*.png|pdf|csv``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from sim import __version__
from sim.plot.figures import FIGURES
from sim.run import RunResult

PACKAGES = ("numpy", "simpy", "pandas", "pyarrow", "pydantic", "matplotlib", "networkx")


def package_versions() -> dict[str, str]:
    """Versions of rdmasim, Python and the packages that shape results."""
    versions = {"rdmasim": __version__, "python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = metadata.version(name)
    return versions


def manifest(result: RunResult, scenario_bytes: bytes | None) -> dict:
    """Everything needed to reproduce the run."""
    bed = result.testbed
    return {
        "rdmasim_manifest": 1,
        "scenario": result.scenario.model_dump(mode="json", by_alias=True),
        "scenario_sha256": hashlib.sha256(scenario_bytes).hexdigest() if scenario_bytes is not None else None,
        "seed": result.seed,
        "parameters": {
            "fabric": dataclasses.asdict(bed.fabric.params),
            "nodes": {name: {"host": dataclasses.asdict(n.host.params), "pcie": dataclasses.asdict(n.pcie.params),
                             "nic": dataclasses.asdict(n.nic.params)} for name, n in bed.nodes.items()},
        },
        "versions": package_versions(),
    }


def _records(frame) -> list[dict]:
    return json.loads(frame.to_json(orient="records", double_precision=15))


def write_results(result: RunResult, out_dir: str | os.PathLike, scenario_bytes: bytes | None = None) -> Path:
    """Write every output of ``result`` into ``out_dir``, replacing it atomically; return the path."""
    target = Path(out_dir).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        result.operations.to_parquet(staging / "metrics.parquet", index=False)
        summary = {"scenario": result.scenario.name, "seed": result.seed,
                   "results": _records(result.summary), "registrations": _records(result.registrations)}
        (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (staging / "manifest.json").write_text(json.dumps(manifest(result, scenario_bytes), indent=1) + "\n")
        for name in result.scenario.outputs:
            kind = "_bw" if name == "bw_vs_size" else "_lat"
            if result.summary["kind"].str.endswith(kind).any():
                FIGURES[name](result.summary, staging / "figures", result.scenario.name)
        _replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _replace_dir(staging: Path, target: Path) -> None:
    """Swap ``staging`` into ``target``; an existing target is moved aside first and removed after."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

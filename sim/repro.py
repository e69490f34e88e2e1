"""``rdmasim repro``: re-run a results directory from its manifest and check the outputs are bit-identical."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sim.core.errors import ConfigError
from sim.results import REPRODUCIBLE, file_sha256, package_versions, write_results
from sim.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants


def reproduce(manifest_path: str | Path) -> tuple[bool, list[str]]:
    """Re-run the scenario (every variant, same seed) recorded in ``manifest_path``; compare output hashes.

    Returns (identical, report lines).

    :raises ConfigError: the manifest cannot be read or its scenario no longer validates.
    """
    path = Path(manifest_path)
    try:
        record = json.loads(path.read_text())
        text, seed, expected = record["scenario_text"], record["seed"], record["outputs_sha256"]
        if not isinstance(text, str):
            raise TypeError("the manifest holds no scenario text (written by the Python API without a file)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"not a reproducible rdmasim manifest: {exc}", file=str(path)) from None
    with tempfile.TemporaryDirectory() as scratch:
        scenario_file = Path(scratch) / "scenario.yaml"
        scenario_file.write_text(text, encoding="utf-8")
        _, raw, variants = load_scenario_variants(scenario_file)
    results = [run_scenario(v, seed, variant=name) for name, v in variants]
    lines = []
    versions = package_versions()
    for name, version in record.get("versions", {}).items():
        if versions.get(name) != version:
            lines.append(f"note: {name} {version} recorded, {versions.get(name)} installed")
    with tempfile.TemporaryDirectory() as scratch:
        out = write_results(results, Path(scratch) / "rerun", raw)
        identical = True
        for name in REPRODUCIBLE:
            got = file_sha256(out / name)
            same = got == expected.get(name)
            identical &= same
            lines.append(f"{name}: {'identical' if same else 'DIFFERENT'} (sha256 {got[:16]}...)")
    return identical, lines

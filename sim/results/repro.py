"""``rdmasim repro``: verify a results directory against its manifest, then re-run it and compare.

Three checks, each reported line by line:

1. the manifest agrees with itself: its scenario text hashes to ``scenario_sha256``, that text still validates,
   its variants are the manifest's variants, and the resolved scenario block is the text's first variant (with
   the engine the run asked for);
2. the files on disk: every file the manifest lists (``files_sha256``: the outputs, the figures, a trace) is a
   regular file hashing to its record, no file it does not list was added, and no entry is a symbolic link (a
   manifest from before files were listed: ``metrics.parquet`` and ``summary.json``, its ``outputs_sha256``);
3. a re-run (every variant, the recorded seed, on the engine that ran it) reproduces them: each file it writes
   (all but a trace) equals the manifest's hash and the file on disk, each variant's resolved parameters equal
   the manifest's, and each variant runs on the engine recorded (a manifest from before engines were recorded: the
   engine asked for).

A malformed manifest is a located :class:`~sim.core.errors.ConfigError` (``FILE:LINE:COL key: reason``): the
scenario loader gives every value's position (JSON is YAML) and :class:`Manifest` validates the JSON values.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationError

from sim.core.errors import ConfigError
from sim.results.write import (MANIFEST, REPRODUCIBLE, file_sha256, files_sha256, package_versions, run_parameters,
                               write_results)
from sim.engine.run import ENGINES, run_scenario
from sim.scenario.loader import validate
from sim.scenario.yaml_reader import PositionMap, parse_yaml, read_yaml_file
from sim.scenario.scenario_file import load_scenario_variants
from sim.scenario.schema import Scenario
from sim.store import outdir

SHOWN_DIFFERENCES = 5
"""Differing key paths listed per compared block; the rest are counted."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
EngineName = Literal["event", "fast"]


def _relative(name: str) -> str:
    """A path inside the results directory: relative, ``/``-separated, no empty, ``.`` or ``..`` component."""
    if "\\" in name or "\x00" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"{name!r} is not a path inside the results directory")
    return name


class WorkloadEngine(BaseModel):
    """The engine that ran one workload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    engine: EngineName


class VariantEngines(BaseModel):
    """The engine a variant asked for, the one that ran each of its workloads and why ``auto`` fell back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requested: Literal["event", "fast", "auto"]
    fallback: str | None
    workloads: list[WorkloadEngine]

    @property
    def ran(self) -> str:
        """The engine that ran every workload (the one asked for when they differ)."""
        engines = {w.engine for w in self.workloads}
        return engines.pop() if len(engines) == 1 else self.requested


class Manifest(BaseModel):
    """The fields of ``manifest.json`` that a re-run reads (others are kept, not checked)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rdmasim_manifest: Literal[1]
    scenario: dict[str, Any]
    scenario_sha256: Sha256
    scenario_text: str
    seed: Annotated[StrictInt, Field(ge=0, lt=2**63)]
    variants: dict[str, dict[str, Any]]
    versions: dict[str, str]
    outputs_sha256: dict[Literal["metrics.parquet", "summary.json"], Sha256]
    files_sha256: dict[Annotated[str, AfterValidator(_relative)], Sha256] | None = None
    """Every file written beside the manifest, by relative path (absent from manifests written before)."""
    engines: dict[str, VariantEngines] | None = None
    """Per variant (absent from manifests written before it was recorded)."""


@dataclass
class Report:
    """What ``repro`` found: one line per check, and whether every check passed."""

    lines: list[str] = field(default_factory=list)
    ok: bool = True

    def check(self, passed: bool, line: str) -> None:
        """Record one check's line; a failed check makes the report fail."""
        self.ok &= passed
        self.lines.append(line)


def manifest_path(path: str | Path) -> Path:
    """``path`` itself, or the manifest inside it when ``path`` is a results directory.

    :raises ConfigError: ``path`` is a directory without a manifest.
    """
    path = Path(path)
    if not path.is_dir():
        return path
    if not (path / MANIFEST).is_file():
        raise ConfigError(f"has no {MANIFEST}; name a results directory of `rdmasim run` or its {MANIFEST}",
                          file=str(path))
    return path / MANIFEST


MANIFEST_LIMIT = 64 * 2**20
"""Largest manifest read (bytes): what rdmasim writes for the largest scenario the schema takes (1024 nodes with
every key set, its resolved parameters and its text: about 5 MB) more than ten times over."""


def read_manifest(path: Path) -> Manifest:
    """Load and validate a manifest: JSON, at most :data:`MANIFEST_LIMIT` bytes, with none of the YAML reader's
    limits on a scenario file, so that what rdmasim wrote for a genuine run reads back. A manifest that does not
    validate is located line by line where the YAML reader takes it (its size and value limits), else by key.

    :raises ConfigError: unreadable, too large, not JSON (or nested past Python's reader), or a field missing or of
        the wrong type (located).
    """
    raw = read_yaml_file(path, MANIFEST_LIMIT)
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ConfigError("not a manifest: nested deeper than a JSON reader follows", file=str(path), line=1,
                          column=1) from None
    except ValueError as exc:
        line, column = getattr(exc, "lineno", 1), getattr(exc, "colno", 1)
        raise ConfigError(f"not JSON: {getattr(exc, 'msg', exc)}", file=str(path), line=line, column=column) from None
    if not isinstance(data, dict) or "rdmasim_manifest" not in data:
        raise ConfigError("not an rdmasim manifest (no 'rdmasim_manifest' key)", file=str(path), line=1, column=1)
    if "script" in data and "scenario" not in data:
        raise ConfigError(f"the results of a Python script ({data['script']}), not of a scenario: reproduce them by "
                          "running the script again (its text and SHA-256 are in the manifest)", file=str(path),
                          line=1, column=1, key="script")
    try:
        return Manifest.model_validate(data)
    except ValidationError:
        pass
    try:
        positions = parse_yaml(raw, str(path))[1]
    except ConfigError:  # past the YAML reader's limits: the errors name their keys without a line
        positions = PositionMap()
    return validate(Manifest, data, positions, str(path))


def reproduce(path: str | Path) -> tuple[bool, list[str]]:
    """Verify the manifest at ``path`` (a ``manifest.json`` or the results directory holding one) and the
    files beside it, re-run the scenario and compare; return (every check passed, report lines).

    :raises ConfigError: the manifest is malformed or its scenario text no longer validates.
    """
    path = manifest_path(path)
    record = read_manifest(path)
    report = Report()
    variants, raw = _check_manifest(record, path, report)
    _note_versions(record, report)
    on_disk = _check_disk(record, path.parent, report)
    results = [_rerun(record, name, v) for name, v in variants]
    for result in results:
        if result.variant not in record.variants:
            report.check(False, f"variant '{result.variant}': MISSING from the manifest's parameters")
            continue
        _check_engine(record, result, report)
        differences = _differences(record.variants[result.variant], _as_json(run_parameters(result)))
        report.check(not differences, f"variant '{result.variant}': re-run parameters "
                     + ("match the manifest" if not differences else f"DIFFERENT at {differences}"))
    listed = record.files_sha256 if record.files_sha256 is not None else dict(record.outputs_sha256)
    with tempfile.TemporaryDirectory() as scratch:
        rerun = files_sha256(write_results(results, Path(scratch) / "rerun", raw))
        written = set(rerun) if record.files_sha256 is not None else set(REPRODUCIBLE)
        for name in sorted((written | set(listed)) - {TRACE}):
            got = rerun.get(name)
            if got is None or name not in listed:
                report.check(False, f"{name}: re-run {'does not write it' if got is None else 'writes it'}, the "
                                    f"manifest {'lists' if got is None else 'does not list'} it")
                continue
            same = got == listed[name] == record.outputs_sha256.get(name, got) and got == on_disk.get(name, got)
            against = "the manifest" + (" and the file on disk" if name in on_disk else "")
            report.check(same, f"{name}: re-run {'identical to' if same else 'DIFFERENT from'} {against} "
                               f"(sha256 {got[:16]}...)")
    return report.ok, report.lines


TRACE = "trace.json"
"""A run's trace: checked on disk, not re-run (a re-run records none)."""


def _rerun(record: Manifest, name: str, variant: Scenario):
    """Run ``variant`` again with the recorded seed, on the engine that ran it."""
    recorded = (record.engines or {}).get(name)
    if recorded is not None:
        variant = variant.model_copy(update={"engine": recorded.ran})
    return run_scenario(variant, record.seed, variant=name, notice=lambda _: None)


def _check_engine(record: Manifest, result, report: Report) -> None:
    """The re-run's engine is the one recorded for its variant (nothing to compare in an older manifest)."""
    recorded = (record.engines or {}).get(result.variant)
    if recorded is None:
        return
    same = result.engine == recorded.ran
    report.check(same, f"variant '{result.variant}': re-run on the {ENGINES[result.engine]}"
                       + (", as recorded" if same else f", DIFFERENT from the {ENGINES[recorded.ran]} recorded"))


def _check_manifest(record: Manifest, path: Path, report: Report) -> tuple[list, bytes]:
    """The manifest's own consistency; returns the variants to re-run (with the recorded engine) and the
    scenario bytes."""
    raw = record.scenario_text.encode("utf-8")
    digest = hashlib.sha256(raw).hexdigest()
    report.check(digest == record.scenario_sha256,
                 "manifest: scenario text " + ("matches scenario_sha256" if digest == record.scenario_sha256
                                               else f"DIFFERS from scenario_sha256 (text hashes to {digest[:16]}...)"))
    variants = recorded_variants(record, path)
    names = [name for name, _ in variants]
    same_names = names == list(record.variants)
    report.check(same_names, "manifest: variants " + (f"match the scenario text ({', '.join(names)})" if same_names
                 else f"DIFFER from the scenario text: recorded {list(record.variants)}, text gives {names}"))
    resolved = variants[0][1].model_dump(mode="json", by_alias=True)
    differences = _differences(record.scenario, resolved)
    report.check(not differences, "manifest: resolved scenario " + (
        f"matches the scenario text (engine {resolved['engine']})" if not differences
        else f"DIFFERS from the scenario text at {differences}"))
    return variants, raw


def recorded_variants(record: Manifest, path: Path) -> list[tuple[str, Scenario]]:
    """The variants of the manifest's scenario text (``path`` is the manifest's), each with the engine the run
    asked for.

    :raises ConfigError: the recorded scenario text no longer validates.
    """
    with tempfile.TemporaryDirectory() as scratch:
        scenario_file = Path(scratch) / f"{path.name}.scenario_text.yaml"
        scenario_file.write_bytes(record.scenario_text.encode("utf-8"))
        try:
            _, _, variants = load_scenario_variants(scenario_file)
        except ConfigError as exc:
            raise ConfigError(f"the recorded scenario text no longer validates: {exc}", file=str(path),
                              key="scenario_text") from None
    engine = record.scenario.get("engine")
    if engine in ("event", "fast", "auto"):
        variants = [(name, v.model_copy(update={"engine": engine})) for name, v in variants]
    return variants


def _note_versions(record: Manifest, report: Report) -> None:
    installed = package_versions()
    for name, version in record.versions.items():
        if installed.get(name) != version:
            report.lines.append(f"note: {name} {version} recorded, {installed.get(name)} installed")


def _check_disk(record: Manifest, directory: Path, report: Report) -> dict[str, str]:
    """Hash the files beside the manifest against its list, refuse links and report files it does not list;
    returns the hashes of the listed files present."""
    links = sorted(p.relative_to(directory).as_posix() for p in _entries(directory) if p.is_symlink())
    for name in links:
        report.check(False, f"{name}: a SYMBOLIC LINK (refused: rdmasim writes regular files only)")
    listed = record.files_sha256
    if listed is None:
        report.lines.append("note: the manifest lists only metrics.parquet and summary.json (written before "
                            "manifests listed every file)")
        listed = dict(record.outputs_sha256)
    else:
        present = {p.relative_to(directory).as_posix() for p in _entries(directory) if p.is_file()}
        for name in sorted(present - set(listed) - {MANIFEST} - set(links)):
            if outdir.OWNED[outdir.RUN].fullmatch(name):  # `rdmasim report` or `plot` wrote it since
                report.lines.append(f"note: {name} is not a file of the run (a page or figure written after it), "
                                    "not checked")
            else:
                report.check(False, f"{name}: ADDED, not a file the manifest lists")
    found = {}
    for name, digest in listed.items():
        file = directory / name
        if name in links or not file.is_file():
            if name not in links:
                report.check(False, f"{name}: MISSING on disk ({file})")
            continue
        found[name] = file_sha256(file)
        same = found[name] == digest == record.outputs_sha256.get(name, digest)
        report.check(same, f"{name}: on disk {'matches' if same else 'DIFFERS from'} the manifest "
                           f"(sha256 {found[name][:16]}...)")
    return found


def _entries(directory: Path):
    """Every entry under ``directory``, links not followed."""
    for root, dirs, files in os.walk(directory):
        yield from (Path(root) / name for name in dirs + files)


def _as_json(value: Any) -> Any:
    """``value`` as it reads back from the manifest's JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


def _differences(recorded: Any, expected: Any) -> str:
    """The key paths where two JSON values differ, rendered as a short list ('' when equal)."""
    paths = list(_walk(recorded, expected, ""))
    shown = ", ".join(p or "(whole value)" for p in paths[:SHOWN_DIFFERENCES])
    more = len(paths) - SHOWN_DIFFERENCES
    return shown + (f" and {more} more" if more > 0 else "")


def _walk(a: Any, b: Any, path: str):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                yield sub
            else:
                yield from _walk(a[key], b[key], sub)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _walk(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield path

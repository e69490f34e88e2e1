"""A scenario's ``library`` studies (:mod:`models.libs`) on its testbed, after the workloads: their rows, totals
and warnings as records for ``summary.json``, and the text ``rdmasim run`` prints for them."""

from __future__ import annotations

import dataclasses

from models.libs.cuda_process import CudaProcess
from models.libs.fallback import Stack
from models.libs.rcache import RcacheParams
from models.libs import studies
from sim.engine.build import Testbed
from sim.core.units import format_duration, format_size_about
from sim.scenario.schema import Scenario
from sim.scenario.studies import DmExport, FallbackChains, LibraryStack, MultiNicServer, RcacheChurn, RegistrationOrder


def run_library(bed: Testbed, scenario: Scenario) -> list[dict]:
    """Run every study of ``scenario.library`` in order; one record each: name, kind, rows, totals, warnings."""
    processes: dict[str, CudaProcess] = {}
    records = []
    for i, study in enumerate(scenario.library):
        name = study.name or f"{study.kind}{i}"
        rows, totals, warnings = _RUN[type(study)](bed, study, processes)
        records.append({"name": name, "kind": study.kind, "rows": rows, "totals": totals, "warnings": warnings})
    return records


def _stack(bed: Testbed, spec: LibraryStack | RegistrationOrder, processes: dict[str, CudaProcess]) -> Stack:
    """A stack on ``spec.on``; one process per GPU, shared by the studies (so their addresses do not collide)."""
    node = spec.on.split(".")[0]
    gpu = bed.gpus[spec.on]
    process = processes.setdefault(spec.on, CudaProcess(gpu, name=f"{spec.on}.lib", data=bed.env.data_mode))
    return Stack(bed.nodes[node], bed.pds[node], gpu, process, peermem_loaded=getattr(spec, "peermem", True),
                 dmabuf_enabled=getattr(spec, "dmabuf", True))


def _churn(bed: Testbed, study: RcacheChurn, processes) -> tuple[list[dict], dict, list[str]]:
    params = RcacheParams(memory_hooks=study.memory_hooks, validate_buffer_id=study.validate_buffer_id,
                          max_unreleased=study.max_unreleased)
    if study.lookup is not None:
        params = dataclasses.replace(params, lookup_ps=study.lookup)
    return studies.buffer_churn(_stack(bed, study, processes), study.policy, params, study.sizes, study.steps,
                                study.lifetime, study.write)


def _fallback(bed: Testbed, study: FallbackChains, processes) -> tuple[list[dict], dict, list[str]]:
    stacks = {_stack_label(s): _stack(bed, s, processes) for s in study.stacks}
    rows = studies.fallback_chains(stacks, study.policies, study.size)
    outcomes = {}
    for row in rows:
        outcome = row["method"] or f"error {row['error']}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return rows, outcomes, [f"{r['stack']} {r['policy']}: {r['warnings']}" for r in rows if r["warnings"]]


def _stack_label(spec: LibraryStack) -> str:
    """'a.gpu0', with ' no-peermem' and ' dmabuf-off' when the stack says so."""
    return f"{spec.on}{'' if spec.peermem else ' no-peermem'}{'' if spec.dmabuf else ' dmabuf-off'}"


def _order(bed: Testbed, study: RegistrationOrder, processes) -> tuple[list[dict], dict, list[str]]:
    rows, totals = studies.registration_order(_stack(bed, study, processes), study.buffer_sizes(), study.orders,
                                              study.memory)
    return rows, {f"{order}_ps": total for order, total in totals.items()}, []


def _multi_nic(bed: Testbed, study: MultiNicServer, processes) -> tuple[list[dict], dict, list[str]]:
    layout = study.layout.layout()
    rows, totals, matrix = studies.multi_nic_server(layout, study.message, study.buffer_sizes())
    return rows, totals | {"matrix": matrix}, []


def _dm_export(bed: Testbed, study: DmExport, processes) -> tuple[list[dict], dict, list[str]]:
    node = bed.nodes[study.on.split(".")[0]]
    rows, totals, warnings = studies.dm_export_study(bed.contexts[node.name], study.on, study.length,
                                             broken=study.broken_importer)
    return rows, totals, node.kernel.warnings + warnings


_RUN = {RcacheChurn: _churn, FallbackChains: _fallback, RegistrationOrder: _order, MultiNicServer: _multi_nic,
        DmExport: _dm_export}


def format_library(records_by_variant: dict[str, list[dict]]) -> str:
    """What ``rdmasim run`` prints: each study's totals and warnings, per variant."""
    lines = []
    for variant, records in records_by_variant.items():
        for record in records:
            label = record["name"] if variant == "base" else f"{variant}: {record['name']}"
            lines.append(f"library {label} ({record['kind']})")
            if record["kind"] == "fallback-chain":
                lines += [f"  {r['stack']:<24} {r['policy']:<15} {r['method'] or 'error ' + r['error']:<13} "
                          f"{r['attempts']}" for r in record["rows"]]
            elif record["kind"] == "dm-export":
                lines += [f"  {r['call']:<37} {r['outcome']}" for r in record["rows"]]
            elif record["kind"] == "multi-nic":
                totals = dict(record["totals"])
                lines += ["  " + line for line in totals.pop("matrix").splitlines()]
                lines += [f"  {r['gpu']}: nearest {r['nearest_nics']}, rail {r['rail_nics']}, "
                          f"{r['rail_aligned_GBps'] * 8:.1f} Gb/s rail-aligned, {r['cross_rail_GBps'] * 8:.1f} Gb/s to "
                          f"{r['cross_rail_nic']}" for r in record["rows"]]
                lines.append("  " + ", ".join(_total(k, v) for k, v in totals.items()))
            else:
                lines.append("  " + ", ".join(_total(k, v) for k, v in record["totals"].items()))
            lines += [f"  warning: {w}" for w in dict.fromkeys(record["warnings"])]
    return "\n".join(lines)


def _total(key: str, value) -> str:
    """A total as printed, its name without the unit suffix and its value with the unit: times (keys ending in
    _ps) in a human unit, rates (_GBps) in Gb/s as every other rate rdmasim prints, bytes in binary units."""
    if key.endswith("_GBps"):
        return f"{key[:-5]} {value * 8:.1f} Gb/s"
    if key.endswith("_ps"):
        return f"{key[:-3]} {format_duration(value)}"
    if key.startswith("bytes") or key.endswith("bytes"):
        return f"{key} {format_size_about(value)}"
    return f"{key} {value}"
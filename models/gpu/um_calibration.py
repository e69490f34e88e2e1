"""The managed-memory measurements as model experiments, and the least-squares fit of the UVM costs.

Each measured item of ``models/data/h200_managed_memory.json`` (calib/gpu_um/measure_um.py) becomes a
:class:`Case`: the same access order replayed on :class:`~models.gpu.managed.ManagedMemory`. The GPU
kernels map to patterns as follows: the grid-stride read sweeps pages in order in lanes that stall
independently (:func:`read_all`); the one-touch-per-thread kernels launch every thread block at once, so
their warps reach the fault buffer in arbitrary order (:func:`concurrent_warps`, fixed seed). Counts (batches,
VA blocks, pages, faults) do not depend on the time constants, but which blocks and copies of a batch are waited
on does (:func:`~models.gpu.managed.last_service_waited`), so :func:`fit` repeats a linear least squares of the
relative error against the geometric mean of the runs' medians until the constants stop moving.

Roles: ``fit`` cases (grid-stride first touch, sparse touches, VA-block sweeps, prefetches, CPU reads)
set the constants; ``check`` cases (touching the first M pages of every block, and reads that follow a
partial touch) test the prefetch tree without being fitted; ``empty`` cases are reads after a touch that
the prefetcher completed (measured time ~ the resident kernel, the model migrates nothing). The CPU reads one
byte every 4 KiB, 64 KiB or 2 MiB of a host-resident range (never moved, or faulted back): each read costs a touch
(:attr:`~models.gpu.managed.UvmParams.cpu_touch_ps`) plus, per doubling of its distance from the previous read,
:attr:`~models.gpu.managed.UvmParams.cpu_touch_doubling_ps`; the 4 KiB and 64 KiB strides fit both, the 2 MiB
stride (a ``check`` case) tests the rule.

The per-call experiments (``models/data/h200_um_edges.json``, calib/gpu_um/measure_um_edges.py, a 64 MiB
range) add prefetches of 4 KiB .. 16 MiB to the fit, which sets the fixed cost of one cudaMemPrefetchAsync
from calls too small to move anything (~31 us). Their sparse first touches (1 .. 32 VA blocks, 1 .. 256 pages
of one block) are ``edge`` cases, shown and not fitted: one touch there costs ~60 us, under half of what the
1 GiB-range experiments imply for a fault's fixed cost (fault latency + one batch, ~140 us).

The range experiment (``models/data/h200_um_range.json``, calib/gpu_um/measure_um_range.py) repeats the one- and
eight-block touches on ranges of 64 MiB .. 4 GiB in one process, so one machine and driver state serve every
size: ``range`` cases after the whole range went back to the host (the protocol of ``blocks``), ``partial``
cases after only the touched blocks did. Within the run the range's size moves one touch by at most ~1.7x
(72 .. 121 us), less than the 64 MiB and 1 GiB experiments differ between machines; ``partial`` touches cost
17-71 us less than ``range`` ones of the same size while the model, which keeps no state a prefetch of blocks
already on the host would change, charges both alike. Both are shown, not fitted: as fit rows they pull the
fault latency to zero and ``blocks 1`` to -35 %. Their tolerance is the wider side of their 15 repetitions'
[min, max] about the median (:attr:`Case.tolerance`).

The stride experiment (``models/data/h100_um_cpu.json``, calib/gpu_um/measure_um_cpu.py; a machine of the same
kind with an H100, two runs) reads one byte every 4 KiB .. 8 MiB (doubling) of a host-resident 1 GiB range in one
process: ``stride`` cases, shown, not fitted, each less the read of one byte (the read's own start, ~12 us).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Callable

import numpy as np

from sim.core import PS_PER_S

from models.gpu.managed import UVM_PRESETS, ManagedMemory, UvmParams, UvmStats
from models.gpu.workloads import block_heads, concurrent_warps, sequential, strided
from models.size_cost import spread_tolerance

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DATA = Path(__file__).resolve().parents[1] / "data" / "h200_managed_memory.json"
EDGES = Path(__file__).resolve().parents[1] / "data" / "h200_um_edges.json"
RANGE = Path(__file__).resolve().parents[1] / "data" / "h200_um_range.json"
STRIDES = Path(__file__).resolve().parents[1] / "data" / "h100_um_cpu.json"
PAGE = 4 * KiB
SPAN = GiB
"""Buffer of the sparse, block and CPU experiments."""
EDGE_SPAN = 64 * MiB
"""Buffer of the per-call experiments (calib/gpu_um/measure_um_edges.py)."""
TOLERANCE = 0.25
"""Of the experiments run on several machines: they spread +-30 % between machines (fault-driven, CPU faults)."""
PREFETCH_TOLERANCE = 0.30
"""Of the prefetches: one 2 MiB block is 16-28 % slower than a fixed cost and a rate predict (both experiments)."""


@dataclass(frozen=True)
class Case:
    """One measured item: ``measured_s`` holds each run's median; ``model`` replays it (returns stats)."""

    name: str
    group: str
    """``gpu``, ``cpu`` or ``prefetch``: which constants it constrains."""
    role: str
    """``fit``, ``check``, ``empty``, ``edge``, ``range``, ``partial`` or ``stride`` (see the module docstring)."""
    measured_s: tuple[float, ...]
    model: Callable[[UvmParams], UvmStats]
    spread: float | None = None
    """Where only one run measured it: the wider side of its repetitions' [min, max] about the median."""

    @property
    def center_s(self) -> float:
        """Geometric mean of the runs' medians."""
        return float(np.exp(np.mean(np.log(self.measured_s))))

    @property
    def tolerance(self) -> float:
        """How far the model may be from :attr:`center_s` (a fraction): the repetitions' spread where one run
        measured it, else 25 % (prefetches 30 %), the fitted experiments' spread between machines."""
        if self.spread is not None:
            return self.spread
        return PREFETCH_TOLERANCE if self.group == "prefetch" else TOLERANCE


def _warps(pattern: np.ndarray) -> np.ndarray:
    return concurrent_warps(pattern, rng=np.random.default_rng(0))


def read_all(mm: ManagedMemory) -> UvmStats:
    """measure_um.py's ``read_all`` kernel over the whole range: a grid-stride loop of ``min(SMs * 8, pages)``
    thread blocks (:attr:`~models.gpu.managed.UvmParams.sweep_lanes`), each a lane of
    :func:`~models.gpu.fault_batches.lane_batches`."""
    return mm.gpu_access(sequential(mm.n_pages), lanes=min(mm.params.sweep_lanes, mm.n_pages))


def _gpu(size: int, pattern: np.ndarray | None, *, bytes_per_access: int = PAGE, then_read: bool = False):
    """Replay ``pattern`` (None: :func:`read_all`) on a host-resident range; ``then_read``: then time a read_all."""
    def replay(params: UvmParams) -> UvmStats:
        mm = ManagedMemory(size, params)
        stats = read_all(mm) if pattern is None else mm.gpu_access(pattern, bytes_per_access=bytes_per_access)
        return read_all(mm) if then_read else stats
    return replay


def _prefetch(size: int, to: str):
    def replay(params: UvmParams) -> UvmStats:
        mm = ManagedMemory(size, params)
        if to == "host":
            mm.prefetch(0, mm.n_pages, to="gpu")
        return mm.prefetch(0, mm.n_pages, to=to)
    return replay


def _prefetch_part(nbytes: int, to: str):
    """cudaMemPrefetchAsync of the first ``nbytes`` of a host-resident :data:`EDGE_SPAN` range."""
    def replay(params: UvmParams) -> UvmStats:
        mm = ManagedMemory(EDGE_SPAN, params)
        if to == "host":
            mm.prefetch(0, nbytes // PAGE, to="gpu")
        return mm.prefetch(0, nbytes // PAGE, to=to)
    return replay


def _cpu(stride: int, *, then_read: bool, resident_on: str = "gpu"):
    def replay(params: UvmParams) -> UvmStats:
        mm = ManagedMemory(SPAN, params)
        if resident_on == "gpu":
            mm.prefetch(0, mm.n_pages, to="gpu")
        stats = mm.cpu_access(strided(mm.n_pages, stride // PAGE))
        return mm.cpu_access(sequential(mm.n_pages)) if then_read else stats
    return replay


def _range_touch(size: int, k: int, previous: int, *, range_back: bool):
    """One repetition of measure_um_range.py on a ``size`` range, timed from its touch: the range's previous
    repetition touched ``previous`` blocks (K = 1, 8 alternate), then the whole range (``range_back``) or its first
    ``k`` blocks went back to the host, then a 4 B write at the start of each of the first ``k`` VA blocks."""
    def replay(params: UvmParams) -> UvmStats:
        mm = ManagedMemory(size, params)
        mm.gpu_access(strided(previous * mm.ppb, mm.ppb), bytes_per_access=4)
        mm.prefetch(0, mm.n_pages if range_back else k * mm.ppb, to="host")
        return mm.gpu_access(strided(k * mm.ppb, mm.ppb), bytes_per_access=4)
    return replay


def range_cases(path: Path = RANGE) -> list[Case]:
    """The range experiment's items (one run): ``range`` and ``partial`` cases with their spread."""
    cases = []
    for run in json.loads(Path(path).read_text())["runs"]:
        for key, role, back in (("touch", "range", "range"), ("touch_after_partial", "partial", "blocks")):
            ks = sorted({item["va_blocks"] for item in run[key]})
            for item in run[key]:
                n, k, faulted = item["range_bytes"], item["va_blocks"], item["faulted"]
                previous = ks[ks.index(k) - 1]  # the script's loop takes each K in turn, repetition by repetition
                cases.append(Case(f"touch {k} blocks of {n // MiB}MiB, {back} to host", "gpu", role,
                                  (faulted["median_s"],), _range_touch(n, k, previous, range_back=role == "range"),
                                  spread_tolerance(faulted, 0.0, low="min_s", high="max_s")))
    return cases


def stride_cases(path: Path = STRIDES) -> list[Case]:
    """The stride experiment's CPU reads of host-resident managed memory (one machine, two runs): ``stride`` cases,
    each run's median less its read of one byte (the read's own start, which the model does not charge); their
    tolerance is the wider side of the repetitions' [min, max] about the median, at least :data:`TOLERANCE`."""
    runs = json.loads(Path(path).read_text())["runs"]
    start = [run["call"]["median_s"] for run in runs]  # per run: its read of one byte (s)
    cases = []
    for rows in zip(*(run["managed"] for run in runs)):
        stride = rows[0]["stride"]
        spread = max(spread_tolerance({k: row[k] - s for k in ("median_s", "min_s", "max_s")}, TOLERANCE,
                                      low="min_s", high="max_s") for row, s in zip(rows, start))
        cases.append(Case(f"cpu stride {stride // KiB}KiB on host", "cpu", "stride",
                          tuple(row["median_s"] - s for row, s in zip(rows, start)),
                          _cpu(stride, then_read=False, resident_on="host"), spread))
    return cases


def load_cases(path: Path = DATA) -> list[Case]:
    """Every measured item as a :class:`Case` (items absent from a run are skipped for that run)."""
    runs = json.loads(Path(path).read_text())["runs"]
    found: dict[str, tuple[str, str, Callable, list[float]]] = {}

    def add(name: str, group: str, model: Callable, seconds: float, role: str = "fit") -> None:
        found.setdefault(name, (group, role, model, []))[3].append(seconds)

    for run in runs:
        for item in run["first_touch"]:
            n = item["bytes"]
            add(f"first_touch {n // MiB}MiB", "gpu", _gpu(n, None), item["faulted"]["median_s"])
        for item in run["sparse"]:
            st = item["stride"]
            pattern = _warps(strided(SPAN // PAGE, st // PAGE))
            add(f"sparse {st // KiB}KiB", "gpu", _gpu(SPAN, pattern, bytes_per_access=4), item["faulted"]["median_s"])
            if "then" in item:
                add(f"sparse {st // KiB}KiB then read", "gpu",
                    _gpu(SPAN, pattern, bytes_per_access=4, then_read=True),
                    item["then"]["followup_read_all"]["median_s"], "check" if st == 2 * MiB else "empty")
        for item in run["blocks"]:
            k = item["va_blocks"]
            add(f"blocks {k}", "gpu", _gpu(SPAN, strided(k * 512, 512), bytes_per_access=4),
                item["faulted"]["median_s"])
        for item in run.get("block_heads", []):
            m = item["pages_per_block"]
            pattern = _warps(block_heads(SPAN // (2 * MiB), m))
            add(f"heads {m}", "gpu", _gpu(SPAN, pattern, bytes_per_access=4), item["touch"]["median_s"], "check")
            add(f"heads {m} then read", "gpu", _gpu(SPAN, pattern, bytes_per_access=4, then_read=True),
                item["followup_read_all"]["median_s"], "empty" if m >= 384 else "check")  # 75 %: completed
        for item in run["prefetch"]:
            n = item["bytes"]
            add(f"prefetch to gpu {n // MiB}MiB", "prefetch", _prefetch(n, "gpu"), item["h2d"]["median_s"])
            add(f"prefetch to host {n // MiB}MiB", "prefetch", _prefetch(n, "host"), item["d2h"]["median_s"])
        for item in run["cpu_fault_back"]:
            st = item["stride"]
            add(f"cpu {st // KiB}KiB", "cpu", _cpu(st, then_read=False), item["gpu_resident"]["read"]["median_s"])
            if "followup_4k_read" in item["gpu_resident"]:
                add(f"cpu {st // KiB}KiB then read", "cpu", _cpu(st, then_read=True),
                    item["gpu_resident"]["followup_4k_read"]["median_s"], "check" if st == 2 * MiB else "fit")
            add(f"cpu {st // KiB}KiB on host", "cpu", _cpu(st, then_read=False, resident_on="host"),
                item["host_resident"]["read"]["median_s"], "check" if st == 2 * MiB else "fit")
    for run in json.loads(EDGES.read_text())["runs"] if path == DATA else []:
        for item in run["prefetch"]:
            n = item["bytes"]
            add(f"prefetch to gpu {n // KiB}KiB of 64MiB", "prefetch", _prefetch_part(n, "gpu"),
                item["h2d"]["median_s"])
            add(f"prefetch to host {n // KiB}KiB of 64MiB", "prefetch", _prefetch_part(n, "host"),
                item["d2h"]["median_s"])
        for item in run["touch_blocks"]:
            k = item["va_blocks"]
            add(f"touch {k} blocks of 64MiB", "gpu", _gpu(EDGE_SPAN, strided(k * 512, 512), bytes_per_access=4),
                item["faulted"]["median_s"], "edge")
        for item in run["touch_pages"]:
            k = item["pages"]
            add(f"touch {k} pages of 64MiB", "gpu", _gpu(EDGE_SPAN, _warps(np.arange(k)), bytes_per_access=4),
                item["faulted"]["median_s"], "edge")
    cases = [Case(name, group, role, tuple(seconds), model) for name, (group, role, model, seconds) in found.items()]
    return cases + range_cases() + stride_cases() if path == DATA else cases


def _features(group: str, stats: UvmStats) -> list[float]:
    """Per-case multipliers of the fitted constants (seconds per unit)."""
    if group == "gpu":
        return [1.0 if stats.batches else 0.0, stats.batches, stats.blocks_waited, stats.pages_waited * PAGE]
    if group == "cpu":
        return [stats.cpu_faults, stats.pages_to_host * PAGE, stats.accesses - stats.cpu_faults,
                stats.cpu_touch_doublings]
    return [1.0, stats.pages_explicit_to_gpu * PAGE, stats.pages_explicit_to_host * PAGE]


def _fit_once(cases: list[Case], base: UvmParams) -> UvmParams:
    """One relative least squares of every group's time constants, the counts replayed with ``base``'s."""
    solved: dict[str, np.ndarray] = {}
    for group in ("gpu", "cpu", "prefetch"):
        chosen = [c for c in cases if c.group == group and c.role == "fit"]
        stats = [c.model(base) for c in chosen]
        design = np.array([_features(group, s) for s in stats], dtype=float)
        target = np.array([c.center_s - s.compute_ps / PS_PER_S for c, s in zip(chosen, stats)])
        weight = 1.0 / np.array([c.center_s for c in chosen])
        solved[group], *_ = np.linalg.lstsq(design * weight[:, None], target * weight, rcond=None)
    g, c, p = solved["gpu"], solved["cpu"], solved["prefetch"]
    ps = lambda seconds: max(0, round(seconds * PS_PER_S))  # noqa: E731 - local unit conversion
    return replace(base, fault_latency_ps=ps(g[0]), batch_ps=ps(g[1]), va_block_ps=ps(g[2]),
                   fault_migrate_Bps=1.0 / g[3], cpu_fault_ps=ps(c[0]), cpu_migrate_Bps=1.0 / c[1],
                   cpu_touch_ps=ps(c[2]), cpu_touch_doubling_ps=ps(c[3]),
                   prefetch_call_ps=ps(p[0]), prefetch_to_gpu_Bps=1.0 / p[1], prefetch_to_host_Bps=1.0 / p[2],
                   evict_block_ps=ps(g[2]), evict_Bps=1.0 / p[2])


FIT_ROUNDS = 20
"""Most rounds of :func:`fit`: which of a batch's blocks and copies are waited on depends on the constants."""


def fit(cases: list[Case], base: UvmParams | None = None) -> UvmParams:
    """Fit the time constants of every group to ``cases`` (relative least squares); geometry from ``base``.

    Which blocks and copies of a fault batch are waited on (:attr:`UvmStats.blocks_waited`) depends on the
    constants, so the fit is repeated with its own result until the constants stop moving (at most
    :data:`FIT_ROUNDS` rounds). Eviction constants are not measured: they follow ``va_block_ps`` and
    ``prefetch_to_host_Bps``.
    """
    params = _fit_once(cases, base or UVM_PRESETS["h200"])
    for _ in range(FIT_ROUNDS):
        again = _fit_once(cases, params)
        if again == params:
            break
        params = again
    return params


def compare(cases: list[Case], params: UvmParams) -> list[dict]:
    """Model vs measured per case: rows with ``model_ms``, ``measured_ms`` (geometric mean of the runs),
    ``runs_ms`` (each run's median) and ``error`` (model / measured - 1)."""
    rows = []
    for case in cases:
        model_s = case.model(params).total_ps / PS_PER_S
        rows.append({"case": case.name, "group": case.group, "role": case.role, "model_ms": model_s * 1e3,
                     "measured_ms": case.center_s * 1e3, "runs_ms": [round(s * 1e3, 3) for s in case.measured_s],
                     "error": model_s / case.center_s - 1.0})
    return rows

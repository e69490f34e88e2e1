"""GPU allocation costs: what cudaMalloc/cudaFree and the VMM calls cost the calling thread, by size.

Each call takes ``fixed + per_GiB * (n / GiB) ** exponent``: a fixed cost (driver entry, bookkeeping) and a part
that grows with the size, sub-linearly for the calls that only build page tables (cudaMalloc, cuMemSetAccess)
and linearly for those that give pages back (cudaFree, cuMemRelease). Fitted by
:func:`models.size_cost.fit_call_cost` to our H200 measurements (``models/data/h200_gpu_alloc.json``, script
``calib/gpu_alloc/measure_alloc.py``, fit ``calib/gpu_alloc/fit_alloc.py``; two runs on fresh machines, 5 and 7
repetitions per size, 2 MiB .. 64 GiB).

What the H200 showed: allocating is cheap (cudaMalloc of 64 GiB: ~2.3 ms) and freeing is not (cudaFree of
64 GiB: ~34 ms, ~0.5 ms per GiB); the VMM path splits the same work over cuMemCreate, cuMemMap and
cuMemSetAccess (which builds the mappings) and cuMemUnmap and cuMemRelease (which frees). From 2 GiB up, some
allocations take a slow path at ~4-5 ms per GiB, alternating with fast ones back to back, gone 0.4 s after the
previous free (``calib/gpu_alloc/measure_slow_path.py``; not fresh pages). These calls charge the typical (fast)
time and the data file counts the slow samples. What decides the slow path is the memory cleared since the frees
before (:mod:`models.gpu.scrub`, measured on an H200 and H100s): an allocation waits for freed memory still being
cleared, or takes the driver's slow path, and the first one after a clearing ended takes that memory back.

The H100's curves are fitted the same way to two runs on fresh H100 80GB HBM3 machines (``h100_gpu_alloc.json``,
2 MiB .. 32 GiB): the same shape, small calls 40-80 % dearer. No AMD measurement exists here: the ``mi300x`` preset
borrows the H200's curve (``GpuParams.alloc_preset``).
"""

from __future__ import annotations

import numpy as np

from sim.core import PS_PER_S

from models.size_cost import CallCost, spread_tolerance

GiB = 1 << 30
SLOW_FACTOR = 10.0
"""A sample more than this many times the fastest of its size is a slow-path sample (not fitted)."""


def typical_samples(samples) -> np.ndarray:
    """The samples on the usual path: those within :data:`SLOW_FACTOR` of the fastest."""
    s = np.asarray(samples, dtype=float)
    return s[s <= SLOW_FACTOR * s.min()]



CALLS = ("cudaMalloc", "cudaFree", "cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess",
         "cuMemUnmap", "cuMemRelease", "cuMemAddressFree")
"""The measured calls, in the order a program makes them."""

ALLOC_PRESETS: dict[str, dict[str, CallCost]] = {
    "h200": {
        "cudaMalloc": CallCost(36_954_919, 145_829_549, 0.66),
        "cudaFree": CallCost(26_650_091, 663_022_379, 0.92),
        "cuMemCreate": CallCost(18_415_352, 43_747_533, 0.5),
        "cuMemAddressReserve": CallCost(3_863_811, 7_076_778, 0.45),
        "cuMemMap": CallCost(3_892_138, 1_531_520, 0.54),
        "cuMemSetAccess": CallCost(31_068_758, 76_889_495, 0.75),
        "cuMemUnmap": CallCost(22_408_756, 22_885_714, 0.76),
        "cuMemRelease": CallCost(10_429_929, 576_444_261, 0.96),
        "cuMemAddressFree": CallCost(2_392_179, 7_706_961, 0.45),
    },
    "h100": {
        "cudaMalloc": CallCost(48_304_895, 97_544_732, 0.75),
        "cudaFree": CallCost(42_197_103, 439_691_624, 1.02),
        "cuMemCreate": CallCost(28_394_840, 25_335_296, 0.71),
        "cuMemAddressReserve": CallCost(7_353_062, 2_865_703, 0.76),
        "cuMemMap": CallCost(6_235_106, 1_322_069, 0.68),
        "cuMemSetAccess": CallCost(43_392_535, 35_937_850, 1.03),
        "cuMemUnmap": CallCost(26_855_571, 10_939_291, 1.0),
        "cuMemRelease": CallCost(17_423_424, 467_123_185, 1.1),
        "cuMemAddressFree": CallCost(5_031_613, 3_316_410, 0.7),
    },
}
"""Fitted per-call costs per GPU (``models/data/<gpu>_gpu_alloc.json``); ``tests/models/gpu/test_alloc_cost.py``
re-fits them from the data."""


TIMER_FLOOR_S = 15e-6
"""Calls faster than this were timed too close to the measuring loop's own overhead (ctypes, perf_counter)
to hold the model to them: their rows are reported, not required."""
VA_ONLY_BELOW_S = 100e-6
"""A call that stays below this at every measured size does no per-page work (cuMemAddressReserve, cuMemMap,
cuMemAddressFree: 3 to 50 us); its rows are reported, not required."""
MIN_TOLERANCE = 0.10
"""Least tolerance of a point however narrow its samples' spread."""


def compare(points: list[dict], calls: dict[str, CallCost]) -> list[dict]:
    """Model vs measured per point of ``models/data/h200_gpu_alloc.json``: ``call``, ``bytes``, ``sim_s``,
    ``measured_s`` (typical median), ``tolerance``, ``required`` (the call takes at least
    :data:`TIMER_FLOOR_S` here and :data:`VA_ONLY_BELOW_S` somewhere) and ``slow_samples``."""
    slowest: dict[str, float] = {}
    for p in points:
        slowest[p["call"]] = max(slowest.get(p["call"], 0.0), p["median_s"])
    return [{"call": p["call"], "bytes": p["bytes"], "sim_s": calls[p["call"]].time_ps(p["bytes"]) / PS_PER_S,
             "measured_s": p["median_s"], "tolerance": spread_tolerance(p, MIN_TOLERANCE),
             "required": p["median_s"] >= TIMER_FLOOR_S and slowest[p["call"]] >= VA_ONLY_BELOW_S,
             "slow_samples": p["slow_samples"]} for p in points]


def gpu_alloc_costs(gpu: str) -> AllocCosts:
    """The allocation costs of GPU preset ``gpu`` (``GpuParams.alloc_preset``), the cudaMalloc path."""
    from models.gpu.presets import gpu_params

    return AllocCosts(ALLOC_PRESETS[gpu_params(gpu).alloc_preset])


class AllocCosts:
    """Allocation costs of one GPU's driver: what an allocation and a free cost the calling thread.

    :param calls: per-call costs, e.g. ``ALLOC_PRESETS["h200"]``.
    :param vmm: the program allocates through the VMM API (create, reserve, map, set access) instead of
        cudaMalloc, and frees by unmap, release, address free.
    """

    def __init__(self, calls: dict[str, CallCost] | None = None, *, vmm: bool = False) -> None:
        self.calls = ALLOC_PRESETS["h200"] if calls is None else calls
        self.vmm = vmm

    def call_ps(self, call: str, nbytes: int) -> int:
        """One measured call on ``nbytes`` (ps).

        :raises KeyError: not one of :data:`CALLS`.
        """
        if call not in self.calls:
            raise KeyError(f"no allocation cost for {call!r}; known: {', '.join(self.calls)}")
        return self.calls[call].time_ps(nbytes)

    def allocate_ps(self, nbytes: int) -> int:
        """One allocation of ``nbytes`` (ps): cudaMalloc, or the four VMM calls that make memory usable."""
        calls = CALLS[2:6] if self.vmm else CALLS[:1]
        return sum(self.call_ps(c, nbytes) for c in calls)

    def free_ps(self, nbytes: int) -> int:
        """Freeing an allocation of ``nbytes`` (ps): cudaFree, or unmap, release and address free."""
        calls = CALLS[6:] if self.vmm else CALLS[1:2]
        return sum(self.call_ps(c, nbytes) for c in calls)

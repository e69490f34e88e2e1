"""The clearing of freed GPU memory (:mod:`models.gpu.scrub`) against ``calib/gpu_alloc/measure_scrub.py``'s runs.

Each measured case is replayed on a :class:`models.gpu.scrub.ScrubQueue` with the preset's call costs
(:class:`models.gpu.alloc_cost.AllocCosts`): the frees of the case, then the timed allocation, whose time is its
wait for cleared memory plus the cudaMalloc call. Times are measured from the end of the case's last free, as
the script's timer starts there (after its sleep, if any). The cases (``models/data/gpu_scrub.json``):

* ``sizes``: X GiB free and X + 2 GiB room: allocate and free X, then allocate X at once (fits the rate);
* ``progress``: 66 GiB room: allocate and free 64 GiB, sleep d, allocate k GiB (8, 32, 62);
* ``two_frees``: 66 GiB room: allocate two 32 GiB, free both, allocate 62 GiB at once (the second free's
  measured time between the two, so that the queue is held to its rule, not to cudaFree's fit);
* ``idle``: no ballast: allocate and free 8 GiB, sleep W, allocate 8 GiB.
"""

from __future__ import annotations

import numpy as np

from sim.core import PS_PER_S

from models.gpu.alloc_cost import AllocCosts
from models.gpu.scrub import GiB, ScrubQueue
from models.size_cost import range_tolerance

MIN_TOLERANCE = 0.10
"""Least tolerance of a case however close its repetitions (the H200's and the H100's rates differ by ~5 %)."""
PAUSE_S = 0.05
"""From this pause on, the measured allocations pay a cost the queue does not model (4-12 ms on both GPUs)."""


def replay(item: str, case: dict, costs: AllocCosts, ps_per_GiB: int, free_bytes: int) -> int:
    """The modeled time of ``case``'s timed allocation (ps); ``free_bytes``: memory free before it with no ballast."""
    queue, now = ScrubQueue(ps_per_GiB), 0
    if item == "sizes":
        size = case["gib"] * GiB
        queue.freed(now, size)
        room, ask = size + 2 * GiB, size
    elif item == "progress":
        queue.freed(now, 64 * GiB)
        room, ask, now = 66 * GiB, case["k_gib"] * GiB, round(case["delay_s"] * PS_PER_S)
    elif item == "two_frees":
        queue.freed(now, 32 * GiB)
        now += round(float(np.median([frees[1] for frees in case["free_s"]])) * PS_PER_S)  # the second free
        queue.freed(now, 32 * GiB)
        room, ask = 66 * GiB, 62 * GiB
    elif item == "idle":
        queue.freed(now, 8 * GiB)
        room, ask, now = free_bytes, 8 * GiB, round(case["wait_s"] * PS_PER_S)
    else:
        raise ValueError(f"unknown scrub case {item!r}")
    return queue.wait_ps(now, ask, room) + costs.allocate_ps(ask)


def fit_rate(sizes: list[dict], costs: AllocCosts) -> int:
    """The clearing time per GiB (ps) that fits the ``sizes`` cases best by relative least squares: each one's
    allocation waits ``rate * X`` plus the cudaMalloc call."""
    x = np.array([c["gib"] * GiB for c in sizes for _ in c["alloc_s"]], dtype=float)
    call = np.array([costs.allocate_ps(int(n)) for n in x], dtype=float)
    measured = np.array([a * PS_PER_S for c in sizes for a in c["alloc_s"]])
    u = x / GiB / measured
    return round(float(np.sum(u * (1 - call / measured)) / np.sum(u * u)))


def label(item: str, case: dict) -> str:
    """A case in words: what was freed, how long after, what was allocated."""
    if item == "sizes":
        return f"free {case['gib']} GiB, allocate it again"
    if item == "progress":
        return f"free 64 GiB, {case['delay_s']:g} s later allocate {case['k_gib']} GiB"
    if item == "two_frees":
        return "free 2 x 32 GiB, allocate 62 GiB"
    return f"8 GiB with room, {case['wait_s']:g} s after a free"


def compare(machine: dict, costs: AllocCosts, ps_per_GiB: int) -> list[dict]:
    """Per measured case of one machine (an entry of ``gpu_scrub.json``'s ``machines``): ``item``, ``case`` (in
    words), ``bytes`` allocated, ``sim_s``, ``measured_s`` (median of its repetitions), ``tolerance`` (their
    spread, at least :data:`MIN_TOLERANCE`), ``required`` (it waits for cleared memory, with no pause of
    :data:`PAUSE_S` or more before it) and a ``note``."""
    rows = []
    for item in ("sizes", "progress", "two_frees", "idle"):
        for case in machine[item]:
            samples = np.asarray(case["alloc_s"])
            median = float(np.median(samples))
            paused = case.get("delay_s", case.get("wait_s", 0.0)) >= PAUSE_S
            required = item != "idle" and not paused
            note = ("after a pause: not modeled (4-12 ms with room to spare, 27-32 ms 0.2 s after 64 GiB)" if paused
                    else "room to spare: no wait, cudaMalloc's own time (its rows)" if item == "idle" else "")
            asked = case.get("gib") or case.get("k_gib") or (62 if item == "two_frees" else 8)
            rows.append({"item": item, "case": label(item, case), "bytes": asked * GiB,
                         "sim_s": replay(item, case, costs, ps_per_GiB, machine["free_bytes"]) / PS_PER_S,
                         "measured_s": median, "required": required,
                         "tolerance": range_tolerance(samples, MIN_TOLERANCE),
                         "note": note})
    return rows

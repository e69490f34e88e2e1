"""The clearing of freed GPU memory and its taking back (:mod:`models.gpu.scrub`) against the runs of
``calib/gpu_alloc/measure_scrub.py``, ``measure_pause.py`` and ``measure_slow_path.py``.

Each clearing case is replayed on a :class:`models.gpu.scrub.ScrubQueue` with the preset's call costs
(:class:`models.gpu.alloc_cost.AllocCosts`): the frees of the case, then the timed allocation, whose time is its
wait for cleared memory, the taking back of what was cleared and the cudaMalloc call. Times are measured from the
end of the case's last free, as the script's timer starts there (after its sleep, if any). The cases
(``models/data/gpu_scrub.json``):

* ``sizes``: X GiB free and X + 2 GiB room: allocate and free X, then allocate X at once (fits the rate);
* ``progress``: 66 GiB room: allocate and free 64 GiB, sleep d, allocate k GiB (8, 32, 62);
* ``two_frees``: 66 GiB room: allocate two 32 GiB, free both, allocate 62 GiB at once (the second free's
  measured time between the two, so that the queue is held to its rule, not to cudaFree's fit).

The runs' ``idle`` cases (8 GiB with room to spare, W s after a free) are taking-back cases: ``fit_pause.py`` reads
them into ``gpu_reclaim.json``, replayed by :func:`reclaim_ps`. Back-to-back allocate-then-free cycles
(``gpu_alternation.json``, the H200's ``h200_alloc_slow_path.json``) are replayed by :func:`replay_cycles`:
:func:`fit_slow` fits the driver's slow path to them, :func:`compare_slow` compares.
"""

from __future__ import annotations

import numpy as np

from sim.core import PS_PER_S

from models.gpu.alloc_cost import AllocCosts
from models.gpu.scrub import GiB, ScrubQueue, ScrubRates
from models.size_cost import range_tolerance, spread_tolerance

MIN_TOLERANCE = 0.10
"""Least tolerance of a case however close its repetitions (the H200's and the H100's rates differ by ~5 %)."""


def replay(item: str, case: dict, costs: AllocCosts, rates: ScrubRates) -> int:
    """The modeled time of ``case``'s timed allocation (ps)."""
    queue, now = ScrubQueue(rates), 0
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
    else:
        raise ValueError(f"unknown scrub case {item!r}")
    return sum(queue.take(now, ask, room)) + costs.allocate_ps(ask)


def per_GiB_fit(gib: np.ndarray, call_ps: np.ndarray, measured_s: np.ndarray) -> int:
    """The cost per GiB (ps) that fits ``measured = call + rate * gib`` best by relative least squares."""
    measured = measured_s * PS_PER_S
    u = gib / measured
    return round(float(np.sum(u * (1 - call_ps / measured)) / np.sum(u * u)))


def fit_rate(sizes: list[dict], costs: AllocCosts, reclaim_ps_per_GiB: int) -> int:
    """The clearing time per GiB (ps) that fits the ``sizes`` cases best: each one's allocation waits for its X GiB
    to be cleared, takes them back at ``reclaim_ps_per_GiB`` and makes the cudaMalloc call."""
    x = np.array([c["gib"] for c in sizes for _ in c["alloc_s"]], dtype=float)
    call = np.array([costs.allocate_ps(int(n * GiB)) for n in x], dtype=float)
    return per_GiB_fit(x, call, np.array([a for c in sizes for a in c["alloc_s"]])) - reclaim_ps_per_GiB


def reclaim_ps(case: dict, costs: AllocCosts, rates: ScrubRates) -> int:
    """The modeled time of a taking-back case of ``gpu_reclaim.json`` (ps): its freed bytes cleared long before,
    room to spare, then its call."""
    queue = ScrubQueue(rates)
    queue.freed(0, case["taken_back_bytes"])
    never_short = case["bytes"] + case["taken_back_bytes"]
    return sum(queue.take(10 * PS_PER_S, case["bytes"], never_short)) + costs.call_ps(case["call"], case["bytes"])


def fit_reclaim(cases: list[dict], costs: AllocCosts) -> int:
    """The taking-back cost per GiB (ps) that fits the cases of ``gpu_reclaim.json`` that take something back."""
    back = [c for c in cases if c["taken_back_bytes"]]
    gib = np.array([c["taken_back_bytes"] / GiB for c in back for _ in c["alloc_s"]])
    call = np.array([costs.call_ps(c["call"], c["bytes"]) for c in back for _ in c["alloc_s"]], dtype=float)
    return per_GiB_fit(gib, call, np.array([a for c in back for a in c["alloc_s"]]))


def label(item: str, case: dict) -> str:
    """A case in words: what was freed, how long after, what was allocated."""
    if item == "sizes":
        return f"free {case['gib']} GiB, allocate it again"
    if item == "progress":
        return f"free 64 GiB, {case['delay_s']:g} s later allocate {case['k_gib']} GiB"
    return "free 2 x 32 GiB, allocate 62 GiB"


def compare(machine: dict, costs: AllocCosts, rates: ScrubRates) -> list[dict]:
    """Per measured case of one machine (an entry of ``gpu_scrub.json``'s ``machines``): ``item``, ``case`` (in
    words), ``bytes`` allocated, ``sim_s``, ``measured_s`` (median of its repetitions), ``tolerance`` (their
    spread, at least :data:`MIN_TOLERANCE`), ``required`` (asked as the free returned: those asked later meet the
    clearing's end, which differs ~15 % between machines, with the taking back, which differs more) and a
    ``note``."""
    rows = []
    for item in ("sizes", "progress", "two_frees"):
        for case in machine[item]:
            samples = np.asarray(case["alloc_s"])
            median = float(np.median(samples))
            required = not case.get("delay_s")
            note = "" if required else "asked near the clearing's end (see the taking-back rows)"
            asked = case.get("gib") or case.get("k_gib") or 62
            rows.append({"item": item, "case": label(item, case), "bytes": asked * GiB,
                         "sim_s": replay(item, case, costs, rates) / PS_PER_S,
                         "measured_s": median, "required": required,
                         "tolerance": range_tolerance(samples, MIN_TOLERANCE),
                         "note": note})
    return rows


def cases_spread(machine: dict, costs: AllocCosts) -> float:
    """How far the taking back per GiB that each fitted case of one machine implies (its median less its call, over
    the GiB it takes back) lies from the machine's fit at most (a fraction): it differs between runs and machines."""
    back = [c for c in machine["cases"] if c["taken_back_bytes"] and c["source"] not in machine["held_out"]]
    return max(abs((float(np.median(c["alloc_s"])) * PS_PER_S - costs.call_ps(c["call"], c["bytes"]))
                   / (c["taken_back_bytes"] / GiB) / machine["fit_ps_per_GiB"] - 1) for c in back)


def compare_reclaim(machine: dict, costs: AllocCosts, rates: ScrubRates) -> list[dict]:
    """Per taking-back case of one machine (an entry of ``gpu_reclaim.json``'s ``machines``): ``case`` (in words,
    with its run), ``bytes`` allocated, ``sim_s``, ``measured_s`` (median), ``tolerance`` (the samples' spread or
    the fitted cases' (:func:`cases_spread`), whichever is wider), ``required`` (it takes memory back and its run
    was fitted; a held-out run's cases are shown, with why it is held out) and a ``note``."""
    spread = cases_spread(machine, costs)
    rows = []
    for case in machine["cases"]:
        samples = np.asarray(case["alloc_s"])
        back, held_out = case["taken_back_bytes"], machine["held_out"].get(case["source"])
        note = (f"takes back {back / GiB:g} GiB" if back else
                "takes nothing back: the call alone, which machines make at up to twice the speed of cudaMalloc's "
                "own rows")
        rows.append({"case": f"{case['case']} ({case['source']})", "bytes": case["bytes"],
                     "sim_s": reclaim_ps(case, costs, rates) / PS_PER_S, "measured_s": float(np.median(samples)),
                     "tolerance": max(range_tolerance(samples, MIN_TOLERANCE), spread),
                     "required": bool(back) and not held_out,
                     "note": f"held out: {held_out['why']}; {note}" if held_out else note})
    return rows


def replay_cycles(cycles: list[dict], free_bytes: int, costs: AllocCosts, rates: ScrubRates) -> list[dict]:
    """Allocate-then-free cycles made one after another on one :class:`~models.gpu.scrub.ScrubQueue` with
    ``free_bytes`` free in all (cases of ``gpu_alternation.json``, in the order they ran: each with its ``bytes``,
    its ``call`` (default cudaMalloc) and, per cycle, when its allocation started and its free returned, s). Per
    allocation: ``bytes``, ``call_ps`` (the call alone), ``measured_s``, ``sim_s`` (its wait, taking back and call)
    and ``slow`` (it took the slow path, :meth:`~models.gpu.scrub.ScrubQueue.slow_path`)."""
    queue, out = ScrubQueue(rates), []
    for case in cycles:
        for at, took, freed in zip(case["alloc_at_s"], case["alloc_s"], case["free_end_s"]):
            now = round(at * PS_PER_S)
            slow = queue.slow_path(now, case["bytes"], free_bytes)
            wait, reclaim = queue.take(now, case["bytes"], free_bytes)
            call = costs.call_ps(case.get("call", "cudaMalloc"), case["bytes"])
            out.append({"bytes": case["bytes"], "call_ps": call, "measured_s": took, "slow": slow,
                        "sim_s": (wait + reclaim + call) / PS_PER_S})
            queue.freed(round(freed * PS_PER_S), case["bytes"])
    return out


EXPONENTS = np.round(np.arange(0.80, 1.501, 0.01), 2)
"""The slow path's exponents tried by :func:`fit_slow`."""


def fit_slow(runs: list[tuple[list[dict], int]], costs: AllocCosts, rates: ScrubRates) -> tuple[int, float]:
    """The slow path's wait at 1 GiB (ps) and exponent (:attr:`~models.gpu.scrub.ScrubRates.slow_exponent`) that fit
    best, by relative least squares, the allocations of ``runs`` ((cycles, free bytes) each, :func:`replay_cycles`)
    that take it on the clearing queue of ``rates`` and took longer than their call and the taking back of every
    free byte. The replay gives the slow path no time, so that which calls take it does not depend on the fit."""
    probe = ScrubRates(rates.clear_ps_per_GiB, rates.reclaim_ps_per_GiB, 0)
    slow = [r for cycles, free in runs for r in replay_cycles(cycles, free, costs, probe)
            if r["slow"] and waited(r, "measured_s", free, rates)]
    gib = np.array([r["bytes"] / GiB for r in slow])
    call = np.array([r["call_ps"] for r in slow], dtype=float)
    measured = np.array([r["measured_s"] for r in slow])

    def misfit(exponent: float) -> tuple[float, int]:
        at_GiB = per_GiB_fit(gib ** exponent, call, measured)
        return float(np.sum((1 - (call + at_GiB * gib ** exponent) / (measured * PS_PER_S)) ** 2)), at_GiB

    best = min(EXPONENTS, key=lambda k: misfit(k)[0])
    return misfit(best)[1], float(best)


def back_to_back(run: dict) -> list[dict]:
    """The back-to-back cycles of a run of ``h200_alloc_slow_path.json`` as :func:`replay_cycles` takes them: made
    one after another in the order they ran, each call starting when the one before it returned."""
    cases, now = [], 0.0
    for c in (c for c in run["cycles"] if c["item"] == "back_to_back"):
        case = {"bytes": c["bytes"], "call": c["call"], "alloc_s": c["alloc_s"], "alloc_at_s": [], "free_end_s": []}
        for took, freeing in zip(c["alloc_s"], c["free_s"]):
            case["alloc_at_s"].append(now)
            now += took + freeing
            case["free_end_s"].append(now)
        cases.append(case)
    return cases


def waited(row: dict, key: str, free_bytes: int, rates: ScrubRates) -> bool:
    """Whether an allocation of :func:`replay_cycles`, by its ``key`` time (``measured_s`` or ``sim_s``), took longer
    than its call and the taking back of every free byte: it waited."""
    return row[key] * PS_PER_S > row["call_ps"] + free_bytes * rates.reclaim_ps_per_GiB // GiB


def _slow_waits(rows: list[dict], free_bytes: int, rates: ScrubRates) -> tuple[list[float], list[float]]:
    """The measured and the modeled times (s) of the allocations among ``rows`` that waited (:func:`waited`)."""
    return ([r["measured_s"] for r in rows if waited(r, "measured_s", free_bytes, rates)],
            [r["sim_s"] for r in rows if waited(r, "sim_s", free_bytes, rates)])


def compare_slow(alternation: dict, h200: dict, costs: dict[str, AllocCosts],
                 rates: dict[str, ScrubRates]) -> list[dict]:
    """Per case of ``gpu_alternation.json`` (``alternation``: runs on H100s and an H200, each GPU's first fitted) and
    of the H200's back-to-back cycles (``h200``: a run of ``h200_alloc_slow_path.json``, held out), replayed on the
    GPU's ``costs`` and ``rates``: ``case`` (in words), ``bytes``, the median time of the allocations that waited,
    modeled (``sim_s``) and measured (``measured_s``), ``tolerance`` (a case's waits' whole range over its GPU's runs,
    so that the machines' difference counts; the back-to-back cycles': their own range), ``required`` (never: one
    curve serves every free-memory level, where the measured waits vary with it) and a ``note`` with both counts of
    calls that waited. A case where no call waited, measured or modeled (the H200's 8 GiB cycles), has no row."""
    pooled: dict[tuple, list[float]] = {}
    replayed = []
    for run in alternation["runs"]:
        for case in run["cases"]:
            rows = replay_cycles([case], case["free_bytes"], costs[run["gpu"]], rates[run["gpu"]])
            measured, sim = _slow_waits(rows, case["free_bytes"], rates[run["gpu"]])
            pooled.setdefault((run["gpu"], case["bytes"], case["free_bytes"]), []).extend(measured)
            replayed.append((run, case, measured, sim))
    fitted = {fit["source"] for fit in alternation["fit"].values()}
    out = []
    for run, case, measured, sim in replayed:
        if not measured and not sim:
            continue
        note = "the slow path's fit" if run["source"] in fitted else "held out: another machine"
        label = (f"{run['gpu']} {run['source'][-4:]}: cudaMalloc {case['bytes'] // GiB} GiB, "
                 f"{case['free_bytes'] / GiB:.0f} GiB free")
        out.append(_slow_row(label, case["bytes"], measured, sim, pooled[run["gpu"], case["bytes"], case["free_bytes"]],
                             note))
    cases = back_to_back(h200)
    rows, k = replay_cycles(cases, h200["free_bytes"], costs["h200"], rates["h200"]), 0
    for case in cases:
        mine, k = rows[k:k + len(case["alloc_s"])], k + len(case["alloc_s"])
        measured, sim = _slow_waits(mine, h200["free_bytes"], rates["h200"])
        out.append(_slow_row(f"h200: {case['call']} {case['bytes'] // GiB} GiB back to back", case["bytes"], measured,
                             sim, measured, "held out: another H200 machine, other cycles"))
    return out


def _slow_row(case: str, nbytes: int, measured: list[float], sim: list[float], spread: list[float],
              note: str) -> dict:
    median = float(np.median(measured))
    return {"case": case, "bytes": nbytes, "sim_s": float(np.median(sim)) if sim else 0.0, "measured_s": median,
            "tolerance": spread_tolerance({"median_s": median, "min_s": min(spread), "max_s": max(spread)},
                                          MIN_TOLERANCE, low="min_s", high="max_s"),
            "required": False, "note": f"{len(measured)} calls waited, {len(sim)} modeled; {note}"}


def headroom_probe(extra: dict, nbytes: int, costs: AllocCosts, rates: ScrubRates) -> float:
    """The modeled time (s) of a probe of ``measure_headroom.py`` (an entry of a run of ``gpu_alternation.json``'s
    ``headroom``): ``nbytes`` allocated right after a free of ``nbytes``, the driver reporting ``free_before_probe``
    free (that free included), everything else cleared long before."""
    queue = ScrubQueue(rates)
    queue.freed(0, nbytes)
    wait, reclaim = queue.take(0, nbytes, probe_free(extra))
    return (wait + reclaim + costs.allocate_ps(nbytes)) / PS_PER_S


def probe_free(extra: dict) -> int:
    """The memory free in all (the free just made included) when a headroom probe came: the median the driver
    reported before that extra's probes (bytes)."""
    return round(float(np.median(extra["free_before_probe"])))


def compare_headroom(alternation: dict, costs: dict[str, AllocCosts], rates: dict[str, ScrubRates]) -> list[dict]:
    """Per probe of each run of ``gpu_alternation.json``'s ``headroom`` (H100s and an H200), on its GPU's ``costs``
    and ``rates``:
    ``case`` (in words), ``bytes``, ``sim_s`` (:func:`headroom_probe`), ``measured_s`` (median), ``tolerance`` (the
    probes' range, at least :data:`MIN_TOLERANCE`), ``required`` (the probe waited: the headroom decides it; one that
    did not is the call alone, which these machines made faster than their GPU's fit) and a ``note``."""
    rows = []
    for probes in alternation["headroom"]:
        mine, calls = rates[probes["gpu"]], costs[probes["gpu"]]
        for extra in probes["extras"]:
            row = {"call_ps": calls.allocate_ps(probes["bytes"]), "measured_s": float(np.median(extra["probe_s"])),
                   "sim_s": headroom_probe(extra, probes["bytes"], calls, mine)}
            waits = waited(row, "measured_s", probe_free(extra), mine)
            rows.append({"case": f"{probes['gpu']} {probes['source'][-4:]}: {probes['bytes'] // GiB} GiB right after "
                                 f"freeing it, {extra['extra_bytes'] >> 20} MiB more free", "bytes": probes["bytes"],
                         "sim_s": row["sim_s"], "measured_s": row["measured_s"], "required": waits,
                         "tolerance": range_tolerance(extra["probe_s"], MIN_TOLERANCE),
                         "note": "waited for the free's clearing" if waits else "went through: the call alone"})
    return rows

"""Array solvers for FIFO service centres: the recurrences of :mod:`sim.core.servers` over many jobs at once.

Jobs are given in service order; every time is an integer number of picoseconds (int64 arrays).

* :func:`cut_through` — one server: ``start_i = max(head_i, finish_{i-1})`` and
  ``finish_i = max(start_i + service_i, not_before_i)``, as :func:`sim.core.servers.claim_cut_through`.
  Exact in closed form: with ``S_i = service_0 + ... + service_i`` and ``c_i = max(head_i + service_i,
  not_before_i)``, ``finish_i = S_i + max(free_at, max_{j<=i}(c_j - S_j))`` (a cumulative sum and a running
  maximum). Most servers are idle most of the time, so the pass-through answer (``start = head``) is tried
  and checked first; it is cheaper than the running maximum, which a server busy throughout (a bottleneck)
  does not need either (its maximum is the first term).
* Stall intervals ``[s, e)``: a job that would start inside one starts at ``e`` instead (service already
  under way is not interrupted). The recurrence is then only piecewise of that form; it is solved exactly
  block by block: the stall-free solution up to the first job that would start in a stall, that job moved to
  the stall's end, and again from the next job.
* :func:`pool` — ``k`` identical servers fed by one queue, each job taking the server that frees first
  (:class:`sim.core.servers.ServerPool`, plus the cut-through ``not_before``), served job by job.

>>> start, finish = cut_through(np.array([0, 1, 10]), 4, np.array([0, 0, 0]))
>>> start.tolist(), finish.tolist()
([0, 4, 10], [4, 8, 14])
"""

from __future__ import annotations

import heapq

import numpy as np

from sim.fast.scans import SIGN, flipped_ramp, prefix_max, running_max

BLOCK = 4096
"""Jobs per block of the piecewise solution with stalls."""
PROBE = 256
"""Jobs checked first for a queue where one is expected, before all jobs are checked for none."""


def cut_through(head: np.ndarray, service, not_before: np.ndarray, free_at: int = 0,
                stalls: np.ndarray | None = None, queued: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Serve jobs in the given order on one cut-through FIFO server; return (start, finish) arrays (ps).

    :param head: time each job's head arrives (ps).
    :param service: occupancy of each job (ps): a scalar or an array.
    :param not_before: earliest finish of each job (its tail's arrival plus the tail's own time, ps).
    :param free_at: when the server is free of earlier work (ps).
    :param stalls: ``[start, end)`` rows (ps) sorted by start, during which no job may start.
    :param queued: expect a queue (check the first :data:`PROBE` jobs for one before trying pass-through for all;
        the answer is the same).
    """
    return serve(head, service, not_before, free_at, stalls, queued)[:2]


def serve(head: np.ndarray, service, not_before: np.ndarray, free_at: int = 0, stalls: np.ndarray | None = None,
          queued: bool = False, shift: int = 0) -> tuple[np.ndarray, np.ndarray, bool]:
    """:func:`cut_through` with ``shift`` (ps) added to the start times (in place where they are a new array, so
    a pipeline's next step needs no array of its own), also telling whether the running maximum was needed (some
    job may have queued; a hint for the next call with similar jobs)."""
    head = np.asarray(head, dtype=np.int64)
    not_before = np.asarray(not_before, dtype=np.int64)
    if stalls is None or len(stalls) == 0:
        start, finish, queued = _solve(head, service, not_before, int(free_at), queued)
    else:
        start, finish = _stalled(head, service, not_before, int(free_at), _coalesced(np.asarray(stalls, np.int64)))
        queued = True
    if shift and start is head:
        start = head + shift
    elif shift:
        start += shift
    return start, finish, queued


def _coalesced(stalls: np.ndarray) -> np.ndarray:
    """Intervals that touch or overlap joined into one (a job moved to one's end would be inside the next)."""
    keep = np.ones(len(stalls), bool)
    keep[1:] = stalls[1:, 0] > running_max(stalls[:-1, 1])
    group = np.cumsum(keep) - 1
    ends = np.zeros(int(group[-1]) + 1, np.int64)
    np.maximum.at(ends, group, stalls[:, 1])
    return np.column_stack((stalls[keep, 0], ends))


def _solve(head, service, not_before, free_at, queued=False):
    """(start, finish, whether the running maximum was needed) without stalls (see the module docstring)."""
    finish = head + service
    np.maximum(finish, not_before, out=finish)
    if len(finish) == 0 or (head[0] >= free_at and not (queued and _queues_early(head, finish))
                            and (head[1:] >= finish[:-1]).all()):
        return head, finish, False  # never queued: every job starts when its head arrives
    scalar = np.ndim(service) == 0
    first = free_at + (service if scalar else int(service[0]))
    if finish[0] < first:  # the first job starts once the server is free
        finish[0] = first
    shift = flipped_ramp(len(finish), service) if scalar else np.cumsum(service, dtype=np.int64) ^ SIGN
    finish -= shift  # c_j - S_j, its sign bit flipped: as unsigned integers they keep their order
    flipped = finish.view(np.uint64)
    if flipped[-1] <= flipped[0] and flipped.max() == flipped[0]:  # busy throughout: one maximum, no scan
        flipped[1:] = flipped[0]
    else:
        prefix_max(flipped)
    finish += shift
    start = np.empty_like(head)
    start[0] = max(int(head[0]), free_at)
    np.maximum(head[1:], finish[:-1], out=start[1:])
    return start, finish, True


def _queues_early(head, finish) -> bool:
    """Whether one of the first :data:`PROBE` jobs starts after its head arrives (then some job queues)."""
    probe = min(PROBE, len(head))
    return bool((head[1:probe] < finish[:probe - 1]).any())


def _stalled(head, service, not_before, free_at, stalls):
    """The piecewise exact solution with stall intervals (see the module docstring)."""
    n = len(head)
    start, finish = np.empty(n, np.int64), np.empty(n, np.int64)
    begins, ends = stalls[:, 0], stalls[:, 1]
    lo = 0
    while lo < n:
        hi = min(n, lo + BLOCK)
        part = service if np.ndim(service) == 0 else service[lo:hi]
        s, f, _ = _solve(head[lo:hi], part, not_before[lo:hi], free_at)
        k = np.searchsorted(begins, s, side="right") - 1
        inside = (k >= 0) & (s < ends[np.maximum(k, 0)])
        cut = int(np.argmax(inside)) if inside.any() else hi - lo
        start[lo:lo + cut], finish[lo:lo + cut] = s[:cut], f[:cut]
        if cut < hi - lo:  # this job would start inside a stall: it starts at the stall's end
            j = lo + cut
            one = int(service if np.ndim(service) == 0 else service[j])
            start[j] = ends[k[cut]]
            finish[j] = max(int(start[j]) + one, int(not_before[j]))
            cut += 1
        lo += cut
        free_at = int(finish[lo - 1])
    return start, finish


def pool(head: np.ndarray, service, not_before: np.ndarray,
         free: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Serve jobs in the given order on ``len(free)`` identical FIFO servers, one by one (pools are small and
    rare: no pipeline the planner builds has one).

    :param free: when each server becomes free (ps).
    :returns: (start, finish, sorted free times of the servers afterwards).
    """
    n = len(head)
    service = np.broadcast_to(np.asarray(service, np.int64), (n,)).tolist()
    start, finish, heap = [0] * n, [0] * n, sorted(int(f) for f in free)
    for j, (h, nb) in enumerate(zip(np.asarray(head).tolist(), np.asarray(not_before).tolist())):
        start[j] = max(h, heap[0])
        finish[j] = max(start[j] + service[j], nb)
        heapq.heapreplace(heap, finish[j])
    return np.array(start, np.int64), np.array(finish, np.int64), sorted(heap)

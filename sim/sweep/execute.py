"""Run a sweep's runs: the per-run task and the executors that dispatch it (serial, processes, dask).

Every executor yields ``(run, table)`` pairs as runs finish, in whatever order they finish; the table depends
only on the run (its seed is fixed in the plan), never on the executor.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

import pandas as pd

from sim.engine import budget
from sim.inspect.compare import case_rows
from sim.core.errors import SimError
from sim.core.units import PS_PER_S, format_time
from sim.engine.run import run_scenario
from sim.sweep.orphans import die_with_parent
from sim.sweep.plan import RunSpec
from sim.sweep.store import FAILED

Finished = Iterator[tuple[RunSpec, pd.DataFrame]]


def execute(run: RunSpec) -> pd.DataFrame:
    """Simulate one run; one row per (workload, size): the engine that ran it (``engine``: ``event`` or ``fast``;
    ``fallback``: why ``auto`` ran the event engine, '' when it did not), perftest's summary columns
    (``errors_by_status`` as JSON text), latency percentiles, registration time, pinned bytes and protocol
    counters. A run that fails in any way (a registration refused with ENOMEM, or a point whose values the engine
    cannot hold) gives :func:`failed`'s row instead, so the sweep goes on."""
    try:
        with time_limit(run.time_limit_s):
            return _tables(run)
    except Exception as exc:  # whatever one point raises is that point's result, not the sweep's end
        return failed(run, exc)


class RunTimedOut(SimError):
    """A run took longer than the sweep's ``run_time_limit``."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`RunTimedOut` in the block once it has run ``seconds`` of wall-clock time (None: never), from
    a SIGALRM timer (``setitimer``); only in the main thread, where Python delivers signals, so a block in another
    thread is not limited."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = [True]

    def expire(signum, frame):
        if armed[0]:  # not once the block has ended
            raise RunTimedOut(f"ran longer than the sweep's run_time_limit ({format_time(round(seconds * PS_PER_S))})")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def failed(run: RunSpec, exc: BaseException) -> pd.DataFrame:
    """The stored result of a run that raised ``exc``: one row with ``status`` :data:`FAILED` and the error's
    type and message."""
    return pd.DataFrame([{"key": run.key, "status": FAILED, "error": f"{type(exc).__name__}: {exc}"}])


def _tables(run: RunSpec) -> pd.DataFrame:
    budget.refuse_over_budget([(run.variant, run.scenario)], budget.available_memory())
    result = run_scenario(run.scenario, run.seed, variant=run.variant, notice=lambda _: None)  # said by run_sweep
    rows = []
    for perftest, extra in case_rows(result):
        perftest["errors_by_status"] = json.dumps(perftest["errors_by_status"])  # Parquet needs one type
        extra["allocation"] = extra["allocation"] or ""  # a string in every run's table: no competing allocation
        rows.append({"key": run.key, "status": "ok", "error": None, "engine": result.engine,
                     "fallback": result.fallback or "", **perftest,
                     **{k: v for k, v in extra.items() if k not in perftest}})
    return pd.DataFrame(rows).drop(columns="variant")


BATCHES_PER_WORKER = 6
"""Dask tasks carry several runs each (about this many tasks per worker thread): fewer scheduler round trips,
while finished batches still stream to disk as they complete."""


def execute_batch(runs: list[RunSpec]) -> list[pd.DataFrame]:
    """:func:`execute` for each run of a batch, in order."""
    return [execute(run) for run in runs]


def serial(runs: list[RunSpec], workers: int | None = None, scheduler: str | None = None) -> Finished:
    """Run in this process, in order."""
    for run in runs:
        yield run, execute(run)


class WorkersLost(SimError):
    """A worker process ended without returning its runs (killed, out of memory): those runs were not stored."""


def processes(runs: list[RunSpec], workers: int | None = None, scheduler: str | None = None) -> Finished:
    """Run on a local process pool (``workers`` processes, default: one per CPU) whose workers end when this
    process does, however it ends.

    :raises WorkersLost: a worker died (killed, out of memory), which breaks the pool: the runs finished before
        are yielded, the others (the one it ran among them, which cannot be told apart) are not, so that a
        resumed sweep runs them.
    """
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent,
                                                  initargs=(os.getpid(),))
    try:
        futures = {pool.submit(execute, run): run for run in runs}
        lost = 0
        for future in concurrent.futures.as_completed(futures):
            run, exc = futures[future], future.exception()
            if isinstance(exc, BrokenProcessPool):
                lost += 1
                continue
            yield run, future.result() if exc is None else failed(run, exc)
        if lost:
            raise WorkersLost(f"a worker process ended without a result (killed, or out of memory): {lost} of "
                              f"{len(runs)} runs were not finished and are not stored; running the sweep again "
                              "runs them")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class SchedulerUnreachable(SimError):
    """The dask scheduler a sweep was pointed at accepted no connection."""


def dask(runs: list[RunSpec], workers: int | None = None, scheduler: str | None = None) -> Finished:
    """Run on dask.distributed: the cluster at ``scheduler`` (e.g. ``tcp://host:8786``, its workers able to
    import rdmasim), else a LocalCluster of ``workers`` single-threaded processes (default: one per CPU), which
    end with this process however it ends (distributed's worker processes watch their parent).

    :raises SchedulerUnreachable: no scheduler answered at ``scheduler`` within distributed's connect timeout.
    """
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers or os.cpu_count(), threads_per_worker=1, processes=True,
                               dashboard_address=None)
    try:
        try:
            client = Client(scheduler or cluster)
        except OSError as exc:  # distributed's own words: the address and how long it tried
            if scheduler is None:
                raise
            raise SchedulerUnreachable(f"--scheduler {scheduler}: {exc}") from None
        with client:
            slots = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values()) or 1
            size = max(1, len(runs) // (slots * BATCHES_PER_WORKER))
            batches = [runs[i:i + size] for i in range(0, len(runs), size)]
            futures = {client.submit(execute_batch, batch, key=f"rdmasim-runs-{batch[0].index}-{batch[0].key}",
                                     pure=False): batch for batch in batches}
            try:
                for future in as_completed(futures):
                    yield from zip(futures[future], future.result())
            finally:
                client.cancel(list(futures))
    finally:
        if cluster is not None:
            cluster.close()


EXECUTORS: dict[str, Callable[..., Finished]] = {"serial": serial, "processes": processes, "dask": dask}
"""Executor name -> function ``(runs, workers, scheduler)`` yielding finished runs."""

"""Run a scenario: build the testbed, run each workload size by size on the event engine (or hand the run to the
vectorized core), collect tidy tables."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace

from models.verbs.qp_state import ack_timeout_ps
from models.verbs.workloads import (Endpoint, Posting, bandwidth, concurrent, read_latency, send_bandwidth,
                                    send_latency, write_latency)
from sim.engine.build import Testbed
from sim.core.errors import DeadlockError
from sim.engine.planner.plan import Declined, run_fast
from sim.engine.harness import (Covered, PieceProgress, Progress, endpoints, finish_run, inline_threshold,
                                retry_counters, setup_run, total_duration_ps, workload_opcode)
from sim.store.operations import OperationTable
from sim.scenario.resolve import fabric_rate_notice
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec
from sim.engine.tables import RunResult, workload_tables


def total_operations(scenario: Scenario) -> int | None:
    """Work requests the scenario will simulate (for progress bars); None when a workload runs for a duration,
    whose count only the run tells."""
    if any(w.duration is not None for w in scenario.workload):
        return None
    return sum(len(w.size_list()) * w.iterations * w.streams() for w in scenario.workload)


def progress_totals(scenarios: list[Scenario]) -> tuple[int | None, int | None]:
    """What a progress display of runs of ``scenarios`` counts to: their operations, or where any runs for a
    duration and every workload does, the simulated time of their durations (ps; None where not known before)."""
    counts = [total_operations(s) for s in scenarios]
    if None not in counts:
        return sum(counts), None
    durations = [total_duration_ps(s) for s in scenarios]
    return None, None if None in durations else sum(durations)


def _process(env, work: WorkloadSpec, pairs: list[tuple[Endpoint, Endpoint]], size: int):
    """The simpy process of ``work``'s loop (:attr:`models.verbs.workload_kinds.WorkloadKind.loop`) at ``size``."""
    inline, opcode, loop = inline_threshold(work), workload_opcode(work), work.rule.loop
    if work.rule.streams:
        posting = Posting(work.post_list, work.cq_mod, work.duration)
        directions = pairs + ([(dst, src) for src, dst in pairs] if work.bidirectional else [])
        if loop == "send_bandwidth":
            streams = [send_bandwidth(env, src, dst, size, work.iterations, work.tx_depth, work.rx_depth, inline,
                                      posting) for src, dst in directions]
        else:
            streams = [bandwidth(env, opcode, src, dst, size, work.iterations, work.tx_depth, inline, posting)
                       for src, dst in directions]
        return streams[0] if len(streams) == 1 else concurrent(env, streams)
    ((src, dst),) = pairs
    if loop == "write_latency":
        return write_latency(env, src, dst, size, work.iterations, inline, duration_ps=work.duration)
    if loop == "send_latency":
        return send_latency(env, src, dst, size, work.iterations, work.rx_depth, inline, duration_ps=work.duration)
    return read_latency(env, src, dst, size, work.iterations, opcode, duration_ps=work.duration)


ENGINES = {"event": "event engine", "fast": "vectorized core"}
"""The engines by their scenario names, as rdmasim's messages name them."""


def run_scenario(scenario: Scenario, seed: int | None = None, progress: Progress | None = None,
                 *, trace: bool = False, variant: str = "base",
                 notice: Callable[[str], None] | None = None,
                 before_fallback: Callable[[], None] | None = None,
                 simulated: Callable[[int], None] | None = None,
                 running: Callable[[str], None] | None = None, operations: bool = True) -> RunResult:
    """Simulate every workload of ``scenario`` (with its events) and return its tables. ``progress`` is told the
    operations simulated as the run goes, ``simulated`` the simulated time covered of its workloads' durations (ps,
    :func:`sim.engine.harness.total_duration_ps` in all), ``running`` the engine that simulates from then on, as
    :data:`ENGINES` names it (and which solve the vectorized core is on when it solves the run again).

    ``scenario.engine`` picks the engine: ``fast`` and ``auto`` (the default) hand the run to
    :mod:`sim.engine.planner.plan`; when ``auto`` cannot use it, the event engine runs. ``notice`` (default: a line on
    stderr) is told in one line which engine ran the workloads and, when ``auto`` fell back, why
    (:func:`engine_notice`); the result records both (``engine``, ``fallback``). ``before_fallback`` is called
    before the event engine runs a variant ``auto`` handed over (it may refuse it: a memory budget). Without
    ``operations`` the result keeps no per-operation table (``table`` None), which a caller reading only the
    summaries spares building.

    :raises sim.engine.build.RegistrationFailed: a buffer could not be registered.
    """
    seed = scenario.seed if seed is None else seed
    fallback, covered = None, Covered(simulated, scenario)
    if scenario.engine != "event":
        if running is not None:
            running(ENGINES["fast"])
        again = None if running is None else lambda solve: running(f"{ENGINES['fast']}, solve {solve}")
        result = run_fast(scenario, seed, PieceProgress(progress, covered, again), trace=trace, variant=variant,
                          operations=operations)
        if not isinstance(result, Declined):
            covered.end()
            return _told(result, notice)
        fallback = result.reason
        if before_fallback is not None:
            before_fallback()
    if running is not None:
        running(ENGINES["event"])
    result = _run_events(scenario, seed, progress, trace, variant, covered, operations)
    covered.end()
    return _told(replace(result, fallback=fallback), notice)


def engine_line(who: str, engine: str, workloads: list[str], fallback: str | None = None) -> str:
    """One line saying which engine ran ``workloads`` of ``who`` (their names) and, after ``auto`` fell back,
    why: ``quickstart (base): vectorized core ran write_bw, write_lat``."""
    return f"{who}: {ENGINES[engine]} ran {', '.join(workloads)}" + (f": {fallback}" if fallback else "")


def engine_notice(result: RunResult) -> str:
    """:func:`engine_line` of a run, named by its scenario and variant."""
    return engine_line(f"{result.scenario.name} ({result.variant})", result.engine,
                       [w.name or w.kind for w in result.scenario.workload], result.fallback)


def _told(result: RunResult, notice: Callable[[str], None] | None) -> RunResult:
    rate = fabric_rate_notice(result.scenario)
    if rate:
        (notice or _stderr)(f"{result.scenario.name} ({result.variant}): {rate}")
    (notice or _stderr)(engine_notice(result))
    return result


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _run_events(scenario: Scenario, seed: int, progress: Progress | None, trace: bool, variant: str,
                covered: Covered, operations: bool) -> RunResult:
    """Run every workload on the event engine, size by size (``operations``: keep the per-operation table)."""
    bed, started, event_log = setup_run(scenario, seed, trace)
    env = bed.env
    table, summaries, cases = OperationTable() if operations else None, [], {}
    for k, work in enumerate(scenario.workload):
        label = work.name or work.kind
        pairs = endpoints(bed, work)
        for size in work.size_list():
            before = retry_counters(bed)  # (only this case's QPs send while it runs)
            proc = env.process(_process(env, work, pairs, size))
            told = _Told(progress, [src.qp.send_cq for src, _ in pairs], covered, (k, size), env)
            records = _run_until(env, proc, bed, f"workload '{label}' at {size} bytes", told.tick)
            summaries.append(workload_tables(work, size, records, variant, table))
            cases[label, size] = {key: n - before[key] for key, n in retry_counters(bed).items()}
            told.rest(len(records.status))
    return finish_run(scenario, seed, bed, variant, started, event_log, table, summaries, cases)


class _Told:
    """What a progress display was told of one (workload, size): the completions its send CQs received and the
    simulated time (``covered``, case ``key``), as the run goes, and at the end the rest of the operations it
    recorded."""

    def __init__(self, progress: Progress | None, cqs: list, covered: Covered, key: tuple[int, int], env) -> None:
        self.progress, self.cqs, self.told = progress, list({id(cq): cq for cq in cqs}.values()), 0
        self.start = sum(cq.delivered for cq in self.cqs)
        self.covered, self.key, self.env, self.begun = covered, key, env, env.now

    def tick(self) -> None:
        self.covered.reach(self.key, self.env.now, self.begun)
        if self.progress:
            done = sum(cq.delivered for cq in self.cqs) - self.start
            self.progress(done - self.told)
            self.told = done

    def rest(self, operations: int) -> None:
        self.covered.finish(self.key)
        if self.progress:
            self.progress(max(0, operations - self.told))


def _run_until(env, proc, bed: Testbed, what: str, tick: Callable[[], None]):
    """Run until ``proc`` ends, calling ``tick`` as it goes; a simulation that runs out of events first (RuntimeError
    with ``proc`` untriggered and nothing scheduled) is a deadlock, reported with the components still waiting."""
    try:
        return env.run_ticking(proc, tick)
    except RuntimeError:
        if proc.triggered or env.peek() != float("inf"):
            raise
        waiting = [_waiting(qp) for qp in bed.qps if qp.outstanding]
        raise DeadlockError(f"{what}: the simulation has nothing left to do but the workload still waits; "
                            f"waiting: {'; '.join(waiting) or 'the workload process only'}") from None


def _waiting(qp) -> str:
    """What a deadlocked QP still waits for, and why when the cause is known: frames lost on a link while its ACK
    timeout is 0 (infinite), so that nothing sends them again."""
    cause = ""
    if qp.frames_lost and ack_timeout_ps(qp.attr.timeout) is None:
        cause = (f"; {qp.frames_lost} of its frames were lost and its ACK timeout (qp_timeout, perftest -u) is 0, "
                 "which never sends them again")
    return (f"QP {qp.qp_num} on {qp.node.name} ({qp.outstanding} work requests outstanding, "
            f"{len(qp.send_cq.entries)} completions unpolled{cause})")

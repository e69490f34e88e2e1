"""The run's streams on the testbed: one per QP a workload posts on, in the order the event engine starts them, with
the buffers and memory each end reaches."""

from __future__ import annotations

from typing import NamedTuple

from models.nic.stages import memory_target
from models.verbs.workloads import Endpoint
from sim.engine.harness import endpoints
from sim.scenario.schema import Scenario
from sim.scenario.workloads import WorkloadSpec


class Stream(NamedTuple):
    """One QP's stream of a workload on the testbed: its requester and responder ends, their buffers' names and
    where their MRs' accesses went when the workloads started (:func:`models.nic.stages.memory_target`)."""

    work: WorkloadSpec
    src: Endpoint
    dst: Endpoint
    targets: tuple[str | None, str | None]
    buffers: tuple[str, str]


def streams(scenario: Scenario, bed) -> list[Stream]:
    """The scenario's workloads' streams on ``bed``, each workload's in the order the event engine starts them
    (:func:`sim.engine.run._process`: every QP of each buffer pair, then the reverse directions when bidirectional);
    creates their QPs as the event engine does."""
    out = []
    for work in scenario.workload:
        pairs = list(zip(endpoints(bed, work), (names for names in work.buffer_pairs() for _ in range(work.qps))))
        now = bed.env.now
        for (src, dst), names in pairs + ([((b, a), names[::-1]) for (a, b), names in pairs]
                                          if work.bidirectional else []):
            out.append(Stream(work, src, dst, (memory_target(src.mr, now), memory_target(dst.mr, now)), names))
    return out


def by_workload(ends: list[Stream]) -> list[list[int]]:
    """The indices of ``ends`` by workload, in run order."""
    out: dict[int, list[int]] = {}
    for k, end in enumerate(ends):
        out.setdefault(id(end.work), []).append(k)
    return list(out.values())


def case_counters(ends: list[Stream], retries, losses) -> dict[tuple[str, int], dict[str, int]]:
    """Per (workload name, message size): the RNR NAKs its streams' requests got (``retries``:
    :class:`~sim.engine.planner.retries.Retries`) and the frames of theirs a link lost (``losses``:
    :class:`~sim.engine.planner.losses.Losses`), as :func:`sim.engine.harness.retry_counters` counts them."""
    return {(ends[mine[0]].work.name or ends[mine[0]].work.kind, size): {
                "rnr_naks": sum(retries.total(k, size) for k in mine),
                "frames_lost": sum(losses.total(k, size) for k in mine)}
            for mine in by_workload(ends) for size in ends[mine[0]].work.size_list()}

"""Translation caches on the vectorized core: the NIC's MPT and MTT caches and the IOMMU's IO-TLB, exactly.

Every operation of a perftest stream translates the same pieces at each translating check (its buffers are
reused: :func:`models.nic.translated.translated`). An LRU cache that one check of one stream reaches in a round
answers that check's first access of the round in its own way and every later one alike: after one access it holds
the same entries after every further one (all of that access's keys when they fit, else the last ones it can hold).
So the model is asked (:func:`models.nic.stages.translation_stages`, the event engine's own call) for the first
access and the next, round by round in run order, and a stream is split where its operations' translations
differ, each part's steps taking its stages as a :class:`~sim.core.steps.Detour` after the check, as the event
engine runs them. Which operation reaches a check first is known once solved (a READ whose responder misses may
be overtaken by the next one's response): a solve that finds another first operation than it assumed is made again
with it (:meth:`Translations.settle`).

Refused (the event engine runs them, saying why): a cache reached by two checks or two streams in one round (their
interleaving, which only the run tells, decides the hits), a translating MR whose backing also decides at run time
(ODP), a stream whose translations differ and that runs for a duration, and ping-pong latency tests.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from models.nic.datapath import translation_cache
from models.nic.stages import translation_stages
from models.nic.translated import RESPONDER, RESPONSE, SOURCE, translated
from models.verbs.ah import data_path_qp
from models.verbs.workloads import posts_inline, whole_buffer_receive, work_request
from sim.core.steps import Check, Detour, Fork, walk_order
from sim.fast import Unsolvable
from sim.engine.harness import inline_threshold, workload_opcode

CHECKS = (SOURCE, RESPONDER, RESPONSE)


class Translations:
    """The translations of a run's streams, asked of the testbed's caches once, in run order."""

    def __init__(self, now_ps: int) -> None:
        self.now_ps = now_ps
        self.stages: dict[tuple[int, int], dict[str, tuple[tuple, tuple]]] = {}
        """Per (stream, size): per translating check, the stages of its first access and of every later one."""
        self.first: dict[tuple[int, int, str], int] = {}
        """Per (stream, size, check): the operation that reaches the check first (0 unless a solve said)."""
        self.reached: dict[tuple, tuple[int, str]] = {}
        """Per (round, cache): the stream and check that reach it."""
        self.labels: dict[tuple[int, int], dict[str, str]] = {}
        """Per (stream, size): the label each translating check reports its times under (its own, else its name)."""

    @property
    def active(self) -> bool:
        """Whether some stream translates through a cache (its run may then be solved again)."""
        return any(self.stages.values())

    def split(self, k: int, end, size: int, steps: tuple, ops: int, duration: bool) -> list[tuple[int, int, tuple]]:
        """``(lo, hi, steps)``: the operations of stream ``k`` (``end``, a :class:`sim.engine.planner.plan.Stream`) at
        ``size`` in runs of equal translations, each with its detours after the checks.

        :raises Unsolvable: what the module docstring lists as refused.
        """
        stages = self._stages(k, end, size, {s.name for s in walk_order(steps) if isinstance(s, Check)})
        if not stages:
            return [(0, ops, steps)]
        self.labels[k, size] = {s.name: _reported(s) for s in walk_order(steps)
                                if isinstance(s, Check) and s.name in stages}
        cuts = {0, ops}
        for check, (first, later) in stages.items():
            if first != later:
                at = self.first.get((k, size, check), 0)
                cuts.update({at, at + 1} & set(range(ops + 1)))
        if len(cuts) > 2 and duration:
            raise Unsolvable("a stream that runs for a duration translates its first operation otherwise than the "
                             "rest (a translation cache's first misses): its steps would change where its posting "
                             "may already have stopped")
        bounds = sorted(cuts)
        out = []
        for lo, hi in zip(bounds, bounds[1:]):
            detours = {check: first if lo == self.first.get((k, size, check), 0) else later
                       for check, (first, later) in stages.items()}
            out.append((lo, hi, _with_detours(steps, detours)))
        return out

    def _stages(self, k: int, end, size: int, checks: set[str]) -> dict[str, tuple[tuple, tuple]]:
        if (k, size) in self.stages:
            return self.stages[k, size]
        work = end.work
        opcode = workload_opcode(work)
        qp = data_path_qp(end.src.qp, end.dst.qp)
        wr = work_request(0, opcode, end.src, end.dst, size, posts_inline(opcode, size, inline_threshold(work)))
        recv = whole_buffer_receive(0, end.dst) if opcode.consumes_receive else None
        out: dict[str, tuple[tuple, tuple]] = {}
        for check in (c for c in CHECKS if c in checks):
            node, pieces, write = translated(qp, wr, check, recv)
            if translation_cache(node) is None or not pieces:
                continue
            if work.rule.ping_pong:
                raise Unsolvable(f"{work.kind}'s ping-pong translates on both nodes' caches in turn")
            if any(mr.backing is not None and mr.backing.decides for mr, _, _ in pieces):
                raise Unsolvable(f"at its check '{check}' an MR's backing decides at run time besides node "
                                 f"{node.name}'s translation cache")
            for cache in (node.nic.mtt, node.iommu):
                if cache is None:
                    continue
                mine = self.reached.setdefault(((id(work), size), id(cache)), (k, check))
                if mine != (k, check):
                    raise Unsolvable(f"the {translation_cache(node)} of node {node.name} is reached by two "
                                     "streams or checks at once, whose interleaving decides its hits")
            out[check] = tuple(tuple(s for mr, addr, length in pieces
                                     for s in translation_stages(node, mr, addr, length, self.now_ps, write=write))
                               for _ in range(2))
        self.stages[k, size] = out
        return out

    def settle(self, marks: dict[tuple[int, int], dict[str, np.ndarray]], local: dict[int, str]) -> bool:
        """Take the first operation at each translating check from a complete solve's ``marks`` (``local``: per
        stream, the name of its check labelled ``local``); True when one differs from what the solve assumed (it
        must then be made again).

        :raises Unsolvable: operations that are not consecutive reach a check after the source's at one
            picosecond (the ordering rule then orders them by their steps' positions, which detours before the check
            move). Consecutive ones are those a turn's claim took up one behind the other (:mod:`sim.fast.turns`),
            and at the source's check, which comes before every detour, the lower operation number goes first.
        """
        changed = False
        for (k, size), stages in self.stages.items():
            for check, (first, later) in stages.items():
                if first == later:
                    continue
                times = marks[k, size]["local" if local.get(k) == check else self.labels[k, size][check]]
                at = int(np.argmin(times))
                tied = np.flatnonzero(times == times[at])
                if check != SOURCE and tied[-1] - tied[0] != len(tied) - 1:
                    raise Unsolvable(f"operations apart in the stream reach the translation at its check '{check}' "
                                     "at one picosecond")
                if at != self.first.get((k, size, check), 0):
                    self.first[k, size, check] = at
                    changed = True
        return changed


def _reported(check: Check) -> str:
    """The label a translating check reports its times under: its own, else its name."""
    return check.label or check.name


def _with_detours(steps: tuple, detours: dict[str, tuple]) -> tuple:
    """``steps`` with each check named in ``detours`` labelled by its name (unless labelled), deciding nothing more
    at run time, and followed by a :class:`Detour` of its stages (none when they are empty)."""
    out = []
    for step in steps:
        if isinstance(step, Fork):
            step = replace(step, steps=_with_detours(step.steps, detours))
        elif isinstance(step, Check) and step.name in detours:
            out.append(replace(step, decides=None, label=_reported(step)))
            if detours[step.name]:
                out.append(Detour(detours[step.name]))
            continue
        out.append(step)
    return tuple(out)

"""The event engine's data path: operations' step lists (:mod:`sim.core.steps`) run in the ordering rule's order.

One :class:`StepRunner` per environment keeps the steps that wait for a time in a heap keyed by (time,
position in the step list, operation number), so that claims reaching a server at the same picosecond are made
in the rule's order whatever order simpy would create events in. Steps that need no time of their own (eager
claims, delays, marks, inline checks) run within the step before them.

The heap runs inside simpy: one timeout wakes it at its earliest time, and it then takes every step that
comes before simpy's next event (model events at a picosecond go first), so that most steps cost a heap
operation and no simpy event. While it runs ahead of simpy's clock, the models it calls are given the time
explicitly; a :class:`~sim.core.steps.Check` runs with simpy's clock at its own time, as the model may look
at or change state there.
"""

from __future__ import annotations

import itertools
from collections import deque
from heapq import heappop, heappush
from typing import Any, Protocol

import simpy

from sim.core.servers import claim_chain
from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Mark, Rebase, Step, Wait, Wake, walk_order

CLAIMS, TURN, DELAY, DRAWN, REBASE, WAKE, CHECK, INLINE_CHECK, MARK, WAIT, GATE, FORK, DETOUR, JOIN, END = range(15)
"""The instructions' opcodes (the two claim groups first: a walk tells them from the rest with one comparison).

Each instruction is a plain tuple (a walk unpacks it by these names; tuples are what it reads fastest), its
opcode and its position in :func:`~sim.core.steps.walk_order` first:

============================  ===========================================================================
``CLAIMS``, ``TURN``          ``(code, pos, waits, claims, rebase, label, turn)``: ``waits`` unless the first
                              claim is eager; ``claims`` as :func:`~sim.core.servers.claim_chain` takes them;
                              ``rebase`` ``(from_tail, offset_ps)`` after the group or None; ``label`` of the
                              last claim (it releases that gate); ``turn`` the name of a TURN's turn (None)
``DELAY``                     ``(code, pos, ps)``
``DRAWN``                     ``(code, pos, ps, draws)``: ``ps`` plus the operation's draw named ``draws``
``REBASE``                    ``(code, pos, from_tail, offset_ps)``
``CHECK``, ``INLINE_CHECK``   ``(code, pos, name, back_ps)``
``MARK``                      ``(code, pos, name)``
``WAIT``                      ``(code, pos, draws)``
``GATE``                      ``(code, pos, label)``
``FORK``                      ``(code, pos, program)``
``DETOUR``, ``JOIN``          ``(code, pos)``: a :class:`~sim.core.steps.Detour`'s start (the tail kept aside, set
                              to the head) and end (the tail no earlier than the one kept); its steps between
``WAKE``, ``END``             ``(code, pos)``
============================  ===========================================================================
"""
POS = 1
"""Where every instruction holds its position."""
MODEL_EVENT = -1
"""Ordering position of a model event (a :class:`Wake` or :class:`Wait`): before every step at its time."""


class Model(Protocol):
    """What an operation's owner decides and is told while the operation runs (times in ps)."""

    def check(self, op: Operation, name: str, now: int, head: int, tail: int) -> Any:
        """A :class:`~sim.core.steps.Check` at ``now``: None to go on; a time (int) to hold the operation until
        and ask again then (head and tail move to at least it); or ``(program, head, tail)`` to run that
        program (:func:`compile_steps`; ``()``: nothing) instead of the rest, from that head and tail."""

    def mark(self, op: Operation, name: str, head: int, tail: int) -> None:
        """A :class:`~sim.core.steps.Mark` was reached."""

    def wake(self, op: Operation, head: int) -> None:
        """A :class:`~sim.core.steps.Wake` of the main chain at ``head`` (a work request's last step: the
        completion is seen then)."""


class Semaphore:
    """A :class:`~sim.core.steps.Gate`'s slots: taken in arrival order, released by the labelled claim."""

    __slots__ = ("capacity", "free", "waiting")

    def __init__(self, capacity: int) -> None:
        self.capacity = self.free = capacity
        self.waiting: deque = deque()


class Turns:
    """The order in which operations make the claims of one :attr:`~sim.core.steps.Claim.turn` (a send queue's):
    by ticket, each operation's ticket passing at its claim there or when it ends without one."""

    __slots__ = ("passed", "early", "parked")

    def __init__(self) -> None:
        self.passed = 0
        """Tickets below this have passed."""
        self.early: set[int] = set()
        """Tickets that passed out of order (their operations ended before an earlier ticket passed)."""
        self.parked: dict = {}
        """Ticket -> the chain waiting at its claim for the earlier tickets."""


def compile_steps(steps: tuple[Step, ...], base: int = 0, *, marks: bool = True) -> tuple:
    """``steps`` as the interpreter's program: one tuple per instruction, opcode and position first.

    Steps that take no time of their own are folded into the instruction before them, so that a walk makes
    fewer dispatches: a claim and the eager claims after it are one ``CLAIMS`` instruction (it waits when its
    first claim does, and ends at a labelled claim), and a plain delay or a rebase after a claim, or a delay after
    a rebase, becomes part of it. A claim in a turn starts a ``TURN`` instruction of its own (it may have to wait
    for earlier operations' claims), the eager claims after it folded in too. A claim is ``(server, service,
    head_ps + latency, tail_ps, latency)``. Without ``marks`` the :class:`~sim.core.steps.Mark` steps are
    left out (for an owner that ignores them). Positions stay those of :func:`~sim.core.steps.walk_order`; an
    ``END`` instruction closes the program (a walk needs no bounds check).
    """
    program: list[tuple] = []
    pos = base
    for step in steps:
        kind = type(step)
        last = program[-1] if program else None
        if kind is Claim:
            claim = (step.server, step.service_ps, step.head_ps + step.latency_ps, step.tail_ps, step.latency_ps)
            if step.turn is not None:
                program.append((TURN, pos, not step.eager, (claim,), None, step.label, step.turn))
            elif step.eager and _open_group(last, label=True):
                code, at, waits, claims, _, _, turn = last
                program[-1] = (code, at, waits, (*claims, claim), None, step.label, turn)
            else:
                program.append((CLAIMS, pos, not step.eager, (claim,), None, step.label, None))
        elif kind is Delay and step.draws is None:
            if last is not None and last[0] in (CLAIMS, TURN, DELAY, REBASE):
                program[-1] = _delayed(last, step.ps)
            else:
                program.append((DELAY, pos, step.ps))
        elif kind is Delay:
            program.append((DRAWN, pos, step.ps, step.draws))
        elif kind is Rebase:
            if _open_group(last, label=False):
                code, at, waits, claims, _, label, turn = last
                program[-1] = (code, at, waits, claims, (step.from_tail, step.offset_ps), label, turn)
            else:
                program.append((REBASE, pos, step.from_tail, step.offset_ps))
            if step.renumber is not None:
                pos = step.renumber - 1
        elif kind is Wake:
            program.append((WAKE, pos))
        elif kind is Check:
            program.append((INLINE_CHECK if step.back_ps is None else CHECK, pos, step.name, step.back_ps or 0))
        elif kind is Mark:
            if marks:
                program.append((MARK, pos, step.name))
        elif kind is Wait:
            program.append((WAIT, pos, step.draws))
        elif kind is Gate:
            program.append((GATE, pos, step.release))
        elif kind is Fork:
            sub = compile_steps(step.steps, pos + 1, marks=marks)
            program.append((FORK, pos, sub))
            pos = pos + len(walk_order(step.steps)) if step.renumber is None else step.renumber - 1
        elif kind is Detour:
            *inner, _ = compile_steps(step.steps, pos + 1, marks=marks)
            pos += len(walk_order(step.steps))
            program += [(DETOUR, pos - len(walk_order(step.steps))), *inner, (JOIN, pos)]
        else:
            raise TypeError(f"not a step: {step!r}")
        pos += 1
    return (*program, (END, pos))


def _open_group(instruction: tuple | None, *, label: bool) -> bool:
    """Whether ``instruction`` is a claim group with no rebase after it yet (nor, if ``label``, a labelled last
    claim): a rebase, or an eager claim (``label``), may be folded into it."""
    if instruction is None or instruction[0] not in (CLAIMS, TURN):
        return False
    _, _, _, _, rebase, last_label, _ = instruction
    return rebase is None and not (label and last_label is not None)


def _delayed(instruction: tuple, ps: int) -> tuple:
    """``instruction`` (a claim group, a delay or a rebase) followed by a delay of ``ps``, as one instruction."""
    code = instruction[0]
    if code == CLAIMS or code == TURN:
        _, pos, waits, claims, rebase, label, turn = instruction
        if rebase is not None:  # after the group's rebase
            from_tail, offset = rebase
            return code, pos, waits, claims, (from_tail, offset + ps), label, turn
        *before, (server, service, lead, tail_ps, latency) = claims
        return code, pos, waits, (*before, (server, service, lead + ps, tail_ps, latency + ps)), None, label, turn
    if code == DELAY:
        _, pos, delay = instruction
        return DELAY, pos, delay + ps
    _, pos, from_tail, offset = instruction
    return REBASE, pos, from_tail, offset + ps


_ENDED = ((END, 0),)
"""The program of a chain that has nothing left to take."""


class Operation:
    """One operation: its program, number, per-operation draws, gates and owner."""

    __slots__ = ("program", "seq", "offset", "draws", "gates", "model", "held", "wait_from", "turns", "ticket",
                 "holding")

    def __init__(self, program: tuple, seq: int, model: Model, draws: dict[str, int] | None = None,
                 gates: dict[str, Semaphore] | None = None, offset: int = 0, turns: dict[str, Turns] | None = None,
                 ticket: int = 0) -> None:
        self.program, self.seq, self.model, self.offset = program, seq, model, offset
        self.turns = dict(turns) if turns else {}
        """The turns (by name) whose claims the operation makes with ``ticket``, while its ticket has not passed."""
        self.ticket = ticket
        self.draws = draws or {}
        self.gates = gates or {}
        self.held: list[str] = []
        """Labels of the gates whose slot the operation holds."""
        self.wait_from = 0
        """When the operation last waited (a :class:`Wait` counts from there)."""
        self.holding: _Chain | None = None
        """The chain a check last held until a time (see :meth:`StepRunner.ask_sooner`)."""


class _Chain:
    """Where one chain of an operation is: its program, the next step, head and tail."""

    __slots__ = ("op", "program", "at", "head", "tail", "main", "due", "kept")

    def __init__(self, op: Operation, program: tuple, head: int, tail: int, main: bool) -> None:
        self.op, self.program, self.at, self.head, self.tail, self.main = op, program, 0, head, tail, main
        self.due = False
        """Whether the step at ``at`` is the one its heap entry was for (it is taken, not waited for again)."""
        self.kept = 0
        """The tail kept aside while a :class:`~sim.core.steps.Detour` runs (ps)."""


class StepRunner:
    """Runs operations' programs on one environment (see the module docstring)."""

    def __init__(self, env) -> None:
        self.env = env
        self.heap: list = []
        self.count = itertools.count()
        """Tie-breaker of heap entries: the order they were pushed in."""
        self.wakeups: list[int] = []
        """Times of the simpy timeouts that will wake the runner, latest first (one is armed only before the
        earliest, so the next to fire is the last)."""
        self.running = False
        self.consulted = False
        """Whether a walk called the model since the runner last looked at simpy's next event (the model may
        have scheduled one)."""
        self.trace = env.trace.slice if env.trace.enabled else None
        """Where claims are traced (None: they are not)."""
        self.numbered = 0

    def number(self) -> int:
        """The next operation number (operations are numbered in posting order unless their owner says)."""
        self.numbered += 1
        return self.numbered - 1

    def start(self, op: Operation) -> None:
        """Run ``op`` from now (its steps up to the first that waits run at once)."""
        now = self.env.now
        op.wait_from = now
        self._walk(_Chain(op, op.program, now, now, True), now)
        if not self.running:
            self._arm()

    def ask_sooner(self, op: Operation, t: int) -> None:
        """Ask the check that last held ``op`` until a later time again at ``t`` instead (head and tail ``t``,
        simpy's clock at ``t``); the later hold lapses. For a model event that ends a wait early (the model must
        know that ``op`` is still held there)."""
        held = op.holding
        chain = op.holding = _Chain(op, held.program, t, t, held.main)
        chain.at, chain.kept = held.at, held.kept
        held.program, held.at, held.main = _ENDED, 0, False  # its heap entry finds nothing left to take
        self._push(chain, t, chain.program[chain.at][POS], True, sync=True)
        if not self.running:
            self._arm()

    def _push(self, chain: _Chain, t: int, pos: int, due: bool, sync: bool = False) -> None:
        """Take ``chain`` up again at ``t`` (the step at ``chain.at`` itself when ``due``), ordered by the step
        list position ``pos`` (:data:`MODEL_EVENT` for a model event); ``sync``: with simpy's clock at ``t``."""
        chain.due = due
        key = pos if pos == MODEL_EVENT else pos + chain.op.offset
        heappush(self.heap, (t, key, chain.op.seq, next(self.count), chain, sync))

    def _arm(self) -> None:
        """Make sure a simpy timeout wakes the runner at its earliest step's time (one per time at most)."""
        if self.heap:
            t, wakeups = self.heap[0][0], self.wakeups
            if not wakeups or t < wakeups[-1]:
                wakeups.append(t)
                simpy.Timeout(self.env, t - self.env.now).callbacks.append(self._fire)

    def _fire(self, _event) -> None:
        env, heap, walk = self.env, self.heap, self._walk
        now, peek = env.now, env.peek
        self.wakeups.pop()
        self.running = True
        try:
            simpy_next = peek()
            while heap:
                t, _, _, _, chain, sync = heap[0]
                if t >= simpy_next or (sync and t > now):
                    break  # simpy goes first, or a check needs simpy's clock at its time
                heappop(heap)
                walk(chain, t)
                if self.consulted:
                    self.consulted = False
                    simpy_next = peek()
        finally:
            self.running = False
        self._arm()

    def _walk(self, chain: _Chain, now: int) -> None:
        """Take ``chain``'s steps from ``chain.at`` at time ``now`` until one waits or the chain ends."""
        op, program = chain.op, chain.program
        head, tail, at, due = chain.head, chain.tail, chain.at, chain.due
        trace = self.trace
        while True:
            step = program[at]
            code = step[0]
            if code <= TURN:
                _, pos, waits, claims, rebase, label, turn = step
                if waits and not due:  # (what _push does, written out: the commonest wait)
                    chain.at, chain.head, chain.tail, chain.due = at, head, tail, True
                    heappush(self.heap, (head, pos + op.offset, op.seq, next(self.count), chain, False))
                    return
                due = False
                turns = None
                if code == TURN:
                    turns = op.turns.get(turn)
                    if turns is not None and op.ticket > turns.passed:  # an earlier operation's claim comes first
                        chain.at, chain.head, chain.tail = at, head, tail
                        turns.parked[op.ticket] = chain
                        return
                head, tail = claim_chain(claims, head, tail, trace)
                if label is not None and label in op.held:  # the labelled last claim releases a gate
                    self._release(op, label, now)
                if rebase is not None:  # a rebase after the group
                    from_tail, offset = rebase
                    head = tail = (tail if from_tail else head) + offset
                if turns is not None:
                    self._pass(op, turn, now)
            elif code == DELAY:
                _, _, ps = step
                head, tail = head + ps, tail + ps
            elif code == REBASE:
                _, _, from_tail, offset = step
                head = tail = (tail if from_tail else head) + offset
            elif code == CHECK or code == INLINE_CHECK:
                _, pos, name, back = step
                if code == CHECK and not due:
                    chain.at, chain.head, chain.tail = at, head, tail
                    self._push(chain, max(now, head - back), pos, True, sync=True)
                    return
                due = False
                self.consulted = True
                outcome = op.model.check(op, name, now, head, tail)
                if type(outcome) is int:  # held: asked again then
                    chain.at, chain.head, chain.tail = at, max(head, outcome), max(tail, outcome)
                    op.holding = chain
                    self._push(chain, max(now, outcome), pos, True, sync=True)
                    return
                if op.holding is chain:  # answered: the operation no longer refers to its chain (nor back)
                    op.holding = None
                if outcome is not None:  # the rest replaced (by nothing when the program is empty)
                    program, head, tail = outcome
                    program = chain.program = program or _ENDED
                    at = 0
                    continue
            elif code == DRAWN:
                _, _, ps, draws = step
                extra = ps + op.draws[draws]
                head, tail = head + extra, tail + extra
            elif code == MARK:
                _, _, name = step
                self.consulted = True
                op.model.mark(op, name, head, tail)
            elif code == WAKE:
                op.wait_from = head
                if chain.main:
                    self.consulted = True
                    op.model.wake(op, head)
            elif code == WAIT:
                if not due:
                    _, _, draws = step
                    chain.at, chain.head, chain.tail = at, head, tail
                    self._push(chain, op.wait_from + op.draws[draws], MODEL_EVENT, True)
                    return
                due = False
                head = tail = op.wait_from = now
            elif code == GATE:  # asked for now (in the order operations get here), passed at the head time
                _, pos, label = step
                gate = op.gates[label]
                chain.at, chain.head, chain.tail = at + 1, head, head
                if gate.free:
                    gate.free -= 1
                    op.held.append(label)
                    self._push(chain, head, pos, False)
                else:
                    gate.waiting.append(chain)
                return
            elif code == FORK:
                _, _, sub = step
                self._walk(_Chain(op, sub, head, tail, False), now)
            elif code == DETOUR:
                chain.kept, tail = tail, head
            elif code == JOIN:
                tail = max(chain.kept, head)
            else:  # END
                break
            at += 1
        if chain.main and (op.held or op.turns):
            self._end(op, now)

    def _release(self, op: Operation, label: str, now: int) -> None:
        """``op`` gives back its slot of gate ``label`` at ``now``: the next waiter passes then."""
        op.held.remove(label)
        gate = op.gates[label]
        if gate.waiting:
            chain = gate.waiting.popleft()
            chain.op.held.append(label)
            chain.head = chain.tail = go = max(now, chain.head)
            self._push(chain, go, chain.program[chain.at - 1][POS], False)
        else:
            gate.free += 1

    def _pass(self, op: Operation, name: str, now: int) -> None:
        """``op``'s ticket passes in turn ``name`` at ``now``: the next ticket's parked claim is made then."""
        turns = op.turns.pop(name)
        if op.ticket != turns.passed:
            turns.early.add(op.ticket)
            return
        turns.passed += 1
        while turns.passed in turns.early:
            turns.early.remove(turns.passed)
            turns.passed += 1
        chain = turns.parked.pop(turns.passed, None)
        if chain is not None:
            self._push(chain, now, chain.program[chain.at][POS], True)

    def _end(self, op: Operation, now: int) -> None:
        """The main chain is done: slots it still holds (it ended without their labelled claim, on an error
        path) are given back, and its tickets pass in the turns it made no claim in."""
        while op.held:
            self._release(op, op.held[0], now)
        for name in list(op.turns):
            self._pass(op, name, now)

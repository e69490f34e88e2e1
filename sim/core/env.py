"""The event kernel: a simpy environment whose clock counts integer picoseconds, with seeded streams.

simpy stays untouched; behaviour lives in generator processes, and the data path's step lists run on the
environment's :class:`~sim.core.interpreter.StepRunner`. This module adds what simpy lacks: an integer clock
contract, per-component random streams and a trace recorder reachable from every model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import simpy
from simpy.core import EmptySchedule, StopSimulation

from sim.core.interpreter import StepRunner
from sim.core.trace import NullTrace, TraceRecorder, TraceWindow

TICK_EVENTS = 20_000
"""Events between two calls of :meth:`Environment.run_ticking`'s hook (a few hundredths of a second of work)."""


class RandomStreams:
    """Independent, named random streams derived from one run seed.

    A stream depends only on the run seed and its name, never on the order in which components ask for
    streams, so adding a component does not perturb the others.

    >>> a = RandomStreams(7).stream("nic.a"); b = RandomStreams(7).stream("nic.a")
    >>> bool(a.integers(1 << 30) == b.integers(1 << 30))
    True
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._streams: dict[str, np.random.Generator] = {}

    def stream(self, name: str) -> np.random.Generator:
        """The generator for component ``name`` (created on first use, then shared)."""
        if name not in self._streams:
            key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
            seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(key,))
            self._streams[name] = np.random.Generator(np.random.PCG64(seq))
        return self._streams[name]


class Environment(simpy.Environment):
    """simpy environment with time in integer picoseconds, named random streams and a trace.

    :param seed: run seed; every random stream derives from it.
    :param trace: record protocol and data-path events (slower), all of them or (a window, [start, end) in ps)
        those the window shows; off gives a no-op recorder.
    :param data: data mode: memory holds real bytes and DMA moves them (slower; for correctness demos).
    """

    def __init__(self, seed: int = 0, *, trace: bool | TraceWindow = False, data: bool = False) -> None:
        super().__init__(initial_time=0)
        self.streams = RandomStreams(seed)
        self.trace: TraceRecorder | NullTrace = (TraceRecorder(self, trace if isinstance(trace, tuple) else None)
                                                 if trace else NullTrace())
        self.data_mode = data
        self.step_runner = StepRunner(self)
        """Runs the data path's step lists in the ordering rule's order (:mod:`sim.core.interpreter`)."""

    def rng(self, component: str) -> np.random.Generator:
        """The random stream of ``component``."""
        return self.streams.stream(component)

    def run_ticking(self, until: simpy.Event, tick: Callable[[], None], every: int | None = None):
        """``run(until=until)``, event for event, calling ``tick()`` after every ``every`` events processed (a
        progress display's hook: it schedules nothing, so the run's order and results are those of ``run``);
        ``every`` defaults to :data:`TICK_EVENTS`.

        :raises RuntimeError: no event is left and ``until`` has not been triggered, as ``run`` raises.
        """
        if until.callbacks is None:
            return until.value
        until.callbacks.append(StopSimulation.callback)
        step, every = self.step, every or TICK_EVENTS
        try:
            while True:
                for _ in range(every):
                    step()
                tick()
        except StopSimulation as exc:
            return exc.args[0]
        except EmptySchedule:
            raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}') from None

    def delay(self, ps: int) -> simpy.Timeout:
        """A timeout of ``ps`` integer picoseconds (rejects floats, which would break exact ordering)."""
        if type(ps) is not int:
            raise TypeError(f"simulated delays are integer picoseconds, got {ps!r}")
        return simpy.Timeout(self, ps)


DRAW_BLOCK = 4096
"""Draws :class:`UniformDraws` takes from its stream per generator call by default."""


class UniformDraws:
    """Integers drawn uniformly from ``[0, high]`` in blocks of ``block``, handed out one at a time (cheap per
    draw). ``rng``, ``high`` and ``block`` are read-only.

    The sequence depends only on the stream and the order of :meth:`next` calls.
    """

    __slots__ = ("rng", "high", "block", "_buffer", "_index")

    def __init__(self, rng: np.random.Generator, high: int, block: int = DRAW_BLOCK) -> None:
        self.rng = rng
        self.high = int(high)
        self.block = block
        self._buffer: list[int] = []
        self._index = 0

    @property
    def started(self) -> bool:
        """Whether a block was drawn from the stream yet (``rng`` is no longer at the sequence's start)."""
        return bool(self._buffer or self._index)

    def next(self) -> int:
        """The next draw."""
        if self._index == len(self._buffer):
            if self.high == 0:
                return 0
            self._buffer = self.rng.integers(0, self.high + 1, size=self.block).tolist()
            self._index = 0
        value = self._buffer[self._index]
        self._index += 1
        return value

"""The progress display of long commands: a bar on stderr while a terminal shows it, nothing otherwise (piped
output stays the tables and the one-line notices).

The bar names the engine simulating (the vectorized core, or the event engine where ``auto`` handed the run over)
and counts the operations simulated, or for a run for a duration the simulated time against the durations'
sum: the vectorized core tells it after each block it solves, the event engine every few thousand events
(:meth:`sim.core.env.Environment.run_ticking`), so it moves several times a second on both engines, with an
estimate of the time left. Where the vectorized core solves a run again (a buffer moved, a page fault, the frames
a link outage loses settled), the bar names the solve it is on: the operations solved again were counted once, and
the count moves on past them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

Display = Callable[[str, int | None, int | None], AbstractContextManager]
"""``display(description, total, simulated_ps)``: a context whose value is told how many more operations were
simulated, and (its ``simulated``) how much more simulated time of the durations' sum (:class:`Advance`)."""


@functools.cache
def stderr():
    """The one console on stderr, shared by notices and progress bars so notices print above a bar."""
    from rich.console import Console  # rich: only for the commands that simulate

    return Console(stderr=True)


def say(line: str) -> None:
    """A notice on stderr as it is written (no markup, highlighting or emoji codes), above a progress bar if one
    shows; before any bar, a plain line (a command refused as it is parsed does not import rich for it)."""
    if stderr.cache_info().currsize:
        stderr().print(line, soft_wrap=True, highlight=False, markup=False, emoji=False)
    else:
        print(line, file=sys.stderr)


class Advance:
    """What a progress bar is told: ``advance(n)`` more operations simulated, ``advance.simulated(ps)`` more
    simulated time covered of the run's durations, ``advance.running(engine)`` the engine simulating now."""

    def __init__(self, bar, task: int, by_time: bool, description: str) -> None:
        self.bar, self.task, self.by_time, self.operations, self.covered = bar, task, by_time, 0, 0
        self.description = description

    def __call__(self, n: int) -> None:
        if self.by_time:
            self.operations += n
            self.bar.update(self.task, operations=self.operations)
        else:
            self.bar.advance(self.task, n)

    def simulated(self, ps: int) -> None:
        if self.by_time:
            self.covered += ps
            self.bar.update(self.task, completed=self.covered, seconds=self.covered / 1e12)

    def running(self, engine: str) -> None:
        """The bar names ``engine`` (``vectorized core``, ``event engine``) after its description from now on."""
        self.bar.update(self.task, description=f"{self.description} ({engine})")


@contextmanager
def progress_bar(console, description: str, total: int | None, quiet: bool = False,
                 simulated_ps: int | None = None) -> Iterator[Advance]:
    """A bar of ``total`` operations on ``console`` (rich), shown while it is a terminal and not ``quiet``;
    gone once the work is done. Without a ``total`` (a run for a duration: only the run tells how many) it follows
    the simulated time against the durations' sum (``simulated_ps``), with the operations counted and an estimate of
    the time left; with neither, it counts the operations and the time spent."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    by_time = total is None and bool(simulated_ps)
    if total is not None:
        counted = [TextColumn("{task.completed:,}/{task.total:,} ops"), TimeRemainingColumn()]
    elif by_time:
        counted = [TextColumn(f"{{task.fields[seconds]:.3g}}/{simulated_ps / 1e12:.3g} s simulated"),
                   TextColumn("{task.fields[operations]:,} ops"), TimeRemainingColumn()]
    else:
        counted = [TextColumn("{task.completed:,} ops"), TimeElapsedColumn()]
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), *counted, console=console,
                  disable=quiet or not console.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=simulated_ps if by_time else total, seconds=0.0, operations=0)
        yield Advance(bar, task, by_time, description)


def phase(console, what: str, quiet: bool = False):
    """A spinner saying ``what`` is being done (writing results and figures), shown while ``console`` is a terminal
    and not ``quiet``."""
    return console.status(what) if console.is_terminal and not quiet else nullcontext()

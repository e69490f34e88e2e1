"""The progress display of long commands: a bar on stderr while a terminal shows it, nothing otherwise (piped
output stays the tables and the one-line notices).

The bar counts the operations simulated: the vectorized core tells it after each block it solves, the event
engine every few thousand events (:meth:`sim.core.env.Environment.run_ticking`), so it moves several times a
second on both engines, with an estimate of the time left.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

Display = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]
"""``display(description, total)``: a context whose value is told how many more operations were simulated."""


@functools.cache
def stderr():
    """The one console on stderr, shared by notices and progress bars so notices print above a bar."""
    from rich.console import Console  # rich: only for the commands that simulate

    return Console(stderr=True)


def say(line: str) -> None:
    """A notice on stderr as it is written (no markup, no highlighting), above a progress bar if one shows."""
    stderr().print(line, soft_wrap=True, highlight=False, markup=False)


@contextmanager
def progress_bar(console, description: str, total: int | None, quiet: bool = False
                 ) -> Iterator[Callable[[int], None]]:
    """A bar of ``total`` operations on ``console`` (rich), shown while it is a terminal and not ``quiet``;
    gone once the work is done. Without a ``total`` (a run for a duration: only the run tells how many) it counts
    the operations and the time spent."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    counted = ([TextColumn("{task.completed:,}/{task.total:,} ops"), TimeRemainingColumn()] if total is not None
               else [TextColumn("{task.completed:,} ops"), TimeElapsedColumn()])
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), *counted, console=console,
                  disable=quiet or not console.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def phase(console, what: str, quiet: bool = False):
    """A spinner saying ``what`` is being done (writing results and figures), shown while ``console`` is a terminal
    and not ``quiet``."""
    return console.status(what) if console.is_terminal and not quiet else nullcontext()

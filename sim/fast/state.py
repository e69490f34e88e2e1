"""What the solver keeps from block to block (:func:`sim.fast.solver.solve`): each group's latest final values
and the state a solve can go on from (:mod:`sim.fast.resume`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sim.fast.block_pass import Carry


@dataclass
class History:
    """Final values of a group's latest operations, as later posts and gates need them."""

    done: np.ndarray
    """Releases (:attr:`sim.fast.block_pass.SliceOut.release`)."""
    released: dict[str, np.ndarray]
    last_done: int
    """The latest operation's completion."""
    end: int = 0
    """When the stream ends if its latest operation is its last (:meth:`Group.end_after`, ps)."""


class State(NamedTuple):
    """The solver's state before a block: what it needs to solve the rest (:func:`sim.fast.resume.rebase`)."""

    problem: object
    """The :class:`sim.fast.solver.Problem` solved."""
    active: dict[int, int]
    """Per group being solved: its next operation."""
    ended: list[int]
    """When each stream of the round that has ended did (ps)."""
    start: dict[int, int]
    """Per group of the rounds started: its round's start (ps)."""
    carry: list[Carry]
    history: dict[int, History]
    spanned: dict[int, int]
    """Per stream: the operations the blocks so far took in (a kept operation's times are final for the steps
    of every operation its block took in, kept or not)."""
    size: int
    """The operations per stream the next block takes (it grows while blocks keep all they take)."""

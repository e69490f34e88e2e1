"""CQ moderation (perftest -Q) on the vectorized core: a stream whose work requests are signaled or not.

perftest signals every ``cq_mod``-th work request (and the last; :func:`models.verbs.workloads.moderated_signal`)
and posts once the completions it has polled cover all but ``tx_depth`` of those posted before: a completion covers
every work request up to its own. The stream is one :class:`sim.fast.Group` whose steps are the signaled path's,
the claims that only a signaled work request makes (its CQE) skipped by the others
(:attr:`sim.core.steps.Claim.skipped_by`), and whose window is ``tx_depth - cq_mod + 1`` (:func:`moderated_window`):
operation ``i`` is posted by the latest completion delivered at or before operation ``i - window``
(:attr:`sim.fast.steps.Group.unsignaled`), which is the first signaled at or after ``i - tx_depth``. Post lists
(perftest -l) with one completion each are the same, whole lists at a time. Its records are the event engine's: an
unsignaled work request takes the time of the completion that covers it, and those after a timed stream's last
signaled one are left out (:class:`Covers`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from models.nic.datapath import Path, Shape
from models.verbs.workloads import moderated_signal
from sim.core.steps import Claim
from sim.fast import Finished, Unsolvable

UNSIGNALED = "unsignaled"
"""Name of the draw marking a moderated stream's unsignaled operations, and of the claims they skip."""


def moderated_steps(signaled: tuple, unsignaled: tuple) -> tuple:
    """One step list for both paths: ``signaled``'s, the claims ``unsignaled`` lacks (a run of them) marked as
    skipped by the unsignaled operations.

    :raises Unsolvable: the paths differ otherwise (a READ's CQE lands with its response, in one write)."""
    extra = len(signaled) - len(unsignaled)
    k = next((k for k, (a, b) in enumerate(zip(signaled, unsignaled)) if a != b), len(unsignaled))
    run = signaled[k:k + extra]
    if extra <= 0 or signaled[:k] + signaled[k + extra:] != unsignaled or not all(isinstance(s, Claim) for s in run):
        raise Unsolvable("an unsignaled work request's path is not the signaled one's without its CQE")
    return (*signaled[:k], *(replace(s, skipped_by=UNSIGNALED) for s in run), *signaled[k + extra:])


def moderate(work, parts: list, paths: Callable[..., Path], draws: dict) -> tuple[list, int, dict]:
    """The groups' parts (``(lo, hi, steps)``: the signaled path's steps, made :func:`moderated_steps` against the
    unsignaled path's; ``paths`` gives the path of a :class:`~models.nic.datapath.Shape`), window
    (:func:`moderated_window`) and arguments of ``work``'s stream, whose draws ``draws`` gain :data:`UNSIGNALED`."""
    signaled, unsignaled = (paths(shape=Shape(signaled=flag, fetched=work.post_list > 1)).steps
                            for flag in (True, False))
    draws[UNSIGNALED] = Unsignaled(work)
    parts = [(lo, hi, moderated_steps(signaled, unsignaled)) for lo, hi, _ in parts]
    return parts, moderated_window(work.tx_depth, work.cq_mod, work.post_list), {"unsignaled": UNSIGNALED}


def moderated_window(tx_depth: int, cq_mod: int, post_list: int = 1) -> int:
    """The window of a moderated stream: operation ``i`` is posted by the latest completion delivered at or before
    operation ``i - window``.

    perftest posts work request ``i`` once its polled completions cover those up to ``i - tx_depth`` (a completion
    covers every work request up to its own): the first signaled one at or after ``i - tx_depth`` is the latest at
    or before ``i - tx_depth + cq_mod - 1``. A list of ``post_list`` goes once it fits whole (its moderation is its
    size): only ``tx_depth`` rounded down to whole lists is ever outstanding, and all of a list's work requests go
    with the completion of the last signaled one a window before its first."""
    return tx_depth - tx_depth % post_list - cq_mod + 1


class Unsignaled:
    """The draw of :data:`UNSIGNALED`: 1 for each operation ``lo..hi-1`` of ``work``'s stream that perftest does
    not signal (a fixed count signals its last; a timed loop's last is not known)."""

    def __init__(self, work) -> None:
        self.cq_mod, self.last = work.cq_mod, None if work.duration is not None else work.iterations - 1

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        return (~moderated_signal(np.arange(lo, hi), self.cq_mod, self.last)).astype(np.int64)


class Covers:
    """A moderated stream's solved pieces as the event engine records them: each operation's completion is the
    one that covers it (the first signaled at or after it); the operations after the latest signaled one are held
    until a later piece covers them, and dropped after the stream's last piece (never covered)."""

    def __init__(self, work) -> None:
        self.signal = Unsignaled(work)
        self.held: Finished | None = None

    def add(self, piece: Finished) -> Finished | None:
        """The covered operations up to ``piece``'s latest signaled one (None: none)."""
        post, done, lo = piece.post, piece.done, piece.lo
        if self.held is not None:
            post, done, lo = (np.concatenate((self.held.post, post)), np.concatenate((self.held.done, done)),
                              self.held.lo)
        signaled = self.signal(lo, lo + len(post)) == 0
        n = len(post) - int(np.argmax(signaled[::-1])) if signaled.any() else 0
        self.held = replace(piece, lo=lo + n, post=post[n:], done=done[n:], marks={}) if n < len(post) else None
        if not n:
            return None
        covering = np.where(signaled[:n], done[:n], np.iinfo(np.int64).max)
        return replace(piece, lo=lo, post=post[:n], done=np.minimum.accumulate(covering[::-1])[::-1], marks={})

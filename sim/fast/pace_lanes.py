"""What the pace acceleration (:mod:`sim.fast.pace`) keeps of a saturated group's last block: the values of its
last window and how far each lane moved over one window (ps)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.fast.scans import ramp


@dataclass(frozen=True)
class Pace:
    """A group that queued throughout its last block: the values of its last kept operations and how far each lane
    of them moved over one window, which a saturated stream keeps (ps). A lane is every ``window``-th operation:
    the operations one completion posts after another (with gates, every ``slots``-th where fewer: the operations
    one slot lets through after another). One stream alone on its servers moves every lane alike; parallel streams
    that take turns on a shared server move each in bursts of a window (of its slots), which the lanes keep."""

    end: tuple[np.ndarray, np.ndarray]
    """The operations' ends (their completion or, where the group's last drawn delays follow its last claim, the
    completion less them): the last window's, and each lane's step."""
    claims: dict[int, tuple[np.ndarray, np.ndarray]]
    """Per shared position: (wake, head, not_before) of the last window's claims, and each lane's step."""
    releases: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per gate label: the last window's releases of a slot, and each lane's step."""

    @staticmethod
    def of(series: list[np.ndarray], n: int, lanes: int) -> tuple[np.ndarray, np.ndarray]:
        """Per series (each holding operations ``0..n-1``, ``n > 1``): the values of its last ``lanes`` operations
        and each one's step from the operation ``lanes`` before it; where fewer than two windows are kept, the
        last value and the mean spacing (one lane)."""
        if n < 2 * lanes:
            last = np.array([[int(x[n - 1])] for x in series], np.int64)
            return last, (last - np.array([[int(x[0])] for x in series], np.int64)) // (n - 1)
        last = np.array([x[n - lanes:n] for x in series], np.int64)
        return last, last - np.array([x[n - 2 * lanes:n - lanes] for x in series], np.int64)

    @staticmethod
    def ahead(last: np.ndarray, step: np.ndarray, m: int) -> np.ndarray:
        """The next ``m`` values of series whose last window is ``last`` and whose lanes move by ``step`` per
        window (one row per series)."""
        lanes = last.shape[-1]
        windows = -(-m // lanes)
        out = last[..., None, :] + step[..., None, :] * ramp(windows, 1)[:, None]
        return out.reshape(*last.shape[:-1], windows * lanes)[..., :m]

"""The rows of ``rdmasim calibrate`` (:mod:`sim.inspect.calibrate`): one simulated quantity against one measured,
with its error and tolerance, and the measurement files they are read from."""

from __future__ import annotations

import json
import math
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "models" / "data"
"""The measurement files (``models/data``)."""


def row(experiment: str, case: str, x: int, unit: str, sim: float, measured: float, *, tolerance: float,
        required: bool = True, best: float = math.nan, note: str = "") -> dict:
    """One row: ``sim`` against ``measured`` (or the nearer end of ``[measured, best]`` where a best case is
    known), its relative error, and whether it lies within ``tolerance``."""
    low, high = (measured, measured) if math.isnan(best) else sorted((measured, best))
    err = sim / low - 1 if sim < low else sim / high - 1 if sim > high else 0.0
    return dict(experiment=experiment, case=case, x=x, unit=unit, sim=sim, measured=measured, best=best,
                err=err, err_median=sim / measured - 1, tolerance=tolerance, required=required,
                passed=abs(err) <= tolerance, note=note)


def load(name: str) -> dict:
    """Measurement file ``name`` of ``models/data``."""
    return json.loads((DATA / name).read_text())

"""Published nvbandwidth copy rates (``models/data/nvbandwidth_copy.json``) against the copy-engine presets.

Each set is one test on one host, one value per GPU. The model's rate is :meth:`CopyEngines.bandwidth_GBps` of
the set's buffer size on the preset of the set's link: Gen5 x16 sets on the H100's copy preset (the H200 fit),
Gen4 x16 sets on the A100's (the H200 fit scaled to the link, :func:`models.gpu.copy_engine.scaled_costs`).

Copy-engine (CE) sets are required; the tolerance of a set is the wider side of its values' spread about their
median (the GPUs of one host differ by that much), at least :data:`FLOOR`. The Gen4 sets come from RTX 4090s: the
copy engines on a Gen4 x16 link, the A100's link; no A100 copy-engine rate was found published. SM sets (a copy
kernel whose threads load across PCIe) are shown, not required: the model has no kernel copies. They show why an
H100's host-to-device rate is quoted near 35 GB/s: SM loads, not the copy engines, which reach 57 GB/s.

Examples
--------
>>> [(s.name, round(s.sim_GBps, 1), s.measured_GBps, f"{s.tolerance:.1%}") for s in compare()[:2]]
[('h100_ce_h2d', 55.1, 57.06, '5.0%'), ('h100_sm_h2d', 55.1, 35.25, '5.0%')]
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import NamedTuple

from models.gpu.copy_engine import COPY_PRESETS, CopyEngines
from models.gpu.presets import gpu_params

DATA = Path(__file__).resolve().parents[1] / "data" / "nvbandwidth_copy.json"
FLOOR = 0.05
"""Least tolerance of a published rate from a host that is not ours: hosts of one GPU model differ by a few
per cent (the H100 copy-engine set is 3 % above our H200's fit) where the GPUs of one host agree within 1 %."""
PRESET_OF_LINK = {"gen5x16": gpu_params("h100").copy_preset, "gen4x16": gpu_params("a100").copy_preset}
"""The copy preset a set's link is simulated on."""


class CopyCheck(NamedTuple):
    """One published set against the model."""

    name: str
    issue: int
    engine: str
    """``"ce"`` (cuMemcpyAsync on the copy engines) or ``"sm"`` (a copy kernel)."""
    direction: str
    nbytes: int
    sim_GBps: float
    measured_GBps: float
    """Median over the set's GPUs (GB/s)."""
    tolerance: float
    what: str


def spread(values: list[float]) -> float:
    """The wider side of ``values``' spread about their median, relative to it (0 for one value)."""
    mid = median(values)
    return max(mid - min(values), max(values) - mid) / mid


def compare() -> list[CopyCheck]:
    """Every published set simulated on its link's copy preset."""
    checks = []
    for s in json.loads(DATA.read_text())["sets"]:
        engines = CopyEngines(COPY_PRESETS[PRESET_OF_LINK[s["link"]]])
        values = s["values_GBps"]
        checks.append(CopyCheck(s["name"], s["issue"], s["engine"], s["direction"], s["bytes"],
                                engines.bandwidth_GBps(s["bytes"], s["direction"]), median(values),
                                max(FLOOR, spread(values)) if len(values) > 1 else FLOOR, s["what"]))
    return checks

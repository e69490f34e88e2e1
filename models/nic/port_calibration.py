"""perftest's published EDR bandwidths replayed on the port model (:func:`models.nic.port_rates.perftest_Bps`).

Two sources, one port generation:

* ``perftest_edr_write_bw.json``: ib_write_bw between pinned host buffers, 64 KiB (perftest issue #225): the
  port alone sets it, so it is required;
* ``perftest_edr_send_bw.json``: ib_send_bw between ROCm GPU buffers reached through peer-direct, 4 KiB .. 8 MiB
  (perftest PR #98): about 3 % below the host row at every size, which the port does not explain (the GPU's
  side of the path), so these rows are shown, not required.

The tolerance of every row is the run-to-run spread of perftest on one EDR port: (max - min) / mean of PR #98's
rows from 8 KiB, where the rate no longer depends on the size (1.5 %).

Examples
--------
>>> rows = compare()
>>> [(r.case, r.nbytes, round(r.sim_Gbps, 2), round(r.measured_Gbps, 2)) for r in rows[:1]]
[('ib_write_bw EDR, host memory (perftest #225)', 65536, 99.34, 98.39)]
>>> round(rows[0].tolerance, 4)
0.0152
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from models.fabric import RETH
from models.nic.port_rates import perftest_Bps, port_rate

DATA = Path(__file__).resolve().parents[1] / "data"
MiB = 1 << 20
FLAT_FROM = 8192
"""The smallest message of PR #98 whose rate no longer grows with the size (bytes)."""


class PortRow(NamedTuple):
    """One published bandwidth and the model's."""

    case: str
    nbytes: int
    sim_Gbps: float
    measured_Gbps: float
    tolerance: float
    required: bool
    note: str


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def spread(rates: list[float]) -> float:
    """(max - min) / mean of ``rates``."""
    return (max(rates) - min(rates)) / (sum(rates) / len(rates))


def compare() -> list[PortRow]:
    """The host-memory WRITE row (required), then the GPU-buffer SEND rows (shown), MTU 4096."""
    write, send = _load("perftest_edr_write_bw.json"), _load("perftest_edr_send_bw.json")
    tolerance = spread([r["bw_Gbps"] for r in send["rows"] if r["bytes"] >= FLAT_FROM])
    rows = [PortRow("ib_write_bw EDR, host memory (perftest #225)", r["bytes"],
                    perftest_Bps(port_rate(write["port"]), r["bytes"], 4096, RETH) * 8 / 1e9,
                    r["bw_MiBps"] * MiB * 8 / 1e9, tolerance, True, "the port: headers, credits, line code")
            for r in write["rows"]]
    rows += [PortRow("ib_send_bw EDR, GPU buffers (perftest #98)", r["bytes"],
                     perftest_Bps(port_rate(send["port"]), r["bytes"], 4096, first_extra=0) * 8 / 1e9,
                     r["bw_Gbps"], tolerance, False, "peer-direct GPU reads: below the host row, not the port")
             for r in send["rows"]]
    return rows

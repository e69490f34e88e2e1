"""A DMA engine's limits beyond its link, fitted to pcie-bench's NFP-6000 on PCIe Gen3 x8.

The data (``models/data/pciebench_dma_read_sizes.json``, pcie-bench data of Neugebauer et al., SIGCOMM'18) give two
limits the link model does not explain, which the ``nfp6000`` PCIe preset (:mod:`models.presets`) carries as
:class:`~models.pcie.link.PcieParams` fields:

* **Posted-write issue spacing** (``dma_write_issue_ps``). Random writes of 16, 32 and 64 B all run at 47.4-47.6
  M writes/s although the link would carry 64 B writes at 82 M/s (88 wire bytes each at 57.9 Gb/s): the engine
  issues at most one write per 21.1 ns, fitted to the 64 B rate. From 512 B on the link is the limit and the
  model meets the measurement within 0.2 %; at 128 and 256 B, where the two limits cross, the NFP is 13 % and
  5 % slower than either alone, which a ceiling min(link, issue) does not capture.
* **Read latency that grows with size** (``read_latency_ps`` and ``read_latency_ps_per_byte``). One outstanding
  read takes 533 ns at 8 B and 1133 ns at 2 KiB, about 0.30 ns/B. The link already charges about 0.15 ns/B of
  that: every completion byte serialises at the TLP rate (plus a 20 B CplD overhead per 256 B), as
  :meth:`~models.pcie.link.PcieParams.lone_read_ps` counts. Only the remainder is fitted: a least-squares line
  through each size's median minus its link part, 8 B .. 2 KiB, whose intercept is the round trip and whose
  slope is the per-byte term.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from models.pcie.link import PcieParams

DATA = Path(__file__).resolve().parents[1] / "data" / "pciebench_dma_read_sizes.json"
ISSUE_FIT_BYTES = 64
"""The write size the issue spacing is fitted at: the largest of the plateau of equal write rates."""
LATENCY_FIT_FROM = 8
"""Smallest read in the latency fit (bytes): 4 B reads take as long as 8 B ones."""


def load() -> dict:
    """The pcie-bench rows (see the file's ``method``)."""
    return json.loads(DATA.read_text())


def fit_write_issue_ps(data: dict) -> int:
    """The engine's posted-write issue spacing: the time per write at :data:`ISSUE_FIT_BYTES` (ps)."""
    row = next(r for r in data["write_rows"] if r["bytes"] == ISSUE_FIT_BYTES)
    return round(1e12 / row["per_s"])


def fit_read_latency(link: PcieParams, data: dict) -> tuple[int, float]:
    """``(read_latency_ps, read_latency_ps_per_byte)`` of a device on ``link``: the line through the measured
    median read latencies less what ``link`` charges for the request and completions (ps, ps per byte)."""
    wire_only = replace(link, read_latency_ps=0, read_latency_ps_per_byte=0.0)
    rows = [r for r in data["latency_rows"] if r["bytes"] >= LATENCY_FIT_FROM]
    sizes = np.array([r["bytes"] for r in rows], dtype=float)
    rest = np.array([r["median_ns"] * 1000 - wire_only.lone_read_ps(r["bytes"]) for r in rows])
    slope, intercept = np.polyfit(sizes, rest, 1)
    return round(intercept), round(float(slope), 2)


def latency_tolerance(row: dict) -> float:
    """The spread of one size's latency samples about their median: the farther of the minimum and the 95th
    percentile, relative to the median."""
    median = row["median_ns"]
    return max(median - row["min_ns"], row["p95_ns"] - median) / median


def write_tolerance(data: dict, nbytes: int) -> float:
    """The spread of the write rate of ``nbytes`` over pcie-bench's repeats (every cache state and window),
    relative to the size sweep's value, and no less than 0.5 %: how far the closed form and the TLP-level model
    (:mod:`models.pcie.tlp`) may differ."""
    measured = next(r["bw_Gbps"] for r in data["write_rows"] if r["bytes"] == nbytes)
    low, high = data["write_repeats_Gbps"].get(str(nbytes), (measured, measured))
    return max(0.005, (high - low) / measured)

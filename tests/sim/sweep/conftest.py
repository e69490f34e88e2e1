"""A tiny base scenario and a sweep over it, written into a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import tiny_yaml

BASE = tiny_yaml("{kind: write_bw, name: bw, from: src, to: dst, sizes: [4KiB], iterations: 50}")

SWEEP = """schema: 1
kind: sweep
name: tiny-sweep
base: base.yaml
seed: 3
repetitions: 2
grid:
  workload.bw.sizes.0: [4KiB, 16KiB]
  buffers.src.register: [pinned, odp]
zip:
  fabric.latency: [300ns, 1us]
  fabric.mtu: [4096, 1024]
random:
  samples: 2
  params:
    workload.bw.tx_depth: {randint: [1, 64]}
    fabric.rate: {loguniform: [100Gb/s, 400Gb/s]}
"""


@pytest.fixture
def sweep_text() -> str:
    """The sweep over the tiny base: 2 sizes x 2 modes x 2 zipped fabrics x 2 random points, 2 repetitions."""
    return SWEEP


@pytest.fixture
def base_text() -> str:
    """The tiny base scenario: pinned host buffers, one write_bw workload named 'bw'."""
    return BASE


@pytest.fixture
def write_sweep(tmp_path):
    """Write the base scenario and a sweep (the default one, or ``text``); return the sweep's path."""
    def write(text: str = SWEEP, base: str = BASE) -> Path:
        (tmp_path / "base.yaml").write_text(base)
        path = tmp_path / "sweep.yaml"
        path.write_text(text)
        return path
    return write

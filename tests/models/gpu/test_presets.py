"""GPU presets and the docstring examples of the GPU models."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import models.gpu
import models.gpu.device_memory
import models.gpu.presets
import models.gpu.workloads
from models.gpu.presets import GPU_PRESETS, SOURCES, gpu_params

MiB, GiB = 1 << 20, 1 << 30
HOST = json.loads((Path(__file__).resolve().parents[3] / "models" / "data" / "h200_host.json").read_text())


def test_h200_matches_the_measured_host():
    h200 = gpu_params("h200")
    assert f"{h200.hbm_bytes // MiB} MiB" in HOST["smi"]
    assert f"{h200.bar1_bytes // MiB} MiB" in HOST["bar1"]
    assert h200.pcie == "gen5x16" and ", 5, 5, 16, 16," in HOST["smi"]
    assert h200.page_sizes == (64 << 10, 2 * MiB) and h200.alloc_granularity == 2 * MiB


def test_presets_cover_h100_and_mi300x_with_sources():
    assert gpu_params("h100").hbm_bytes == 80 * GiB
    assert gpu_params("mi300x").hbm_bytes == 192 * GiB and gpu_params("mi300x").bar1_bytes is None
    assert set(SOURCES) == set(GPU_PRESETS)
    assert gpu_params("h200", hbm_bytes=GiB).hbm_bytes == GiB
    with pytest.raises(KeyError, match="known: a100, h100, h200, mi300x"):
        gpu_params("v100")
    with pytest.raises(TypeError):
        gpu_params("h200", hbm=1)


@pytest.mark.parametrize("module", [models.gpu, models.gpu.device_memory, models.gpu.presets,
                                    models.gpu.workloads])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0

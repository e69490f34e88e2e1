"""The DMA-engine calibration figure: pcie-bench's points and the nfp6000 preset's closed form behind it."""

import pandas as pd
import pytest

from models.pcie.dma_engine import load
from models.pcie.link import PcieParams
from models.pcie.presets import PCIE_PRESETS
from sim.plot.calib_dma import dma_engine_figure


def test_figure_shows_every_measured_point_with_the_model_beside_it(tmp_path):
    paths = dma_engine_figure(tmp_path)
    assert [p.name for p in paths] == ["calib_dma_engine.png", "calib_dma_engine.pdf", "calib_dma_engine.csv"]
    assert paths[0].stat().st_size > 20_000
    points = pd.read_csv(paths[2])
    data, nfp = load(), PcieParams(**PCIE_PRESETS["nfp6000"])
    assert len(points) == len(data["write_rows"]) + len(data["rows"]) + len(data["latency_rows"]) - 1  # 4 B left out
    latency = points[points.what == "read latency"].set_index("bytes")
    assert latency.loc[2048, "measured"] == 1133
    assert latency.loc[2048, "model"] == pytest.approx(nfp.lone_read_ps(2048) / 1e3)
    writes = points[points.what == "write"].set_index("bytes")
    assert writes.loc[64, "model"] == pytest.approx(writes.loc[64, "measured"], rel=1e-3)  # the fitted point

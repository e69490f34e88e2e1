"""A heatmap over axes of many values stays a figure a viewer opens: its size is capped (cells narrow instead of
the image widening; a 400-value axis drew 67,560 px before), values are written only in cells that hold them and
at most ``MAX_TICKS`` axis values are labelled; the CSV keeps every cell."""

from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sim.plot.recipes import HEATMAP_MAX_IN, MAX_TICKS, _SweepDir, heatmap
from tests.properties import examples

DPI = 120  # sim.plot.figures.save's


def sweep(rows: int, cols: int, seed: int) -> _SweepDir:
    """A sweep table of ``rows`` x ``cols`` runs over axes y and x, with random bandwidths."""
    y, x = np.meshgrid(np.arange(rows), np.arange(cols) * 4096, indexing="ij")
    table = pd.DataFrame({"y": y.ravel(), "x": x.ravel(), "run": np.arange(rows * cols), "status": "ok",
                          "kind": "write_bw",
                          "bw_avg_Gbps": np.random.default_rng(seed).uniform(1, 400, rows * cols)})
    return _SweepDir("grid", table, ["y", "x"])


@hsettings(max_examples=examples(4), deadline=None)
@given(rows=st.integers(1, 60), cols=st.sampled_from([1, 3, 9, 41, 400]), seed=st.integers(0, 3))
def test_a_heatmap_is_bounded_and_keeps_every_cell(tmp_path_factory, rows, cols, seed):
    out = tmp_path_factory.mktemp("heat")
    results = sweep(rows, cols, seed)
    png, _, csv = heatmap(results, out)
    height, width = mpimg.imread(png).shape[:2]
    assert width <= HEATMAP_MAX_IN[0] * DPI and height <= HEATMAP_MAX_IN[1] * DPI
    kept = pd.read_csv(csv)
    assert len(kept) == rows * cols
    assert np.allclose(kept.sort_values(["y", "x"])["bw_avg_Gbps"], results.table["bw_avg_Gbps"])


def test_labels_are_thinned_and_values_left_out_of_narrow_cells(tmp_path, monkeypatch):
    import matplotlib.axes

    written, ticks = [], {}
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda self, *a, **k: written.append(a))
    original = matplotlib.axes.Axes.set_xticks

    def count(self, positions, labels=None, **kwargs):
        ticks["x"] = list(labels)
        return original(self, positions, labels, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticks", count)
    heatmap(sweep(3, 400, 0), tmp_path / "wide")
    assert written == [] and len(ticks["x"]) <= MAX_TICKS and ticks["x"][0] == "0"
    heatmap(sweep(3, 4, 0), tmp_path / "small")
    assert len(written) == 12 and len(ticks["x"]) == 4

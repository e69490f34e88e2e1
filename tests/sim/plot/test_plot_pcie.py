"""The PCIe efficiency figures: files written, and the CSV shows the MPS sawtooth."""

import pandas as pd

from models.pcie.closed_form import MPS_CHOICES
from sim.plot.pcie import pcie_efficiency_figures


def test_pcie_figures_show_the_mps_sawtooth(tmp_path):
    paths = pcie_efficiency_figures(tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"pcie_bw_vs_{k}.{ext}" for k in ("mps", "gen")
                                                   for ext in ("png", "pdf", "csv"))
    assert all(p.parent == tmp_path and p.stat().st_size > 1000 for p in paths)
    data = pd.read_csv(tmp_path / "pcie_bw_vs_mps.csv")
    assert sorted(data["mps"].unique()) == list(MPS_CHOICES)
    for (op, mps), rows in data.groupby(["op", "mps"]):
        bw = rows.set_index("bytes")["bw_GBps"]
        step = mps if op == "write" else min(mps, 512)  # a read's completions are cut at MRRS 512 too
        for edge in range(step, 4096, step):
            if op == "write" or edge >= 256:  # small reads are capped by the 256 tags instead
                assert bw[edge + 1] < bw[edge] and bw[edge + 1] < bw[edge + 32], (op, mps, edge)
        assert bw[4096] > bw[2 * 32] > 0
    gens = pd.read_csv(tmp_path / "pcie_bw_vs_gen.csv").groupby("gen")["bw_GBps"].max()
    assert list(gens.index) == [1, 2, 3, 4, 5, 6] and gens.is_monotonic_increasing

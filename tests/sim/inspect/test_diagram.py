"""``sim.inspect.diagram`` and ``explain --diagram``: every timeline entry drawn in its layer's lane, in time order,
lock holds and fence waits marked; the file obeys the output rules (only rdmasim's drawings are replaced, with --force)
and the same run draws the same bytes."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest
from matplotlib.collections import PolyCollection
from typer.testing import CliRunner

from sim.store import outdir
from sim.cli.app import app
from sim.inspect.diagram import DMABUF, EXPORTER, FORMATS, IMPORTER, NIC, SPACING, UVERBS, draw, lane
from sim.inspect.diagram import lane_titles as make_titles
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from sim.inspect.timeline import sections
from tests.conftest import ROOT, tiny_yaml

PRESSURE = ROOT / "scenarios" / "pin_vs_dmabuf.yaml"
runner = CliRunner()


@cache
def dmabuf_run():
    return run_scenario(dict(load_scenario_variants(PRESSURE)[2])["dmabuf"], trace=True, variant="dmabuf")


def _texts(fig):
    return [(t.get_text(), t.get_position()) for t in fig.axes[0].texts]


def test_every_entry_of_the_timeline_is_drawn_once_in_time_order():
    bed = dmabuf_run().testbed
    parts = sections(bed)
    texts = iter(_texts(draw(bed, parts, "t")))
    ys = []
    for entry in (entry for part in parts for entry in part.entries):
        event = entry.event
        if event.name in ("LockAcquired", "LockReleased"):
            word = "lock" if event.name == "LockAcquired" else "unlock"
            found = lambda text: text.startswith(f"{word} {event.args['lock']} ({event.component})")  # noqa: E731
        else:
            found = lambda text: f": {event.name}" in text  # noqa: E731 - labels read "a: name(...)"
        ys.append(next(pos for text, pos in texts if found(text))[1])  # each label after the one before
    assert ys == sorted(ys, reverse=True) and len(set(ys)) == len(ys) > 30  # one row each, top to bottom


@pytest.mark.parametrize("name, expected", [
    ("ibv_reg_dmabuf_mr", UVERBS), ("pagefault_dmabuf_mr", IMPORTER), ("MappingInvalidated", IMPORTER),
    ("dma_buf_move_notify", DMABUF), ("FencesWaited", DMABUF), ("BufferMoved", EXPORTER),
    ("AccessStalled", NIC), ("MovableExporter.move", EXPORTER)])
def test_each_layer_draws_in_its_own_lane(name, expected):
    event = next(e for e in dmabuf_run().testbed.env.trace.events if e.name == name)
    assert lane(event) == expected
    fig = draw(dmabuf_run().testbed, sections(dmabuf_run().testbed), "t")
    if event.dur_ps is None:  # an instant: its dot sits on its lane's lifeline
        dots = [line.get_xdata()[0] for line in fig.axes[0].lines if line.get_marker() == "o"]
        assert expected * SPACING in dots


def test_each_lock_hold_is_one_bar_and_the_fence_wait_spans_the_rows_it_waited():
    bed = dmabuf_run().testbed
    fig = draw(bed, sections(bed), "t")
    holds = sum(1 for s in sections(bed) for e in s.entries if e.event.name == "LockReleased")
    bars = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bars) == holds == 3
    dotted = [line for line in fig.axes[0].lines if line.get_linestyle() == ":"]
    fence = next(pos for text, pos in _texts(fig) if "FencesWaited" in text and "waited=0.000" not in text)
    assert len(dotted) == 1 and dotted[0].get_ydata()[1] == fence[1] < dotted[0].get_ydata()[0]  # from above


def _explain(*args):
    return runner.invoke(app, ["explain", str(PRESSURE), "--variant", "dmabuf", *args])


def test_explain_draws_svg_and_png_with_rdmasim_marker_and_the_same_bytes_again(tmp_path):
    svg, png = tmp_path / "t.svg", tmp_path / "t.png"
    assert _explain("--diagram", str(svg)).exit_code == 0 and _explain("--diagram", str(png)).exit_code == 0
    first = svg.read_bytes()
    assert first.startswith(b"<?xml") and FORMATS[".svg"] in first and b"move_notify" in first
    assert png.read_bytes().startswith(b"\x89PNG") and FORMATS[".png"] in png.read_bytes()[:outdir.MARKER_SPAN]
    again = _explain("--diagram", str(svg), "--force")
    assert again.exit_code == 0 and svg.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png", "t.svg"]  # no temporary file left


def test_a_diagram_drawn_before_is_replaced_only_with_force(tmp_path):
    svg = tmp_path / "t.svg"
    assert _explain("--diagram", str(svg)).exit_code == 0
    before = svg.read_bytes()
    refused = _explain("--diagram", str(svg))
    assert refused.exit_code == 2 and "add --force" in refused.stderr and svg.read_bytes() == before


@pytest.mark.parametrize("make, reason", [
    (lambda p: p.write_text("<svg>mine</svg>"), "rdmasim did not write it"),
    (lambda p: p.mkdir(), "is not a file"),
    (lambda p: os.symlink(p.parent / "elsewhere.svg", p), "symbolic link"),
])
def test_explain_refuses_before_running_a_diagram_path_it_may_not_write(tmp_path, make, reason):
    path = tmp_path / "t.svg"
    make(path)
    before = sorted(os.listdir(tmp_path))
    result = _explain("--diagram", str(path), "--force")
    assert result.exit_code == 2 and reason in result.stderr and str(path) in result.stderr
    assert "Registration of" not in result.stdout  # refused before the run
    assert sorted(os.listdir(tmp_path)) == before
    if path.is_file() and not path.is_symlink():
        assert path.read_text() == "<svg>mine</svg>"


@pytest.mark.parametrize("name", ["t.pdf", "t", "missing/t.svg"])
def test_explain_refuses_a_diagram_it_cannot_draw_there(tmp_path, name):
    result = _explain("--diagram", str(tmp_path / name))
    assert result.exit_code == 2 and "Traceback" not in result.output and len(result.stderr.splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_a_pinned_run_without_dmabuf_still_has_its_lanes_and_calls(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10}"))
    out = tmp_path / "d.svg"
    result = runner.invoke(app, ["explain", str(path), "--diagram", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "pin_user_pages" in text and "uverbs / ib_core" in text and "MkeyCreated" in text


def test_writing_a_file_that_fails_leaves_nothing(tmp_path):
    def fail(path: Path) -> None:
        path.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(outdir.OutputError, match="writing failed: disk full"):
        outdir.write_file(tmp_path / "t.svg", b"marker", fail)
    assert os.listdir(tmp_path) == []


@cache
def _variant(name):
    return run_scenario(dict(load_scenario_variants(PRESSURE)[2])[name], trace=True, variant=name)


def _move_section(bed):
    return next(s for s in sections(bed) if s.registration is None)


def _arrow_from(fig, label: str) -> float:
    """The x its call arrow starts from, for the call whose label contains ``label``."""
    y = next(pos[1] for text, pos in _texts(fig) if label in text)  # a label sits 0.1 above its arrow
    arrows = [a for a in fig.axes[0].texts if hasattr(a, "xyann") and abs(a.xy[1] - (y - 0.1)) < 1e-9]
    return arrows[0].xyann[0]


def test_move_notify_is_an_arrow_from_the_dma_buf_core_into_the_importer_under_the_exporter_s_lock():
    """drivers/dma-buf/dma-buf.c dma_buf_move_notify calls attach->importer_ops->move_notify, which is
    mlx5_ib_dmabuf_invalidate_cb (drivers/infiniband/hw/mlx5/mr.c), with the exporter holding the resv lock."""
    bed = dmabuf_run().testbed
    part = _move_section(bed)
    names = [e.event.name for e in part.entries]
    callback = next(e.event for e in part.entries if e.event.name == "mlx5_ib_dmabuf_invalidate_cb")
    assert lane(callback) == IMPORTER and callback.dur_ps
    assert names.index("LockAcquired") < names.index("mlx5_ib_dmabuf_invalidate_cb") < names.index("LockReleased")
    fig = draw(bed, [part], "t")
    assert _arrow_from(fig, "mlx5_ib_dmabuf_invalidate_cb") == DMABUF * SPACING
    assert _arrow_from(fig, "dma_buf_unmap_attachment") == IMPORTER * SPACING    # the importer unmaps


def test_the_umr_that_zaps_and_the_one_that_rewrites_the_mtt_run_on_the_nic_lane_with_their_durations():
    """mlx5_ib_dmabuf_invalidate_cb posts mlx5r_umr_update_mr_pas(mr, MLX5_IB_UPD_XLT_ZAP), which writes every
    entry (zeros); pagefault_dmabuf_mr rewrites them with mlx5r_umr_update_mr_pas under the lock."""
    from models.nic.nic import UmrParams
    umrs = [e.event for e in _move_section(dmabuf_run().testbed).entries if e.event.name == "mlx5r_umr_update_mr_pas"]
    assert [u.args.get("flags") for u in umrs] == ["ZAP", None]
    umr, pages = UmrParams(), (1 << 30) // 4096
    assert all(lane(u) == NIC and u.dur_ps == umr.fixed_ps + umr.entry_ps * pages for u in umrs)


def test_a_peer_memory_run_has_a_peer_memory_client_lane_and_no_dynamic_importer():
    bed = _variant("peermem").testbed
    titles = make_titles(bed)
    assert "peer-memory client" in titles[DMABUF] and "dma-buf core" not in titles[DMABUF]
    assert "dynamic" not in titles[IMPORTER]
    events = {e.name: e for e in bed.env.trace.events}
    assert lane(events["nv_mem_get_pages"]) == DMABUF and lane(events["nvidia_p2p_get_pages"]) == EXPORTER
    assert "dynamic" in make_titles(dmabuf_run().testbed)[IMPORTER]


def test_a_broken_importer_s_stale_accesses_are_drawn_on_the_nic_lane():
    from sim.scenario.schema import Scenario
    scn = Scenario.model_validate({
        "schema": 1, "name": "broken", "seed": 2, "data": True, "invariants": "record",
        "nodes": [{"name": "a", "nic": {"ignore_move_notify": True}, "kernel": {"version": "7.1"},
                   "gpus": [{"preset": "mi300x", "memory": "256MiB"}]}, {"name": "b"}],
        "buffers": [{"name": "src", "on": "a.gpu0", "size": "32MiB", "register": "dmabuf"},
                    {"name": "dst", "on": "b.host", "size": "32MiB"}],
        "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["1MiB"], "iterations": 100,
                      "tx_depth": 16}],
        "events": [{"at": "500us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "230MiB"}]})
    result = run_scenario(scn, trace=True)
    stale = [e.event for e in _move_section(result.testbed).entries if e.event.name == "StaleAccess"]
    assert stale and all(lane(e) == NIC for e in stale) and result.counters["invariant_violations"] > 0

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

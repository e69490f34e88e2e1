"""The guide's sequence diagrams (``docs/diagrams/``) are current: drawn again from their runs, they are the
committed bytes, and every one is shown somewhere in the guide."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("make_diagrams", ROOT / "docs" / "make_diagrams.py")
make_diagrams = sys.modules["make_diagrams"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(make_diagrams)


def test_the_committed_diagrams_are_what_their_runs_draw_now(tmp_path):
    drawn = make_diagrams.draw_all(tmp_path, force=False)
    committed = sorted(p.name for p in (ROOT / "docs" / "diagrams").iterdir())
    assert sorted(p.name for p in drawn) == committed, "run python docs/make_diagrams.py"
    stale = [p.name for p in drawn if p.read_bytes() != (ROOT / "docs" / "diagrams" / p.name).read_bytes()]
    assert not stale, f"stale diagrams {stale}: run python docs/make_diagrams.py"


def test_every_diagram_is_shown_in_the_guide():
    pages = "".join(page.read_text() for page in (ROOT / "docs").glob("*.md"))
    for diagram in make_diagrams.DIAGRAMS:
        assert f"](diagrams/{diagram.name})" in pages, diagram.name

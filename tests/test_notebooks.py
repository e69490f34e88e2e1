"""The teaching notebooks are committed with their outputs, and those outputs are current: built from their
py:percent sources and run again (``notebooks/make_notebooks.py``), each notebook is the committed file byte for
byte: text, tables and figures."""

from __future__ import annotations

import importlib.util
import sys

import jupytext
import nbformat
import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "notebooks" / "make_notebooks.py")
make_notebooks = sys.modules["make_notebooks"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_notebooks)
HINT = "run python notebooks/make_notebooks.py"


def test_every_committed_notebook_has_a_source():
    committed = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert committed and committed == sorted(make_notebooks.NOTEBOOKS), HINT


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_each_source_is_in_the_form_jupytext_writes(name):
    """A notebook saved from JupyterLab (paired by notebooks/jupytext.toml) or converted with ``jupytext --to
    py:percent`` rewrites its source to this form: a source already in it changes only where a cell changed."""
    source = make_notebooks.NOTEBOOKS[name].read_text(encoding="utf-8")
    assert jupytext.writes(jupytext.reads(source, fmt=make_notebooks.FORMAT), fmt=make_notebooks.FORMAT) == source


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_the_committed_notebook_is_what_running_it_gives_now(name):
    committed = (ROOT / "notebooks" / name).read_text(encoding="utf-8")
    nb = nbformat.reads(committed, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and any(c.outputs for c in code), f"{name} has no outputs: {HINT}"
    assert make_notebooks.text(name) == committed, f"{name} is stale: {HINT}"


def test_streams_are_merged_per_stream_in_order():
    out = nbformat.v4.new_output
    shown = out("display_data", data={"text/plain": "x"})
    merged = make_notebooks.merge_streams([out("stream", name="stderr", text="a"), out("stream", name="stdout",
                                           text="b"), shown, out("stream", name="stderr", text="c"),
                                           out("stream", name="stdout", text="d")])
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "bd"), ("stream", "stderr", "ac"), ("display_data", None, None)]

"""Build the teaching notebooks 01-07 from their sources and run them (nbclient), so that they are committed with
their outputs.

Each notebook is written as a jupytext ``py:percent`` source beside it, ``notebooks/NN_name.py``: a ``# %%`` line
starts a code cell, ``# %% [markdown]`` a markdown cell whose lines are commented out. Edit the source (or the
notebook in JupyterLab, which ``notebooks/jupytext.toml`` pairs with it), then run from anywhere
``python notebooks/make_notebooks.py`` to write every notebook, or ``python notebooks/make_notebooks.py 04`` for
the notebooks whose names start so. Each notebook runs in a fresh ``python3`` kernel with ``notebooks/`` as its
working directory (as Jupyter gives a notebook opened there), so repository files are reached as
``Path("..") / ...``. Every notebook says what it teaches, asserts what it claims on simulated results (a
regression fails the notebook), and ends with "What you saw". The written bytes depend only on the source and the
installed packages: cell ids come from the notebook name and cell index, no timing is recorded, string hashing is
seeded, the streams a cell printed are merged into one output per stream, and the kernel's ``language_info`` (the
Python patch version) is left out. ``tests/test_notebooks.py`` runs them again and compares the bytes.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NOTEBOOKS: dict[str, Path] = {source.with_suffix(".ipynb").name: source
                              for source in sorted(HERE.glob("[0-9][0-9]_*.py"))}
"""Each notebook's file name and its py:percent source."""
FORMAT = "py:percent"


def source_cells(name: str) -> list[tuple[str, str]]:
    """The (kind, source) cells of notebook ``name``, read from its source."""
    return [(cell.cell_type, cell.source) for cell in jupytext.read(NOTEBOOKS[name], fmt=FORMAT).cells]


def cell_id(name: str, index: int) -> str:
    """A stable cell id: the same notebook and position give the same id."""
    return hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:8]


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """The notebook ``name`` from its (kind, source) cells, without outputs."""
    nb = new_notebook()
    for index, (kind, source) in enumerate(cells):
        cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
        cell["id"] = cell_id(name, index)
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.validate(nb)
    return nb


TIMEOUT_S = 600
"""Longest a cell may run (seconds)."""


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` run top to bottom in a fresh python3 kernel in ``notebooks/``, with its outputs in a stable form.

    :raises nbclient.exceptions.CellExecutionError: a cell raised (an assertion of the notebook failed).
    """
    NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(HERE)}},
                   record_timing=False).execute(env={**os.environ, "PYTHONHASHSEED": "0"})
    nb.metadata.pop("language_info", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    nbformat.validate(nb)
    return nb


def merge_streams(outputs: list) -> list:
    """``outputs`` with all the text a cell wrote to one stream joined into one output, stdout's before stderr's, where
    the first of them was: how the kernel cut the text into messages, and when each stream was flushed relative
    to the other, is timing, not content."""
    merged: list = []
    streams: dict = {}
    for output in outputs:
        if output.output_type != "stream":
            merged.append(output)
        elif not streams:
            streams[output.name] = output
            merged.append(streams)  # where the streams go, once all are joined
        elif output.name in streams:
            streams[output.name].text += output.text
        else:
            streams[output.name] = output
    at = next((i for i, item in enumerate(merged) if item is streams), None)
    if at is not None:
        merged[at:at + 1] = [streams[name] for name in ("stdout", "stderr") if name in streams]
    return merged


def text(name: str) -> str:
    """The file content of notebook ``name``: built from its source, run, serialized (ending in a newline)."""
    return nbformat.writes(execute(build(name, source_cells(name)))) + "\n"


def main(prefixes: list[str]) -> None:
    """Write the notebooks whose names start with one of ``prefixes`` (all without any), with their outputs, next
    to this script.

    :raises SystemExit: a prefix names no notebook (nothing is written).
    """
    unknown = [prefix for prefix in prefixes if not any(name.startswith(prefix) for name in NOTEBOOKS)]
    if unknown:
        sys.exit(f"make_notebooks.py: no notebook's name starts with {', '.join(unknown)}; "
                 f"the notebooks are {', '.join(NOTEBOOKS)}")
    for name in NOTEBOOKS:
        if not prefixes or name.startswith(tuple(prefixes)):
            (HERE / name).write_text(text(name))
            print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main(sys.argv[1:])

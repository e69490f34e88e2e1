"""What the guide says became of the competing allocation in ``scenarios/pin_vs_dmabuf.yaml`` is what the run
says: every diagram title, every sentence of the docs and of the notebooks' text, and the scenario's own comments
that claim the allocation failed or went through for a variant are held against that variant's
``failed_allocations`` counter.

A sentence names its variants by their names in backticks or by the phrases of :data:`SUBJECTS`; it claims a
failure (:data:`FAILS`) or a success (:data:`SUCCEEDS`) for all of them, or, with "only", a success for those it
names and a failure for the others. A sentence that claims both a failure and a success is not read.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path

import pytest

from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario_variants
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "pin_vs_dmabuf.yaml"
PINNED = frozenset({"peermem", "dmabuf-pinned", "dmabuf-no-move-notify"})
SUBJECTS = {
    r"peer[- ]memory|nvidia-peermem|`peermem`": {"peermem"},
    r"`dmabuf-pinned`|pinned dma-buf (importer|registration|MR)": {"dmabuf-pinned"},
    r"`dmabuf-no-move-notify`|without `?CONFIG_DMABUF_MOVE_NOTIFY`?": {"dmabuf-no-move-notify"},
    **{rf"(?<![\w-])(`|\*\*){name}(`|\*\*)(?![\w-])": {name}
       for name in ("peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify")},
    r"every pinned (mode|registration|variant)|all pinned (modes|registrations|variants)|pinned registrations": PINNED,
}
"""How the guide names the variants of the scenario (regular expressions, case-insensitive): by name in backticks
or in bold, or in words."""
ONLY = re.compile(r"\bonly (the )?(dynamic dma-buf (MR|registration)|`dmabuf`)", re.I)
FAILS = re.compile(r"allocation[^.;]*?\bfail|\bfail(s|ed)?\b[^.;]*?allocation|failed allocation", re.I)
SUCCEEDS = re.compile(r"allocation[^.;]*?\b(succeeds|fits|goes through|is `allocated`)|\blets? go\b|"
                      r"lets? the allocation through", re.I)
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def failed_allocations() -> dict[str, int]:
    """Per variant of the scenario: the run's own ``failed_allocations`` counter."""
    _, _, variants = load_scenario_variants(SCENARIO)
    return {name: run_scenario(spec, variant=name).counters["failed_allocations"] for name, spec in variants}


def sentences(text: str) -> list[str]:
    """The prose of a markdown text (code blocks left out), one sentence, list item or table row per entry."""
    prose = re.sub(r"\n(\n|\* |\d+\. |> |\| )", " ¶ ", FENCE.sub("\n\n", text))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])|\s*¶\s*", re.sub(r"\s+", " ", prose))
            if s.strip()]


def claims(sentence: str, default: frozenset = frozenset()) -> dict[str, bool]:
    """What ``sentence`` claims of the variants: variant -> the allocation failed (True) or went through."""
    only = ONLY.search(sentence)
    if only:
        return {v: v != "dmabuf" for v in failed_allocations()}
    fails, succeeds = bool(FAILS.search(sentence)), bool(SUCCEEDS.search(sentence))
    if fails == succeeds:
        return {}
    named = set(default)
    for pattern, variants in SUBJECTS.items():
        if re.search(pattern, sentence, re.I):
            named |= variants
    return dict.fromkeys(named, fails)


def _docs() -> list[tuple[str, str]]:
    return [(str(page.relative_to(ROOT)), page.read_text()) for page in sorted((ROOT / "docs").glob("*.md"))]


def _notebooks() -> list[tuple[str, str]]:
    make = _load("make_notebooks", ROOT / "notebooks" / "make_notebooks.py")
    return [(name, "\n\n".join(text for kind, text in make.source_cells(name) if kind == "markdown"))
            for name in make.NOTEBOOKS]


def _scenario_comments() -> list[tuple[str, str]]:
    lines = [line[1:].strip() for line in SCENARIO.read_text().splitlines() if line.startswith("#")]
    entries = re.split(r"\n(?=[a-z-]+ {2,})", "\n".join(lines))
    return [(f"{SCENARIO.name}: {entry.split()[0]}", entry) for entry in entries]


def every_claim() -> list[tuple[str, str, dict[str, bool]]]:
    """(where, sentence, claims) of every sentence of the guide that claims an outcome."""
    out = []
    for where, text in _docs() + _notebooks():
        out += [(where, s, c) for s in sentences(text) if (c := claims(s))]
    for where, entry in _scenario_comments():
        variant = where.split(": ")[1]
        if variant in failed_allocations() and (c := claims(" ".join(entry.split()), frozenset({variant}))):
            out.append((where, entry, c))
    return out


def test_every_outcome_claim_in_the_docs_and_notebooks_is_what_the_run_counted():
    wrong = [f"{where}: {sentence!r} says {variant} {'fails' if says else 'allocates'}, the run counted "
             f"{failed_allocations()[variant]} failed allocation(s)"
             for where, sentence, said in every_claim() for variant, says in said.items()
             if says != (failed_allocations()[variant] > 0)]
    assert not wrong, "\n".join(wrong)


def test_the_claims_cover_every_variant_both_ways():
    """The checker reads the guide: each variant's outcome is claimed somewhere, so a wrong one would show."""
    said = {variant for _, _, c in every_claim() for variant in c}
    assert said == set(failed_allocations())
    assert {True, False} <= {says for _, _, c in every_claim() for says in c.values()}


def test_every_diagram_title_states_what_its_run_counted():
    make = _load("make_diagrams", ROOT / "docs" / "make_diagrams.py")
    checked = 0
    for diagram in make.DIAGRAMS:
        if Path(diagram.scenario) != SCENARIO.relative_to(ROOT):
            continue
        said = claims(diagram.title, frozenset({diagram.variant}))
        checked += bool(said)
        for variant, says in said.items():
            assert says == (failed_allocations()[variant] > 0), (diagram.name, diagram.title, variant)
    assert checked >= 2


@pytest.mark.parametrize("sentence, expected", [
    ("The `dmabuf-no-move-notify` variant pins on map, and the competing job's allocation then fails.",
     {"dmabuf-no-move-notify": True}),
    ("Without CONFIG_DMABUF_MOVE_NOTIFY the map pins, and the competing job's allocation fails",
     {"dmabuf-no-move-notify": True}),
    ("Explain why every pinned mode makes the competing allocation fail.", dict.fromkeys(PINNED, True)),
    ("Only the dynamic dma-buf MR lets go.", {"peermem": True, "dmabuf": False, "dmabuf-pinned": True,
                                              "dmabuf-no-move-notify": True}),
    ("With `peermem` the allocation fails, with `dmabuf` it fits.", {}),
])
def test_the_faults_the_checker_was_made_for_are_read_as_claims(sentence, expected):
    """The sentences of the guide that once said the wrong outcome (issue: the GTT correction) are claims."""
    assert claims(sentence) == expected

"""The guide is a course: each chapter opens with learning objectives, asks for a prediction before its labs and
ends with exercises whose solutions (``docs/solutions.md``, run by ``tests/test_docs.py``) exist; the glossary, the
lesson path and the page of topics left out hold what they promise; every link into a page finds its heading."""

from __future__ import annotations

import re

import pytest

from tests.test_docs import APPENDICES, CHAPTERS, DOCS, PAGES, blocks

SOLUTIONS = DOCS / "solutions.md"
GLOSSARY_TERMS = ("MR", "PD", "lkey, rkey", "MTT", "mkey", "UMR", "ODP", "GTT", "BAR, BAR1", "resv", "fence",
                  "move_notify")
"""Terms the glossary must define (each opens a paragraph in bold)."""
LEFT_OUT = ("BAR1", "ordering of GPUDirect writes", "Registration caches and lazy unpinning", "ACS and the IOMMU",
            "NV-P2P API is deprecated")
"""The topics the chapters leave out, as the headings of ``docs/beyond.md`` name them."""


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (but ``-`` and ``_``), spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page) -> set[str]:
    return {slug(m[1]) for m in re.finditer(r"^#+ (.+)$", _prose(page.read_text()), re.M)}


def _prose(text: str) -> str:
    """``text`` without its fenced blocks (a ``#`` comment in a block is no heading)."""
    return re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_opens_with_its_learning_objectives(chapter):
    lines = chapter.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    assert lines[2] == "> **Learning objectives.** After this chapter you can", chapter.name
    objectives = [line for line in lines[3:12] if line.startswith("> * ")]
    assert len(objectives) >= 2, chapter.name


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_a_prediction_comes_before_a_lab_s_output(chapter):
    text = chapter.read_text()
    predictions = [m.start() for m in re.finditer(r"^> \*\*Predict\.\*\* ", _keep_offsets(text), re.M)]
    assert predictions, f"{chapter.name} asks for no prediction"
    offsets = [text.index(f"```{b.info}\n{b.body}") for b in blocks(chapter)]
    runnable = [o for o, b in zip(offsets, blocks(chapter)) if b.info in ("python", "console", "console fail")]
    for at in predictions:
        later = [o for o in runnable if o > at]
        assert later, f"{chapter.name}: a prediction with no lab after it"
        between = text[at:later[0]]
        assert "\n## " not in between, f"{chapter.name}: the lab a prediction introduces is in another section"


def _keep_offsets(text: str) -> str:
    """``text`` with its fenced blocks blanked, offsets kept."""
    return re.sub(r"^```.*?^```[ \t]*$", lambda m: re.sub(r"[^\n]", " ", m[0]), text, flags=re.M | re.S)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_ends_with_exercises_whose_solutions_run(chapter):
    text = chapter.read_text()
    assert "\n## Exercises\n" in text, chapter.name
    exercises = text[text.index("\n## Exercises\n"):]
    links = re.findall(r"\*\*Exercise (\d+\.\d+)\.\*\*.*?\(\[solution\]\(solutions\.md#(exercise-\d+)\)\)", exercises,
                       re.S)
    assert links and all(anchor == "exercise-" + number.replace(".", "") for number, anchor in links), chapter.name
    solutions = SOLUTIONS.read_text()
    for number, _ in links:
        assert number.split(".")[0] == chapter.name[:2].lstrip("0"), f"{chapter.name}: exercise {number}"
        section = re.search(rf"^### Exercise {re.escape(number)}\n(.*?)(?=^##|\Z)", solutions, re.M | re.S)
        assert section and ("```python" in section[1] or "```console" in section[1]), f"no solution code: {number}"


def test_every_solution_answers_an_exercise_of_a_chapter():
    asked = {n for c in CHAPTERS for n in re.findall(r"\*\*Exercise (\d+\.\d+)\.\*\*", c.read_text())}
    answered = set(re.findall(r"^### Exercise (\d+\.\d+)$", SOLUTIONS.read_text(), re.M))
    assert answered == asked


def test_the_glossary_defines_the_course_s_terms():
    text = (DOCS / "glossary.md").read_text()
    defined = re.findall(r"^\*\*([^*]+)\*\*", text, re.M)
    for term in GLOSSARY_TERMS:
        assert any(d == term or d.startswith(term + " (") for d in defined), term
    assert defined == sorted(defined, key=str.lower), "the glossary is in alphabetical order"


def test_the_lesson_path_takes_fifty_minutes_step_by_step():
    text = (DOCS / "lesson.md").read_text()
    table = [int(m[1]) for m in re.finditer(r"^\| (\d+) \| ", text, re.M)]
    steps = [int(m[1]) for m in re.finditer(r"^## \d+\. .+ \((\d+) min\)$", text, re.M)]
    assert sum(table) == 50 and steps == table


def test_the_topics_left_out_are_each_sourced_and_say_what_is_simulated():
    text = (DOCS / "beyond.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) == len(LEFT_OUT)
    for topic, section in zip(LEFT_OUT, sections):
        assert topic in section.splitlines()[0], topic
        assert "**In the simulator:**" in section, topic
        assert re.search(r"guide|`drivers/|Documentation/|reference|NCCL", section), f"{topic} names no source"
        assert "```python" in section or "```console" in section or "not modelled" in section, topic


CORE = ("01", "02", "03", "04", "05", "08", "09")
"""The chapters of the core path, by number."""


def test_the_core_path_is_as_long_as_the_guide_says_and_links_its_appendices():
    """docs/README.md states the core path's length in words, all and prose (outside code blocks), to the thousand;
    every appendix is linked from a core chapter, and no core chapter's words are in an appendix twice."""
    core = [c for c in CHAPTERS if c.name[:2] in CORE]
    words = sum(len(c.read_text().split()) for c in core)
    prose = sum(len(_prose(c.read_text()).split()) for c in core)
    said = re.search(r"core path: chapters 1, 2, 3, 4, 5, 8 and 9.*?about ([\d,]+) words, ([\d,]+) of them prose",
                     (DOCS / "README.md").read_text(), re.S)
    assert said, "README.md does not state the core path's length"
    assert (round(words, -3), round(prose, -3)) == tuple(int(n.replace(",", "")) for n in said.groups())
    assert APPENDICES
    for appendix in APPENDICES:
        assert any(f"]({appendix.name}" in c.read_text() for c in core), f"no core chapter links {appendix.name}"
        headings = set(re.findall(r"^## (.+)$", _prose(appendix.read_text()), re.M))
        headings -= {"What the simulator simplifies here"}
        for chapter in core:
            assert not headings & set(re.findall(r"^## (.+)$", _prose(chapter.read_text()), re.M)), appendix.name


def test_links_into_pages_find_their_headings():
    for page in PAGES:
        for target, fragment in re.findall(r"\]\(([\w./-]*)#([\w-]+)\)", page.read_text()):
            linked = page if target == "" else (page.parent / target)
            if linked.suffix == ".md":
                assert fragment in anchors(linked), f"{page.name}: no heading #{fragment} in {linked.name}"

"""The concept guide in ``docs/`` is executable: every snippet runs and asserts what the prose claims.

* ```` ```python ```` blocks of one page run in order in one namespace, with the repository root as the working
  directory (so ``Path("scenarios/quickstart.yaml")`` works).
* ```` ```console ```` blocks: each ``$ rdmasim ...`` line runs through :class:`typer.testing.CliRunner` on
  ``sim.cli.app.app`` and must exit 0; ```` ```console fail ```` blocks must exit non-zero. The lines shown under a
  command are its expected output: each must appear in the real output (stdout and stderr together), in
  order, with runs of spaces compared as one; a line ending in `` ...`` matches any line it begins. ``--out DIR``
  (and ``report``'s results directory) is redirected into a temporary directory so the guide never writes into
  the checkout.
* ```` ```yaml ```` blocks are either complete scenarios (``schema: 1``), validated like ``rdmasim validate``,
  or excerpts whose first line is ``# <path> (excerpt)``: every other line must appear in that file, in order.
* ```` ```text ```` blocks are diagrams and tables, never commands.

Blocks run in document order (python and console interleaved), so a page reads top to bottom as a lab session.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHAPTERS = sorted(DOCS.glob("[0-9][0-9]_*.md"))
REFERENCE = [DOCS / "api.md", DOCS / "from_pyverbs.md"]
"""The Python API's reference and its port of a pyverbs test (not numbered chapters)."""
COURSE = [DOCS / name for name in ("lesson.md", "glossary.md", "beyond.md", "solutions.md")]
"""The course's pages beside the chapters: the lesson path, the glossary, the topics left out, the solutions."""
APPENDICES = sorted(DOCS.glob("appendix_*.md"))
"""Topics moved out of the core chapters (the transport in detail; revocation, NIC memory, fault injection)."""
CONTRIBUTING = DOCS / "contributing.md"
PAGES = [DOCS / "README.md", *CHAPTERS, *APPENDICES, *REFERENCE, *COURSE, CONTRIBUTING]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
KINDS = {"python", "console", "console fail", "yaml", "text"}
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    """Line of the opening fence (1-based)."""
    info: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    text = page.read_text()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m["info"].strip(), m["body"])
            for m in FENCE.finditer(text)]


def _normal(line: str) -> str:
    return " ".join(line.split())


def _expect_lines(block: Block, command: str, expected: list[str], output: str) -> None:
    """Each expected line appears in ``output``, in order (`` ...`` at the end: a prefix)."""
    actual = [_normal(line) for line in output.splitlines()]
    at = 0
    for want in (_normal(line) for line in expected):
        if not want or want == "...":
            continue
        prefix = want.endswith(" ...")
        stem = want[:-4] if prefix else want
        for i in range(at, len(actual)):
            if actual[i].startswith(stem) if prefix else actual[i] == stem:
                at = i + 1
                break
        else:
            raise AssertionError(f"{block.where}: `{command}` did not print (in order):\n  {want}\n"
                                 f"--- its output ---\n{output}")


def run_console(block: Block, tmp_path: Path) -> None:
    """Run every ``$ rdmasim`` command of a console block and compare the output shown under it."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            assert line.startswith("$ rdmasim "), f"{block.where}: only rdmasim commands run in docs: {line}"
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.where}: output before the first command"
            commands[-1][1].append(line)
    assert commands, f"{block.where}: a console block without a command"
    for command, expected in commands:
        args = shlex.split(command)[1:]
        if "--out" in args:
            i = args.index("--out") + 1
            args[i] = str(tmp_path / args[i])
        if args[:1] == ["report"]:  # the results directory a command above wrote
            args[1] = str(tmp_path / args[1])
        result = CliRunner().invoke(app, args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{block.where}: `{command}` raised") from result.exception
        if block.info == "console fail":
            assert result.exit_code != 0, f"{block.where}: `{command}` was expected to fail:\n{result.output}"
        else:
            assert result.exit_code == 0, f"{block.where}: `{command}` exited {result.exit_code}:\n{result.output}"
        _expect_lines(block, command, expected, result.output)


def check_yaml(block: Block) -> None:
    """A complete scenario validates; an excerpt is found, line by line in order, in the file it names."""
    first, *rest = block.body.splitlines()
    excerpt = re.fullmatch(r"# (?P<path>\S+) \(excerpt\)", first.strip())
    if excerpt:
        lines = (ROOT / excerpt["path"]).read_text().splitlines()
        at = 0
        for want in rest:
            if want.strip() in ("", "..."):
                continue
            assert want in lines[at:], f"{block.where}: not in {excerpt['path']} (in this order): {want!r}"
            at = lines.index(want, at) + 1
        return
    from ruamel.yaml import YAML

    from sim.scenario.refs import check_references
    from sim.scenario.schema import Scenario

    data = YAML(typ="safe").load(block.body)
    assert data.get("schema") == 1, f"{block.where}: a yaml block is a scenario (schema: 1) or a '# path (excerpt)'"
    problems = check_references(Scenario.model_validate(data))
    assert not problems, f"{block.where}: {problems}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs(page, tmp_path, monkeypatch):
    """Every snippet of the page, in order: python in one namespace, console through the CLI."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": f"docs.{page.stem}"}
    for block in blocks(page):
        assert block.info in KINDS, f"{block.where}: fence info {block.info!r}; use one of {sorted(KINDS)}"
        if block.info == "python":
            assert "except" not in block.body or "raise AssertionError" in block.body, \
                f"{block.where}: an expected error must fail the snippet when it does not happen"
            code = compile(block.body, f"{block.where} (python block)", "exec")
            exec(code, namespace)  # noqa: S102 - the documentation's own code
        elif block.info.startswith("console"):
            run_console(block, tmp_path)
        elif block.info == "yaml":
            check_yaml(block)
        else:
            assert "$ rdmasim" not in block.body, f"{block.where}: commands go in console blocks (they are run)"


def test_table_of_contents_and_links():
    """README.md lists every chapter; every relative link resolves; each chapter points at its lab material."""
    assert len(CHAPTERS) == 11, [p.name for p in CHAPTERS]
    toc = (DOCS / "README.md").read_text()
    for chapter in CHAPTERS + APPENDICES + REFERENCE:
        assert f"]({chapter.name})" in toc, f"README.md does not link {chapter.name}"
    for page in PAGES:
        text = page.read_text()
        for match in LINK.finditer(text):
            target = match["target"]
            if re.match(r"[a-z]+:", target):
                continue
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
        if page in CHAPTERS:
            assert re.search(r"scenarios/\w+\.yaml|notebooks/0\d_", text), f"{page.name} links no scenario/notebook"
            assert "```python" in text or "```console" in text, f"{page.name} has no executable snippet"

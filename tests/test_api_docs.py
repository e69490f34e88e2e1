"""The Python API's reference documents every public name with an example (the examples themselves run in
tests/test_docs.py), and the README's API example runs."""

from __future__ import annotations

import re
from pathlib import Path

import sim.api

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


def sections(text: str) -> dict[str, str]:
    """The python code of each ``### `Name` `` section of the reference, by each name in its heading."""
    found = {}
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        body = body.split("\n## ")[0]
        code = "".join(m["body"] for m in FENCE.finditer(body) if m["info"].strip() == "python")
        for name in re.findall(r"`(\w+)`", heading):
            found[name] = code
    return found


def test_every_public_name_has_a_section_whose_example_uses_it():
    documented = sections((ROOT / "docs" / "api.md").read_text())
    missing = [name for name in sim.api.__all__ if name not in documented]
    assert not missing, f"docs/api.md has no '### `NAME`' section for {missing}"
    unused = [name for name in sim.api.__all__ if not re.search(rf"\b{name}\b", documented[name])]
    assert not unused, f"these sections' examples do not use their name: {unused}"
    assert not set(documented) - set(sim.api.__all__), "the reference documents names the API does not export"


def test_all_names_exist():
    assert all(hasattr(sim.api, name) for name in sim.api.__all__)
    assert len(set(sim.api.__all__)) == len(sim.api.__all__)


def test_the_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    api_section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    (code,) = [m["body"] for m in FENCE.finditer(api_section) if m["info"].strip() == "python"]
    namespace: dict = {}
    exec(compile(code, "README.md (Python API)", "exec"), namespace)  # noqa: S102 - the README's own code
    assert namespace["wc"].byte_len == 65536

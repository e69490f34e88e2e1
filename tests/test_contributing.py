"""The contributor's page ``docs/contributing.md`` stays true: its rule table names functions that exist where it
says, it names every kernel-named function of ``models/``, and the layers' imports (the folders of ``sim/``, the
packages of ``models/``) point the way it says."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import networkx as nx
import pytest

import models

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "contributing.md"
ROW = re.compile(r"^\| (?P<kernel>[^|]+) \| (?P<ours>[^|]+) \| `(?P<module>[\w.]+)` \|$", re.M)
KERNEL_NAMES = re.compile(r"^(ibv_|mlx5dv_|ib_|dma_buf_|dma_resv_|get_dma_buf$)")
CORE = ("sim.core", "sim.fast")


def table() -> list[tuple[str, str]]:
    """(module, dotted name) for every function the rule table names."""
    text = PAGE.read_text()
    return [(m["module"], name) for m in ROW.finditer(text) for name in re.findall(r"`([\w.]+)`", m["ours"])]


def test_the_table_is_on_the_page_and_linked():
    assert len(table()) >= 40
    for index in (ROOT / "README.md", ROOT / "docs" / "README.md"):
        assert "contributing.md" in index.read_text(), index


@pytest.mark.parametrize(("module", "name"), table())
def test_each_function_lives_where_the_table_says(module, name):
    owner = importlib.import_module(module)
    obj = owner
    for part in name.split("."):
        obj = getattr(obj, part)
    if inspect.isfunction(obj):
        assert obj.__module__ == module, f"{name} is defined in {obj.__module__}, not {module}"
    else:
        assert name in vars(owner) or name.split(".")[0] in vars(owner)


def _model_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(models.__path__, "models.")]


def test_every_kernel_named_function_is_in_the_table():
    listed = set(table())
    missing = []
    for module in _model_modules():
        for name, obj in vars(importlib.import_module(module)).items():
            if inspect.isfunction(obj) and obj.__module__ == module and KERNEL_NAMES.match(name):
                if (module, name) not in listed:
                    missing.append(f"{module}.{name}")
    assert not missing, f"add to docs/contributing.md's rule table: {missing}"


def _imports() -> dict[str, set[str]]:
    """Every module of sim/ and models/ and every module it imports anywhere in its source (any depth)."""
    found: dict[str, set[str]] = {}
    for top in ("sim", "models"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
            targets = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    targets.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [base])
                    base = base.strip(".")
                    targets.add(base)
                    # ``from sim.store import outdir`` imports the module sim.store.outdir
                    targets.update(f"{base}.{alias.name}" for alias in node.names
                                   if _is_module(f"{base}.{alias.name}"))
            found[name] = {t for t in targets if t.split(".")[0] in ("sim", "models")}
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_arrows_point_one_way():
    wrong = []
    for module, targets in _imports().items():
        for target in targets:
            if _within(module, CORE) and not _within(target, CORE):
                wrong.append(f"{module} -> {target}")
            if module.startswith("models") and target.startswith("sim") and not _within(target, ("sim.core",)):
                wrong.append(f"{module} -> {target}")
    assert not wrong


def page_order(top: str) -> dict[str, tuple[int, str]]:
    """Each package (or module at the top) of ``top``/ and its place in the page's order, 0 the highest, with the
    group that holds it: names joined by ``+`` are one group and share their place; names beside one another
    (``/``) are groups of their own."""
    text = " ".join(PAGE.read_text().split())
    order = re.search(rf"inside `{top}/`, imports point down the list `([^`]+)`", text)[1]
    return {name: (k, group) for k, place in enumerate(order.split(" → ")) for group in place.split(" / ")
            for name in group.split(" + ")}


def _against_the_order(top: str) -> list[str]:
    """The imports of ``top``'s modules that point to their own place or above, outside their own group."""
    place, wrong = page_order(top), []
    imports = _imports()
    unplaced = {m.split(".")[1] for m in imports if m.startswith(f"{top}.")} - set(place)
    assert not unplaced, f"give these a place in docs/contributing.md's order of {top}/: {sorted(unplaced)}"
    for module, targets in imports.items():
        if not module.startswith(f"{top}."):
            continue
        rank, group = place[module.split(".")[1]]
        for target in targets:
            parts = target.split(".")  # ``sim`` alone holds only the version, which every layer may record
            if parts[0] == top and len(parts) > 1 and place[parts[1]][1] != group and place[parts[1]][0] <= rank:
                wrong.append(f"{module} -> {target}")
    return wrong


def test_the_packages_of_models_import_down_their_order():
    assert not _against_the_order("models")


def test_the_layers_of_sim_import_down_their_order():
    assert not _against_the_order("sim")


def test_the_tests_mirror_the_packages():
    """A test sits in the folder of the package it tests; only tests of a module at the top of ``models/`` sit at
    the top of ``tests/models/``."""
    for top in ("models", "sim"):
        folders = {p.name for p in (ROOT / "tests" / top).iterdir() if p.is_dir() and p.name[0] not in "_."}
        packages = {p.parent.name for p in (ROOT / top).glob("*/__init__.py")}
        assert folders <= packages, f"tests/{top}/ folders without a package: {sorted(folders - packages)}"
    assert not sorted((ROOT / "tests" / "sim").glob("*.py")), "a test of sim/ goes in its layer's folder"


def _resolve(target: str, modules: set[str]) -> str | None:
    """The module ``target`` names (``from pkg import name`` names ``pkg``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def test_no_import_circle():
    imports = _imports()
    graph = nx.DiGraph()
    for module, targets in imports.items():
        graph.add_node(module)
        for target in targets:
            found = _resolve(target, set(imports))
            if found and found != module and not module.startswith(found + "."):
                graph.add_edge(module, found)
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles


def test_every_property_names_its_examples_through_the_profile():
    """The thorough hypothesis profile reaches a property only when its count goes through ``examples(n)``."""
    bare = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "tests").rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"max_examples=\d", line)]
    assert not bare, f"max_examples without examples(n): {bare}"
    assert "--hypothesis-profile=thorough" in PAGE.read_text()


def test_the_thorough_profile_draws_ten_times_the_examples():
    from hypothesis import settings

    from tests.properties import THOROUGH, examples

    current = settings.get_current_profile_name()
    try:
        settings.load_profile("thorough")
        assert THOROUGH >= 10 and examples(12) == 12 * THOROUGH
        settings.load_profile("ci")
        assert examples(12) == 12
    finally:
        settings.load_profile(current)


def test_a_test_module_importing_the_conftest_keeps_the_loaded_profile():
    """Test modules import ``tests.conftest`` for its helpers (a second copy of the module pytest loaded): that
    import must leave ``--hypothesis-profile=thorough`` in force for every module collected after it."""
    import importlib
    import sys

    from hypothesis import settings

    current = settings.get_current_profile_name()
    saved = sys.modules.pop("tests.conftest", None)
    try:
        settings.load_profile("thorough")
        importlib.import_module("tests.conftest")
        assert settings.get_current_profile_name() == "thorough"
    finally:
        settings.load_profile(current)
        if saved is not None:
            sys.modules["tests.conftest"] = saved


MAX_MODULE_LINES = 500
"""The most lines a module of sim/ or models/ may have (docs/contributing.md: small modules with one job)."""


def test_every_module_is_at_most_500_lines():
    long = {str(path.relative_to(ROOT)): n for package in ("sim", "models") for path in (ROOT / package).rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules (lines): {long}"


EXACT_SOLVER = ("solver", "block", "block_pass", "merge", "server", "turns", "steps")
"""The exact solver's modules of sim/fast, as docs/contributing.md names them."""
MAX_EXACT_SOLVER_LINES = 1000
"""The most lines of code (docstrings, comments and blank lines aside) the exact solver may have, so that its
exactness can be read; an acceleration goes in a module of its own."""


def code_lines(source: str) -> int:
    """Lines of ``source`` that hold code: not blank, not only a comment, not part of a docstring (a module's, a
    class's, a function's or an attribute's: a string standing alone as a statement)."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        for statement in getattr(node, "body", []) if isinstance(getattr(node, "body", None), list) else []:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
                    and isinstance(statement.value.value, str):
                docstrings.update(range(statement.lineno, statement.end_lineno + 1))
    return sum(1 for n, line in enumerate(source.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and n not in docstrings)


def test_code_lines_count_code_alone():
    source = '"""Doc\n\nstring."""\n\n# a comment\nx = 1  # code\n"""an attribute\'s docstring"""\n\n' \
             'def f():\n    """Its docstring."""\n    return x\n'
    assert code_lines(source) == 3


def test_the_exact_solver_is_at_most_1000_lines_of_code():
    page = PAGE.read_text()
    assert all(f"`{name}.py`" in page for name in EXACT_SOLVER), "docs/contributing.md names the exact solver's files"
    lines = {name: code_lines((ROOT / "sim" / "fast" / f"{name}.py").read_text()) for name in EXACT_SOLVER}
    assert sum(lines.values()) <= MAX_EXACT_SOLVER_LINES, f"move accelerations out of the exact solver: {lines}"

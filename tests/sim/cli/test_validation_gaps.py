"""Scenarios that validated and then misbehaved: a workload name given twice (a variant's ``set`` by name reached
only the first), and ``engine: fast`` on a scenario whose steps the vectorized core does not solve (it failed at
run time). Both are refused by ``validate`` and before ``run`` simulates or writes anything, located at their key."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli.app import app
from tests.conftest import tiny_yaml
from tests.properties import examples

runner = CliRunner()
LOCATED = re.compile(r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+) (?P<key>\S+): (?P<reason>.+)$")


@hsettings(max_examples=examples(15), deadline=None)
@given(names=st.lists(st.sampled_from(["w", "x", "write_bw", None]), min_size=1, max_size=5))
def test_a_workload_name_given_twice_is_refused_where_it_repeats(tmp_path_factory, names):
    items = [f"{{kind: write_bw, from: src, to: dst, sizes: [4KiB]{'' if n is None else f', name: {n}'}}}"
             for n in names]
    path = tmp_path_factory.mktemp("dup") / "s.yaml"
    path.write_text(tiny_yaml(*items))
    lines = path.read_text().splitlines()
    given_names = [n for n in names if n is not None]
    repeats = [i for i, n in enumerate(names) if n is not None and n in names[:i]]
    result = runner.invoke(app, ["validate", str(path)])
    if not repeats:
        assert result.exit_code == 0, result.output
        assert len(set(given_names)) == len(given_names)
        return
    assert result.exit_code == 2
    errors = [LOCATED.match(line) for line in result.stderr.splitlines()]
    assert all(errors) and len(errors) == len(repeats)
    for error, i in zip(errors, repeats):
        assert error["key"] == f"workload[{i}].name" and f"duplicate workload name '{names[i]}'" in error["reason"]
        assert f"name: {names[i]}" in lines[int(error["line"]) - 1]
    assert "Traceback" not in result.output


def test_a_variant_reaches_a_workload_by_a_name_it_has_once(tmp_path):
    """The README's variant paths walk lists by an item's name: with the names unique, ``set`` reaches the one."""
    tail = "variants:\n  - {name: longer, set: {workload.w.iterations: 20}}\n"
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10, name: w}",
                              "{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 10, name: v}",
                              tail=tail))
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0


UNSOLVABLE = {  # what makes the vectorized core's steps decide at run time, as a scenario says it
    "odp": ("buffers:\n  - {name: src, on: a.host, size: 64KiB}\n"  # a responder's faults answer RNR NAKs
            "  - {name: dst, on: b.host, size: 64KiB, register: odp}\n", "", "ODP maps a page"),
    "lossy link": ("", "", "a link outage loses the frames"),  # a READ stream's (a WRITE stream's are followed)
    "data mode": ("", "", "data mode moves the bytes"),
}


def _fast_scenario(case: str, engine_line: str) -> str:
    buffers, node_a, said = UNSOLVABLE[case]
    kind = "read_bw" if case == "lossy link" else "write_bw"
    text = tiny_yaml(f"{{kind: {kind}, from: src, to: dst, sizes: [4KiB], iterations: 10}}")
    if buffers:
        text = re.sub(r"buffers:\n(  - .*\n){2}", buffers, text)
    if node_a:
        text = text.replace("  - {name: a}\n", node_a)
    if case == "data mode":
        text += "data: true\n"
    if case == "lossy link":
        text += "events:\n  - {at: 10us, kind: link-flap, node: b, duration: 5us, frames: lost}\n"
    return text.replace("seed: 5\n", f"seed: 5\n{engine_line}")


@pytest.mark.parametrize("case", sorted(UNSOLVABLE))
def test_engine_fast_the_core_cannot_solve_is_refused_at_the_engine_key(tmp_path, case):
    path = tmp_path / "s.yaml"
    path.write_text(_fast_scenario(case, "engine: fast\n"))
    engine_line = path.read_text().splitlines().index("engine: fast") + 1
    said = UNSOLVABLE[case][2]
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "-q"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        error = LOCATED.match(line)
        assert error and error["key"] == "engine" and int(error["line"]) == engine_line
        assert said in error["reason"] and "engine fast" in error["reason"]
    assert not (tmp_path / "out").exists()
    auto = tmp_path / "auto.yaml"
    auto.write_text(_fast_scenario(case, "engine: auto\n"))
    assert runner.invoke(app, ["validate", str(auto)]).exit_code == 0
    forced = runner.invoke(app, ["run", str(auto), "--engine", "fast", "--out", str(tmp_path / "out"), "-q"])
    assert forced.exit_code == 2 and forced.stderr.startswith(f"{auto} --engine: engine fast: ")
    assert not (tmp_path / "out").exists()


def test_a_variant_that_asks_for_fast_is_located_at_its_set(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(_fast_scenario("odp", "") + "variants:\n  - {name: base-engine, set: {}}\n"
                    "  - {name: fast-engine, set: {engine: fast}}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    error = LOCATED.match(result.stderr.strip())
    assert error["key"] == "variants[1].set.engine" and "variant 'fast-engine': engine fast" in error["reason"]
    assert "engine: fast" in path.read_text().splitlines()[int(error["line"]) - 1]

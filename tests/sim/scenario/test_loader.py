"""Tests for sim.scenario.loader: every problem in a YAML file becomes a ConfigError with file:line:col key."""

from __future__ import annotations

import io
import time
from typing import Annotated, Literal, Optional, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from ruamel.yaml import YAML

from sim.core.errors import ConfigError, ConfigErrors
from sim.scenario.loader import validate
from sim.scenario.yaml_reader import MAX_DEPTH, MAX_NODES, PositionMap, error_at, format_path, load_yaml
from tests.properties import examples


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Nic(Strict):
    preset: str
    ports: Annotated[int, Field(ge=1, le=64)] = 1


class Node(Strict):
    name: str
    nic: Nic


class Cat(Strict):
    kind: Literal["cat"]
    lives: int = 9


class Dog(Strict):
    kind: Literal["dog"]
    bark: str


class Fish(Strict):
    fins: int


class Scenario(Strict):
    name: str = "s"
    nodes: list[Node] = []
    fabric: dict[str, Nic] = {}
    pet: Optional[Annotated[Union[Cat, Dog], Field(discriminator="kind")]] = None
    animal: Union[Cat, Fish, int] = 0
    pets: list[Union[Cat, Dog]] = []
    policy: Union[Literal["rail", "all"], Annotated[list[str], Field(min_length=1)]] = "rail"
    transport: Literal["ib", "roce"] = "ib"


def write(tmp_path, content: str | bytes):
    path = tmp_path / "s.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def load_error(tmp_path, content: str | bytes) -> ConfigError:
    path = write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert info.value.file == str(path)
    return info.value


def problems(tmp_path, text: str) -> list[tuple[int, int, str, str]]:
    """(line, column, key, reason) of every error validating ``text`` against Scenario."""
    data, positions = load_yaml(write(tmp_path, text))
    with pytest.raises(ConfigErrors) as info:
        validate(Scenario, data, positions, "s.yaml")
    assert all(e.file == "s.yaml" for e in info.value.errors)
    return [(e.line, e.column, e.key, e.reason) for e in info.value.errors]


# ------------------------------------------------------------------------------------------ happy path


def test_valid_file_loads_with_positions_anchors_and_merges(tmp_path):
    text = ("nodes:\n"
            "  - name: a\n"
            "    nic: &cx {preset: connectx7, ports: 2}\n"
            "fabric:\n"
            "  x: *cx\n"
            "  y:\n"
            "    <<: *cx\n"
            "    ports: 0x10\n")
    data, positions = load_yaml(write(tmp_path, text))
    assert data == {"nodes": [{"name": "a", "nic": {"preset": "connectx7", "ports": 2}}],
                    "fabric": {"x": {"preset": "connectx7", "ports": 2},
                               "y": {"preset": "connectx7", "ports": 16}}}
    assert type(data["fabric"]["y"]["ports"]) is int
    assert positions.locate(("nodes", 0, "nic", "preset")) == (3, 23)
    assert positions.locate_key(("nodes", 0, "nic")) == (3, 5)
    assert positions.locate_key(("fabric", "x", "ports")) == (3, 34)  # inside an alias: found at the anchor
    assert positions.locate(("nodes", 0, "gpus")) == (2, 5)  # missing: the enclosing mapping
    scenario = validate(Scenario, data, positions, "s.yaml")
    assert scenario.fabric["y"].ports == 16 and scenario.nodes[0].nic.preset == "connectx7"


def test_scalars_follow_yaml_1_2_core_schema(tmp_path):
    data, _ = load_yaml(write(tmp_path, "a: yes\nb: true\nc: ~\nd: 1_000\ne: .inf\nf: 2024-01-02\ng: 012\n"))
    assert data == {"a": "yes", "b": True, "c": None, "d": 1000, "e": float("inf"), "f": "2024-01-02", "g": 12}


def test_position_map_falls_back_to_longest_prefix():
    positions = PositionMap(values={(): (1, 1), ("a",): (2, 3), ("a", 0): (3, 5)}, keys={("a",): (2, 1)})
    assert positions.locate(("a", 0, "b", "c")) == (3, 5)
    assert positions.locate(("z",)) == (1, 1)
    assert positions.locate_key(("a",)) == (2, 1)
    assert positions.locate_key(("a", 0)) == (3, 5)
    assert format_path(("nodes", 0, "nic", "preset")) == "nodes[0].nic.preset"


def test_error_at_locates_semantic_problem(tmp_path):
    data, positions = load_yaml(write(tmp_path, "nodes:\n  - name: a\n    nic: {preset: nope}\n"))
    err = error_at(positions, ("nodes", 0, "nic", "preset"), "no preset named 'nope'", "s.yaml")
    assert str(err) == "s.yaml:3:19 nodes[0].nic.preset: no preset named 'nope'"


# ------------------------------------------------------------------------------------------ validation


def test_unknown_key_nested_two_levels_suggests_field(tmp_path):
    assert problems(tmp_path, "fabric:\n  x:\n    preset: a\n    prots: 2\n") == [
        (4, 5, "fabric.x.prots", "unknown key 'prots' (did you mean 'ports'?)")]


def test_unknown_key_inside_list_suggests_field(tmp_path):
    text = "nodes:\n  - name: a\n    nic: {preset: x}\n  - name: b\n    nic: {preset: y}\n    nmae: c\n"
    assert problems(tmp_path, text) == [(6, 5, "nodes[1].nmae", "unknown key 'nmae' (did you mean 'name'?)")]


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path):
    assert problems(tmp_path, "fabric: {x: {preset: a, zzz: 1}}\n") == [
        (1, 25, "fabric.x.zzz", "unknown key 'zzz' (valid keys: preset, ports)")]


def test_the_valid_keys_are_spelled_as_a_scenario_spells_them(tmp_path):
    class Pair(BaseModel):
        model_config = ConfigDict(extra="forbid", populate_by_name=True)
        from_: str = Field(alias="from")
        to: str

    data, positions = load_yaml(write(tmp_path, "{from: a, to: b, zzz: 1}\n"))
    with pytest.raises(ConfigErrors) as info:
        validate(Pair, data, positions, "s.yaml")
    assert [e.reason for e in info.value.errors] == ["unknown key 'zzz' (valid keys: from, to)"]


def test_bad_value_type(tmp_path):
    assert problems(tmp_path, "nodes:\n  - name: a\n    nic: {preset: x, ports: many}\n") == [
        (3, 29, "nodes[0].nic.ports", "Input should be a valid integer, unable to parse string as an integer")]


def test_container_type_errors_name_yaml_kinds(tmp_path):
    assert problems(tmp_path, "nodes: {a: 1}\nfabric: [1]\n") == [
        (1, 8, "nodes", "expected a list, not a mapping"), (2, 9, "fabric", "expected a mapping, not a list")]


def test_missing_key_points_at_enclosing_mapping(tmp_path):
    assert problems(tmp_path, "nodes:\n  - nic: {preset: x}\n") == [
        (2, 5, "nodes[0]", "missing required key 'name'")]


def test_plain_union_collapses_to_best_member(tmp_path):
    # Cat fails on one key, Fish on two, int at the top: only Cat's error is shown.
    assert problems(tmp_path, "animal:\n  kind: cat\n  fins: 3\n") == [
        (3, 3, "animal.fins", "unknown key 'fins' (valid keys: kind, lives)")]


def test_plain_union_prefers_member_whose_tag_matches(tmp_path):
    # Cat and Dog both have two errors, but Cat's `kind` literal does not match: Dog's errors are shown.
    assert problems(tmp_path, "pets:\n  - {kind: dog, barkk: 1}\n") == [
        (2, 5, "pets[0]", "missing required key 'bark'"),
        (2, 17, "pets[0].barkk", "unknown key 'barkk' (did you mean 'bark'?)")]


def test_plain_union_type_mismatch_reports_one_error(tmp_path):
    assert problems(tmp_path, "animal: [1]\n") == [(1, 9, "animal", "expected a mapping or an integer, not a list")]


def test_union_that_no_member_accepts_names_every_accepted_word_and_shape(tmp_path):
    assert problems(tmp_path, "policy: everything\n") == [
        (1, 9, "policy", "expected 'rail', 'all' or a list, not 'everything'")]
    assert problems(tmp_path, "policy: al\n") == [
        (1, 9, "policy", "expected 'rail', 'all' or a list, not 'al' (did you mean 'all'?)")]
    assert problems(tmp_path, "policy: 3\n") == [(1, 9, "policy", "expected 'rail', 'all' or a list, not an integer")]


def test_a_word_close_to_an_accepted_one_is_suggested(tmp_path):
    assert problems(tmp_path, "transport: robe\n") == [
        (1, 12, "transport", "Input should be 'ib' or 'roce' (did you mean 'roce'?)")]
    assert problems(tmp_path, "transport: iwarp\n") == [(1, 12, "transport", "Input should be 'ib' or 'roce'")]


def test_union_member_that_accepts_the_shape_gives_its_own_error(tmp_path):
    assert problems(tmp_path, "policy: []\n") == [(1, 9, "policy", "needs at least 1 item(s), got 0")]


def test_discriminated_union_reports_selected_member_only(tmp_path):
    assert problems(tmp_path, "pet:\n  kind: dog\n  bark: 3\n  livs: 2\n") == [
        (3, 9, "pet.bark", "expected a string, not an integer"),
        (4, 3, "pet.livs", "unknown key 'livs' (valid keys: kind, bark)")]


def test_discriminated_union_bad_and_missing_tag(tmp_path):
    assert problems(tmp_path, "pet: {kind: dgo}\n") == [
        (1, 13, "pet.kind", "unknown kind 'dgo' (did you mean 'dog'?)")]
    assert problems(tmp_path, "pet: {bark: x}\n") == [(1, 6, "pet", "missing required key 'kind'")]


def test_several_problems_sorted_by_line(tmp_path):
    text = "bogus: 1\nnodes:\n  - name: a\n    nic: {preset: x, ports: no}\n"
    data, positions = load_yaml(write(tmp_path, text))
    with pytest.raises(ConfigErrors) as info:
        validate(Scenario, data, positions, "s.yaml")
    assert str(info.value) == (
        "s.yaml:1:1 bogus: unknown key 'bogus' (valid keys: name, nodes, fabric, pet, animal, pets, policy, "
        "transport)\n"
        "s.yaml:4:29 nodes[0].nic.ports: Input should be a valid integer, unable to parse string as an integer")
    assert [e.line for e in info.value.errors] == [1, 4]


def test_errors_inside_alias_are_found_in_anchor_text(tmp_path):
    text = "fabric:\n  a: &n\n    preset: x\n    ports: bad\n  b: *n\n"
    reason = "Input should be a valid integer, unable to parse string as an integer"
    assert problems(tmp_path, text) == [(4, 12, "fabric.a.ports", reason), (4, 12, "fabric.b.ports", reason)]


# ------------------------------------------------------------------------------------------ YAML layer


def test_duplicate_key_reported_at_second_occurrence(tmp_path):
    err = load_error(tmp_path, "name: a\nnodes:\n  - name: x\n    name: y\n")
    assert (err.line, err.column, err.key, err.reason) == (4, 5, "nodes[0].name", "duplicate key 'name'")


def test_an_anchor_defined_twice_is_refused_at_its_second_definition(tmp_path, recwarn):
    err = load_error(tmp_path, "a: &n {x: 1}\nb: *n\nc: &n {x: 2}\nd: *n\n")
    assert (err.line, err.column, err.reason) == (3, 4, "anchor '&n' is defined again (first at line 1); give each "
                                                        "anchor its own name")
    assert not recwarn.list  # refused before ruamel composes the file (it warns of a reused anchor, naming no file)


def test_python_object_tag_is_refused(tmp_path):
    err = load_error(tmp_path, "name: a\npet: !!python/object/apply:os.system ['echo pwned']\n")
    assert (err.line, err.column, err.key) == (2, 6, "pet")
    assert err.reason == "tag '!!python/object/apply:os.system' is not allowed; only plain YAML values are"
    err = load_error(tmp_path, "a: {b: !custom 3}\n")
    assert (err.line, err.column, err.key) == (1, 8, "a.b")


def test_non_utf8_bytes_name_their_line(tmp_path):
    err = load_error(tmp_path, "name: a\nnodes: é".encode() + b"\xff\n")
    assert (err.line, err.column) == (2, 9)  # columns count characters, not bytes
    assert err.reason.startswith("file is not valid UTF-8 (byte 0xff")


def test_syntax_error_uses_parser_position(tmp_path):
    err = load_error(tmp_path, "nodes: [1, 2\nname: 3\n")
    assert (err.line, err.column) == (2, 5)
    assert "expected ',' or ']'" in err.reason


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_empty_file(tmp_path, text):
    err = load_error(tmp_path, text)
    assert (err.line, err.column, err.reason) == (1, 1, "file is empty; expected a mapping at the top level")


def test_top_level_list_is_refused(tmp_path):
    err = load_error(tmp_path, "- a\n- b\n")
    assert str(err) == f"{tmp_path / 's.yaml'}:1:1: the top level must be a mapping, not a list"


def test_depth_limit(tmp_path):
    assert load_yaml(write(tmp_path, "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)))[0]["a"]
    err = load_error(tmp_path, "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert (err.line, err.column, err.reason) == (1, 3 + MAX_DEPTH, f"nesting deeper than {MAX_DEPTH} levels")
    err = load_error(tmp_path, "a: " + "[" * 5000)  # deeper than Python's recursion limit
    assert err.reason == f"nesting deeper than {MAX_DEPTH} levels"


def test_alias_bomb_is_capped(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    started = time.perf_counter()
    err = load_error(tmp_path, "\n".join(lines) + "\n")
    assert f"more than {MAX_NODES:,} values once aliases are expanded" in err.reason
    assert time.perf_counter() - started < 30


def test_recursive_alias_is_refused(tmp_path):
    err = load_error(tmp_path, "a: &x [1, *x]\n")
    assert (err.line, err.key, err.reason) == (1, "a[1]", "an alias refers to a node that contains it")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_yaml(tmp_path / "absent.yaml")


# ------------------------------------------------------------------------------------------ properties

_KEYS = ["name", "nodes", "nic", "preset", "ports", "fabric", "pet", "kind", "animal", "fins", "lives", "nmae"]
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.sampled_from(["cat", "dog", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=12)
_TOKENS = list("ab:-[]{},&*!|>'\"#?%@`~ \n\t01.<\\") + [
    "nodes", "  ", "\n  - ", "!!python/object", "<<: ", "&a ", "*a"]
_YAMLISH = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)


def _only_config_errors(path) -> None:
    try:
        data, positions = load_yaml(path)
        validate(Scenario, data, positions, str(path))
    except ConfigError as err:
        assert err.line is not None and err.line >= 1 and str(err).startswith(str(path))


_FUZZ = settings(max_examples=examples(150), deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(raw=st.binary(max_size=80))
def test_random_bytes_raise_only_config_errors(tmp_path, raw):
    _only_config_errors(write(tmp_path, raw))


@_FUZZ
@given(text=_YAMLISH)
def test_yamlish_text_raises_only_config_errors(tmp_path, text):
    _only_config_errors(write(tmp_path, text))


@_FUZZ
@given(data=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=5))
def test_random_documents_raise_only_config_errors(tmp_path, data):
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, buf)
    _only_config_errors(write(tmp_path, buf.getvalue()))


def test_a_number_out_of_its_bounds_is_said_with_the_bound(tmp_path):
    assert problems(tmp_path, "nodes:\n  - name: a\n    nic: {preset: x, ports: 0}\n") == [
        (3, 29, "nodes[0].nic.ports", "0 is below the minimum of 1")]
    assert problems(tmp_path, "nodes:\n  - name: a\n    nic: {preset: x, ports: 100000}\n") == [
        (3, 29, "nodes[0].nic.ports", "100,000 is above the maximum of 64")]

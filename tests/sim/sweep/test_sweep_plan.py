"""Sweep files: expansion into runs, seeds fixed before dispatch, errors located in the sweep file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.core.errors import ConfigError
from sim.core.units import parse_rate, parse_size, parse_time
from sim.sweep import load_sweep
from sim.sweep.plan import run_seed

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "scenarios" / "sweeps" / "msg_size_x_mode.yaml"


def test_grid_zip_and_random_multiply_and_repetitions_are_innermost(write_sweep):
    plan = load_sweep(write_sweep())
    assert plan.axes == ["workload.bw.sizes.0", "buffers.src.register", "fabric.latency", "fabric.mtu",
                         "workload.bw.tx_depth", "fabric.rate"]
    assert len(plan.runs) == 2 * 2 * 2 * 2 * 2 and [r.index for r in plan.runs] == list(range(32))
    assert [r.repetition for r in plan.runs[:4]] == [0, 1, 0, 1]
    first = plan.runs[0]
    assert first.variant == "base" and first.axes["workload.bw.sizes.0"] == "4KiB"
    assert first.scenario.workload[0].sizes == [4096] and first.scenario.fabric.latency == 300_000
    zipped = {(r.axes["fabric.latency"], r.axes["fabric.mtu"]) for r in plan.runs}
    assert zipped == {("300ns", 4096), ("1us", 1024)}
    assert {r.scenario.buffers[0].registration for r in plan.runs} == {"pinned", "odp"}
    assert len({r.key for r in plan.runs}) == 32


def test_seeds_derive_from_the_sweep_seed_per_repetition(write_sweep):
    plan = load_sweep(write_sweep())
    expected = [int(np.random.SeedSequence(3, spawn_key=(0, r)).generate_state(1, np.uint64)[0] >> np.uint64(1))
                for r in (0, 1)]
    assert expected[0] != expected[1] and [run_seed(3, r) for r in (0, 1)] == expected
    for run in plan.runs:
        assert run.seed == run.scenario.seed == expected[run.repetition] < 2**63


def test_random_axes_are_drawn_with_the_sweep_seed(write_sweep, sweep_text):
    plan = load_sweep(write_sweep())
    depths = [r.axes["workload.bw.tx_depth"] for r in plan.runs]
    rates = [parse_rate(r.axes["fabric.rate"]) for r in plan.runs]
    assert all(isinstance(d, int) and 1 <= d <= 64 for d in depths) and len(set(depths)) == 2
    assert all(100e9 / 8 <= rate <= 400e9 / 8 for rate in rates)
    assert [r.scenario.workload[0].tx_depth for r in plan.runs] == depths
    again = load_sweep(write_sweep())
    assert [r.axes for r in again.runs] == [r.axes for r in plan.runs]
    assert [r.key for r in again.runs] == [r.key for r in plan.runs]
    other = load_sweep(write_sweep(sweep_text.replace("seed: 3", "seed: 4")))
    assert [r.axes["workload.bw.tx_depth"] for r in other.runs] != depths


def test_the_seed_defaults_to_the_base_scenarios(write_sweep, sweep_text):
    plan = load_sweep(write_sweep(sweep_text.replace("seed: 3\n", "")))
    assert plan.seed == 5 and plan.runs[0].seed == run_seed(5, 0)


def test_variants_of_the_base_are_an_axis():
    plan = load_sweep(SAMPLE)
    assert plan.axes == ["variant", "workload.stream.sizes.0"]
    assert [(r.variant, r.axes["workload.stream.sizes.0"]) for r in plan.runs[:4]] == [
        ("peermem", "4KiB"), ("peermem", "64KiB"), ("peermem", "1MiB"), ("dmabuf", "4KiB")]
    assert {r.scenario.buffers[0].registration for r in plan.runs} == {"peermem", "dmabuf", "dmabuf-pinned"}
    assert all(r.scenario.workload[0].iterations == 600 and r.scenario.variants == [] for r in plan.runs)


def test_variants_are_implicitly_the_first_axis_when_not_named(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"schema: 1\nkind: sweep\nname: s\nbase: {SAMPLE.parent.parent / 'pin_vs_dmabuf.yaml'}\n"
                    "set: {workload.stream.iterations: 10}\n")
    plan = load_sweep(path)
    assert plan.axes == ["variant"] and [r.variant for r in plan.runs] == [
        "peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify"]
    assert plan.runs[3].scenario.nodes[0].kernel.dmabuf_move_notify is False


def _at(text: str, needle: str, nth: int = 0) -> str:
    """``:LINE:COL`` of ``needle`` in ``text`` (its ``nth`` occurrence)."""
    index = -1
    for _ in range(nth + 1):
        index = text.index(needle, index + 1)
    return f":{text.count(chr(10), 0, index) + 1}:{index - text.rfind(chr(10), 0, index)} "


@pytest.mark.parametrize("old, new, needle, words", [
    ("buffers.src.register:", "buffers.srcx.register:", "buffers.srcx", "no list item named 'srcx'"),
    ("fabric.latency:", "fabric.latncy:", "fabric.latncy", "unknown key 'latncy' (did you mean 'latency'?)"),
    ("[pinned, odp]", "[pinned, bogus]", "bogus", " grid.buffers.src.register[1]: Input should be 'pinned'"),
    ("[4096, 1024]", "[4096, 1000]", "1000", "fabric.mtu"),
    ("[4KiB, 16KiB]", "[4KiB, 128KiB]", "128KiB", "does not fit buffer"),
    ("[300ns, 1us]", "[300ns, 1us, 2us]", "fabric.latency", "zip lists must all have one length"),
    ("{randint: [1, 64]}", "{randint: [1us, 4KiB]}", "[1us", "bounds must be of one kind"),
    ("{randint: [1, 64]}", "{randint: [1, 64], choice: [2]}", "{randint", "exactly one of"),
    ("  buffers.src.register:", "  seed: [1, 2]\n  buffers.src.register:", "seed: [", "run seeds derive"),
    ("  buffers.src.register:", "  workload: [[]]\n  buffers.src.register:", "workload:", "results column"),
    ("  buffers.src.register:", "  variant: [x]\n  buffers.src.register:", "x]", "no variant named 'x'"),
    ("  fabric.mtu", "  workload.bw.sizes.0: [1, 2]\n  fabric.mtu", "workload.bw.sizes.0: [1, 2]", "already an axis"),
    ("base: base.yaml", "base: nope.yaml", "nope.yaml", "no scenario file"),
    ("grid:", "gird:", "gird", "did you mean 'grid'"),
    ("kind: sweep\n", "", "schema", "missing required key 'kind'"),
    ("repetitions: 2\n", "repetitions: 2\nset:\n  workload.bw.sizes: [4KiB, 12]\n", "12]",
     " set.workload.bw.sizes[1]: 12: give a unit, e.g. '12B'"),
    ("repetitions: 2\n", "repetitions: 2\nset:\n  fabric: {mtu: 4096, latency: 300}\n", "300}",
     " set.fabric.latency: 300: give a unit, e.g. '300ns'"),
    ("repetitions: 2\n", "repetitions: 2\nset:\n  workload.bw.iterations: 2ms\n", "2ms",
     " set.workload.bw.iterations: "),
    ("repetitions: 2\n", "repetitions: 2\nset:\n  fabric: {mtu: 4096, latncy: 1us}\n", "latncy",
     " set.fabric.latncy: unknown key 'latncy' (did you mean 'latency'?)"),
])
def test_errors_are_located_in_the_sweep_file(write_sweep, sweep_text, old, new, needle, words):
    assert old in sweep_text
    text = sweep_text.replace(old, new, 1)
    path = write_sweep(text)
    with pytest.raises(ConfigError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{_at(text, needle).rstrip()}") and words in message, message


def test_errors_of_the_base_file_are_located_there(write_sweep, base_text):
    path = write_sweep(base=base_text.replace("size: 64KiB}\n  - {name: dst", "size: 64KIB}\n  - {name: dst"))
    with pytest.raises(ConfigError) as caught:
        load_sweep(path)
    assert str(caught.value).startswith(f"{path.parent / 'base.yaml'}:8:")


@pytest.mark.parametrize("spec, check", [
    ({"uniform": ["1us", "2us"]}, lambda v: v.endswith("ps") and 10**6 <= parse_time(v) <= 2 * 10**6),
    ({"loguniform": ["4KiB", "1MiB"]}, lambda v: v.endswith("B") and 4096 <= parse_size(v) <= 2**20),
    ({"uniform": [0.5, 1]}, lambda v: isinstance(v, float) and 0.5 <= v <= 1),
    ({"randint": ["4KiB", "8KiB"]}, lambda v: v.endswith("B") and 4096 <= parse_size(v) <= 8192),
    ({"choice": ["pinned", {"a": 1}]}, lambda v: v in ("pinned", {"a": 1})),
])
def test_distributions_draw_values_the_schema_reads(spec, check):
    from sim.sweep.plan import _sample
    from sim.sweep.spec import Distribution

    rng = np.random.default_rng(0)
    assert all(check(_sample(Distribution.model_validate(spec), rng)) for _ in range(50))


def test_a_base_named_up_a_folder_is_reported_without_dot_dot_where_that_is_the_same_file(tmp_path):
    (tmp_path / "sweeps").mkdir()
    sweep = tmp_path / "sweeps" / "s.yaml"
    sweep.write_text(SAMPLE.read_text())
    (tmp_path / "pin_vs_dmabuf.yaml").write_text((SAMPLE.parent.parent / "pin_vs_dmabuf.yaml").read_text())
    assert load_sweep(sweep).base_file == str(tmp_path / "pin_vs_dmabuf.yaml")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "pin_vs_dmabuf.yaml").write_text((tmp_path / "pin_vs_dmabuf.yaml").read_text())
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere" / "sub", target_is_directory=True)
    (tmp_path / "elsewhere" / "sub").mkdir()
    linked = tmp_path / "linked" / "s.yaml"
    linked.write_text(SAMPLE.read_text())
    # Through a link, linked/.. is elsewhere/, not tmp_path: the path is kept as written.
    assert load_sweep(linked).base_file == str(tmp_path / "linked" / ".." / "pin_vs_dmabuf.yaml")

"""A sweep is counted before it is built: past ``max_runs`` it is refused at once, and validating one keeps no
point."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.sweep.plan as plan_module
from sim.core.errors import ConfigError
from sim.sweep.plan import check_sweep, load_sweep, read_sweep
from tests.properties import examples

AXES = ("workload.bw.tx_depth", "workload.bw.iterations", "fabric.mtu")
VALUES = {"workload.bw.tx_depth": range(1, 10**6), "workload.bw.iterations": range(1, 10**6),
          "fabric.mtu": [256, 512, 1024, 2048, 4096]}


def _sweep(lengths: list[int], repetitions: int, samples: int | None, max_runs: int | None) -> str:
    """A sweep over the tiny base with one grid axis of each of ``lengths`` values."""
    lines = ["schema: 1", "kind: sweep", "name: sized", "base: base.yaml", f"repetitions: {repetitions}"]
    if max_runs is not None:
        lines.append(f"max_runs: {max_runs}")
    if lengths:
        lines.append("grid:")
    for axis, length in zip(AXES, lengths):
        values = VALUES[axis]
        lines.append(f"  {axis}: [{', '.join(str(values[i % len(values)]) for i in range(length))}]")
    if samples is not None:
        lines += ["random:", f"  samples: {samples}", "  params:", "    fabric.latency: {uniform: [1us, 2us]}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def no_point_built(monkeypatch):
    """Fail the test if any point of a sweep is drawn or built."""
    def refuse(*args, **kwargs):
        raise AssertionError("a point was built")
    monkeypatch.setattr(plan_module, "_factors", refuse)
    monkeypatch.setattr(plan_module, "_points", refuse)


@settings(max_examples=examples(20), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 1000), min_size=0, max_size=3), repetitions=st.integers(1, 50),
       samples=st.none() | st.integers(1, 10**6), max_runs=st.none() | st.integers(1, 10**5))
def test_a_sweep_over_its_limit_is_refused_with_its_count_before_any_point_is_built(
        write_sweep, no_point_built, lengths, repetitions, samples, max_runs):
    count = math.prod(lengths) * (samples or 1) * repetitions
    limit = 10_000 if max_runs is None else max_runs
    path = write_sweep(_sweep(lengths, repetitions, samples, max_runs))
    if count <= limit:
        assert read_sweep(path).count == count
        return
    with pytest.raises(ConfigError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert f"expands to {count:,} runs" in message and f"more than max_runs ({limit:,})" in message
    sizes = lengths + ([samples] if samples else [])
    key = "max_runs" if max_runs is not None else "repetitions" if not sizes else \
        (["grid." + a for a in AXES[:len(lengths)]] + ["random.samples"])[sizes.index(max(sizes))]
    text = path.read_text()
    line = text[:text.index(key.split(".")[-1] if key.startswith("grid.") else key.split(".")[-1] + ":")].count("\n")
    assert message.startswith(f"{path}:{line + 1}:") and f" {key}: " in message


def test_raising_max_runs_admits_the_sweep(write_sweep):
    text = _sweep([3, 2], 2, None, None)
    assert read_sweep(write_sweep(text)).count == 12
    with pytest.raises(ConfigError, match=r"12 runs \(3 x 2 points x 2 repetitions\), more than max_runs \(11\)"):
        read_sweep(write_sweep(text.replace("repetitions: 2", "repetitions: 2\nmax_runs: 11")))
    assert len(load_sweep(write_sweep(text.replace("repetitions: 2", "repetitions: 2\nmax_runs: 12"))).runs) == 12


def test_checking_a_sweep_validates_every_point_and_keeps_none(write_sweep, monkeypatch):
    path = write_sweep(_sweep([4, 3], 1, None, None))
    seen = []
    real = plan_module._Files.scenario
    monkeypatch.setattr(plan_module._Files, "scenario",
                        lambda self, data, where, label="", **kw: seen.append(label) or real(self, data, where, label,
                                                                                              **kw))
    monkeypatch.setattr(plan_module, "RunSpec", None)  # checking builds no run
    swept = read_sweep(path)
    assert check_sweep(swept) == ["workload.bw.tx_depth", "workload.bw.iterations"]
    assert sum(label.startswith("with ") for label in seen) == 12 == swept.count


def test_validate_states_the_count_and_refuses_a_grid_of_a_million_at_once(write_sweep, monkeypatch):
    from typer.testing import CliRunner

    from sim.cli.app import app

    path = write_sweep(_sweep([3, 2], 1, None, None))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.startswith(f"{path}: ok (sweep sized: 6 runs over")
    monkeypatch.setattr("sim.cli.app._interactive", lambda: True)
    result = CliRunner().invoke(app, ["validate", str(path)])  # on a terminal, before the points are built
    assert result.stderr == f"{path}: 6 runs (3 x 2 points x 1 repetition); checking each\n"
    big = write_sweep(_sweep([1000, 1000], 1, None, None))
    result = CliRunner().invoke(app, ["validate", str(big)])
    assert result.exit_code == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"{big}:7:3 grid.workload.bw.tx_depth: the sweep expands to 1,000,000 runs")

"""A workload that runs for a ``duration`` (perftest -D) is inside the same two checks as one of ``iterations``:
the clock's horizon (its sizes' durations and the windows still in flight after each) and the memory estimate
(its operations bounded from the path: one per service time of the busiest stage, ``tx_depth`` per lifetime of
one). Before, both counted the default ``iterations`` a duration run never posts."""

from __future__ import annotations

import re

import yaml
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli.app import app
from sim.core.units import PS_PER_S
from sim.engine.budget import estimate
from sim.engine.run import run_scenario
from sim.scenario.horizon import HORIZON_PS, workload_operations
from sim.scenario.schema import Scenario
from tests.properties import examples

runner = CliRunner()


def scenario(kind: str, sizes: list[int], duration: str, rate: str = "400Gb/s", tx_depth: int = 128,
             transport: str = "rc", qps: int = 1) -> dict:
    return {"schema": 1, "name": "timed", "seed": 3,
            "nodes": [{"name": "a"}, {"name": "b"}], "fabric": {"rate": rate, "latency": "300ns"},
            "buffers": [{"name": "src", "on": "a.host", "size": "2GiB"},
                        {"name": "dst", "on": "b.host", "size": "2GiB"}],
            "workload": [{"kind": kind, "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes],
                          "duration": duration, "tx_depth": tx_depth, "transport": transport, "qps": qps}]}


@hsettings(max_examples=examples(8), deadline=None)
@given(kind=st.sampled_from(["write_bw", "read_bw", "write_lat"]),
       sizes=st.lists(st.sampled_from([2, 64, 4096, 65536]), min_size=1, max_size=2, unique=True),
       duration_us=st.integers(5, 60), tx_depth=st.sampled_from([1, 16, 128]),
       transport=st.sampled_from(["rc", "uc"]), qps=st.sampled_from([1, 2, 4]))
def test_the_bound_holds_what_a_duration_run_posts(kind, sizes, duration_us, tx_depth, transport, qps):
    if transport == "uc" and kind.startswith("read"):
        transport = "rc"  # UC has no READ
    qps = 1 if kind.endswith("lat") else qps  # (a latency test runs one QP)
    spec = Scenario.model_validate(scenario(kind, sizes, f"{duration_us}us", tx_depth=tx_depth,
                                            transport=transport, qps=qps))
    bound = workload_operations(spec, spec.workload[0])
    ops = run_scenario(spec).operations
    for size, most in zip(sizes, bound):
        posted = int((ops["bytes"] == size).sum())
        assert 0 < posted <= most


def test_qps_of_one_port_share_its_bound():
    """perftest's ``ib_write_bw -q 4 -s 65536 -D 10`` was estimated at four times the operations one port can
    carry in 10 s (each QP counted as if it had the wire to itself) and refused on a 24 GiB machine."""
    one, four = (Scenario.model_validate(scenario("write_bw", [65536], "10s", qps=qps)) for qps in (1, 4))
    [alone], [shared] = (workload_operations(spec, spec.workload[0]) for spec in (one, four))
    line = 10 * 400e9 / 8 / 65536  # 64 KiB payloads at 400 Gb/s for 10 s
    assert line < alone < 1.01 * line and shared - alone == 3 * 128  # three more windows in flight, no more


def test_a_duration_run_is_counted_in_the_memory_estimate():
    """A 2 B write_bw for 100 ms was estimated at the default 1,000 iterations; it posts millions."""
    spec = Scenario.model_validate(scenario("write_bw", [2], "100ms"))
    counted = estimate([("base", spec)])
    plain = estimate([("base", Scenario.model_validate({**scenario("write_bw", [2], "1us"), "workload": [
        {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["2B"], "iterations": 1000}]}))])
    assert counted.key == ("workload", 0, "duration")
    # 100 ms at one operation per 4 ns engine slot at most: millions, not the default thousand
    assert 1_000_000 < counted.operations <= 100_000_000_000 // 4000 + 128
    assert counted.bytes > 100 * plain.bytes // 10


@hsettings(max_examples=examples(10), deadline=None)
@given(sizes=st.integers(2, 200), seconds=st.integers(1, 86_400))
def test_durations_past_the_horizon_are_refused_at_their_key(tmp_path_factory, sizes, seconds):
    data = scenario("write_bw", [2**31 - 4096 * k for k in range(sizes)], f"{seconds}s", rate="1Gb/s")
    posting = sizes * seconds * PS_PER_S  # the run posts for this long at least
    path = tmp_path_factory.mktemp("h") / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(app, ["validate", str(path)])
    if posting > HORIZON_PS:
        assert result.exit_code == 2
        [line] = result.stderr.splitlines()
        assert re.match(rf"^{re.escape(str(path))}:\d+:\d+ workload\[0\]\.duration: the run would simulate about "
                        r"[\d,.]+ days .* past the 26\.7 days", line), line
    elif posting * 2 < HORIZON_PS // 2:  # far inside: the windows in flight at 1 Gb/s add under a day per size
        assert result.exit_code == 0, result.output

"""A generated corpus of hostile scenario inputs: every one is a single located error (FILE:LINE:COL key: reason)
from both `validate` and `run`, exit 2, and leaves every file around it as it was; values at the bounds run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.scenario.yaml_reader import DEFAULT_SIZE_LIMIT, MAX_NODES, SIZE_LIMIT_ENV

BASE = """schema: 1
name: hostile
seed: 1
nodes:
  - name: a
  - name: b
fabric: {rate: 400Gb/s, latency: 300ns}
buffers:
  - {name: src, on: a.host, size: 64KiB}
  - {name: dst, on: b.host, size: 64KiB}
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 20}
"""
FLAP = "events:\n  - {at: 1us, kind: link-flap, node: a, duration: 1us}\n"
VARIANTS = "variants:\n  - {name: x, set: {seed: 2}}\n  - {name: y, set: {seed: 3}}\n"
BIG = BASE.replace("size: 64KiB", "size: 2GiB").replace("[4KiB]", "[2GiB]")
GPU = (BASE.replace("  - name: a\n", "  - name: a\n    gpus: [{}]\n")
       + "events:\n  - {at: 1us, kind: qp-error, node: b}\n"
       "  - {at: 1ms, kind: gpu-job-grows, on: a.gpu0, step: 1MiB, every: 86400s, steps: 10}\n")

# (id, text, old, new, marker, key, reason): `old` in `text` becomes `new`; the error must point at the first
# `marker` from the start of the line of `new` on and name `key` with a reason containing `reason`.
CASES = [
    ("rate below 1Mb/s", BASE, "400Gb/s", "4KB/s", "4KB/s", "fabric.rate", "below the minimum of 1Mb/s"),
    ("tiny rate", BASE, "400Gb/s", "1e-30Gb/s", "1e-30", "fabric.rate", "below the minimum of 1Mb/s"),
    ("rate past float", BASE, "400Gb/s", "1e400Gb/s", "1e400", "fabric.rate", "above the maximum of 100Tb/s"),
    ("bare rate", BASE, "400Gb/s", "400", "400", "fabric.rate", "400: give a unit, e.g. '400Gb/s'"),
    ("latency of 1e7 s", BASE, "300ns", "1e7s", "1e7s", "fabric.latency", "above the maximum of 86400s"),
    ("latency above 1 s", BASE, "300ns", "2s", "2s", "fabric.latency", "2s is above the maximum of 1s"),
    ("bare latency", BASE, "300ns", "300", "300", "fabric.latency", "300: give a unit, e.g. '300ns'"),
    ("bare size", BASE, "size: 64KiB}\n  - {name: dst", "size: 65536}\n  - {name: dst", "65536",
     "buffers[0].size", "65536: give a unit, e.g. '65536B'"),
    ("size past 256TiB", BASE, "size: 64KiB}\n  - {name: dst", "size: 1e400KiB}\n  - {name: dst", "1e400",
     "buffers[0].size", "above the maximum of 256TiB"),
    ("message past 2GiB", BIG, "[2GiB]", "[4GiB]", "4GiB", "workload[0].sizes[0]",
     "4GiB is above the maximum of 2GiB"),
    ("empty sizes", BASE, "[4KiB]", "[]", "[]", "workload[0].sizes", "needs at least 1 item(s), got 0"),
    ("inverted range", BASE, "[4KiB]", "{from: 8KiB, to: 4KiB}", "4KiB", "workload[0].sizes.to",
     "the range ends below its start"),
    ("boolean count", BASE, "iterations: 20", "iterations: true", "true", "workload[0].iterations",
     "expected an integer, not a boolean"),
    ("float count", BASE, "iterations: 20", "iterations: 20.0", "20.0", "workload[0].iterations",
     "expected an integer, not a number"),
    ("seed of 2**63", BASE, "seed: 1", f"seed: {2**63}", str(2**63), "seed",
     "must be less than 9,223,372,036,854,775,808"),
    ("flap of 1e30 s", BASE + FLAP, "duration: 1us", "duration: 1e30s", "1e30s", "events[0].duration",
     "above the maximum of 86400s"),
    ("event at 1e400 s", BASE + FLAP, "at: 1us", "at: 1e400s", "1e400s", "events[0].at",
     "above the maximum of 86400s"),
    ("bare event time", BASE + FLAP, "at: 1us", "at: 20", "20", "events[0].at", "20: give a unit, e.g. '20ns'"),
    ("duplicate variant", BASE + VARIANTS, "name: y", "name: x", "x, set: {seed: 3", "variants[1].name",
     "duplicate variant name 'x'"),
    ("run past the clock", BIG.replace("400Gb/s", "1Mb/s"), "iterations: 20", "iterations: 200", "200",
     "workload[0].iterations",
     "past the 26.7 days the engines' int64-picosecond clock allows"),
    ("job past the clock", GPU, "steps: 10}", "steps: 100}", "{at: 1ms", "events[1]",
     "gpu-job-grows acts until about 100.0 days"),
]
runner = CliRunner()


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def _located(text: str, new: str, marker: str) -> tuple[int, int]:
    index = text.index(marker, text.rfind("\n", 0, text.index(new)) + 1)
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def _one_error(result, path: Path) -> tuple[int, int, str, str]:
    """The single ``FILE:LINE:COL key: reason`` line a command printed, split (key may be empty)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    match = re.fullmatch(rf"{re.escape(str(path))}:(\d+):(\d+)(?: (\S+))?: (.*)\n", result.stderr)
    assert match, result.stderr
    return int(match[1]), int(match[2]), match[3] or "", match[4]


def test_the_corner_cases_start_from_a_valid_scenario(tmp_path):
    for text in {BASE, BASE + FLAP, BASE + VARIANTS, BIG}:
        (tmp_path / "s.yaml").write_text(text)
        assert runner.invoke(app, ["validate", str(tmp_path / "s.yaml")]).exit_code == 0


@pytest.mark.parametrize("text, old, new, marker, key, reason", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_hostile_value_is_one_located_error_and_nothing_changes(tmp_path, text, old, new, marker, key, reason):
    assert old in text
    hostile = text.replace(old, new, 1)
    path = tmp_path / "s.yaml"
    path.write_text(hostile)
    (tmp_path / "notes.txt").write_text("mine")
    before = _snapshot(tmp_path)
    expected = _located(hostile, new, marker)
    for args in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "-q"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        line, column, got_key, got_reason = _one_error(result, path)
        assert (line, column, got_key) == (*expected, key)
        assert reason is None or reason in got_reason, got_reason
        assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("change", [
    {"fabric": {"rate": "1Mb/s", "latency": "1s"}},
    {"fabric": {"rate": "1.6Tb/s", "latency": "0ps"}},
    {"events": "  - {at: 86400s, kind: link-flap, node: a, duration: 86400s, frames: held}\n"
               "  - {at: 1ns, kind: link-flap, node: b, duration: 86400s, frames: held}"},
    {"nodes": "  - name: a\n    nic: {doorbell: 1s, tx_latency: 1s, rx_latency: 1s}\n"
              "    pcie: {read_latency: 1s, write_latency: 1s, read_tags: 1, gen: 1, lanes: 1, mrrs: 128}\n"
              "    host: {poll_period: 1s}\n  - name: b"},
], ids=["slowest rate, longest latency", "fastest rate, no latency", "events at one day", "slowest node"])
@pytest.mark.parametrize("engine", ["event", "fast"])
def test_values_at_the_bounds_run(tmp_path, change, engine):
    # the slowest node would fetch a 2GiB message in 2^24 one-second read round trips: past the clock
    text = (BASE if "nodes" in change else BIG).replace("iterations: 20", "iterations: 5")
    for key, value in change.items():
        if key == "fabric":
            text = text.replace("{rate: 400Gb/s, latency: 300ns}",
                                "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}")
        elif key == "events":
            text += f"events:\n{value}\n"
        else:
            text = text.replace("  - name: a\n  - name: b", value)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q", "--engine", engine])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "metrics.parquet").is_file()


def _validate_in_a_subprocess(path: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A child process, so that a regression that blocks on the file fails the test instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "sim", "validate", path], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_special_files_are_refused_unread(tmp_path, kind):
    path = {"fifo": tmp_path / "s.yaml", "device": Path("/dev/zero"), "directory": tmp_path / "d.yaml"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    before = _snapshot(tmp_path)
    done = _validate_in_a_subprocess(str(path))
    name = {"fifo": "a FIFO", "device": "a character device", "directory": "a directory"}[kind]
    assert done.returncode == 2 and done.stderr == f"{path}: {name}, not a regular file; rdmasim reads YAML only " \
                                                   "from regular files\n"
    assert _snapshot(tmp_path) == before


def test_the_file_size_limit_is_named_and_raised_by_its_variable(tmp_path):
    path = tmp_path / "s.yaml"
    padding = "#" * 119 + "\n"
    path.write_text(BASE + padding * (DEFAULT_SIZE_LIMIT // len(padding) + 1))
    size = path.stat().st_size
    refused = runner.invoke(app, ["validate", str(path)])
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (f"{path}: file is {size:,} bytes, above the 1MiB limit for YAML files "
                                      f"(raise it with {SIZE_LIMIT_ENV}, e.g. {SIZE_LIMIT_ENV}=16MiB)")
    accepted = runner.invoke(app, ["validate", str(path)], env={SIZE_LIMIT_ENV: "2MiB"})
    assert accepted.exit_code == 0, accepted.output
    wrong = runner.invoke(app, ["validate", str(path)], env={SIZE_LIMIT_ENV: "lots"})
    assert wrong.exit_code == 2 and wrong.stderr.startswith(f"${SIZE_LIMIT_ENV}: expected a size")


def test_a_long_flow_list_stops_while_it_is_parsed(tmp_path):
    path = tmp_path / "s.yaml"
    items = ", ".join(["1"] * (MAX_NODES + 10))
    path.write_text(BASE + f"description: [{items}]\n")
    result = runner.invoke(app, ["validate", str(path)], env={SIZE_LIMIT_ENV: "4MiB"})
    assert result.exit_code == 2
    line, column, key, reason = _one_error(result, path)
    text = path.read_text()
    assert (line, key, reason) == (text.count("\n"), "", f"more than {MAX_NODES:,} values")
    assert text.splitlines()[line - 1][column - 1] == "1" and column < len(text.splitlines()[line - 1]) - 10


@pytest.mark.parametrize("args, message", [
    (["--seed", str(2**63)], "a seed is an integer with 0 <= seed < 2**63"),
    (["--seed", "-1"], "a seed is an integer with 0 <= seed < 2**63"),
])
def test_run_options_follow_the_schema(tmp_path, args, message):
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    before = _snapshot(tmp_path)
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2 and message in result.stderr
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("argv, message", [
    (["ib_write_bw", "-s", "2049M"], "-s/--size: Message Size should be between 1 and 2147483647"),
    (["ib_write_bw", "-s", "0x7fffffffffffffff"], "-s/--size: Message Size should be between 1 and 2147483647"),
    (["ib_write_bw", "-n", "1e9"], "-n/--iters: Iteration num argument 1e9 should be int"),
    (["ib_write_bw", "-n", "100000001"], "-n/--iters: Iteration num should be between 5 and 100000000"),
    (["ib_write_bw", "-q", "1025"],
     "-q/--qp: num of Qps (perftest takes up to 16384, rdmasim simulates 1024) should be between 1 and 1024"),
    (["ib_write_bw", "-t", "0"], "-t/--tx-depth: Tx depth should be between 1 and 15000"),
    (["ib_write_bw", "-s", "2047M", "-n", "100000000", "-q", "1024"], "-n/-s/-q: the run would simulate about"),
])
def test_perftest_numbers_are_bounded(tmp_path, argv, message):
    result = runner.invoke(app, ["perftest", *argv])
    assert result.exit_code == 2 and message in result.stderr, result.output

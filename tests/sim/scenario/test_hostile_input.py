"""Hostile scenario input: mutations of every shipped scenario give a located ConfigError (exit 2) or a
valid scenario that runs; never a traceback, never a file outside the results directory."""

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli.app import app
from sim.core.errors import ConfigError
from sim.scenario.scenario_file import load_scenario_variants
from tests.properties import examples

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
TEXTS = {p.name: p.read_text() for p in SHIPPED}
NASTY = ["-1", "0", "300", "4096", "true", "1e7s", "1e400s", "1e-30Gb/s", "4KB/s", "1e400Gb/s",
         "{from: 8KiB, to: 4KiB}", "100Tb/s", "1Mb/s", "1s", "86400s", "2GiB", "256TiB", "9223372036854775808",
         "1e309", "99999999999999999999999999", "4 KiB", "4kib", "4KiBB", "-4KiB", "null", "[]", "{}",
         "!!python/object/apply:os.system ['true']", "&a [*a]", "'\\x00'", "yes", "0x10", "1.5", "~", "\"\"",
         "1000TiB", "400Gbps", "600 ns", "2 ms", "h200", "pinned", "dmabuf-pinned", "a.gpu9", "zz.host"]


def _mutate(text: str, data) -> str:
    lines = text.splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    line = lines[index]
    action = data.draw(st.sampled_from(["value", "key", "delete", "duplicate", "indent", "bytes"]))
    if action == "value" and ":" in line:
        head = line[: line.index(":") + 1]
        lines[index] = f"{head} {data.draw(st.sampled_from(NASTY))}"
    elif action == "key" and ":" in line:
        key_start = len(line) - len(line.lstrip(" -{"))
        cut = data.draw(st.integers(key_start, max(key_start, line.index(":") - 1)))
        lines[index] = line[:cut] + line[cut + 1:]
    elif action == "delete":
        del lines[index]
    elif action == "duplicate":
        lines.insert(index, line)
    elif action == "indent":
        lines[index] = " " * data.draw(st.integers(1, 5)) + line
    else:
        return text[: len(text) // 2] + "\udcff" if data.draw(st.booleans()) else "\t" + text
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(TEXTS)), data=st.data())
def test_mutated_scenarios_load_or_fail_with_a_located_config_error(tmp_path, name, data):
    path = tmp_path / name
    text = _mutate(TEXTS[name], data)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        load_scenario_variants(path)
    except ConfigError as exc:
        for error in getattr(exc, "errors", [exc]):
            assert error.file == str(path) and error.line is not None and error.line >= 1


def _shrunk(text: str) -> str:
    """A shipped scenario made cheap to run: few iterations, small messages, no figures."""
    text = re.sub(r"iterations: [0-9]+", "iterations: 5", text)
    text = re.sub(r"(sizes: \{from: [0-9]+[KMG]?i?B), to: [0-9]+[KMG]iB\}", r"\1, to: 64KiB}", text)
    text = text.replace("sizes: [1MiB]", "sizes: [64KiB]")
    return re.sub(r"^outputs: .*$", "outputs: []", text, flags=re.M)


SHRUNK = {name: _shrunk(text) for name, text in TEXTS.items()}


def test_the_shrunk_scenarios_still_run_every_variant(tmp_path):
    for name, text in SHRUNK.items():
        assert text != TEXTS[name] and "iterations: 5" in text
        path = tmp_path / name
        path.write_text(text)
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / name[:-5]), "-q"])
        assert result.exit_code == 0, result.output


@settings(max_examples=examples(40), deadline=None)
@given(name=st.sampled_from(sorted(SHRUNK)), data=st.data())
def test_mutated_scenarios_validate_and_run_or_stop_with_a_located_error(name, data):
    text = _mutate(SHRUNK[name], data)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / name
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        runner = CliRunner()
        checked = runner.invoke(app, ["validate", str(path)])
        ran = runner.invoke(app, ["run", str(path), "--out", str(root / "out"), "-q"])
        for result in (checked, ran):
            assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
            assert "Traceback" not in result.output
        assert checked.exit_code in (0, 2) and ran.exit_code in (0, 1, 2)
        if checked.exit_code == 2:  # every line a located error in this file, and the run refuses the same way
            assert ran.exit_code == 2 and ran.stderr == checked.stderr
            assert all(re.match(rf"{re.escape(str(path))}:[0-9]+:[0-9]+[ :]", line)
                       for line in checked.stderr.splitlines()), checked.stderr
        elif ran.exit_code == 1:  # a valid scenario whose simulation fails: one line per failed run
            assert all(line.startswith((f"{path}:", "wrote ")) for line in ran.stderr.splitlines()), ran.stderr
            assert "run failed: " in ran.stderr
        else:
            assert ran.exit_code == 0, ran.output
        outside = {p.name for p in root.iterdir()} - {"out"}
        assert outside == {name}


def test_cli_on_a_broken_file_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TEXTS["quickstart.yaml"].replace("seed: 1\n", "seed: 1\nseed: 2\n", 1))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(bad), "--out", str(out)])
    assert result.exit_code == 2 and "duplicate key 'seed'" in result.stderr and f"{bad}:" in result.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_results_directory_holds_only_known_names(tmp_path):
    out = tmp_path / "out"
    small = tmp_path / "q.yaml"
    small.write_text(TEXTS["quickstart.yaml"].replace("iterations: 2000", "iterations: 20")
                     .replace("iterations: 1000", "iterations: 20").replace("to: 8MiB", "to: 64KiB"))
    assert CliRunner().invoke(app, ["run", str(small), "--out", str(out), "-q", "--trace"]).exit_code == 0
    names = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    figures = {f"out/figures/{f}.{e}" for f in ("bw_vs_size", "latency_vs_size") for e in ("png", "pdf", "csv")}
    assert names <= {"q.yaml", "out", "out/metrics.parquet", "out/summary.json", "out/manifest.json",
                     "out/trace.json", "out/figures"} | figures

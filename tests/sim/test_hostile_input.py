"""Hostile scenario input: mutations of every shipped scenario give a located ConfigError (exit 2) or a
valid scenario; never a traceback, never a results directory."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli import app
from sim.core.errors import ConfigError
from sim.scenario.scenario_file import load_scenario_variants

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
TEXTS = {p.name: p.read_text() for p in SHIPPED}
NASTY = ["-1", "0", "1e309", "99999999999999999999999999", "4 KiB", "4kib", "4KiBB", "-4KiB", "null", "[]", "{}",
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
    assert names <= {"q.yaml", "out", "out/metrics.parquet", "out/summary.json", "out/manifest.json",
                     "out/trace.json", "out/figures"} | {f"out/figures/{f}.{e}" for f in ("bw_vs_size", "latency_vs_size")
                                                        for e in ("png", "pdf", "csv")}

"""Output directories: run, sweep, plot and perftest write only where sim.store.outdir allows, and every file they did
not write survives byte for byte (with its mode)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.store import outdir
from sim.cli.app import app
from tests.conftest import tiny_yaml

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = tiny_yaml("{kind: write_bw, name: bw, from: src, to: dst, sizes: [4KiB], iterations: 40}")
SWEEP = """schema: 1
kind: sweep
name: tiny-sweep
base: s.yaml
grid:
  workload.bw.sizes.0: [4KiB, 16KiB]
"""
runner = CliRunner()


def _snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry under ``root`` (``skip``'s subtree left out): its mode and its bytes, link target or 'dir'."""
    entries = {}
    for path in [root, *root.rglob("*")]:
        if skip is not None and (path == skip or skip in path.parents):
            continue
        info = path.lstat()
        content = (os.readlink(path) if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes())
        entries[path.relative_to(root).as_posix()] = (stat.filemode(info.st_mode), content)
    return entries


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder as a user has it: notes, a sub-folder, a file, a link to a folder, the scenario and a sweep."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep.txt").write_text("keep\n")
    (tmp_path / "link").symlink_to("target")
    (tmp_path / "file.txt").write_text("a file\n")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "sw.yaml").write_text(SWEEP)
    return tmp_path


def _run(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _earlier_run(work: Path, name: str = "earlier") -> Path:
    assert _run("run", "s.yaml", "--out", name, "-q").exit_code == 0
    return work / name


REFUSED = [  # (--out, words of the message)
    (".", "is a non-empty directory that rdmasim did not write"),
    ("", "output path is empty"),
    ("/", "is the root directory"),
    ("link", "is a symbolic link (to target)"),
    ("file.txt", "exists and is not a directory"),
    ("sub", "is a non-empty directory that rdmasim did not write"),
]


def _command(kind: str, out: str, *extra: str) -> list[str]:
    return {"run": ["run", "s.yaml", "--out", out, "-q"],
            "sweep": ["sweep", "sw.yaml", "--out", out],
            "perftest": ["perftest", "ib_write_bw", "-s", "4K", "-n", "20", "--out", out]}[kind] + list(extra)


@pytest.mark.parametrize("kind", ["run", "sweep", "perftest"])
@pytest.mark.parametrize("out, words", REFUSED)
def test_a_refused_out_exits_2_naming_why_and_changes_nothing(work, kind, out, words):
    before = _snapshot(work)
    result = _run(*_command(kind, out))
    assert result.exit_code == 2, result.output
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(work) == before


@pytest.mark.parametrize("kind", ["run", "sweep", "perftest"])
def test_earlier_results_are_replaced_only_with_force(work, kind):
    earlier = _earlier_run(work)
    before = _snapshot(work)
    refused = _run(*_command(kind, "earlier"))
    assert refused.exit_code == 2 and "add --force to replace them" in refused.stderr
    assert _snapshot(work) == before
    assert _run(*_command(kind, "earlier", "--force")).exit_code == 0
    assert _snapshot(work, skip=earlier) == {k: v for k, v in before.items() if not k.startswith("earlier")}
    marker = "sweep.json" if kind == "sweep" else "manifest.json"
    assert outdir.owner(earlier) == ("sweep" if kind == "sweep" else "run") and (earlier / marker).is_file()
    assert not [p for p in work.iterdir() if "rdmasim-" in p.name]  # no staging or set-aside directory left


@pytest.mark.parametrize("kind", ["run", "sweep", "perftest"])
def test_force_never_deletes_a_file_rdmasim_did_not_write(work, kind):
    earlier = _earlier_run(work)
    (earlier / "figures" / "my_notes.md").write_text("do not lose\n")
    before = _snapshot(work)
    result = _run(*_command(kind, "earlier", "--force"))
    assert result.exit_code == 2 and f"{earlier / 'figures' / 'my_notes.md'} is not its" in result.stderr
    assert _snapshot(work) == before


@pytest.mark.parametrize("kind", ["run", "sweep", "perftest"])
def test_a_new_directory_gets_ordinary_permissions_and_an_empty_one_keeps_its_own(work, kind):
    before = _snapshot(work)
    umask = os.umask(0o027)
    try:
        assert _run(*_command(kind, "new/deeper")).exit_code == 0
    finally:
        os.umask(umask)
    assert stat.S_IMODE((work / "new" / "deeper").stat().st_mode) == 0o750
    (work / "empty").mkdir(mode=0o700)
    assert _run(*_command(kind, "empty")).exit_code == 0
    assert stat.S_IMODE((work / "empty").stat().st_mode) == 0o700 and outdir.owner(work / "empty")
    after = _snapshot(work)
    assert {k: v for k, v in after.items() if not k.startswith(("new", "empty"))} == before


def test_out_dot_in_an_empty_folder_fills_it(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "s.yaml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path / "here")
    assert _run("run", "../s.yaml", "--out", ".", "-q").exit_code == 0
    assert outdir.owner(tmp_path / "here") == "run" and sorted(p.name for p in tmp_path.iterdir()) == ["here",
                                                                                                         "s.yaml"]


@pytest.mark.parametrize("kind", ["run", "sweep", "perftest"])
def test_force_replaces_earlier_results_inside_the_directory_itself(work, kind, monkeypatch):
    """The directory stays the same one: its mode, and a shell standing in it (``--out . --force``) keep it."""
    earlier = _earlier_run(work)
    earlier.chmod(0o700)
    inode = earlier.stat().st_ino
    monkeypatch.chdir(earlier)
    command = [str(work / arg) if arg in ("s.yaml", "sw.yaml") else arg for arg in _command(kind, ".", "--force")]
    assert _run(*command).exit_code == 0
    assert Path.cwd() == earlier and earlier.stat().st_ino == inode and stat.S_IMODE(earlier.stat().st_mode) == 0o700
    assert outdir.owner(earlier) == ("sweep" if kind == "sweep" else "run")
    assert not [p for p in work.iterdir() if "rdmasim-" in p.name]


def test_a_sweep_resumes_into_its_own_directory_and_another_needs_force(work):
    assert _run("sweep", "sw.yaml", "--out", "sw").exit_code == 0
    again = _run("sweep", "sw.yaml", "--out", "sw")
    assert again.exit_code == 0 and "0 runs simulated, 2 already stored" in again.stderr
    (work / "other.yaml").write_text(SWEEP.replace("name: tiny-sweep", "name: other"))
    before = _snapshot(work)
    other = _run("sweep", "other.yaml", "--out", "sw")
    assert other.exit_code == 2 and "earlier sweep 'tiny-sweep'" in other.stderr and _snapshot(work) == before
    replaced = _run("sweep", "other.yaml", "--out", "sw", "--force")
    assert replaced.exit_code == 0 and "2 runs simulated, 0 already stored" in replaced.stderr
    assert json.loads((work / "sw" / "sweep.json").read_text())["name"] == "other"


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_staging_left_by_a_killed_run_is_removed_by_the_next_run_and_nothing_else(work):
    killed = subprocess.run([sys.executable, "-c", (
        "import os, sys; from sim.store import outdir\n"
        "with outdir.staged('res', outdir.RUN) as (staging, _):\n"
        "    (staging / 'metrics.parquet').write_bytes(b'half')\n"
        "    print(staging); sys.stdout.flush(); os._exit(9)")], capture_output=True, text=True, cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    left = Path(killed.stdout.strip())
    assert killed.returncode == 9 and left.parent == work and (left / outdir.STAGING_MARKER).is_file()
    live = work / f".res.rdmasim-staging-{os.getpid()}-00ff"  # a run still going (this process)
    live.mkdir()
    (live / outdir.STAGING_MARKER).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                          "kind": "run"}))
    unmarked = work / f".res.rdmasim-staging-{_dead_pid()}-0abc"  # looks like one, carries no marker
    unmarked.mkdir()
    (unmarked / "metrics.parquet").write_text("not ours\n")
    before = _snapshot(work)
    assert _run("run", "s.yaml", "--out", "res", "-q").exit_code == 0
    after = _snapshot(work, skip=work / "res")
    assert not left.exists() and {k: v for k, v in before.items() if not k.startswith(left.name)} == after


def test_a_run_whose_variant_fails_writes_nothing_and_names_it(work):
    limited = SCENARIO.replace("- {name: a}", "- {name: a, host: {memlock_limit: 1MiB}}")
    (work / "v.yaml").write_text(limited + "variants:\n  - {name: fine, set: {nodes.a.host.memlock_limit: 1MiB}}\n"
                                 "  - {name: tight, set: {nodes.a.host.memlock_limit: 16KiB}}\n")
    before = _snapshot(work)
    result = _run("run", "v.yaml", "--out", "res", "-q")
    assert result.exit_code == 1 and _snapshot(work) == before
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "tiny (fine): vectorized core ran bw"  # the variant that ran says which engine ran it
    assert lines[1].startswith("v.yaml: variant 'tight' run failed: ") and "ENOMEM" in lines[1]
    assert lines[-1] == "v.yaml: wrote nothing (1 of 2 variant(s) failed)" and len(lines) == 3


def test_perftest_out_writes_a_results_directory_that_repro_reproduces(work):
    result = _run("perftest", "ib_write_bw", "-s", "4K", "-n", "20", "--out", "pt")
    assert result.exit_code == 0 and f"wrote {work / 'pt'}" in result.stderr and "wrote" not in result.stdout
    manifest = json.loads((work / "pt" / "manifest.json").read_text())
    assert manifest["scenario"]["description"] == "rdmasim perftest ib_write_bw -s 4K -n 20"
    assert len(pd.read_parquet(work / "pt" / "metrics.parquet")) == 20
    again = _run("repro", str(work / "pt" / "manifest.json"))
    assert again.exit_code == 0 and again.stdout.count("identical") == len(manifest["files_sha256"])


PLOT_REFUSED = [  # (--out, words)
    ("file.txt", "exists and is not a directory"),
    ("sub", "is a non-empty directory that rdmasim did not write (no figures.json)"),
    ("link", "is a symbolic link"),
    ("earlier", "holds the results of a run"),
    ("", "output path is empty"),
]


@pytest.mark.parametrize("out, words", PLOT_REFUSED)
def test_plot_refuses_an_out_it_may_not_write(work, out, words):
    _earlier_run(work)
    before = _snapshot(work)
    result = _run("plot", "earlier", "--recipe", "bw_vs_size", "--out", out)
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(work) == before


def test_plot_adds_figures_and_replaces_one_only_with_force(work):
    earlier = _earlier_run(work)
    first = _run("plot", "earlier", "--recipe", "latency_cdf", "--out", "figs")
    assert first.exit_code == 0 and (work / "figs" / "latency_cdf.png").is_file()
    assert outdir.owner(work / "figs") == "figures"
    assert _run("plot", "earlier", "--recipe", "bw_over_time", "--out", "figs").exit_code == 0
    before = _snapshot(work)
    again = _run("plot", "earlier", "--recipe", "bw_vs_size")  # the run drew it into its figures/ already
    assert again.exit_code == 2 and f"{earlier / 'figures' / 'bw_vs_size.csv'}: exists" in again.stderr
    assert _snapshot(work) == before
    assert _run("plot", "earlier", "--recipe", "bw_vs_size", "--force").exit_code == 0
    assert sorted(p.name for p in (earlier / "figures").iterdir()) == sorted(
        f"bw_vs_size.{e}" for e in ("png", "pdf", "csv"))
    assert not [p for p in work.rglob("*") if "rdmasim-" in p.name]


@pytest.mark.parametrize("damage, words", [
    (lambda d: (d / "summary.json").write_text('{"scenario": "x", "res'), "summary.json: not the summary.json"),
    (lambda d: (d / "summary.json").write_text('{"scenario": "x"}'), "summary.json: not the summary.json of "
                                                                      "`rdmasim run`: no key 'events'"),
    (lambda d: (d / "metrics.parquet").write_bytes(b"PAR1 junk junk PAR1"), "metrics.parquet: not the metrics"),
    (lambda d: (d / "summary.json").write_text(json.dumps({**json.loads((d / "summary.json").read_text()),
                                                           "results": [{}]})),
     "earlier: not results as rdmasim writes them: no key 'kind'"),
])
def test_plot_on_damaged_results_names_the_file(work, damage, words):
    damage(_earlier_run(work))
    before = _snapshot(work)
    result = _run("plot", "earlier", "--recipe", "bw_vs_size", "--out", "figs")
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(work) == before


def test_plot_heatmap_with_one_axis_twice_is_a_one_line_error(work):
    assert _run("sweep", "sw.yaml", "--out", "sw").exit_code == 0
    before = _snapshot(work)
    twice = _run("plot", "sw", "--recipe", "heatmap", "--by", "workload.bw.sizes.0", "--by", "workload.bw.sizes.0")
    assert twice.exit_code == 2 and "two different axes, got 'workload.bw.sizes.0' twice" in twice.stderr
    assert len(twice.stderr.strip().splitlines()) == 1 and _snapshot(work) == before


def test_plot_of_a_sweep_with_a_damaged_partition_draws_the_runs_that_can_be_read(work):
    assert _run("sweep", "sw.yaml", "--out", "sw").exit_code == 0
    assert _run("plot", "sw", "--recipe", "bw_vs_size", "--out", "all").exit_code == 0
    partition = next((work / "sw" / "runs").iterdir())
    partition.write_bytes(b"junk")
    assert _run("plot", "sw", "--recipe", "bw_vs_size", "--out", "some").exit_code == 0
    drawn = [len((work / d / "bw_vs_size.csv").read_text().splitlines()) for d in ("all", "some")]
    assert drawn[1] < drawn[0]


def test_a_directory_made_while_a_run_writes_is_not_written_over(work, monkeypatch):
    import sim.results.write

    real = sim.results.write._write

    def meanwhile(results, staging, scenario_bytes):
        real(results, staging, scenario_bytes)
        (work / "res").mkdir()
        (work / "res" / "theirs.txt").write_text("made during the run\n")

    monkeypatch.setattr(sim.results.write, "_write", meanwhile)
    result = _run("run", "s.yaml", "--out", "res", "-q")
    assert result.exit_code == 2 and "is a non-empty directory that rdmasim did not write" in result.stderr
    assert sorted(p.name for p in (work / "res").iterdir()) == ["theirs.txt"]
    assert not [p for p in work.iterdir() if "rdmasim-" in p.name]


def test_a_failed_write_is_one_line_and_leaves_no_staging(work, monkeypatch):
    import errno

    import sim.results.write

    def disk_full(results, staging, scenario_bytes):
        (staging / "metrics.parquet").write_bytes(b"part")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sim.results.write, "_write", disk_full)
    before = _snapshot(work)
    result = _run("run", "s.yaml", "--out", "res", "-q")
    assert result.exit_code == 2
    assert result.stderr == ("tiny (base): vectorized core ran bw\n"
                             f"{work / 'res'}: writing failed: [Errno 28] No space left on device\n")
    assert _snapshot(work) == before


def test_a_link_above_the_output_directory_is_an_ordinary_folder(work):
    before = _snapshot(work)
    assert _run("run", "s.yaml", "--out", "link/res", "-q").exit_code == 0
    assert outdir.owner(work / "target" / "res") == "run"
    assert _snapshot(work, skip=work / "target" / "res") == before


def test_calibrate_figures_into_a_file_or_foreign_folder_is_refused_before_calibrating(work, monkeypatch):
    import sim.inspect.calibrate

    def never(*args, **kwargs):
        raise AssertionError("calibrated although the output was refused")
    monkeypatch.setattr(sim.inspect.calibrate, "calibrate", never)
    before = _snapshot(work)
    for out, words in [("file.txt", "exists and is not a directory"),
                       ("sub", "is a non-empty directory that rdmasim did not write")]:
        result = _run("calibrate", "--figures", out)
        assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(work) == before

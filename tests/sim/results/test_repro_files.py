"""``rdmasim repro`` checks every file the manifest lists (the outputs, each figure, a trace), refuses symbolic
links and reports files added beside them; tampering of any of these kinds, drawn at random, fails it with a line
naming the file, and an untouched directory passes."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli.app import app
from tests.properties import examples
from tests.sim.results.test_repro import SCENARIO

runner = CliRunner()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro-files")
    (root / "s.yaml").write_text(SCENARIO)
    out = root / "res"
    done = runner.invoke(app, ["run", str(root / "s.yaml"), "--out", str(out), "-q", "--trace"])
    assert done.exit_code == 0, done.output
    return out


def listed(directory) -> list[str]:
    return sorted(json.loads((directory / "manifest.json").read_text())["files_sha256"])


def test_the_manifest_lists_every_file_rdmasim_wrote(results):
    written = sorted(p.relative_to(results).as_posix() for p in results.rglob("*")
                     if p.is_file() and p.name != "manifest.json")
    assert listed(results) == written and "trace.json" in written and "figures/bw_vs_size.png" in written


def swap(directory, a, b):
    data = (directory / a).read_bytes()
    (directory / a).write_bytes((directory / b).read_bytes())
    (directory / b).write_bytes(data)


TAMPERING = {  # what is done to the directory (given two listed files), and the line repro must print
    "delete": (lambda d, a, b: (d / a).unlink(), "{a}: MISSING on disk"),
    "swap": (lambda d, a, b: swap(d, a, b), "{a}: on disk DIFFERS from the manifest"),
    "append": (lambda d, a, b: (d / a).open("ab").write(b"\n"), "{a}: on disk DIFFERS from the manifest"),
    "link": (lambda d, a, b: (os.replace(d / a, d.parent / "moved"), os.symlink(d.parent / "moved", d / a)),
             "{a}: a SYMBOLIC LINK (refused"),
    "add": (lambda d, a, b: (d / f"{a}.extra").write_text("x"), "{a}.extra: ADDED, not a file the manifest lists"),
    "link beside": (lambda d, a, b: os.symlink(d / a, d / "alias"), "alias: a SYMBOLIC LINK (refused"),
}


@hsettings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(what=st.sampled_from(sorted(TAMPERING)), data=st.data())
def test_any_tampering_fails_repro_naming_the_file(results, tmp_path_factory, what, data):
    directory = tmp_path_factory.mktemp("copy") / "res"
    shutil.copytree(results, directory)
    names = listed(directory)
    a = data.draw(st.sampled_from(names))
    b = data.draw(st.sampled_from([n for n in names if n != a and n.rsplit(".", 1)[-1] == a.rsplit(".", 1)[-1]]
                                  or [n for n in names if n != a]))
    act, says = TAMPERING[what]
    act(directory, a, b)
    if what == "swap" and (directory / a).read_bytes() == (directory / b).read_bytes():
        return  # two files of equal bytes: swapping them changes nothing
    result = runner.invoke(app, ["repro", str(directory)])
    assert result.exit_code == 1, result.output
    assert says.format(a=a) in result.stdout


def test_an_untouched_copy_passes_and_checks_each_file(results, tmp_path):
    directory = tmp_path / "res"
    shutil.copytree(results, directory)
    result = runner.invoke(app, ["repro", str(directory)])
    assert result.exit_code == 0, result.output
    for name in listed(directory):
        assert f"{name}: on disk matches the manifest" in result.stdout
        if name != "trace.json":  # a re-run records no trace
            assert f"{name}: re-run identical to the manifest and the file on disk" in result.stdout


def test_a_manifest_may_not_name_a_file_outside_its_directory(results, tmp_path):
    directory = tmp_path / "res"
    shutil.copytree(results, directory)
    path = directory / "manifest.json"
    record = json.loads(path.read_text())
    record["files_sha256"]["../s.yaml"] = "0" * 64
    path.write_text(json.dumps(record, indent=1) + "\n")
    result = runner.invoke(app, ["repro", str(directory)])
    assert result.exit_code == 2 and "files_sha256" in result.stderr and "not a path inside" in result.stderr

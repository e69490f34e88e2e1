"""Publishing over earlier results: under the parent's lock, and finished by the next claim when cut short."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest

from sim.store import outdir

FILES = ("metrics.parquet", "summary.json", "trace.json", "figures/bw_vs_size.png", "figures/bw_vs_size.csv")
STEPS = ("rename", "replace", "unlink", "rmdir", "mkdir")
"""The os calls a publish changes the file system with."""


def _publish(out: Path, label: str, files=FILES, *, force: bool = True) -> None:
    """Publish a results directory of ``files`` whose every file, the manifest included, says ``label``."""
    with outdir.staged(out, outdir.RUN, force=force) as (staging, _):
        (staging / "figures").mkdir()
        for name in files:
            (staging / name).write_text(label)
        (staging / "manifest.json").write_text(json.dumps({"rdmasim_manifest": 1, "label": label}))


def _state(out: Path) -> tuple[str | None, dict[str, str]]:
    """The label of ``out``'s manifest (None without one) and every other file's content."""
    manifest = out / "manifest.json"
    label = json.loads(manifest.read_text())["label"] if manifest.exists() else None
    return label, {p.relative_to(out).as_posix(): p.read_text() for p in sorted(out.rglob("*"))
                   if p.is_file() and p != manifest}


def _complete(out: Path, label: str, files=FILES) -> bool:
    return _state(out) == (label, {name: label for name in files})


def _killed_at(step: int, work: Path, files) -> bool:
    """Fork a process that publishes 'new' over ``work/res`` and SIGKILLs itself at the publish's ``step``-th
    change of the file system; whether it was killed (else the publish ended first)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        count = [0]
        real = outdir._publish

        def counting(*args, **kwargs):
            for name in STEPS:
                original = getattr(os, name)

                def step_then(*a, _original=original, **k):
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return _original(*a, **k)
                setattr(os, name, step_then)
            return real(*args, **kwargs)
        outdir._publish = counting
        _publish(work / "res", "new", files)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def test_a_publish_killed_at_any_step_leaves_old_or_new_results_and_the_next_claim_finishes_it(tmp_path):
    new_files = FILES[:2]  # the old trace and figures must go too
    step = 0
    while True:
        step += 1
        work = tmp_path / str(step)
        work.mkdir()
        _publish(work / "res", "old", force=False)
        if not _killed_at(step, work, new_files):
            break
        label, _ = _state(work / "res")
        assert label is None or _complete(work / "res", label, FILES if label == "old" else new_files), step
        outdir.claim(work / "res", outdir.RUN, force=True)
        assert _complete(work / "res", "old") or _complete(work / "res", "new", new_files), step
        assert [p.name for p in work.iterdir()] == ["res"], step
    assert step > 8 and _complete(work / "res", "new", new_files)


def _waiting_for_a_lock(pid: int) -> bool:
    """Whether process ``pid`` waits for a file lock (Linux /proc/locks lists waiters with '->')."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines() if len(line.split()) > 5)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="finds the waiting publisher through /proc/locks")
def test_a_publisher_paused_between_its_renames_keeps_another_out_until_it_is_done(tmp_path):
    _publish(tmp_path / "res", "old", force=False)
    first = os.fork()
    if first == 0:  # pragma: no cover - pauses at its third rename until SIGCONT
        real, count = os.replace, [0]

        def replace(*args):
            count[0] += 1
            if count[0] == 3:
                os.kill(os.getpid(), signal.SIGSTOP)
            return real(*args)
        os.replace = replace
        _publish(tmp_path / "res", "first")
        os._exit(0)
    os.waitpid(first, os.WUNTRACED)  # stopped in the middle of its renames
    second = os.fork()
    if second == 0:  # pragma: no cover
        _publish(tmp_path / "res", "second", FILES[:3])
        os._exit(0)
    done = 0
    while not done and not _waiting_for_a_lock(second):  # without a lock it publishes now, among first's renames
        done, _ = os.waitpid(second, os.WNOHANG)
    os.kill(first, signal.SIGCONT)
    assert os.waitpid(first, 0)[1] == 0 and (done or os.waitpid(second, 0)[1] == 0)
    assert _complete(tmp_path / "res", "second", FILES[:3])
    assert [p.name for p in tmp_path.iterdir()] == ["res"]


@pytest.mark.parametrize("fail_at", range(1, 4))
def test_a_full_disk_while_staging_leaves_nothing_behind(tmp_path, monkeypatch, fail_at):
    real, count = Path.write_text, [0]

    def write_text(self, *args, **kwargs):
        count[0] += 1
        if count[0] == fail_at:
            with open(self, "w"):  # the file is created, then the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(outdir.OutputError, match="No space left on device"):
        _publish(tmp_path / "res", "new")
    assert list(tmp_path.iterdir()) == []


def test_a_staging_directory_whose_marker_was_never_written_is_removed_when_empty(tmp_path):
    import subprocess
    import sys

    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    empty = tmp_path / f".res.rdmasim-staging-{gone}-00aa"
    half = tmp_path / f".res.rdmasim-staging-{gone}-00bb"
    kept = tmp_path / f".res.rdmasim-staging-{gone}-00cc"
    for path in (empty, half, kept):
        path.mkdir()
    (half / outdir.STAGING_MARKER).write_text("")  # cut short by a full disk
    (half / f".{outdir.STAGING_MARKER}.tmp-{gone}").write_text('{"pid"')
    (kept / "notes.txt").write_text("not rdmasim's")
    outdir.claim(tmp_path / "res", outdir.RUN)
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name] and (kept / "notes.txt").exists()

"""Claim an output directory: the one rule for what rdmasim may write over.

An output path (``--out`` of run, sweep, plot and perftest) may be a directory that does not exist yet (it is
created), an empty directory (it is filled), or a directory rdmasim wrote before, recognised by its marker file:
``manifest.json`` with key ``rdmasim_manifest`` (a run), ``sweep.json`` with ``rdmasim_sweep`` (a sweep) or
``figures.json`` with ``rdmasim_figures`` (figures drawn by ``plot``; a results directory's ``figures/`` counts
as one too). Replacing earlier results needs ``force``, and even then only when every file in the directory is
one rdmasim writes there: a foreign file is named and the directory left alone. A sweep resumes into its own
directory without ``force``. Everything else is refused before any work: the empty path, ``/``, a symbolic
link (never followed), a file, a non-empty directory without a marker.

A single drawn file (``explain --diagram``, ``report``'s page) follows the same rule at the scale of one file: a
new path, or (with ``force``) a file that carries rdmasim's marker; it is written under a temporary name beside it
and renamed into place.

Results are written into a staging directory next to the target (``.NAME.rdmasim-staging-PID-TOKEN`` holding a
``.rdmasim-staging`` marker) and published, under a lock of the parent directory, by a rename or file by file
with the results' marker file last; what a killed process left in a parent (a staging directory, a publish cut
short) is removed or finished by the next claim there.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from sim.core.errors import SimError
from sim.store.leftovers import leftovers

RUN, SWEEP, FIGURES = "run", "sweep", "figures"
MARKERS = {RUN: ("manifest.json", "rdmasim_manifest"), SWEEP: ("sweep.json", "rdmasim_sweep"),
           FIGURES: ("figures.json", "rdmasim_figures")}
"""Per kind of output directory: its marker file and the key the marker's JSON object carries."""

STAGING_MARKER = ".rdmasim-staging"
"""File in a staging directory: JSON with the owning process's pid, host and the kind of output staged."""
_STAGING_NAME = re.compile(r"\..+\.rdmasim-(?:staging|old)-(?P<pid>\d+)-[0-9a-f]+")

_FIGURE = (r"(?:bw_vs_size|latency_vs_size|bw_over_time|latency_cdf|gpu_memory|rail_bw|mode_comparison|heatmap_[\w.]+"
           r"|pcie_bw_vs_mps|pcie_bw_vs_gen)")
_FIGURE_FILE = rf"{_FIGURE}\.(?:png|pdf|csv)"
_MARKER = rf"{re.escape(STAGING_MARKER)}|\.{re.escape(STAGING_MARKER)}\.tmp-\d+"
TEMPORARY_NAME = r"\.(?P<name>[^/]+)\.tmp-(?P<pid>\d+)"
"""The name of a file rdmasim is writing in place of ``name``: ``.<name>.tmp-<pid>`` (a sweep's atomic writes)."""


def temporary_name(name: str) -> str:
    """The :data:`TEMPORARY_NAME` of ``name`` written by this process."""
    return f".{name}.tmp-{os.getpid()}"


OWNED = {
    RUN: re.compile(rf"manifest\.json|metrics\.parquet|summary\.json|trace\.json|report\.html|figures"
                    rf"|figures/{_FIGURE_FILE}|{_MARKER}"),
    SWEEP: re.compile(rf"sweep\.json|summary\.parquet|summary\.csv|runs|runs/[^/]+\.parquet|(?:runs/)?{TEMPORARY_NAME}"
                      rf"|figures|figures/{_FIGURE_FILE}|figures/figures\.json|{_MARKER}"),
    FIGURES: re.compile(rf"figures\.json|{_FIGURE_FILE}|{_MARKER}"),
}
"""Per kind: the relative paths of the files and folders rdmasim writes in such a directory."""


class OutputError(SimError):
    """An output path rdmasim will not write to (exit code 2); the message names the path and why."""


@dataclass(frozen=True)
class Claim:
    """An output path checked for writing."""

    path: Path
    """Absolute path (its last component not followed)."""
    kind: str
    """What will be written: RUN, SWEEP or FIGURES."""
    found: str | None
    """What the directory holds now: None (missing or empty) or the kind of the earlier rdmasim output."""
    replace: bool = False
    """Whether the earlier output is replaced (``force``); else it is resumed or added to."""


def owner(directory: Path) -> str | None:
    """The kind of rdmasim output ``directory`` holds, from its marker file; None if it holds none."""
    for kind, (name, key) in MARKERS.items():
        marker = directory / name
        if marker.is_file() and not marker.is_symlink():
            try:
                record = json.loads(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and key in record:
                return kind
    if directory.name == "figures" and owner(directory.parent) in (RUN, SWEEP):
        return FIGURES
    return None


def foreign_files(directory: Path, kind: str) -> list[Path]:
    """Entries under ``directory`` that rdmasim does not write in an output of ``kind`` (links included:
    they are never followed), sorted."""
    foreign = []
    for root, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            path = Path(root) / name
            if path.is_symlink() or not OWNED[kind].fullmatch(path.relative_to(directory).as_posix()):
                foreign.append(path)
        dirs[:] = [d for d in dirs if Path(root, d) not in foreign]
    return sorted(foreign)


def remove_owned(directory: Path, kind: str, *, keep_directory: bool = False) -> None:
    """Delete the files rdmasim writes in an output of ``kind`` under ``directory``, then its folders left
    empty (``directory`` included unless ``keep_directory``); anything else, and the folders holding it, stay
    where they are."""
    owned = lambda path: OWNED[kind].fullmatch(path.relative_to(directory).as_posix())  # noqa: E731
    for root, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink() and owned(path):
                path.unlink()
        for path in [Path(root) / d for d in dirs if not Path(root, d).is_symlink()] + [Path(root)]:
            if (not keep_directory) if path == directory else owned(path):
                try:
                    path.rmdir()
                except OSError:  # not empty: it holds something rdmasim did not write
                    pass


def _refuse(path: Path, why: str) -> OutputError:
    return OutputError(f"{path}: {why}")


def claim(out: str | os.PathLike, kind: str, *, force: bool = False, sweep: str | None = None) -> Claim:
    """Check that an output of ``kind`` may be written at ``out``; remove staging directories that killed
    processes left next to it. ``sweep`` is the name of the sweep about to run (it resumes into its own
    directory). Creates and deletes nothing else.

    :raises OutputError: the path is refused; the message says why and what to do.
    """
    return _checked(out, kind, force, sweep, locked=False)


def _checked(out: str | os.PathLike, kind: str, force: bool, sweep: str | None, *, locked: bool) -> Claim:
    """:func:`claim`, with the lock of the parent directory already held (``locked``) or taken to settle it."""
    text = os.fspath(out)
    if text == "":
        raise OutputError("output path is empty: name a directory, e.g. --out results/mine")
    given = Path(text)
    try:
        return _claim(given, kind, force, sweep, locked)
    except OSError as exc:
        raise _refuse(given, f"cannot be checked: {exc.strerror or exc}") from None


def _claim(given: Path, kind: str, force: bool, sweep: str | None, locked: bool) -> Claim:
    if given.is_symlink():
        raise _refuse(given, f"is a symbolic link (to {os.readlink(given)}); rdmasim does not write through links: "
                             "name the directory itself")
    path = given.resolve() if given.name in ("", ".", "..") else given.parent.resolve() / given.name
    if path == Path(path.anchor):
        raise _refuse(path, "is the root directory; name a directory of its own")
    if path.exists() and not path.is_dir():
        raise _refuse(path, "exists and is not a directory; rdmasim writes a directory there and replaces no file")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise _refuse(path, f"cannot be created: {parent} is not a writable directory")
    if locked:
        _settle(path.parent)
    elif path.parent.is_dir():
        with _locked(path.parent):
            _settle(path.parent)
    if not path.exists() or not any(path.iterdir()):
        return Claim(path, kind, None)
    found = owner(path)
    if found is None:
        marker = MARKERS[kind][0]
        raise _refuse(path, f"is a non-empty directory that rdmasim did not write (no {marker}); name a new or "
                            "empty directory")
    if kind == FIGURES and found != FIGURES:
        raise _refuse(path, f"holds the results of a {found}; draw figures into its figures/ or another directory")
    if found == kind == SWEEP and _sweep_name(path) == sweep or found == kind == FIGURES:
        return Claim(path, kind, found)
    if not force:
        what = f"sweep '{_sweep_name(path)}'" if found == SWEEP else found
        raise _refuse(path, f"holds the results of an earlier {what} ({MARKERS[found][0]}); add --force to "
                            "replace them")
    foreign = foreign_files(path, found)
    if foreign:
        raise _refuse(path, f"--force replaces only what rdmasim wrote, and {foreign[0]} is not its: move it "
                            "elsewhere first")
    return Claim(path, kind, found, replace=True)


def _sweep_name(path: Path) -> str | None:
    return json.loads((path / MARKERS[SWEEP][0]).read_text(encoding="utf-8")).get("name")


@contextmanager
def staged(out: str | os.PathLike, kind: str, *, force: bool = False) -> Iterator[tuple[Path, Claim]]:
    """Claim ``out`` for an output of ``kind`` and yield a staging directory to fill (and the claim); when the
    block ends, publish it (:func:`_publish`) under the lock of the parent directory, claimed again there so
    that what another process published meanwhile is judged as well. On any error the staging directory is
    removed and nothing is published.

    :raises OutputError: ``out`` is refused (before the block runs or at its end), a figure of the same name
        exists and ``force`` is not given, or writing failed (the message says why).
    """
    target = claim(out, kind, force=force)
    try:
        path = _staging(target)
    except OSError as exc:
        raise _refuse(target.path, f"cannot stage the output next to it: {exc}") from None
    try:
        yield path, target
        with _locked(target.path.parent):
            _publish(path, _checked(out, kind, force, None, locked=True), force=force)
    except OSError as exc:
        _discard(path)
        raise _refuse(target.path, f"writing failed: {exc}") from None
    except BaseException:
        _discard(path)
        raise


@contextmanager
def _locked(parent: Path) -> Iterator[None]:
    """Hold the exclusive lock of the directory ``parent`` while publishing into it or settling what was left
    there. ``flock`` on the directory itself leaves no lock file behind, and the kernel releases it when its
    holder ends, even by SIGKILL."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _staging(target: Claim) -> Path:
    """A new staging directory next to ``target``'s path, with ordinary permissions (0o777 less the umask) and
    its marker; figures drawn elsewhere than a results directory's ``figures/`` get their marker file. Nothing
    stays behind when this fails (a full disk)."""
    path = target.path.parent / f".{target.path.name}.rdmasim-staging-{os.getpid()}-{secrets.token_hex(4)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    try:
        _mark(path, {"kind": target.kind})
        if target.kind == FIGURES and target.found is None and not (target.path.name == "figures"
                                                                    and owner(target.path.parent) in (RUN, SWEEP)):
            name, key = MARKERS[FIGURES]
            (path / name).write_text(json.dumps({key: 1}) + "\n")
    except BaseException:
        _discard(path)
        raise
    return path


def _mark(directory: Path, record: dict) -> None:
    """Write (or rewrite) a staging directory's marker atomically: it is whole or absent, never half-written."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), **record}
    write_atomically(directory / STAGING_MARKER, lambda tmp: tmp.write_text(json.dumps(record) + "\n"))


def _discard(staged: Path) -> None:
    """Remove a staging directory (everything in it was written by this process)."""
    shutil.rmtree(staged, ignore_errors=True)


def _publish(staged: Path, target: Claim, *, force: bool = False) -> None:
    """Move a complete staging directory's files to ``target`` (the parent's lock held): a rename onto a new
    path; else, after its marker says so (the target's name and what is replaced), file by file: the earlier
    results' marker file first, then the rest of what rdmasim wrote there (``force``), then the new files, their
    marker file last. A directory thus holds its marker only while complete, and a publish cut short (SIGKILL) is
    finished by the next claim in the same parent (:func:`_settle`). Into a figures directory, a figure drawn
    before is replaced only with ``force``. The directory itself stays, with its mode, and a shell whose working
    directory it is still stands in it."""
    path = target.path
    if target.found == FIGURES:
        for entry in sorted(staged.iterdir()):
            there = path / entry.name
            if entry.name in (STAGING_MARKER, MARKERS[FIGURES][0]) or not (there.exists() or there.is_symlink()):
                continue
            if there.is_symlink() or not there.is_file():
                raise _refuse(there, "is in the way of a figure and is not a file rdmasim wrote; move it elsewhere")
            if not force:
                raise _refuse(there, "exists (drawn before); add --force to replace it")
    if not path.exists():
        os.rename(staged, path)
        (path / STAGING_MARKER).unlink()
        return
    _mark(staged, {"kind": target.kind, "target": path.name, "replace": target.found if target.replace else None})
    _finish(staged, json.loads((staged / STAGING_MARKER).read_text()))


def _finish(staged: Path, record: dict) -> None:
    """Carry out (or carry on) the publish that ``record``, the marker of ``staged``, describes; idempotent, so
    that a publish cut short at any step is finished by running it again."""
    path, kind = staged.parent / record["target"], record["kind"]
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        _discard(staged)  # what stands there now is not the directory it was publishing into
        return
    path.mkdir(exist_ok=True)
    if record["replace"]:
        (path / MARKERS[record["replace"]][0]).unlink(missing_ok=True)
        remove_owned(path, record["replace"], keep_directory=True)
        _mark(staged, {**record, "replace": None})
    marker, staging = MARKERS[kind][0], _staging_markers(staged)
    entries = [e for e in staged.iterdir() if e not in staging]
    for entry in sorted(entries, key=lambda e: (e.name == marker, e.name)):
        os.replace(entry, path / entry.name)
    _fsync(path)
    for entry in staging:
        entry.unlink(missing_ok=True)
    staged.rmdir()


def _staging_markers(staged: Path) -> list[Path]:
    """A staging directory's marker and the temporaries of its rewrites (one cut short leaves its own)."""
    return [staged / STAGING_MARKER, *staged.glob(f".{STAGING_MARKER}.tmp-*")]


def _settle(parent: Path) -> None:
    """What processes gone from this host left in ``parent`` (the lock held): their publishes cut short are
    finished, their staging directories removed (and a marker-less one, whose marker could not be written,
    if it holds nothing else)."""
    for entry, match in leftovers(parent, _STAGING_NAME):
        marker = entry / STAGING_MARKER
        try:
            record = json.loads(marker.read_text())
            ours = record["host"] == socket.gethostname() and record["pid"] == int(match["pid"])
            kind = record["kind"] if record["kind"] in OWNED else None
        except (FileNotFoundError, ValueError):  # it could not be written (a full disk): the directory holds no more
            for left in _staging_markers(entry):
                left.unlink(missing_ok=True)
            with suppress(OSError):
                entry.rmdir()
            continue
        except (OSError, KeyError, TypeError):
            continue
        if ours and kind and "target" in record:
            _finish(entry, record)
        elif ours and kind:
            remove_owned(entry, kind)


MARKER_SPAN = 64 * 1024
"""How far into an existing file its marker is looked for (bytes): metadata comes before the drawing."""


def claim_file(out: str | os.PathLike, marker: bytes, *, force: bool = False) -> Path:
    """Check that a file rdmasim draws may be written at ``out``: a new path, or, with ``force``, a file whose
    first :data:`MARKER_SPAN` bytes hold ``marker`` (rdmasim drew it). Creates nothing.

    :raises OutputError: the empty path, a symbolic link, a directory or other non-file, a file rdmasim did not
        write, a drawing of rdmasim's without ``force``, or a folder for it that is not a writable directory.
    """
    text = os.fspath(out)
    if text == "":
        raise OutputError("output path is empty: name a file, e.g. --diagram timeline.svg")
    given = Path(text)
    try:
        return _claim_file(given, marker, force)
    except OSError as exc:
        raise _refuse(given, f"cannot be checked: {exc.strerror or exc}") from None


def _claim_file(given: Path, marker: bytes, force: bool) -> Path:
    if given.is_symlink():
        raise _refuse(given, f"is a symbolic link (to {os.readlink(given)}); rdmasim does not write through links")
    path = given.parent.resolve() / given.name
    if path.exists():
        if not path.is_file():
            raise _refuse(path, "exists and is not a file; name a new file")
        with open(path, "rb") as handle:
            ours = marker in handle.read(MARKER_SPAN)
        if not ours:
            raise _refuse(path, "exists and rdmasim did not write it; name a new file")
        if not force:
            raise _refuse(path, "exists (rdmasim wrote it before); add --force to replace it")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK | os.X_OK):
        raise _refuse(path, f"cannot be created: {path.parent} is not a writable directory")
    return path


def write_file(out: str | os.PathLike, marker: bytes, write: Callable[[Path], None], *, force: bool = False) -> Path:
    """Claim ``out`` (:func:`claim_file`) and write it with :func:`write_atomically`, claiming it again just
    before the rename.

    :raises OutputError: as :func:`claim_file`, or writing failed.
    """
    path = claim_file(out, marker, force=force)
    try:
        write_atomically(path, write, lambda: claim_file(out, marker, force=force))
    except OSError as exc:
        raise _refuse(path, f"writing failed: {exc}") from None
    return path


def write_atomically(path: Path, write: Callable[[Path], None], target: Callable[[], Path] | None = None) -> None:
    """Call ``write(temporary path)`` beside ``path`` (its :func:`temporary_name`), flush it to disk, rename it
    onto ``path`` (or onto what ``target()`` returns then, a last check) and flush the directory, so that after a
    crash the file holds the old content or the new, never a part; the temporary file never stays behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(temporary_name(path.name))
    try:
        write(temporary)
        _fsync(temporary)
        final = path if target is None else target()
        os.replace(temporary, final)
        _fsync(final.parent)
    finally:
        temporary.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    """Flush a file's or a directory's content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The trees a side-by-side benchmark measures: this checkout and, for each commit it names, a detached git
worktree of that commit, removed when the benchmark is done."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checked_out(revs: list[str], scratch: str | Path) -> Iterator[dict[str, Path]]:
    """``{"this checkout": ROOT, rev: worktree, ...}``, each worktree under ``scratch``."""
    trees = {"this checkout": ROOT}
    try:
        for rev in revs:
            tree = Path(scratch) / rev.replace("/", "_")
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                           check=True, capture_output=True)
            trees[rev] = tree
        yield trees
    finally:
        for rev in revs:
            if rev in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[rev])],
                               check=False, capture_output=True)

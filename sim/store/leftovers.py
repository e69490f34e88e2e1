"""Processes of this host: whether one still runs, so that what a killed rdmasim left behind is recognised."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


def leftovers(folder: Path, name: re.Pattern[str]) -> Iterator[tuple[Path, re.Match[str]]]:
    """The entries of ``folder`` whose name ``name`` matches in full, with its ``pid`` group naming a process
    no longer running on this host: what a killed process left behind. Symbolic links are never among them; a
    missing folder has none."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = name.fullmatch(entry.name)
        if match and not entry.is_symlink() and not pid_alive(int(match["pid"])):
            yield entry, match

"""A command measured in a process of its own: its wall time, its peak RSS (``os.wait4``) and what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from sim.cli.app import main; sys.argv[0] = 'rdmasim'; main()"
"""``python -c CLI ARGS`` runs ``rdmasim ARGS`` from this checkout."""


def timed(argv: list[str], cwd: Path = ROOT) -> tuple[float, int, str]:
    """Wall time (s), peak RSS (bytes) and standard output of ``python ARGV`` run in the repository (or ``cwd``)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"python {' '.join(argv[:4])} ... failed ({status})")
    return time.perf_counter() - started, usage.ru_maxrss * 1024, out


def rdmasim(*args: str) -> tuple[float, int, str]:
    """:func:`timed` of ``rdmasim ARGS``."""
    return timed(["-c", CLI, *args])

"""Worker processes that end with the process that started them, however it ends (even SIGKILL)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

from sim.store.leftovers import pid_alive

PR_SET_PDEATHSIG = 1
"""prctl(2) option (linux/prctl.h): the signal the kernel sends this process when its parent exits."""
WATCH_INTERVAL_S = 0.5
"""How often the portable watcher checks that the parent is still there (seconds)."""


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: end this process when its parent ends.

    On Linux the kernel sends SIGTERM when the parent exits (``prctl(PR_SET_PDEATHSIG)``). Everywhere, a daemon
    thread also checks every :data:`WATCH_INTERVAL_S` that the parent has not changed (an orphan is adopted by
    another process) and ends this one if it has; ``parent_pid`` (the process that created the pool) already
    gone when the worker starts ends it at once.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = os.getppid()
    if not pid_alive(parent_pid):
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="rdmasim-parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    """End this process as soon as ``parent`` is no longer its parent."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(1)  # from a thread: ends the process at once, without running the worker's cleanup

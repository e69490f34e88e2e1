"""A process's file descriptor table holding dma-buf files and plain files.

fds 0, 1 and 2 start open on plain files (stdin, stdout, stderr); new fds take the lowest free number,
like Linux. Closing an fd runs its file's release (``f_op->release``): for a dma-buf, dropping the reference the
fd held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.core import VerbsError

from models.dmabuf.core import DmaBuf


@dataclass(frozen=True, slots=True)
class PlainFile:
    """Any open file that is not a dma-buf (a regular file, a socket...)."""

    name: str


class FdTable:
    """The fd table of one process.

    :param owner: the process, also the default context of calls made through its fds.
    :param max_fds: ``RLIMIT_NOFILE``: fds ``0 .. max_fds-1`` may be open.
    """

    def __init__(self, owner: str = "process", *, max_fds: int = 1024) -> None:
        self.owner = owner
        self.max_fds = max_fds
        self.files: dict[int, DmaBuf | PlainFile] = {0: PlainFile("stdin"), 1: PlainFile("stdout"),
                                                     2: PlainFile("stderr")}
        self.releases: dict[int, Callable[[str], None]] = {}
        """What closing an fd runs, called with the owner (the file's ``f_op->release``); absent: nothing."""

    def install(self, file: DmaBuf | PlainFile, release: Callable[[str], None] | None = None) -> int:
        """Put ``file`` at the lowest free fd and return it (``get_unused_fd_flags`` + ``fd_install``);
        closing the fd calls ``release(owner)``.

        :raises VerbsError: ``EMFILE`` when all ``max_fds`` fds are open.
        """
        fd = next((n for n in range(self.max_fds) if n not in self.files), None)
        if fd is None:
            raise VerbsError("EMFILE", f"{self.owner} has all {self.max_fds} fds open (RLIMIT_NOFILE)",
                             call="get_unused_fd_flags")
        self.files[fd] = file
        if release is not None:
            self.releases[fd] = release
        return fd

    def open(self, name: str) -> int:
        """Open a plain file called ``name``; return its fd."""
        return self.install(PlainFile(name))

    def fget(self, fd: int, call: str = "fget") -> DmaBuf | PlainFile:
        """The file behind ``fd``.

        :raises VerbsError: ``EBADF`` when ``fd`` is not open.
        """
        if fd not in self.files:
            raise VerbsError("EBADF", f"fd {fd} is not open in {self.owner}", call=call)
        return self.files[fd]

    def close(self, fd: int) -> None:
        """Close ``fd``, running its release in the owner's context (for a dma-buf fd:
        :func:`~models.dmabuf.ops.dma_buf_put`).

        :raises VerbsError: ``EBADF`` when ``fd`` is not open.
        :raises ProtocolError, DeadlockError: as the release (the fd then stays open).
        """
        self.fget(fd, "close")
        release = self.releases.get(fd)
        if release is not None:
            release(self.owner)
        del self.files[fd]
        self.releases.pop(fd, None)

    def close_all(self) -> None:
        """Process exit: close every descriptor above the standard three, lowest first."""
        for fd in sorted(self.files):
            if fd > 2:
                self.close(fd)

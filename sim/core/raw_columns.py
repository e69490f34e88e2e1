"""Named columns of numbers appended piece by piece and read back by range, with bounded memory: held in memory up
to a number of values, then in one raw file per column (numpy's ``tofile``) under a directory made when first
needed. The bandwidth spool of a summary (:class:`sim.core.metrics.OpSpool`) and the records a workload's QPs hold
until their size ends (:class:`sim.engine.planner.rows.HeldRecords`) keep their operations in them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class RawColumns:
    """Columns (``kinds``: each one's name and numpy type) that take values at their ends and give back ranges;
    held in memory until a column would hold more than ``hold`` values, then in raw files under ``directory`` (a
    path, or a function of these columns that makes one then: a scratch directory to remove with them)."""

    def __init__(self, kinds: dict[str, type], directory: str | Callable[[RawColumns], str], hold: int = 0) -> None:
        self.kinds, self._directory, self._hold = kinds, directory, hold
        self.lengths = dict.fromkeys(kinds, 0)
        """Values per column so far."""
        self._held: dict[str, list[np.ndarray]] | None = {name: [] for name in kinds}
        """The values while in memory (None once in files)."""
        self._files: dict = {}
        """The files, by column, once made."""

    def append(self, name: str, values) -> None:
        """Add ``values`` at the end of column ``name``."""
        values = np.asarray(values, dtype=self.kinds[name])
        if self._held is not None and self.lengths[name] + len(values) > self._hold:
            self._to_files()
        if self._held is not None:
            self._held[name].append(values)
        else:
            self._files[name].seek(0, 2)
            values.tofile(self._files[name])
        self.lengths[name] += len(values)

    def read(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Values ``lo..hi-1`` of column ``name``."""
        if self._held is not None:
            if len(self._held[name]) > 1:
                self._held[name] = [np.concatenate(self._held[name])]
            held = self._held[name]
            return held[0][lo:hi] if held else np.empty(0, self.kinds[name])
        file, kind = self._files[name], np.dtype(self.kinds[name])
        file.seek(lo * kind.itemsize)
        return np.fromfile(file, dtype=kind, count=hi - lo)

    def close(self) -> None:
        """Close the files (their directory is the caller's to remove, or goes with the function that made it)."""
        for file in self._files.values():
            file.close()

    def _to_files(self) -> None:
        """Move the values held in memory to the files (made now)."""
        directory = self._directory if isinstance(self._directory, str) else self._directory(self)
        for name in self.kinds:
            self._files[name] = open(f"{directory}/{name}.raw", "w+b")
            for values in self._held[name]:
                values.tofile(self._files[name])
        self._held = None

"""A run's per-operation table with bounded memory: rows are held in memory up to one Parquet row group and
spooled beyond that to a Parquet file, a row group at a time, while the run produces them (a thread of the table's
own writes each row group while the run goes on; the next waits for it).

A table that never reached a row group stays a pandas frame, so small runs write exactly the bytes a
one-shot ``DataFrame.to_parquet`` writes. A spooled table lives in a directory under the system's temporary
directory (``TMPDIR``), removed when the table is garbage collected (the spool of a killed run, by the next run
that spools); readers take it a batch at a time
(:meth:`OperationTable.batches`, which keeps what it read for readers that come back, within
:meth:`OperationTable.reading`) or as a whole frame when they ask for one. pandas and pyarrow are imported when
a frame or a file is first made, not with the module (a run that keeps no table needs neither).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from sim.store.leftovers import leftovers

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

ROW_GROUP_ROWS = 1 << 20
"""Rows per spooled row group (pyarrow's default row-group size, about 60 MiB of operation rows)."""
READ_CACHE_BYTES = 512 << 20
"""Columns a spooled table keeps once read while :meth:`OperationTable.reading` is on (bytes, all tables together):
writing a run's results reads the same row groups several times."""
TIME_BYTES = 8
"""Bytes of one row of a column of times (int64 ps)."""
LABELS = ("variant", "workload", "kind")
"""Text columns stored as categories in memory (joining tables of differing labels turns them into text, which
:func:`_joined` makes categories again); every categorical column is dictionary-encoded in Parquet."""


SPOOL_NAME = re.compile(r"rdmasim-spool-[a-z]+-(?P<pid>\d+)-[^/]+")
"""Spool directories under ``TMPDIR``: ``rdmasim-spool-<what>-<pid>-<random>``."""


def scratch_dir(what: str) -> str:
    """A new private directory under ``TMPDIR`` for spooled data of ``what`` (a lowercase word), named after
    this process. Spool directories of this user's rdmasim processes that are gone (killed before they could
    remove them) are removed first, once per process and ``TMPDIR`` (a run makes one per bandwidth case)."""
    root = tempfile.gettempdir()
    if root not in _SWEPT:
        remove_stale_spools(Path(root))
        _SWEPT.add(root)
    return tempfile.mkdtemp(prefix=f"rdmasim-spool-{what}-{os.getpid()}-")


_SWEPT: set[str] = set()
"""The temporary directories this process has removed stale spools from."""


def remove_stale_spools(root: Path) -> None:
    """Remove the spool directories in ``root`` that belong to this user and to a process no longer running."""
    for entry, _ in leftovers(root, SPOOL_NAME):
        try:
            ours = entry.is_dir() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if ours:
            shutil.rmtree(entry, ignore_errors=True)


def owned_scratch_dir(owner, what: str) -> str:
    """A new :func:`scratch_dir` for ``what``, removed once ``owner`` is garbage collected (or at exit)."""
    directory = scratch_dir(what)
    weakref.finalize(owner, shutil.rmtree, directory, ignore_errors=True)
    return directory


@dataclass(frozen=True)
class RowBlock:
    """Rows appended to an :class:`OperationTable` as columns, made part of a frame only with the rows around them
    (building a pandas frame per solved piece costs more than the piece's rows). Each column, in the frame's order,
    is a constant text (a category in the frame), a constant number or an array of one value per row;
    ``categories`` gives the categories of the columns whose arrays hold category codes."""

    rows: int
    columns: dict[str, str | int | np.ndarray]
    categories: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.rows

    def split(self, k: int) -> tuple[RowBlock, RowBlock]:
        """The first ``k`` rows and the rest."""
        def part(at: slice, rows: int) -> RowBlock:
            return RowBlock(rows, {name: v[at] if isinstance(v, np.ndarray) else v for name, v in self.columns.items()},
                            self.categories)
        return part(slice(None, k), k), part(slice(k, None), self.rows - k)


def _cut(parts: list[pd.DataFrame | RowBlock], rows: int) -> tuple[list, list]:
    """``parts`` (holding at least ``rows`` rows) as the parts of their first ``rows`` rows and those of the rest,
    the part across the cut split in two."""
    ends = np.cumsum([len(part) for part in parts])
    k = int(np.searchsorted(ends, rows))  # the part holding row ``rows - 1``
    within = rows - (int(ends[k - 1]) if k else 0)
    part = parts[k]
    if isinstance(part, RowBlock):
        head, tail = part.split(within)
    else:
        head, tail = part.iloc[:within], part.iloc[within:].reset_index(drop=True)
    return parts[:k] + [head], ([tail] if len(tail) else []) + parts[k + 1:]


def _blocks_frame(blocks: list[RowBlock]) -> pd.DataFrame:
    """One frame of ``blocks``' rows in order: what pandas gives for the concatenation of a frame of each, its text
    columns made categories again."""
    import pandas as pd

    counts = [b.rows for b in blocks]
    columns = {}
    for name, first in blocks[0].columns.items():
        values = [b.columns[name] for b in blocks]
        if isinstance(first, str):  # one text throughout: its own category, else those of the rows, sorted
            categories = [first] if len(set(values)) == 1 else sorted({v for v, n in zip(values, counts) if n})
            code = {text: k for k, text in enumerate(categories)}  # (a text of no rows repeats no code)
            codes = np.repeat(np.array([code.get(v, 0) for v in values], np.int64), counts)
            columns[name] = pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=str))
        elif name in blocks[0].categories:
            codes = np.concatenate(values)
            columns[name] = pd.Categorical.from_codes(codes, categories=blocks[0].categories[name])
        elif isinstance(first, np.ndarray):
            columns[name] = np.concatenate(values)
        else:
            columns[name] = np.repeat(np.array(values, np.int64), counts)
    return pd.DataFrame(columns)


class OperationTable:
    """The per-operation rows of one run, appended in row order (frames, or :class:`RowBlock` s)."""

    def __init__(self) -> None:
        self.rows = 0
        self._held: list[pd.DataFrame | RowBlock] = []
        self._held_rows = 0
        self._whole: pd.DataFrame | None = None
        self._writer: pq.ParquetWriter | None = None
        self._writing: ThreadPoolExecutor | None = None
        """The thread that writes row groups to the spool while the run goes on (Arrow's encoding and compression
        let the interpreter run meanwhile); one row group at a time, in order."""
        self._written: Future | None = None
        """The row group being written (its exception, if it failed, is raised at the next spill or close)."""
        self.path: Path | None = None
        """The spool file (None while every row is in memory)."""
        self._read: dict[tuple[int, str], pd.Series] | None = None
        """The columns kept by row group and name while :meth:`reading` is on (None while it is off)."""
        self._read_room = 0
        """Bytes not yet promised to the columns :attr:`_read` keeps."""
        self._keeping: dict[str, bool] = {}
        """Per column read while :meth:`reading` is on: whether it is kept (it fit whole when first read)."""

    @classmethod
    def of(cls, frame: pd.DataFrame) -> OperationTable:
        """A closed table of ``frame``'s rows."""
        table = cls()
        table.append(frame)
        return table.close()

    @property
    def spooled(self) -> bool:
        """Rows went to the spool file."""
        return self.path is not None

    def append(self, frame: pd.DataFrame | RowBlock) -> None:
        """Add rows after the ones appended so far; a full row group goes to the spool file."""
        self._held.append(frame)
        self._held_rows += len(frame)
        self.rows += len(frame)
        while self._held_rows >= ROW_GROUP_ROWS:
            self._spill(ROW_GROUP_ROWS)

    def _spill(self, rows: int) -> None:
        import pyarrow.parquet as pq

        group, self._held = _cut(self._held, rows)
        self._held_rows -= rows
        table = arrow_table(_joined(group))
        if self._writer is None:
            self.path = Path(owned_scratch_dir(self, "operations")) / "operations.parquet"
            self._writer = pq.ParquetWriter(self.path, table.schema)
            self._writing = ThreadPoolExecutor(1, thread_name_prefix="rdmasim-spool")
        self._wait_written()
        self._written = self._writing.submit(self._writer.write_table, table, row_group_size=rows)

    def _wait_written(self) -> None:
        """Wait for the row group being written, raising what its write raised."""
        if self._written is not None:
            written, self._written = self._written, None
            written.result()

    def close(self) -> OperationTable:
        """No more rows: the rest goes to the spool (a spooled table) or becomes one frame."""
        if self._writer is not None:
            try:
                if self._held_rows:
                    self._spill(self._held_rows)
                self._wait_written()
            finally:
                self._writing.shutdown()
                self._writer.close()
                self._writer = self._writing = None
        elif self._whole is None:
            self._whole = _joined(self._held)
            self._held = []
        return self

    def frame(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The whole table (read from the spool file when spooled), or only ``columns``."""
        import pandas as pd

        if self.spooled:
            return pd.read_parquet(self.path, columns=columns)
        return self._whole if columns is None else self._whole[columns]

    def batches(self, columns: list[str] | None = None, backwards: bool = False) -> Iterator[pd.DataFrame]:
        """The table a row group at a time (one frame when in memory), the last first when ``backwards``."""
        import pyarrow.parquet as pq

        if not self.spooled:
            yield self.frame(columns)
            return
        file = pq.ParquetFile(self.path)
        groups = range(file.num_row_groups)
        for group in reversed(groups) if backwards else groups:  # iter_batches holds what it read until it ends
            yield self._row_group(file, group, columns)

    @contextmanager
    def reading(self, room: int = READ_CACHE_BYTES) -> Iterator[OperationTable]:
        """While inside, a spooled table keeps the columns it reads whose every row group fits in ``room`` bytes
        (of all it keeps), and reads only the columns it does not hold: for callers that read the table several
        times. A column too large to keep whole is read each time, as outside; so is every column of a table too
        long for one column of times (8 bytes a row) to fit, where keeping its small columns alone would take
        memory and spare little."""
        self._read = {} if self.rows * TIME_BYTES <= room else None
        self._read_room, self._keeping = room, {}
        try:
            yield self
        finally:
            self._read = None

    def _row_group(self, file: pq.ParquetFile, group: int, columns: list[str] | None) -> pd.DataFrame:
        """Row group ``group`` of the spool with ``columns`` (all by default), from what :meth:`reading` keeps
        where it can."""
        if self._read is None:
            return file.read_row_group(group, columns=columns).to_pandas()
        import pandas as pd

        names = file.schema_arrow.names if columns is None else columns
        missing = [name for name in names if (group, name) not in self._read]
        read = file.read_row_group(group, columns=missing).to_pandas() if missing else None
        for name in missing:
            if name not in self._keeping:  # the first row group read decides for the whole column
                whole = read[name].memory_usage(index=False) * self.rows // max(len(read), 1)
                self._keeping[name] = whole <= self._read_room
                self._read_room -= whole if self._keeping[name] else 0
            if self._keeping[name]:
                self._read[group, name] = read[name]
        return pd.DataFrame({name: self._read[group, name] if read is None or name not in read else read[name]
                             for name in names}, copy=False)

    def arrow_batches(self) -> Iterator[pa.Table]:
        """The table as Arrow tables of at most :data:`ROW_GROUP_ROWS` rows, in the spool's schema."""
        import pyarrow.parquet as pq

        if self.spooled:
            file = pq.ParquetFile(self.path)
            for group in range(file.num_row_groups):
                yield file.read_row_group(group)
            return
        for lo in range(0, max(len(self._whole), 1), ROW_GROUP_ROWS):
            yield arrow_table(self._whole.iloc[lo:lo + ROW_GROUP_ROWS])


def _joined(parts: list[pd.DataFrame | RowBlock]) -> pd.DataFrame:
    """One frame of ``parts`` (frames, or runs of :class:`RowBlock` s) with the label columns as categories."""
    import pandas as pd

    if all(isinstance(part, RowBlock) for part in parts):
        return _blocks_frame(parts)
    operations = pd.concat([_blocks_frame([p]) if isinstance(p, RowBlock) else p for p in parts], ignore_index=True)
    for column in LABELS:  # concat of differing categories falls back to strings
        operations[column] = operations[column].astype("category")
    return operations


def arrow_table(frame: pd.DataFrame) -> pa.Table:
    """``frame`` as an Arrow table with dictionary-encoded label and categorical columns (int32 indices) and no
    pandas metadata, so every row group of a streamed file has one schema."""
    import pandas as pd
    import pyarrow as pa

    columns = {}
    for name in frame.columns:
        values = frame[name]
        if name in LABELS or isinstance(values.dtype, pd.CategoricalDtype):
            labels = values.astype("category")
            columns[name] = pa.DictionaryArray.from_arrays(
                pa.array(labels.cat.codes.to_numpy().astype(np.int32)),
                pa.array([str(c) for c in labels.cat.categories], pa.string()))
        else:
            columns[name] = pa.array(values.to_numpy())
    return pa.table(columns)


def write_operations(tables: list[OperationTable], path: Path) -> None:
    """Write the rows of ``tables`` in order to ``path``: as one frame (the bytes a one-shot write gives)
    when none is spooled, else row group by row group; a single spooled table is linked (or copied)."""
    import pandas as pd
    import pyarrow.parquet as pq

    if not any(t.spooled for t in tables):
        pd.concat([t.frame() for t in tables], ignore_index=True).to_parquet(path, index=False)
        return
    if len(tables) == 1:
        try:
            os.link(tables[0].path, path)
        except OSError:
            shutil.copyfile(tables[0].path, path)
        return
    writer = None
    try:
        for table in tables:
            for batch in table.arrow_batches():
                if writer is None:
                    writer = pq.ParquetWriter(path, batch.schema)
                writer.write_table(batch, row_group_size=ROW_GROUP_ROWS)
    finally:
        if writer is not None:
            writer.close()

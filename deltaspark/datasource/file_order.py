"""A stream's initial snapshot in delta-spark's order, without holding millions of files in memory.

A stream's offsets number the files of its initial snapshot by their position in delta-spark's
order (modification time, then path), so the whole list must be sorted before the first batch,
and a batch reads a slice of it. Up to `RUN_FILES` files this is a list. Past that, the files are
sorted in runs of `RUN_FILES`, each run written to a local temporary file, and the runs merged
into one Arrow IPC file of `BLOCK_FILES`-row record batches that a batch's slice is read from:
the planning process holds a run while sorting and a block per run while merging, whatever the
table's size. The temporary files have no name in the file system (POSIX): their space is freed
when the list is dropped or the process ends, however it ends.
"""

from __future__ import annotations

import heapq
import pickle
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from typing import IO, Any, overload

RUN_FILES = 50_000  # files sorted in memory at a time
BLOCK_FILES = 4_096  # files per record batch of the spilled list

_SCHEMA_FIELDS = (("modificationTime", "int64"), ("path", "string"), ("entry", "binary"))


def stream_key(entry: dict[str, Any]) -> tuple[int, str]:
    """delta-spark's streaming order of a snapshot's files."""
    return (entry["modificationTime"] or 0, entry["path"])


class FileOrder:
    """Collects file entries (`table_state.file_entry`), then gives them sorted by `stream_key`."""

    def __init__(self, run_files: int = RUN_FILES) -> None:
        self._run_files = run_files
        self._buffer: list[dict[str, Any]] = []
        self._runs: list[IO[bytes]] = []

    def add(self, entry: dict[str, Any]) -> None:
        if len(self._buffer) == self._run_files:
            self._runs.append(_write_run(sorted(self._buffer, key=stream_key)))
            self._buffer = []
        self._buffer.append(entry)

    def sorted(self) -> Sequence[dict[str, Any]]:
        """The files in order: a list when they fit in one run (`run_files` or fewer), else a
        `SpilledFiles`."""
        self._buffer.sort(key=stream_key)
        if not self._runs:
            return self._buffer
        runs = [*self._runs, _write_run(self._buffer)]
        self._buffer, self._runs = [], []
        try:
            return SpilledFiles(_merge(runs))
        finally:
            for run in runs:
                run.close()


def _temp_file() -> IO[bytes]:
    """A temporary file with no name left in the file system (POSIX): nothing stays behind when
    the planning process is killed; closing it frees the space."""
    return tempfile.TemporaryFile(prefix="deltaspark-stream-", suffix=".arrow")


def _schema():  # noqa: ANN202 - a pyarrow schema
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in _SCHEMA_FIELDS])


def _write_rows(rows: Iterator[tuple[int, str, bytes]]) -> IO[bytes]:
    """`rows` (sorted) to a new IPC file of `BLOCK_FILES`-row batches, left open."""
    import pyarrow as pa

    handle = _temp_file()
    schema = _schema()
    try:
        with pa.ipc.new_file(handle, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            block: list[tuple[int, str, bytes]] = []
            for row in rows:
                block.append(row)
                if len(block) == BLOCK_FILES:
                    writer.write_batch(_batch(block, schema))
                    block = []
            if block:
                writer.write_batch(_batch(block, schema))
    except BaseException:
        handle.close()
        raise
    return handle


def _batch(block: list[tuple[int, str, bytes]], schema: Any) -> Any:
    import pyarrow as pa

    times, paths, entries = zip(*block, strict=True)
    return pa.record_batch([pa.array(times), pa.array(paths), pa.array(entries)], schema=schema)


def _write_run(entries: list[dict[str, Any]]) -> IO[bytes]:
    return _write_rows((*stream_key(e), pickle.dumps(e, pickle.HIGHEST_PROTOCOL)) for e in entries)


def _read_rows(handle: IO[bytes]) -> Iterator[tuple[int, str, bytes]]:
    import pyarrow as pa

    reader = pa.ipc.open_file(handle)
    for i in range(reader.num_record_batches):
        columns = reader.get_batch(i).to_pydict()
        yield from zip(columns["modificationTime"], columns["path"], columns["entry"], strict=True)


def _merge(runs: list[IO[bytes]]) -> IO[bytes]:
    return _write_rows(heapq.merge(*(_read_rows(run) for run in runs), key=lambda row: (row[0], row[1])))


class SpilledFiles(Sequence[dict[str, Any]]):
    """The sorted files in a local IPC file: indexing and slicing decode only the blocks asked for
    (the last one is kept: a stream walks the list in order)."""

    def __init__(self, handle: IO[bytes]) -> None:
        import pyarrow as pa

        self._file = handle
        self._finalizer = weakref.finalize(self, handle.close)
        self._reader = pa.ipc.open_file(handle)
        self._blocks = self._reader.num_record_batches
        # every block but the last holds `BLOCK_FILES` (`_write_rows`)
        last = self._reader.get_batch(self._blocks - 1).num_rows if self._blocks else 0
        self._length = max(0, self._blocks - 1) * BLOCK_FILES + last
        self._held: tuple[int, list[bytes]] | None = None

    def __len__(self) -> int:
        return self._length

    def _block(self, number: int) -> list[bytes]:
        if self._held is None or self._held[0] != number:
            self._held = (number, self._reader.get_batch(number).column("entry").to_pylist())
        return self._held[1]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(index)
        return pickle.loads(self._block(index // BLOCK_FILES)[index % BLOCK_FILES])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for number in range(self._blocks):
            for blob in self._block(number):
                yield pickle.loads(blob)

    def __reduce__(self) -> Any:
        raise TypeError("deltaspark: a spilled file list stays in the process that planned it")

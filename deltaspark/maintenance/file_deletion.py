"""Deleting files and empty directories from Spark tasks (vacuum), never from the driver.

Each task opens the table's filesystem with `pyarrow.fs` and deletes its share of the paths.
Throttling answers of object stores (S3 `SlowDown`, HTTP 503/429) are retried with a random
backoff; a file that is already gone counts as deleted (another vacuum, or a retried task, took
it). Directories are removed only when that is atomic and non-recursive - `rmdir` on a local or
mounted filesystem - so a writer that has just put a file into a partition directory never loses
it; on object stores a directory vanishes with its last object and nothing is removed.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

from deltaspark.file_io import carry_settings, open_file

_THROTTLED = ("slowdown", "slow down", "503", "429", "throttl", "toomanyrequests", "reduce your request rate")
MAX_ATTEMPTS = 10


def _throttled(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _THROTTLED)


def _delete_one(fs: Any, local: str, is_dir: bool, is_local_fs: bool) -> tuple[bool, str | None]:
    """(deleted, why not). Missing counts as deleted; throttling is retried."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            if is_dir:
                if not is_local_fs:
                    return False, "directories are left on object stores (they vanish with their files)"
                os.rmdir(local)
            else:
                fs.delete_file(local)
            return True, None
        except FileNotFoundError:
            return True, None
        except OSError as exc:
            if is_dir and os.path.isdir(local) and os.listdir(local):
                return False, "not empty: it holds files vacuum keeps or does not list (hidden names)"
            if _throttled(exc) and attempt < MAX_ATTEMPTS:
                time.sleep(0.1 + random.random())  # noqa: S311 - a backoff, not cryptography
                continue
            return False, f"{type(exc).__name__}: {exc}"
    return False, "gave up after repeated throttling"


def deletion_batches(root: str):  # noqa: ANN201 - a mapInArrow function
    """`mapInArrow` body: candidate rows (`path` absolute under `root`, `isDir`, `skip` - why not
    to delete it, or null - and any other columns) -> the same rows + `deleted`, `error`."""

    def delete(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyarrow import fs as pafs

        fs, root_local = open_file(root)
        root_local = root_local.rstrip("/")
        is_local_fs = isinstance(fs, pafs.LocalFileSystem)
        for batch in batches:
            deleted_column, error_column = [], []
            for row in batch.to_pylist():
                path = row["path"]
                if row["skip"] is not None:
                    deleted, error = False, row["skip"]
                elif not path.startswith(root + "/"):  # never outside the table
                    deleted, error = False, "outside the table root: never deleted"
                else:
                    local = root_local + path[len(root) :]
                    deleted, error = _delete_one(fs, local, bool(row["isDir"]), is_local_fs)
                deleted_column.append(deleted)
                error_column.append(error)
            columns = [batch.column(i) for i in range(batch.num_columns) if batch.schema.names[i] != "skip"]
            names = [n for n in batch.schema.names if n != "skip"]
            yield pa.RecordBatch.from_arrays(
                [*columns, pa.array(deleted_column, pa.bool_()), pa.array(error_column, pa.string())],
                names=[*names, "deleted", "error"],
            )

    return carry_settings(delete)

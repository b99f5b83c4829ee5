"""Iceberg tables written by pyiceberg into a folder, without a catalog service: each commit writes
the next `NNNNN-<uuid>.metadata.json` (as a catalog table's metadata files are named), which
deltaspark finds as the newest one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import update_table_metadata


def _metadata_path(location: str, version: int) -> str:
    return f"{location}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"


class _FolderCatalog(NoopCatalog):
    """Commits a table by writing its next metadata file; nothing else."""

    def commit_table(self, table: Table, requirements: Any, updates: Any) -> CommitTableResponse:
        for requirement in requirements:
            requirement.validate(table.metadata)
        metadata = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
        version = MetastoreCatalog._parse_metadata_version(table.metadata_location) + 1
        location = _metadata_path(metadata.location, version)
        ToOutputFile.table_metadata(metadata, table.io.new_output(location))
        return CommitTableResponse(metadata=metadata, metadata_location=location)


def create_table(
    path: Path | str,
    schema: Any,
    partition_spec: Any = UNPARTITIONED_PARTITION_SPEC,
    format_version: int = 2,
    io_properties: dict[str, str] | None = None,
) -> Table:
    """An empty pyiceberg table at `path` (a folder, or a location such as `s3://bucket/t` with the
    pyiceberg `io_properties` that reach it) of a pyiceberg `Schema`; `append` and other writes
    commit to the folder."""
    location = str(path).rstrip("/")
    metadata = new_table_metadata(
        location=location,
        schema=schema,
        partition_spec=partition_spec,
        sort_order=UNSORTED_SORT_ORDER,
        properties={"format-version": str(format_version)},
    )
    metadata_location = _metadata_path(location, 0)
    io = load_file_io(io_properties or {}, location=metadata_location)
    ToOutputFile.table_metadata(metadata, io.new_output(metadata_location))
    return Table(
        identifier=("folder", location.rsplit("/", 1)[-1]),
        metadata=metadata,
        metadata_location=metadata_location,
        io=io,
        catalog=_FolderCatalog("folder"),
    )

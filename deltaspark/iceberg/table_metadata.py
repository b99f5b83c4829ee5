"""The Iceberg table metadata JSON: finding the current file and reading what a scan needs.

Finding the current metadata file follows Iceberg's Hadoop table operations, pyiceberg and DuckDB:
`version-hint.text` (or `.txt`) holds a version N or a metadata file's name.

- N reads `vN.metadata.json` (plain or gzip) and walks forward while `v{N+1}` exists, because
  Hadoop writers update the hint after the metadata file and may stop in between (a warning says
  so). No `vN` at all is an error, as in Iceberg's Java reader.
- A name reads that file: `<hint>`, `<hint>.metadata.json` or `v<hint>.metadata.json`, each plain
  or gzip (pyiceberg's `StaticTable` and DuckDB's version formats). It is followed as written: no
  other file is chosen for it. A name no file has, or one that names both `<hint>` and `v<hint>`
  files, is an error (`CorruptIcebergMetadataError`).
- An empty hint is no hint (Iceberg's Java reader falls back the same way; a warning says so).

Without a hint the newest `vN` or `NNNNN-<uuid>` metadata file wins (plain or gzip). Format v1's
single `schema` and `partition-spec` are read as schema 0 and spec 0.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from deltaspark.errors import (
    CorruptIcebergMetadataError,
    IcebergTableNotFoundError,
    InvalidArgumentError,
    SnapshotNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
)
from deltaspark.iceberg import files
from deltaspark.iceberg.relocation import PathMap

log = logging.getLogger(__name__)
HINT_FILES = ("version-hint.text", "version-hint.txt")  # Iceberg's name, and Impala's
_METADATA_SUFFIXES = (".metadata.json", ".gz.metadata.json", ".metadata.json.gz")
_VERSIONED = re.compile(r"^v(\d+)(\.gz)?\.metadata\.json(\.gz)?$")
_SEQUENCED = re.compile(r"^(\d+)-[0-9a-fA-F-]+(\.gz)?\.metadata\.json(\.gz)?$")
SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp_ms: int
    manifest_list: str | None
    manifests: tuple[str, ...]  # format v1's inline manifest list, when there is no manifest list file
    summary: dict[str, str]
    schema_id: int | None
    first_row_id: int | None
    added_rows: int | None

    @property
    def operation(self) -> str | None:
        return self.summary.get("operation")


@dataclass(frozen=True)
class PartitionField:
    field_id: int
    source_id: int
    name: str
    transform: str


@dataclass(frozen=True)
class TableMetadata:
    metadata_file: str
    table_root: str
    raw: dict[str, Any]
    format_version: int
    location: str
    schemas: dict[int, dict[str, Any]]
    current_schema_id: int
    specs: dict[int, tuple[PartitionField, ...]]
    default_spec_id: int
    properties: dict[str, str]
    snapshots: dict[int, Snapshot]
    current_snapshot_id: int | None
    refs: dict[str, dict[str, Any]]
    snapshot_log: tuple[tuple[int, int], ...]  # (timestamp ms, snapshot id), oldest first
    last_sequence_number: int
    next_row_id: int | None
    paths: PathMap = field(default_factory=PathMap)

    @property
    def schema(self) -> dict[str, Any]:
        return self.schemas[self.current_schema_id]

    def schema_for(self, snapshot: Snapshot | None) -> dict[str, Any]:
        """The schema a snapshot is read with: its own for time travel, the table's for the current one."""
        if snapshot is None or snapshot.snapshot_id == self.current_snapshot_id:
            return self.schema
        if snapshot.schema_id is not None and snapshot.schema_id in self.schemas:
            return self.schemas[snapshot.schema_id]
        return self.schema

    def name_mapping(self) -> list[dict[str, Any]] | None:
        text = self.properties.get("schema.name-mapping.default")
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CorruptIcebergMetadataError(
                self.metadata_file, f"schema.name-mapping.default is not JSON: {exc}"
            ) from exc

    # ---- choosing a snapshot ------------------------------------------------------------------
    def snapshot(
        self, snapshotId: int | None = None, ref: str | None = None, asOfTimestampMs: int | None = None
    ) -> Snapshot | None:
        """The snapshot named by id, ref (branch or tag) or time; the current one by default (None
        for a table that has no snapshot yet)."""
        if sum(x is not None for x in (snapshotId, ref, asOfTimestampMs)) > 1:
            raise InvalidArgumentError("Give at most one of snapshotId, ref and asOfTimestamp")
        if snapshotId is not None:
            if snapshotId not in self.snapshots:
                raise SnapshotNotFoundError(
                    f"Snapshot {snapshotId} is not in {self.metadata_file}; it has "
                    f"{sorted(self.snapshots) or 'no snapshots'}"
                )
            return self.snapshots[snapshotId]
        if ref is not None:
            if ref not in self.refs:
                raise SnapshotNotFoundError(
                    f"No branch or tag named {ref!r} in {self.metadata_file}; refs: {sorted(self.refs)}"
                )
            return self._by_id(self.refs[ref]["snapshot-id"], f"ref {ref!r}")
        if asOfTimestampMs is not None:
            chosen = None
            for timestamp, snapshot_id in self.snapshot_log:
                if timestamp <= asOfTimestampMs:
                    chosen = snapshot_id
            if chosen is None:
                first = self.snapshot_log[0][0] if self.snapshot_log else None
                raise TimestampOutOfRangeError(
                    f"No snapshot of {self.table_root} was current at {asOfTimestampMs} ms"
                    + (f"; the first became current at {first} ms" if first is not None else "")
                )
            return self._by_id(chosen, "the snapshot log")
        if self.current_snapshot_id is None:
            return None
        return self._by_id(self.current_snapshot_id, "current-snapshot-id")

    def _by_id(self, snapshot_id: int, named_by: str) -> Snapshot:
        if snapshot_id not in self.snapshots:
            raise CorruptIcebergMetadataError(
                self.metadata_file, f"{named_by} names snapshot {snapshot_id}, which is not in `snapshots`"
            )
        return self.snapshots[snapshot_id]

    def ancestors(self, snapshot_id: int | None) -> list[int]:
        """The snapshot and its parents, newest first, as far as the metadata still has them."""
        out: list[int] = []
        while snapshot_id is not None and snapshot_id in self.snapshots and snapshot_id not in out:
            out.append(snapshot_id)
            snapshot_id = self.snapshots[snapshot_id].parent_id
        return out


# ---- finding the metadata file ---------------------------------------------------------------
def _version_of(name: str) -> tuple[int, int] | None:
    """(kind, number) of a metadata file name: kind 1 for `vN`, 0 for `NNNNN-uuid`."""
    match = _VERSIONED.match(name)
    if match:
        return (1, int(match.group(1)))
    match = _SEQUENCED.match(name)
    if match:
        return (0, int(match.group(1)))
    return None


def _hinted(table_root: str, metadata_dir: str, names: list[str]) -> str | None:
    """The metadata file `version-hint.text` (or `.txt`) points at; None without a usable hint."""
    for hint_name in HINT_FILES:
        if hint_name not in names:
            continue
        hint_path = metadata_dir + "/" + hint_name
        lines = (files.read_bytes(hint_path) or b"").decode("utf-8", "replace").strip().splitlines()
        if not lines:
            log.warning(
                "%s is empty; reading the newest metadata file in %s instead, as Iceberg's Hadoop "
                "tables do (pass metadataLocation= to choose one)",
                hint_path,
                metadata_dir,
            )
            return None
        hint = lines[0].strip()  # Iceberg's Java reader reads the first line
        if not any(_version_of(name) or ".metadata.json" in name for name in names):
            raise IcebergTableNotFoundError(
                table_root, f"{hint_path} names {hint!r}, but no metadata file exists"
            )
        if re.fullmatch(r"[0-9]+", hint):
            return _hinted_version(hint_path, int(hint), names)
        return _hinted_name(hint_path, hint, names)
    return None


def _hinted_version(hint_path: str, version: int, names: list[str]) -> str:
    """`vN.metadata.json` for a hint N, walking forward to the newest `vN` that follows it."""
    present = set(names)
    by_version: dict[int, str] = {}
    for name in names:
        kind = _version_of(name)
        if kind and kind[0] == 1 and kind[1] not in by_version:
            # Iceberg's Java reader looks for the plain file first, then the gzip names
            n = kind[1]
            by_version[n] = next(f"v{n}{s}" for s in _METADATA_SUFFIXES if f"v{n}{s}" in present)
    if version not in by_version:
        versions = sorted(by_version)
        raise CorruptIcebergMetadataError(
            hint_path,
            f"it names version {version}, but there is no v{version}.metadata.json (plain or gzip) "
            + (f"(versions present: {versions})" if versions else "(no vN.metadata.json at all)")
            + "; pass metadataLocation= to read a metadata file of your choice",
        )
    hinted = version
    while version + 1 in by_version:
        version += 1
    if version != hinted:
        log.warning(
            "%s says version %d, but %s exists: reading it (the hint is stale, as when a writer "
            "stopped between writing a metadata file and the hint)",
            hint_path,
            hinted,
            by_version[version],
        )
    return by_version[version]


def _hinted_name(hint_path: str, hint: str, names: list[str]) -> str:
    """The metadata file a hint holding a name points at (followed as written, no walking)."""
    present = set(names)
    if hint in present and ".metadata.json" in hint:
        return hint
    bare = next((hint + s for s in _METADATA_SUFFIXES if hint + s in present), None)
    prefixed = next(("v" + hint + s for s in _METADATA_SUFFIXES if "v" + hint + s in present), None)
    if bare and prefixed:
        raise CorruptIcebergMetadataError(
            hint_path,
            f"it names {hint!r}, which could be {bare} or {prefixed}; pass metadataLocation= to "
            "read one of them",
        )
    if bare or prefixed:
        return bare or prefixed  # type: ignore[return-value]
    raise CorruptIcebergMetadataError(
        hint_path,
        f"it names {hint!r}, but there is no {hint}.metadata.json or v{hint}.metadata.json (plain or "
        "gzip); pass metadataLocation= to read a metadata file of your choice",
    )


def find_metadata_file(table_root: str) -> str:
    """The current metadata JSON of the table at `table_root` (see the module docstring)."""
    metadata_dir = table_root.rstrip("/") + "/metadata"
    names = files.list_names(metadata_dir)
    if names is None:
        raise IcebergTableNotFoundError(table_root, "no metadata/ folder")
    hinted = _hinted(table_root, metadata_dir, names)
    if hinted:
        return metadata_dir + "/" + hinted
    candidates = [(v, name) for name in names if (v := _version_of(name))]
    if not candidates:
        raise IcebergTableNotFoundError(table_root, "no vN.metadata.json or NNNNN-uuid.metadata.json")
    # vN files (Hadoop tables) and NNNNN-uuid files (catalog tables) are not mixed by one writer; if
    # both are present the numbered kind with the higher number is the newer table history.
    best = max(candidates, key=lambda c: (c[0][1], c[0][0]))
    return metadata_dir + "/" + best[1]


# ---- parsing ------------------------------------------------------------------------------------
def _spec_fields(path: str, fields: list[dict[str, Any]]) -> tuple[PartitionField, ...]:
    out = []
    for position, f in enumerate(fields):
        try:
            out.append(
                PartitionField(
                    int(f.get("field-id", 1000 + position)),
                    int(f["source-id"]),
                    str(f["name"]),
                    str(f["transform"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptIcebergMetadataError(path, f"malformed partition field {f!r}") from exc
    return tuple(out)


def _snapshot(path: str, s: dict[str, Any]) -> Snapshot:
    try:
        return Snapshot(
            snapshot_id=int(s["snapshot-id"]),
            parent_id=int(s["parent-snapshot-id"]) if s.get("parent-snapshot-id") is not None else None,
            sequence_number=int(s.get("sequence-number", 0)),
            timestamp_ms=int(s["timestamp-ms"]),
            manifest_list=s.get("manifest-list"),
            manifests=tuple(s.get("manifests") or ()),
            summary={str(k): str(v) for k, v in (s.get("summary") or {}).items()},
            schema_id=int(s["schema-id"]) if s.get("schema-id") is not None else None,
            first_row_id=int(s["first-row-id"]) if s.get("first-row-id") is not None else None,
            added_rows=int(s["added-rows"]) if s.get("added-rows") is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptIcebergMetadataError(
            path, f"malformed snapshot {s.get('snapshot-id')!r}: {exc}"
        ) from exc


def parse(metadata_file: str, text: bytes, table_root: str, relocate: dict[str, str] | None) -> TableMetadata:
    """The table metadata in `text`; `relocate` maps prefixes of where the table was written to
    where it is now (by default its `location` is mapped to `table_root`)."""
    try:
        raw = json.loads(files.decompress(metadata_file, text))
    except (ValueError, OSError, EOFError) as exc:
        raise CorruptIcebergMetadataError(metadata_file, f"not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise CorruptIcebergMetadataError(metadata_file, "not a JSON object")
    try:
        version = int(raw["format-version"])
        location = str(raw["location"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptIcebergMetadataError(metadata_file, f"missing or malformed {exc}") from exc
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise UnsupportedFeatureError(
            f"Iceberg format version {version} of {metadata_file} is not supported (1, 2 and 3 are)",
            [f"iceberg-format-version-{version}"],
        )
    properties = {str(k): str(v) for k, v in (raw.get("properties") or {}).items()}
    if raw.get("encryption-keys") or properties.get("encryption.key-id"):
        raise UnsupportedFeatureError(
            f"Iceberg table encryption ({metadata_file}) is not supported", ["iceberg-encryption"]
        )
    if "schemas" in raw:
        schemas = {int(s.get("schema-id", 0)): s for s in raw["schemas"]}
        current_schema_id = int(raw.get("current-schema-id", min(schemas) if schemas else 0))
    elif "schema" in raw:
        schemas = {int(raw["schema"].get("schema-id", 0)): raw["schema"]}
        current_schema_id = next(iter(schemas))
    else:
        raise CorruptIcebergMetadataError(metadata_file, "no `schemas` and no `schema`")
    if current_schema_id not in schemas:
        raise CorruptIcebergMetadataError(
            metadata_file, f"current-schema-id {current_schema_id} is not a schema"
        )
    if "partition-specs" in raw:
        specs = {
            int(s["spec-id"]): _spec_fields(metadata_file, s.get("fields", []))
            for s in raw["partition-specs"]
        }
        default_spec_id = int(raw.get("default-spec-id", min(specs) if specs else 0))
    else:
        specs = {0: _spec_fields(metadata_file, raw.get("partition-spec", []))}
        default_spec_id = 0
    snapshots = {s.snapshot_id: s for s in (_snapshot(metadata_file, x) for x in raw.get("snapshots") or [])}
    current = raw.get("current-snapshot-id")
    current_id = int(current) if current is not None and int(current) != -1 else None
    refs = {str(k): dict(v) for k, v in (raw.get("refs") or {}).items()}
    if "main" not in refs and current_id is not None:
        refs["main"] = {"snapshot-id": current_id, "type": "branch"}
    log = tuple((int(e["timestamp-ms"]), int(e["snapshot-id"])) for e in (raw.get("snapshot-log") or []))
    mapping = {location: table_root} if location.rstrip("/") != table_root.rstrip("/") else {}
    mapping.update(relocate or {})
    return TableMetadata(
        metadata_file=metadata_file,
        table_root=table_root,
        raw=raw,
        format_version=version,
        location=location,
        schemas=schemas,
        current_schema_id=current_schema_id,
        specs=specs,
        default_spec_id=default_spec_id,
        properties=properties,
        snapshots=snapshots,
        current_snapshot_id=current_id,
        refs=refs,
        snapshot_log=log,
        last_sequence_number=int(raw.get("last-sequence-number", 0)),
        next_row_id=int(raw["next-row-id"]) if raw.get("next-row-id") is not None else None,
        paths=PathMap.of(mapping),
    )


def load(table_root: str, metadata_location: str | None, relocate: dict[str, str] | None) -> TableMetadata:
    """Read the table's current (or the named) metadata file."""
    table_root = table_root.rstrip("/")
    if metadata_location is None:
        metadata_file = find_metadata_file(table_root)
    elif "/" in metadata_location:
        metadata_file = metadata_location
    else:
        metadata_file = table_root + "/metadata/" + metadata_location
    data = files.read_bytes(metadata_file)
    if data is None:
        raise IcebergTableNotFoundError(table_root, f"{metadata_file} does not exist")
    return parse(metadata_file, data, table_root, relocate)

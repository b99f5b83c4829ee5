"""The `protocol` action: reader/writer versions, table features, and what deltaspark can read.

Reader versions 1-3 are understood. On reader version 3 every name in `readerFeatures` must be one
deltaspark implements, or the table is refused with the feature named. Older protocol versions
imply their features (reader 2 = column mapping; writer 2-6 their legacy features).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltaspark.errors import UnsupportedFeatureError, UnsupportedWriterFeatureError

# Reader features whose semantics the log replay honours.
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",  # physical names in partition values and stats
        "deletionVectors",  # (path, dv uniqueId) file keys
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",  # nothing to do for readers beyond acknowledging it
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
    }
)

# Features known to the protocol that deltaspark deliberately refuses, with the reason given to users.
REFUSED_READER_FEATURES = {
    "catalogManaged": "the table is managed by a catalog; commits must be read through the catalog, "
    "not by listing _delta_log",
    "catalogOwned-preview": "the table is managed by a catalog (preview name of catalogManaged); commits "
    "must be read through the catalog, not by listing _delta_log",
}

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


@dataclass(frozen=True)
class Protocol:
    minReaderVersion: int
    minWriterVersion: int
    readerFeatures: tuple[str, ...] | None = None
    writerFeatures: tuple[str, ...] | None = None

    @classmethod
    def from_row(cls, row: Any) -> Protocol:
        d = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
        return cls(
            minReaderVersion=int(d.get("minReaderVersion") or 0),
            minWriterVersion=int(d.get("minWriterVersion") or 0),
            readerFeatures=tuple(d["readerFeatures"]) if d.get("readerFeatures") is not None else None,
            writerFeatures=tuple(d["writerFeatures"]) if d.get("writerFeatures") is not None else None,
        )

    @property
    def supportsReaderFeatures(self) -> bool:
        return self.minReaderVersion >= 3

    @property
    def supportsWriterFeatures(self) -> bool:
        return self.minWriterVersion >= 7

    @property
    def tableFeatures(self) -> list[str]:
        """Every feature the table supports, explicit or implied by legacy protocol versions."""
        features: list[str] = []
        if self.supportsReaderFeatures:
            features += list(self.readerFeatures or ())
        elif self.minReaderVersion >= 2:
            features.append("columnMapping")
        if self.supportsWriterFeatures:
            features += list(self.writerFeatures or ())
        else:
            for version, implied in LEGACY_WRITER_FEATURES.items():
                if self.minWriterVersion >= version:
                    features += implied
        return sorted(dict.fromkeys(features))

    def hasFeature(self, name: str) -> bool:
        return name in self.tableFeatures

    def asDict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.minReaderVersion,
            "minWriterVersion": self.minWriterVersion,
        }
        if self.readerFeatures is not None:
            out["readerFeatures"] = list(self.readerFeatures)
        if self.writerFeatures is not None:
            out["writerFeatures"] = list(self.writerFeatures)
        return out


def check_readable(protocol: Protocol, table_path: str) -> None:
    """Refuse a table this engine cannot read correctly, naming what is missing."""
    if protocol.minReaderVersion > MAX_READER_VERSION or protocol.minReaderVersion < 1:
        raise UnsupportedFeatureError(
            f"Table {table_path} requires Delta reader version {protocol.minReaderVersion}; "
            f"deltaspark reads versions 1 to {MAX_READER_VERSION}"
        )
    if not protocol.supportsReaderFeatures:
        return
    features = set(protocol.readerFeatures or ())
    refused = sorted(f for f in features if f in REFUSED_READER_FEATURES)
    unknown = sorted(f for f in features if f not in SUPPORTED_READER_FEATURES and f not in refused)
    if refused or unknown:
        reasons = [f"`{f}`: {REFUSED_READER_FEATURES[f]}" for f in refused]
        reasons += [f"`{f}`: not implemented by deltaspark" for f in unknown]
        raise UnsupportedFeatureError(
            f"Table {table_path} requires reader feature(s) deltaspark cannot honour: " + "; ".join(reasons),
            features=[*refused, *unknown],
        )


# Writer features deltaspark honours. deltaspark never writes data files or commits: the only things
# it writes to a table are checkpoints (and `_last_checkpoint`), and the only things it deletes are
# expired log files (metadata cleanup). A writer feature is listed here when its rules either bind
# only data files and commits (so neither a checkpoint nor a cleanup can break them) or bind the
# checkpoint / cleanup and are implemented by `checkpoint_writer` / `log_cleanup`.
SUPPORTED_WRITER_FEATURES = frozenset(
    {
        # Rules on commits and data files only; a checkpoint copies the state as it is.
        "appendOnly",  # no commit may remove data: a checkpoint commits nothing
        "invariants",  # checked when rows are written; a checkpoint writes no rows
        "checkConstraints",  # idem, and the constraints live in metaData, copied verbatim
        "generatedColumns",  # schema metadata, copied verbatim
        "identityColumns",  # schema metadata (high-water marks), copied verbatim
        "allowColumnDefaults",  # schema metadata, used by row writers only
        "changeDataFeed",  # `cdc` actions are never part of a checkpoint (the protocol says so)
        "icebergCompatV1",  # data-file layout rules; no checkpoint rule
        "icebergCompatV2",  # idem
        "timestampNtz",  # typed stats/partition values are parsed with the schema's types
        "typeWidening",  # stats_parsed uses the current (widest) types, as Spark's Delta does
        "typeWidening-preview",
        "variantType",  # variant columns get a nullCount stat only in stats_parsed; JSON kept as is
        "variantType-preview",
        "variantShredding",  # a data-file encoding; checkpoints do not shred
        "variantShredding-preview",
        "materializePartitionColumns",  # partition values also in data files; no log rule
        "vacuumProtocolCheck",  # binds VACUUM only, which deltaspark does not implement
        # Rules that bind checkpoints or metadata cleanup, implemented by deltaspark.
        "columnMapping",  # partitionValues_parsed / stats_parsed use physical names
        "deletionVectors",  # DV descriptors kept; multi-part parts clustered by (path, dvId)
        "domainMetadata",  # every live domain kept (removed ones dropped), unknown ones included
        "rowTracking",  # baseRowId / defaultRowCommitVersion kept; the delta.rowTracking domain kept
        "clustering",  # the delta.clustering domain and clusteringProvider kept
        "v2Checkpoint",  # V2 spec: checkpointMetadata, sidecars, UUID name; never multi-part
        "inCommitTimestamp",  # cleanup keeps the commit JSON at the checkpoint it keeps
        "checkpointProtection",  # no checkpoint below requireCheckpointProtectionBeforeVersion;
        # cleanup never creates checkpoints nor deletes any at or after its truncation version
    }
)

# Writer features known to the protocol that deltaspark deliberately refuses, with the reason.
REFUSED_WRITER_FEATURES = {
    "catalogManaged": "commits and maintenance of a catalog-managed table go through its catalog",
    "catalogOwned-preview": "commits and maintenance of a catalog-managed table go through its catalog",
    "coordinatedCommits-preview": "commits are ratified by a commit coordinator; a checkpoint could "
    "cover versions that are not yet backfilled into _delta_log",
}


def check_writable(protocol: Protocol, table_path: str, operation: str = "write to") -> None:
    """Refuse to change a table's log unless every reader and writer feature it lists is honoured.

    Writers must implement the reader features too (they read the table first), so the reader check
    runs first. Legacy writer versions 2-6 imply only features deltaspark honours.
    """
    check_readable(protocol, table_path)
    if protocol.minWriterVersion > MAX_WRITER_VERSION or protocol.minWriterVersion < 1:
        raise UnsupportedWriterFeatureError(
            f"Cannot {operation} table {table_path}: it requires Delta writer version "
            f"{protocol.minWriterVersion}; deltaspark writes versions 1 to {MAX_WRITER_VERSION}"
        )
    if not protocol.supportsWriterFeatures:
        return
    features = set(protocol.writerFeatures or ()) | set(protocol.readerFeatures or ())
    refused = sorted(f for f in features if f in REFUSED_WRITER_FEATURES)
    unknown = sorted(f for f in features if f not in SUPPORTED_WRITER_FEATURES and f not in refused)
    if refused or unknown:
        reasons = [f"`{f}`: {REFUSED_WRITER_FEATURES[f]}" for f in refused]
        reasons += [f"`{f}`: not implemented by deltaspark" for f in unknown]
        raise UnsupportedWriterFeatureError(
            f"Cannot {operation} table {table_path}: it requires writer feature(s) deltaspark cannot "
            "honour: " + "; ".join(reasons),
            features=[*refused, *unknown],
        )

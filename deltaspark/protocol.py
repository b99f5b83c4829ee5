"""The `protocol` action: reader/writer versions, table features, and what deltaspark can read.

Reader versions 1-3 are understood. On reader version 3 every name in `readerFeatures` must be one
deltaspark implements, or the table is refused with the feature named. Older protocol versions
imply their features (reader 2 = column mapping; writer 2-6 their legacy features).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import UnsupportedFeatureError

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

_LEGACY_WRITER_FEATURES = {
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
            for version, implied in _LEGACY_WRITER_FEATURES.items():
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

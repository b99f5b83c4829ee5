"""Which protocol a table needs for the features its properties enable ("Table Features").

Setting a property such as `delta.enableDeletionVectors=true` needs the feature in the protocol
first; delta-spark adds it automatically, and so does `required_protocol`. Tables stay on the
legacy protocol (1, 2) until a feature needs more; then they move to table features, writer
version 7 (and reader version 3 when a reader-writer feature is among them), listing the features
the legacy versions implied, so that no capability is lost in the upgrade.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampNTZType

from deltaspark.errors import InvalidArgumentError, UnsupportedFeatureError
from deltaspark.features.protocol import Protocol

# Features readers must understand too: listed in readerFeatures and writerFeatures.
READER_WRITER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
    }
)
WRITER_ONLY_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "domainMetadata",
        "rowTracking",
        "inCommitTimestamp",
        "clustering",
        "allowColumnDefaults",
        "checkpointProtection",
    }
)
# Features deltaspark can add to a table's protocol on request (what its commits honour).
ENABLEABLE_FEATURES = READER_WRITER_FEATURES - {"variantType"} | WRITER_ONLY_FEATURES
DEPENDENCIES = {"rowTracking": ("domainMetadata",), "clustering": ("domainMetadata",)}

# property -> (the value that enables, the feature it needs)
PROPERTY_FEATURES: dict[str, tuple[str, str]] = {
    "delta.appendOnly": ("true", "appendOnly"),
    "delta.enableChangeDataFeed": ("true", "changeDataFeed"),
    "delta.enableDeletionVectors": ("true", "deletionVectors"),
    "delta.enableRowTracking": ("true", "rowTracking"),
    "delta.enableInCommitTimestamps": ("true", "inCommitTimestamp"),
    "delta.enableTypeWidening": ("true", "typeWidening"),
    "delta.checkpointPolicy": ("v2", "v2Checkpoint"),
}
FEATURE_PROPERTY_PREFIX = "delta.feature."


def features_for_properties(configuration: Mapping[str, str]) -> set[str]:
    """Features that `configuration` turns on, including `delta.feature.<name>=supported`."""
    features: set[str] = set()
    for key, value in configuration.items():
        if key.startswith(FEATURE_PROPERTY_PREFIX):
            name = key[len(FEATURE_PROPERTY_PREFIX) :]
            if (value or "").lower() not in ("supported", "enabled"):
                raise InvalidArgumentError(f"{key} must be 'supported', got {value!r}")
            features.add(name)
            continue
        wanted = PROPERTY_FEATURES.get(key)
        if wanted and (value or "").strip().lower() == wanted[0]:
            features.add(wanted[1])
        if key.startswith("delta.constraints."):
            features.add("checkConstraints")
        if key == "delta.columnMapping.mode" and (value or "none").lower() != "none":
            features.add("columnMapping")
    return features


def _with_dependencies(features: Iterable[str]) -> set[str]:
    out = set(features)
    for feature in list(out):
        out.update(DEPENDENCIES.get(feature, ()))
    return out


def required_protocol(current: Protocol | None, features: Iterable[str]) -> Protocol:
    """The smallest protocol at or above `current` that supports `features`."""
    wanted = _with_dependencies(features)
    unknown = sorted(f for f in wanted if f not in READER_WRITER_FEATURES | WRITER_ONLY_FEATURES)
    if unknown:
        raise UnsupportedFeatureError(f"Unknown table feature(s): {', '.join(unknown)}", unknown)
    refused = sorted(
        f for f in wanted if f not in ENABLEABLE_FEATURES and not (current and current.hasFeature(f))
    )
    if refused:
        raise UnsupportedFeatureError(
            f"deltaspark cannot add the table feature(s) {', '.join(refused)}: its writers do not "
            "honour them yet",
            refused,
        )
    base = current or Protocol(1, 2)
    have = set(base.tableFeatures)
    if wanted <= have:
        return base
    # Move to table features, keeping every feature the legacy versions implied.
    features_now = have | wanted
    reader = sorted(f for f in features_now if f in READER_WRITER_FEATURES)
    writer = sorted(features_now)
    reader_version = 3 if reader else max(base.minReaderVersion, 1)
    if reader_version == 3:
        return Protocol(3, 7, tuple(reader), tuple(writer))
    return Protocol(reader_version, 7, None, tuple(writer))


def features_for_schema(schema: StructType) -> set[str]:
    """Features a schema needs: timestamp_ntz columns, generated columns, invariants, identity."""
    features: set[str] = set()

    def visit(data_type: DataType) -> None:
        if isinstance(data_type, TimestampNTZType):
            features.add("timestampNtz")
        elif isinstance(data_type, StructType):
            for f in data_type.fields:
                if "delta.generationExpression" in f.metadata:
                    features.add("generatedColumns")
                if "delta.invariants" in f.metadata:
                    features.add("invariants")
                if "delta.identity.start" in f.metadata:
                    features.add("identityColumns")
                visit(f.dataType)
        elif isinstance(data_type, ArrayType):
            visit(data_type.elementType)
        elif isinstance(data_type, MapType):
            visit(data_type.keyType)
            visit(data_type.valueType)
        elif data_type.typeName() == "variant":
            features.add("variantType")

    visit(schema)
    return features


def stored_configuration(configuration: Mapping[str, str]) -> dict[str, str]:
    """The configuration a `metaData` action keeps: `delta.feature.*` requests go into the protocol,
    not the properties; enabling row tracking names its materialized columns, as delta-spark does."""
    import uuid

    stored = {k: v for k, v in configuration.items() if not k.startswith(FEATURE_PROPERTY_PREFIX)}
    if (stored.get("delta.enableRowTracking") or "").lower() == "true":
        stored.setdefault("delta.rowTracking.materializedRowIdColumnName", f"_row-id-col-{uuid.uuid4()}")
        stored.setdefault(
            "delta.rowTracking.materializedRowCommitVersionColumnName",
            f"_row-commit-version-col-{uuid.uuid4()}",
        )
    return stored

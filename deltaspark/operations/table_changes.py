"""Creating tables and changing their metadata and protocol, each as one commit.

`create_table` backs `DeltaTable.create / createIfNotExists / createOrReplace / replace`;
`set_properties`, `unset_properties`, `add_feature_support` and `upgrade_protocol` back the
methods of the same names. Features a property needs are added to the protocol in the same
commit (`features.enablement`), as delta-spark does; the protocol is never downgraded.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from deltaspark.errors import (
    InvalidArgumentError,
    InvariantViolationError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
)
from deltaspark.features import clustering
from deltaspark.features.column_mapping import MODE_KEY, column_mapping_mode, with_column_mapping
from deltaspark.features.enablement import (
    READER_WRITER_FEATURES,
    features_for_properties,
    features_for_schema,
    required_protocol,
    stored_configuration,
)
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.metadata import Metadata, is_true
from deltaspark.features.protocol import Protocol
from deltaspark.features.row_tracking import ENABLED_KEY as ROW_TRACKING_KEY
from deltaspark.features.table_properties import CONSTRAINT_PREFIX, check_user_properties
from deltaspark.operations.write import (
    GENERATION_KEY,
    add_of,
    clustering_columns,
    new_table_metadata,
    removes_of,
)
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)

CREATE_MODES = ("create", "createIfNotExists", "createOrReplace", "replace")


def create_table(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot | None,
    mode: str,
    schema: StructType,
    partition_by: list[str],
    properties: dict[str, str],
    comment: str | None,
    cluster_by: list[str] | None = None,
) -> CommitResult | None:
    """Create (or replace) the table, clustered by `cluster_by` when given; None when
    `createIfNotExists` found one."""
    if mode not in CREATE_MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(CREATE_MODES)}")
    if snapshot is not None and mode == "create":
        raise TableAlreadyExistsError(table_path)
    if snapshot is not None and mode == "createIfNotExists":
        return None
    if snapshot is None and mode == "replace":
        raise TableNotFoundError(table_path, "replace needs an existing table; use createOrReplace")
    if not schema.fields:
        raise InvalidArgumentError("A table needs at least one column")
    names = [f.name.lower() for f in schema.fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidArgumentError(f"Duplicate column name(s) (case-insensitive): {', '.join(duplicates)}")
    unknown = [c for c in partition_by if c.lower() not in names]
    if unknown:
        raise InvalidArgumentError(f"Partition column(s) {', '.join(unknown)} are not columns of the table")
    properties = check_user_properties(spark, properties, schema, table_path)
    for field in schema.fields:
        generation = field.metadata.get(GENERATION_KEY)
        if generation:
            what = f"The generation expression of column {field.name}"
            resolve_expression(spark, schema, generation, what, table_path, cast_to=field.dataType)
    schema, configuration = with_column_mapping(schema, dict(properties), keep_names=False)
    features = features_for_properties(configuration) | features_for_schema(schema)
    clustered = None
    if cluster_by is not None:
        clustered = clustering_columns(schema, cluster_by, partition_by, configuration, table_path)
        features.add("clustering")
    current = snapshot.protocol if snapshot is not None else None
    protocol = required_protocol(current, features)
    configuration = stored_configuration(configuration)
    metadata = new_table_metadata(schema, partition_by, configuration, description=comment)
    txn = Transaction(spark, storage, table_path, snapshot)
    txn.updateProtocol(protocol)
    txn.updateMetadata(metadata)
    if clustered is not None:
        mode = column_mapping_mode(protocol, metadata)
        txn.addAction(clustering.domain_action(clustering.physical_paths(clustered, mode)))
    parameters: dict[str, Any] = {
        "partitionBy": list(partition_by),
        "clusterBy": [f.name for f in clustered] if clustered is not None else None,
        "description": comment,
        "isManaged": "false",
        "properties": configuration,
    }
    operation = "CREATE TABLE"
    if snapshot is not None:
        operation = "REPLACE TABLE" if mode == "replace" else "CREATE OR REPLACE TABLE"
        txn.readWholeTable()
        txn.removeFiles(removes_of(snapshot.files(), int(time.time() * 1000)))
    return txn.commit(operation, parameters)


def set_properties(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, properties: dict[str, str]
) -> CommitResult:
    """ALTER TABLE SET TBLPROPERTIES: change configuration, adding the features it needs."""
    if not properties:
        raise InvalidArgumentError("No properties given")
    properties = check_user_properties(spark, properties, snapshot.schema, table_path)
    metadata = snapshot.metadata
    configuration = {**metadata.configuration, **properties}
    old_mode = (metadata.configuration.get(MODE_KEY) or "none").lower()
    new_mode = (configuration.get(MODE_KEY) or "none").lower()
    schema = snapshot.schema
    if new_mode != old_mode:
        if not (old_mode == "none" and new_mode == "name"):
            raise UnsupportedFeatureError(
                f"Cannot change {MODE_KEY} of {table_path} from {old_mode} to {new_mode}: only enabling "
                "`name` mode on a table without column mapping is possible without rewriting it",
                ["columnMapping"],
            )
        schema, configuration = with_column_mapping(schema, configuration, keep_names=True)
    protocol = required_protocol(
        snapshot.protocol, features_for_properties(configuration) | features_for_schema(schema)
    )
    configuration = stored_configuration(configuration)
    txn = Transaction(spark, storage, table_path, snapshot)
    added = {
        k: v
        for k, v in properties.items()
        if k.lower().startswith(CONSTRAINT_PREFIX) and metadata.configuration.get(k) != v
    }
    if added:
        # A new CHECK constraint must hold for the rows already there, as for rows written later;
        # a concurrent write (of rows not checked here) conflicts.
        txn.readWholeTable()
        _check_existing_rows(snapshot, added, table_path)
    txn.updateProtocol(protocol)
    txn.updateMetadata(_replace_metadata(metadata, configuration=configuration, schemaString=schema.json()))
    enabling_row_tracking = is_true(configuration.get(ROW_TRACKING_KEY)) and not metadata.flag(
        ROW_TRACKING_KEY
    )
    if enabling_row_tracking:
        backfilled = _backfill_row_ids(txn, snapshot)
        log.info("Enabling row tracking on %s: %d file(s) given base row ids", table_path, backfilled)
    # Enabling row tracking is checked as a data change (WriteSerializable): a concurrent append,
    # whose files may lack row ids, must conflict rather than land in a table that claims them.
    return txn.commit("SET TBLPROPERTIES", {"properties": properties}, dataChange=enabling_row_tracking)


def _check_existing_rows(snapshot: Snapshot, constraints: dict[str, str], table_path: str) -> None:
    """Count, in one job, the rows each constraint rejects (false or NULL, as writes check them)."""
    counts = (
        snapshot.toDF()
        .agg(*[F.count(F.when(~F.coalesce(F.expr(v), F.lit(False)), 1)) for v in constraints.values()])
        .first()
    )
    bad = [(k, v, n) for (k, v), n in zip(constraints.items(), counts or (), strict=True) if n]
    if bad:
        shown = "; ".join(f"{k} ({v}) by {n} row(s)" for k, v, n in bad)
        raise InvariantViolationError(f"Cannot add the CHECK constraint(s) to {table_path}: violated {shown}")


def _backfill_row_ids(txn: Transaction, snapshot: Snapshot) -> int:
    """Re-add (dataChange=false) every live file without a `baseRowId`, in the commit that enables
    row tracking, so that the transaction assigns it fresh row ids above the high-water mark: once
    `delta.enableRowTracking` is true every file must have one. The whole table is read, so a
    concurrent append (whose files may lack ids) conflicts instead of slipping through."""
    txn.readWholeTable()
    lacking = snapshot.files().where(F.col("baseRowId").isNull())
    counts = lacking.agg(
        F.count(F.lit(1)), F.count(F.when(F.col("stats_parsed.numRecords").isNull(), 1))
    ).first()
    if not counts[0]:
        return 0
    num_records = F.col("stats_parsed.numRecords")
    if counts[1]:
        # A file without a numRecords statistic: count its physical rows (DVs do not change them).
        path_column = "__deltaspark_path"
        physical = (
            read_files(
                snapshot,
                lacking.where(num_records.isNull()).withColumn(path_column, F.col("path")),
                carry=[path_column],
                apply_deletion_vectors=False,
            )
            .groupBy(path_column)
            .agg(F.count(F.lit(1)).alias("__rows"))
        )
        lacking = lacking.join(physical, lacking["path"] == physical[path_column], "left")
        num_records = F.coalesce(num_records, F.col("__rows"), F.lit(0))
    add = add_of(dataChange=F.lit(False))
    txn.addFiles(lacking.select(add.alias("add"), num_records.cast("long").alias("num_records")))
    return int(counts[0])


def unset_properties(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot,
    keys: list[str],
    if_exists: bool,
) -> CommitResult | None:
    metadata = snapshot.metadata
    missing = [k for k in keys if k not in metadata.configuration]
    if missing and not if_exists:
        raise InvalidArgumentError(
            f"{table_path} has no propert{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}"
        )
    if MODE_KEY in keys and (metadata.configuration.get(MODE_KEY) or "none") != "none":
        raise UnsupportedFeatureError(
            f"Cannot unset {MODE_KEY} of {table_path}: column mapping cannot be removed", ["columnMapping"]
        )
    present = [k for k in keys if k in metadata.configuration]
    if not present:
        return None
    configuration = {k: v for k, v in metadata.configuration.items() if k not in present}
    txn = Transaction(spark, storage, table_path, snapshot)
    txn.updateMetadata(_replace_metadata(metadata, configuration=configuration))
    return txn.commit("UNSET TBLPROPERTIES", {"properties": present, "ifExists": if_exists}, dataChange=False)


def add_feature_support(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, feature: str
) -> CommitResult | None:
    protocol = required_protocol(snapshot.protocol, {feature})
    if protocol == snapshot.protocol:
        return None
    return _commit_protocol(spark, storage, table_path, snapshot, protocol)


def upgrade_protocol(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, reader: int, writer: int
) -> CommitResult | None:
    """delta-spark's `upgradeTableProtocol`: raise the versions (never lower them)."""
    current = snapshot.protocol
    if reader < 1 or writer < 1 or reader > 3 or writer > 7:
        raise InvalidArgumentError(
            f"Protocol versions must be reader 1-3 and writer 1-7, got ({reader}, {writer})"
        )
    if reader < current.minReaderVersion or writer < current.minWriterVersion:
        raise InvalidArgumentError(
            f"Cannot downgrade the protocol of {table_path} from ({current.minReaderVersion}, "
            f"{current.minWriterVersion}) to ({reader}, {writer})"
        )
    if (reader, writer) == (current.minReaderVersion, current.minWriterVersion):
        return None
    if writer < 7:
        new = Protocol(reader, writer)  # legacy versions imply their features
    else:
        # Every feature the current protocol has, explicit or implied by its legacy versions.
        features = set(current.tableFeatures)
        reader_features = tuple(sorted(features & READER_WRITER_FEATURES))
        new = Protocol(reader, 7, reader_features if reader >= 3 else None, tuple(sorted(features)))
        if reader < 3 and reader_features and not (reader == 2 and reader_features == ("columnMapping",)):
            raise InvalidArgumentError(
                f"Features {', '.join(reader_features)} of {table_path} need reader version 3"
            )
    return _commit_protocol(spark, storage, table_path, snapshot, new)


def cluster_by(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, columns: list[str]
) -> CommitResult | None:
    """ALTER TABLE CLUSTER BY (NONE when `columns` is empty): record the clustering columns, adding
    the `clustering` feature when the table does not support it yet. Files are not rewritten:
    the next OPTIMIZE clusters the files no clustering laid out. None when nothing changes."""
    if not columns and not snapshot.protocol.hasFeature("clustering"):
        return None  # CLUSTER BY NONE on a table that was never clustered: nothing to record
    fields = clustering_columns(
        snapshot.schema, columns, snapshot.partitionColumns, snapshot.configuration, table_path
    )
    old = clustering.clustering_fields(snapshot)
    protocol = required_protocol(snapshot.protocol, {"clustering"})
    if protocol == snapshot.protocol and [f.name for f in old] == [f.name for f in fields]:
        return None
    txn = Transaction(spark, storage, table_path, snapshot)
    txn.updateProtocol(protocol)
    txn.addAction(clustering.domain_action(clustering.physical_paths(fields, snapshot.columnMappingMode)))
    parameters = {
        "oldClusteringColumns": ",".join(f.name for f in old),
        "newClusteringColumns": ",".join(f.name for f in fields),
    }
    return txn.commit("CLUSTER BY", parameters, dataChange=False)


def _commit_protocol(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, protocol: Protocol
) -> CommitResult:
    txn = Transaction(spark, storage, table_path, snapshot)
    txn.updateProtocol(protocol)
    parameters = {"newProtocol": protocol.asDict()}
    return txn.commit("UPGRADE PROTOCOL", parameters, dataChange=False)


def _replace_metadata(metadata: Metadata, **changes: Any) -> Metadata:
    return replace(metadata, **changes)

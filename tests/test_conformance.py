"""Every table in the shared conformance folder, checked against independent readers.

Each table's version, protocol, metadata, live file set and transactions must equal a plain-Python
reference replay (tests/reference_replay.py); where delta-rs (`deltalake`) loads the table, its
version, protocol and file set must agree too. Tables deltaspark must refuse are listed with the
error they must raise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable, TableNotFoundError, UnsupportedFeatureError
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.conftest import DRIVER_REPLAY_CONF, conformance_root
from tests.reference_replay import dv_id, replay
from tests.suites import skip_unless_swept

# Tables with variant columns (their schemaString has the `variant` type): Spark 3.5 cannot read them.
VARIANT_TABLES = {
    "spark-shredded-variant-preview-delta",
    "spark-variant-checkpoint",
    "spark-variant-stable-feature-checkpoint",
    "unshredded-variant",
}

# Tables that must be refused, with the exception and the words its message must name.
REFUSED = {
    "catalog-owned-preview": (UnsupportedFeatureError, "catalogManaged"),
    "table-with-geo": (UnsupportedFeatureError, "geospatial"),
    "crc-malformed": (TableNotFoundError, "no commit or checkpoint"),
}
if PYSPARK_VERSION < (4, 0):
    REFUSED.update(
        {
            name: (UnsupportedFeatureError, r"variant columns, which Spark 3\.5 cannot read")
            for name in VARIANT_TABLES
        }
    )


def _tables() -> list[str]:
    root = conformance_root()
    if root is None:
        return []
    found = []
    for entry in sorted(os.listdir(root)):
        path = root / entry
        if (path / "_delta_log").is_dir():
            found.append(entry)
        elif path.is_dir():
            found += [
                f"{entry}/{sub}" for sub in sorted(os.listdir(path)) if (path / sub / "_delta_log").is_dir()
            ]
    return found


TABLES = _tables()


def test_conformance_folder_is_present_and_complete(conformance):
    assert len(TABLES) >= 60, f"expected the full conformance set under {conformance}, found {len(TABLES)}"
    assert set(REFUSED) <= set(TABLES)
    with_variant = {name for name in TABLES if b'\\"variant\\"' in _commit_bytes(conformance / name)}
    assert with_variant == VARIANT_TABLES


def _commit_bytes(table_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((table_dir / "_delta_log").glob("*.json")))


def _absolute(root: Path, path: str) -> str:
    """An absolute local path for a decoded path that is relative, `/abs` or `file:` form."""
    if path.startswith("file:"):
        return "/" + path[len("file:") :].lstrip("/")
    return str(root / path) if not path.startswith("/") else path


# Run on Spark Connect too: every checkpoint kind, DVs, column mapping, compaction, a refusal.
CONNECT_SUBSET = [
    "basic-dv-with-checkpoint",
    "kernel-pagination-multi-part-checkpoints",
    "v2-checkpoints-json-with-sidecars",
    "v2-checkpoints-parquet-with-sidecars",
    "v2-classic-checkpoint-parquet",
    "v1-multi-part-struct-stats-only",
    "compacted-log-files-table",
    "cdf-column-mapping-name-mode-3-7",
    "catalog-owned-preview",
]


@pytest.mark.parametrize("name", TABLES)
def test_table_agrees_with_independent_readers(spark, conformance, name):
    skip_unless_swept(name)
    check_against_independent_readers(spark, conformance, name)


@pytest.mark.connect
@pytest.mark.parametrize("name", CONNECT_SUBSET)
def test_representative_tables(spark, conformance, name):
    assert name in TABLES
    check_against_independent_readers(spark, conformance, name)


def check_against_independent_readers(spark, conformance: Path, name: str) -> None:
    table_dir = conformance / name
    if name in REFUSED:
        error, words = REFUSED[name]
        with pytest.raises(error, match=words):
            DeltaTable.forPath(spark, str(table_dir)).snapshot()
        return

    snap = DeltaTable.forPath(spark, str(table_dir)).snapshot()
    ref = replay(str(table_dir))

    assert snap.version == ref.version
    assert snap.protocol.asDict() == {k: v for k, v in ref.protocol.items() if v is not None}
    assert snap.metadata.id == ref.metadata["id"]
    assert snap.metadata.schemaString == ref.metadata["schemaString"]
    assert list(snap.metadata.partitionColumns) == list(ref.metadata.get("partitionColumns") or [])
    assert snap.metadata.configuration == {
        k: v for k, v in (ref.metadata.get("configuration") or {}).items() if v is not None
    }

    rows = snap.files().select("path", "size", "deletionVector", "stats_parsed.numRecords").collect()
    ours = sorted(
        (unquote(r["path"]), dv_id(r["deletionVector"] and r["deletionVector"].asDict()), r["size"])
        for r in rows
    )
    expected = sorted((path, dv, a["size"]) for (path, dv), a in ref.files.items())
    assert ours == expected

    _replays_agree(spark, table_dir, snap)

    txns = {r["appId"]: r["version"] for r in snap.transactions().collect()}
    retention = snap.configuration.get("delta.setTransactionRetentionDuration")
    if retention is None:
        assert txns == {app: t["version"] for app, t in ref.txns.items()}
    domains = {r["domain"]: r["configuration"] for r in snap.domainMetadata().collect()}
    assert domains == {d: v["configuration"] for d, v in ref.domains.items()}

    from deltalake import DeltaTable as RsTable

    rs = RsTable(str(table_dir))  # delta-rs reads every table that deltaspark does not refuse
    assert rs.version() == snap.version
    rs_protocol = rs.protocol()
    assert rs_protocol.min_reader_version == snap.protocol.minReaderVersion
    assert rs_protocol.min_writer_version == snap.protocol.minWriterVersion
    assert sorted(rs_protocol.reader_features or []) == sorted(snap.protocol.readerFeatures or [])
    rs_files = sorted(_absolute(table_dir, u) for u in rs.file_uris())  # already decoded
    our_files = sorted(_absolute(table_dir, unquote(r["path"])) for r in rows)
    assert our_files == rs_files
    if not name.startswith("300k"):  # (no stats there; 300k rows of stats would only slow the run)
        assert _stats_differences(snap, rs) == []


def _replays_agree(spark, table_dir: Path, snap) -> None:
    """A log the driver replays (small, no sidecars) gives the reconciled actions of Spark's replay,
    field for field: the same rows in the same order of fields."""
    if snap.statePlan.held_rows is None:
        return
    columns = ["version", "is_add", "path_key", "dv_id", "add", "remove", "checkpoint_stats"]

    def rows(actions) -> list[str]:
        return sorted(r[0] for r in actions.select(F.to_json(F.struct(*columns))).collect())

    spark.conf.set(DRIVER_REPLAY_CONF, "0")
    try:
        by_spark = DeltaTable.forPath(spark, str(table_dir)).snapshot(version=snap.version).fileActions()
        assert rows(snap.fileActions()) == rows(by_spark)
    finally:
        spark.conf.unset(DRIVER_REPLAY_CONF)


def _flatten(prefix: str, value, out: dict) -> None:
    if value is None:
        return
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict):
        for key, child in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, child, out)
    else:
        out[prefix] = value


def _stats_differences(snap, rs) -> list[str]:
    """numRecords/min/max/nullCount per file: ours (`stats_parsed`, logical names) against delta-rs
    (`get_add_actions(flatten=True)`, physical names under column mapping)."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    logical = {}

    def walk(struct) -> None:
        for f in struct.fields:
            logical[f.metadata.get("delta.columnMapping.physicalName", f.name)] = f.name
            if hasattr(f.dataType, "fields"):
                walk(f.dataType)

    walk(snap.schema)
    voids = {f.name for f in snap.schema.fields if f.dataType.typeName() == "void"}
    ours: dict[str, dict] = {}
    for r in snap.files().select("path", "stats_parsed").collect():
        _flatten("", r["stats_parsed"], ours.setdefault(unquote(r["path"]), {}))
    prefixes = {
        "num_records": "numRecords",
        "min": "minValues",
        "max": "maxValues",
        "null_count": "nullCount",
    }
    differences = []
    for row in pa.table(rs.get_add_actions(flatten=True)).to_pylist():
        mine = ours[unquote(row["path"])]
        for key, theirs in row.items():
            head, _, rest = key.partition(".")
            if head not in prefixes or theirs is None:
                continue
            parts = [logical.get(p, p) for p in rest.split(".") if p]
            if parts and parts[0] in voids:
                continue  # void columns are dropped from the schema deltaspark reads
            name = ".".join([prefixes[head], *parts])
            value = mine.get(name)
            if isinstance(theirs, dt.datetime) and isinstance(value, dt.datetime):
                theirs, value = theirs.replace(tzinfo=None), value.replace(tzinfo=None)
            if isinstance(value, Decimal) or isinstance(theirs, Decimal):
                theirs, value = Decimal(str(theirs)), Decimal(str(value)) if value is not None else None
            if value != theirs:
                differences.append(f"{row['path']} {name}: deltaspark {value!r} != delta-rs {theirs!r}")
    return differences


def test_expired_transactions_follow_set_transaction_retention(spark, conformance):
    """`app-txn-with-last-updated` sets a 1-day txn retention: txns without `lastUpdated`, or
    updated long ago, are dropped (as Spark's Delta does); the rest are kept."""
    snap = DeltaTable.forPath(spark, str(conformance / "app-txn-with-last-updated")).snapshot()
    assert snap.configuration["delta.setTransactionRetentionDuration"] == "interval 1 days"
    assert snap.transactions().collect() == []  # every lastUpdated there is from 1970 or absent


def test_last_checkpoint_checksums_of_real_tables_verify(conformance):
    from deltaspark.log.json_checksum import checksum_of_text

    checked = 0
    for path in sorted(conformance.glob("*/_delta_log/_last_checkpoint")):
        text = path.read_text()
        expected = json.loads(text).get("checksum")
        if expected:
            assert checksum_of_text(text) == expected, path
            checked += 1
    assert checked >= 15

"""The incremental step of `DeltaTable.toIceberg`: from the Delta version the last conversion
recorded (`delta-version`) to the one being converted, touch only what changed.

The commits in between name every file that changed (an `add` or a `remove`; a new deletion vector
is a remove and an add of its file). Manifests naming none of those files are kept as they are;
those naming one are rewritten without it (`iceberg.manifest_rewriter`); the changed files that are
live now go into new manifests. Anything that would make the kept manifests wrong falls back to a
full conversion: another format version or partition spec, a field whose id changed (column mapping
enabled), a table that moved, a snapshot some other writer committed, or commits the log no longer
holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltaspark.iceberg import from_spark, manifest_rewriter, table_metadata
from deltaspark.iceberg.manifests import entries, manifests, parallelism
from deltaspark.log.files import LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import read_json_actions
from deltaspark.snapshot import Snapshot
from deltaspark.storage import Storage

cloudpickle.register_pickle_by_value(manifest_rewriter)

log = logging.getLogger(__name__)
DELTA_VERSION = "delta-version"
# The data files' total size, in each snapshot summary a conversion writes: an incremental
# conversion checks its manifests' bytes against the Delta snapshot without decoding kept ones.
DATA_BYTES = "deltaspark.data-files-size"


@dataclass(frozen=True)
class Increment:
    """What the increment keeps and what it must write."""

    live: list[dict[str, Any]]  # the previous snapshot's manifest-list rows with live entries
    dirty: DataFrame  # manifest_path, sequence_number, added_snapshot_id, drop: those to rewrite
    touched: DataFrame  # path: every file a commit since the last conversion added or removed
    data_bytes: int  # the data files' total size the previous snapshot recorded


def _fallback(why: str, root: str) -> None:
    log.info("Iceberg export of %s: full conversion, %s", root, why)


def plan(
    spark: Any,
    storage: Storage,
    snapshot: Snapshot,
    previous: table_metadata.TableMetadata,
    converted: from_spark.IcebergSchema,
    spec_id: int,
    format_version: int,
    root: str,
) -> Increment | None:
    """The increment from the previous conversion, or None when a full conversion is needed (the
    reason is logged)."""
    current = previous.snapshots.get(previous.current_snapshot_id or -1)
    recorded = previous.properties.get(DELTA_VERSION)
    if current is None or recorded is None:
        return _fallback("no earlier snapshot", root)
    if current.summary.get(DELTA_VERSION) != recorded:
        return _fallback("the current Iceberg snapshot was not written by a conversion", root)
    if not str(current.summary.get(DATA_BYTES, "")).isdigit():
        return _fallback(f"the last conversion recorded no {DATA_BYTES}", root)
    if previous.format_version != format_version:
        return _fallback(f"format {previous.format_version} becomes {format_version}", root)
    if previous.default_spec_id != spec_id:
        return _fallback("the partition columns changed", root)
    if previous.location.rstrip("/") != root.rstrip("/"):
        return _fallback(f"the table moved from {previous.location}", root)
    before = from_spark.ids_by_path(previous.schema)
    if any(converted.ids_by_path.get(path, fid) != fid for path, fid in before.items()):
        return _fallback("field ids changed (column mapping)", root)
    start, end = int(recorded) + 1, snapshot.version
    if start > end:
        return _fallback(f"the recorded version {recorded} is not older than {end}", root)
    listing = list_log_files(storage, log_dir_of(root), from_version=start) or []
    commits = sorted(
        (f for f in listing if f.kind is LogFileKind.COMMIT and start <= f.version <= end),
        key=lambda f: f.version,
    )
    if [c.version for c in commits] != list(range(start, end + 1)):
        return _fallback(f"the log no longer holds every commit from {start} to {end}", root)

    actions = read_json_actions(spark, commits, ["add", "remove"], select_lines=False)
    touched = (
        actions.select(F.coalesce(F.col("add.path"), F.col("remove.path")).alias("path"))
        .where(F.col("path").isNotNull())
        .select(canonical_path("path", root).alias("path"))
        .distinct()
    )
    listed = [r.asDict(recursive=True) for r in manifests(spark, previous, current).collect()]
    live = [m for m in listed if (m["added_files_count"] or 0) + (m["existing_files_count"] or 0) > 0]
    named = entries(spark, previous, current).where(F.col("status") != manifest_rewriter.DELETED)
    touched = _with_puffin_neighbours(named, touched)
    key = F.when(F.col("content") == 0, F.col("file_path")).otherwise(F.col("referenced_data_file"))
    hits = named.join(touched, key == touched["path"], "left_semi")
    dirty = hits.groupBy("manifest_path").agg(F.collect_list(key).alias("drop"))
    manifest_rows = spark.createDataFrame(
        [(m["manifest_path"], m["sequence_number"], m["added_snapshot_id"]) for m in live],
        "manifest_path string, sequence_number long, added_snapshot_id long",
    )
    return Increment(
        live=live,
        dirty=manifest_rows.join(dirty, "manifest_path"),
        touched=touched,
        data_bytes=int(current.summary[DATA_BYTES]),
    )


def _with_puffin_neighbours(named: DataFrame, touched: DataFrame) -> DataFrame:
    """`touched` plus the data files whose deletion vectors share a Puffin file with a touched one.

    A Puffin file holds the DVs of every data file one task converted, and some readers (pyiceberg
    0.12) apply every blob of a Puffin file they open, whatever the manifests say of each: a DV
    marked DELETED would still delete rows while another DV of its file stays live. So when one DV
    of a Puffin file changes, every data file with a DV there counts as changed: all of the file's
    entries become DELETED, and the DVs still live are written again into new Puffin files."""
    vectors = named.where(F.col("content") == 1).select("file_path", "referenced_data_file")
    puffins = vectors.join(touched, vectors["referenced_data_file"] == touched["path"], "left_semi")
    neighbours = vectors.join(puffins.select("file_path").distinct(), "file_path", "left_semi")
    return touched.unionByName(neighbours.select(F.col("referenced_data_file").alias("path"))).distinct()


def rewrite(
    spark: Any, increment: Increment, snapshot_id: int, sequence: int, metadata_dir: str
) -> tuple[list[dict[str, Any]], int]:
    """Rewrite the dirty manifests on the executors (one pass over the previous manifests) and
    return the new manifest list's rows for every previous manifest (kept ones unchanged,
    rewritten ones as added in this snapshot) and the data bytes they now list."""
    run = manifest_rewriter.manifest_rewriter(snapshot_id, metadata_dir)
    spread = increment.dirty.repartition(parallelism(spark))
    rewritten = {r["old_path"]: r.asDict() for r in spread.mapInArrow(run, _spark_schema()).collect()}
    out = []
    for m in increment.live:
        new = rewritten.get(m["manifest_path"])
        if new is None:
            out.append({k: v for k, v in m.items() if k != "has_key_metadata"})
            continue
        if new["existing_files_count"] == 0 and new["deleted_files_count"] == 0:
            continue
        out.append(
            {
                **{k: v for k, v in m.items() if k != "has_key_metadata"},
                "manifest_path": new["manifest_path"],
                "manifest_length": new["manifest_length"],
                "sequence_number": sequence,
                "min_sequence_number": sequence
                if new["min_sequence_number"] is None
                else new["min_sequence_number"],
                "added_snapshot_id": snapshot_id,
                "added_files_count": 0,
                "existing_files_count": new["existing_files_count"],
                "existing_rows_count": new["existing_rows_count"],
                "deleted_files_count": new["deleted_files_count"],
                "deleted_rows_count": new["deleted_rows_count"],
                "added_rows_count": 0,
                "first_row_id": None,
            }
        )
    log.info(
        "Iceberg export: %d manifests kept, %d rewritten",
        len(increment.live) - len(rewritten),
        len(rewritten),
    )
    change = sum(r["bytes_after"] - r["bytes_before"] for r in rewritten.values())
    return out, increment.data_bytes + change


def _spark_schema() -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(manifest_rewriter.REWRITTEN_ROW)

"""MERGE: upsert a source DataFrame into the table, as one commit.

The plan, as DataFrame transforms (nothing row-sized reaches the driver):

1. The source's rows are kept once (a local checkpoint, as delta-spark materializes a merge
   source: a non-deterministic source would otherwise give the passes below different rows; when
   an executor holding some is lost, the merge starts over) and aggregated once: its row count and
   the range of each key the condition equates with a target column (`pruning`).
2. Target files that cannot hold a match are skipped. One pass over the candidate files' rows
   (only the columns the condition and the clauses read) joins them with the source - inner, or
   left when not-matched-by-source clauses need the unmatched target rows; the source is the side
   Spark broadcasts - and tags each joined row with the first clause whose condition holds.
3. One aggregate per target row that matched or is changed finds the files holding a changed
   row and checks SQL's rule: a target row may be updated or deleted by at most one source row
   (`MergeCardinalityError` otherwise; a merge whose only matched clause is an unconditional
   delete is exempt, as in delta-spark, since every match deletes the same row).
4. Only those files change. With deletion vectors the changed rows are marked in each file's
   new DV (existing DVs kept) and only updated rows are written (merge-on-read): the aggregate of
   step 3 is followed by one per file listing its changed rows, which is cached in place of the
   rows and from which the DVs are built, without another shuffle of the rows; otherwise the
   files are rewritten with their unchanged rows copied (copy-on-write). When every live row of
   the touched files changes, there is nothing to copy and each DV would delete its whole file:
   those files are removed and their rows written without a DV. Files whose matched rows no
   clause changes are never rewritten.
5. Inserted rows are the source rows without a match: when the condition is key equalities (and
   conjuncts over the target alone), the source anti-joined with the matched pairs' keys from
   step 2, without a second pass over the target; otherwise anti-joined with the candidate rows.

Merges with only insert clauses anti-join the source with the candidate rows (only the columns
the condition reads) and append; they remove nothing, and when the source's key range misses
every file they read no target file at all.

New values pass the write's checks (NOT NULL, CHECK, invariants, generated columns, recomputed
when not assigned). With `withSchemaEvolution()`, `updateAll`/`insertAll` add the source's new
columns and struct fields to the table (and widen types when type widening is on). Row tracking:
updated and copied rows keep their row ids, inserted rows get fresh ones; updated and inserted rows
take the commit's version. Identity columns an insert leaves out are generated as a write
generates them, and their high-water marks move past the values written. Change data:
`update_preimage`/`update_postimage`, `delete`, `insert`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
)

from deltaspark.errors import InvalidArgumentError, MergeCardinalityError, MergeSourceLostError
from deltaspark.features.column_mapping import with_column_mapping
from deltaspark.features.enablement import features_for_schema, required_protocol
from deltaspark.features.identity_columns import with_high_water_marks
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.features.schema_evolution import merge_schemas
from deltaspark.operations.delete import (
    FILE_COLUMN,
    check_rows_changeable,
    mark_rows_deleted,
    materialized_row_tracking,
    write_change_files,
    writes_deletion_vectors,
)
from deltaspark.operations.file_set import FileSet, Total, held_listing, in_one_task, totals_of
from deltaspark.operations.merge.clauses import (
    DELETE,
    INSERT,
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    UPDATE,
    Clause,
    check_order,
)
from deltaspark.operations.merge.pruning import ConditionParts, KeyPair, all_of, key_ranges
from deltaspark.operations.merge.values import (
    CLAUSE,
    ROW_ID,
    ROW_VERSION,
    SOURCE_ROW,
    TARGET_ROW,
    ClauseValues,
    expression_of,
    first_line,
    quote,
    shown,
)
from deltaspark.operations.update import out_of_range_error
from deltaspark.operations.write import (
    check_writable_rows,
    with_identity_values,
    write_data_files,
)
from deltaspark.read.scan import LOCATION, read_files, tie_to_files
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import (
    KeptCopy,
    coalesced_partitions,
    conf_get,
    is_connect,
    is_local,
    local_frame,
    lost_kept_rows,
    parse_bytes,
    persist_sized,
    plan_bytes,
    rdd_rows,
    spark_version,
)
from deltaspark.storage import Storage
from deltaspark.transaction.idempotent import apply_once
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)

TARGET_ALIAS = "__deltaspark_target"  # the target's alias when the user gave none
SOURCE_HERE = "__deltaspark_source_present"
ROW_INDEX = "__deltaspark_row_index"
PAIR_BYTES = 256  # about the size of a matched pair's row: its file, position, clause and key
LISTED_ROW_BYTES = 8  # a changed row in its file's list (the DV route): its index
DRIVER_ROWS = 10_000  # source rows (and then changed target rows) a merge holds on the driver
DRIVER_SOURCE_BYTES = 8 * 1024 * 1024  # Spark's estimate of a source the driver may hold
DRIVER_LISTS_BYTES = 16 * 1024 * 1024  # the DV route's changed rows a merge may list on the driver
# A kept source up to this size (as kept: the JVM's estimate of its rows as objects, about twice
# their bytes) is broadcast to the join with the target's rows, where Spark's own threshold (10 MB,
# on its estimates) would shuffle both sides: the size is the copy's own, measured as it was filled,
# not an estimate.
BROADCAST_SOURCE_CONF = "spark.deltaspark.merge.broadcastSourceBytes"
DEFAULT_BROADCAST_SOURCE_BYTES = "128MB"
SOURCE_ATTEMPTS = 4  # merges started over when the kept source loses rows (delta-spark's default)
# Key types whose collected values Python orders as Spark does (not floating point: NaN; not
# timestamps with a time zone: collected as local wall-clock times, which a daylight-saving change
# can put out of order).
_ORDERED_TYPES = (IntegralType, DecimalType, BooleanType, DateType, TimestampNTZType)
_CHANGED_ROWS = StructType([StructField(LOCATION, StringType()), StructField(ROW_INDEX, LongType())])
_TOUCHED = StructType([StructField(LOCATION, StringType())])


@dataclass
class MergeOutcome:
    """The commit (None when nothing changed) and delta-spark's MERGE metrics."""

    commit: CommitResult | None
    metrics: dict[str, Any]


def merge(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot,
    target_alias: str | None,
    source: DataFrame,
    condition: Any,
    clauses: list[Clause],
    schema_evolution: bool = False,
    app: tuple[str, int] | None = None,
) -> MergeOutcome:
    """Merge `source` into the table (see the module docstring); `app`, an idempotent write's
    (txnAppId, txnVersion): nothing is read or committed when the table already holds it."""
    started = time.time()
    check_order(clauses)
    if not hasattr(source, "columns") or not hasattr(source, "join"):
        raise InvalidArgumentError(f"The merge source must be a DataFrame, got {type(source).__name__}")
    if not isinstance(condition, str) and type(condition).__name__ != "Column":
        raise InvalidArgumentError(
            f"The merge condition must be a SQL string or a Column, got {type(condition).__name__}"
        )
    modifies = any(c.modifies_target for c in clauses)
    if modifies:
        check_rows_changeable(snapshot, table_path, "merge into")
    else:
        check_writable_rows(snapshot.protocol, snapshot.metadata, table_path)
    alias = target_alias or TARGET_ALIAS
    attempt = 0
    while True:
        attempt += 1
        txn = Transaction(spark, storage, table_path, snapshot)
        plan = _Plan(spark, storage, table_path, snapshot, txn, alias, source, condition, clauses)
        plan.evolve = schema_evolution
        plan.replicated = attempt > 1
        if not apply_once(txn, app, table_path):
            return MergeOutcome(None, plan.metrics)
        plan.schema, plan.configuration = _evolved(
            snapshot, txn, source, clauses, schema_evolution, table_path
        )
        try:
            outcome = plan.run()
            break
        except Exception as exc:
            # The kept source lost rows (an executor gone): nothing is committed yet, so the merge
            # starts over with a new copy, kept on two executors on Spark 4 (the files written so far are
            # never committed: vacuum removes them).
            if lost_kept_rows(exc):
                if attempt < SOURCE_ATTEMPTS:
                    log.warning("Merge into %s lost its kept source; attempt %d", table_path, attempt + 1)
                    continue
                raise MergeSourceLostError(table_path, attempt) from exc
            found = out_of_range_error(exc)  # a value out of its column's range, raised by a task
            if found is None:
                raise
            raise found from None
        finally:
            plan.release()
    outcome.metrics["executionTimeMs"] = int((time.time() - started) * 1000)
    return outcome


def _evolved(
    snapshot: Snapshot,
    txn: Transaction,
    source: DataFrame,
    clauses: list[Clause],
    evolve: bool,
    table_path: str,
) -> tuple[StructType, dict[str, str]]:
    """The table's schema after the merge, and its configuration: with schema evolution and an
    `updateAll`/`insertAll` clause, the source's new columns and fields are added (metadata and
    protocol updated in `txn`)."""
    schema, metadata = snapshot.schema, snapshot.metadata
    if not evolve or not any(c.assignments is None for c in clauses):
        return schema, dict(metadata.configuration)
    widening = metadata.flag("delta.enableTypeWidening") and snapshot.protocol.hasFeature("typeWidening")
    merged = merge_schemas(schema, source.schema, table_path, widening)
    if merged == schema:
        return schema, dict(metadata.configuration)
    merged, configuration = with_column_mapping(merged, dict(metadata.configuration), keep_names=False)
    metadata = replace(metadata, schemaString=merged.json(), configuration=configuration)
    txn.updateProtocol(required_protocol(snapshot.protocol, features_for_schema(metadata.schema(table_path))))
    txn.updateMetadata(metadata)
    log.info("Merge into %s evolves the schema to %s", table_path, merged.simpleString())
    return metadata.schema(table_path), dict(metadata.configuration)


def _listed_per_file(marked: list[dict[str, Any]]) -> Any:
    """Changed rows held on the driver (`LOCATION`, `ROW_INDEX`: each once) as each file's list, a
    pyarrow Table (`path`, `rows`) as `mark_rows_deleted` takes it."""
    import pyarrow as pa

    by_file: dict[str, list[int]] = {}
    for r in marked:
        by_file.setdefault(r[LOCATION], []).append(r[ROW_INDEX])
    rows = pa.array(list(by_file.values()), pa.list_(pa.int64()))
    return pa.table({"path": pa.array(list(by_file), pa.string()), "rows": rows})


class _Plan:
    """One merge's steps, sharing what they have built (and what they cached)."""

    def __init__(
        self,
        spark: SparkSession,
        storage: Storage,
        table_path: str,
        snapshot: Snapshot,
        txn: Transaction,
        alias: str,
        source: DataFrame,
        condition: Any,
        clauses: list[Clause],
    ) -> None:
        self.spark, self.storage, self.table_path = spark, storage, table_path
        self.snapshot, self.txn, self.alias = snapshot, txn, alias
        self.user_source, self.condition, self.clauses = source, condition, clauses
        self.schema: StructType = snapshot.schema
        self.configuration: dict[str, str] = {}
        self.cached: list[Any] = []
        self.broadcast_source = False  # decided once the source is kept (`_broadcastable`)
        self.replicated = False  # the source kept on two executors (a merge started over)
        self.kept: KeptCopy | None = None  # the source's rows, unless held on the driver
        self.changed = False  # whether a file was added or removed
        self.touched_files: DataFrame | None = None  # the files holding a changed row
        self.matched_keys: DataFrame | None = None  # the matched pairs' source keys
        self.held_lists: Any = None  # the DV route's changed rows listed per file (`path`, `rows`), held
        self.inserted_rows: DataFrame | None = None
        self.evolve = False
        self.now = int(time.time() * 1000)
        self.indexes = {
            (kind, action): [i for i, c in enumerate(clauses) if c.kind == kind and c.action == action]
            for kind in (MATCHED, NOT_MATCHED_BY_SOURCE)
            for action in (UPDATE, DELETE)
        }
        self.updates = [i for i, c in enumerate(clauses) if c.action == UPDATE]
        self.deletes = [i for i, c in enumerate(clauses) if c.action == DELETE]
        self.inserts = [i for i, c in enumerate(clauses) if c.action == INSERT]
        self.by_source = any(c.kind == NOT_MATCHED_BY_SOURCE for c in clauses)
        self.modifies = any(c.modifies_target for c in clauses)
        matched = [c for c in clauses if c.kind == MATCHED]
        # delta-spark's exemption: every match of a lone unconditional delete deletes the same row
        self.duplicates_allowed = (
            len(matched) == 1 and matched[0].action == DELETE and matched[0].condition is None
        )
        tracked = row_tracking_enabled(snapshot.protocol, snapshot.metadata)
        self.hidden: tuple[str, ...] = (
            materialized_row_tracking(snapshot) if tracked and self.modifies else ()
        )
        self.metrics: dict[str, Any] = {
            "numSourceRows": 0,
            "numTargetRowsInserted": 0,
            "numTargetRowsUpdated": 0,
            "numTargetRowsMatchedUpdated": 0,
            "numTargetRowsNotMatchedBySourceUpdated": 0,
            "numTargetRowsDeleted": 0,
            "numTargetRowsMatchedDeleted": 0,
            "numTargetRowsNotMatchedBySourceDeleted": 0,
            "numTargetRowsCopied": 0,
            "numOutputRows": 0,
            "numTargetFilesAdded": 0,
            "numTargetFilesRemoved": 0,
            "numTargetChangeFilesAdded": 0,
            "numTargetBytesAdded": 0,
            "numTargetBytesRemoved": 0,
            "numTargetDeletionVectorsAdded": 0,
            "numTargetDeletionVectorsRemoved": 0,
            "numTargetDeletionVectorsUpdated": 0,
        }

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()

    # ---- 1. the source, and the target files that can hold a match ----------------------------
    def run(self) -> MergeOutcome:
        started = time.time()
        columns = list(self.user_source.columns)
        held = self._held_source()
        if held is None:
            self.kept = KeptCopy(self.user_source, plan_bytes(self.user_source), self.replicated)
            self.cached.append(self.kept)
            held = self.kept.frame
        self.source = held.select(
            "*",
            F.lit(True).alias(SOURCE_HERE),
            F.struct(*[F.col(quote(c)) for c in columns]).alias(SOURCE_ROW),
        )
        self.source_types = {
            c.lower(): (c, t)
            for c, t in zip(columns, [f.dataType for f in self.user_source.schema.fields], strict=True)
        }
        parts = ConditionParts(self.condition, self.alias, self.snapshot.schema, self.user_source)
        self.pairs = parts.key_pairs()
        # the source rows with a match are found from the matched pairs' keys (no second join)
        self.keyed = parts.keys_decide_matches()
        # each key's source range bounds the target's (not where a cast could reorder the keys)
        self.ranged = [] if self.by_source else parts.ranged_pairs()
        source_rows, ranges = self._key_bounds(self.ranged)  # fills the kept source
        self.broadcast_source = self._broadcastable()
        self.metrics["numSourceRows"] = source_rows
        candidates = self._candidates(parts, ranges, source_rows)
        self.candidates = candidates
        self._check_condition()
        if not self.modifies:
            self.metrics["numTargetRowsInserted"] = self._write(self._inserted()).rows
        else:
            self._change(time.time() - started)
        return self._commit()

    def _key_bounds(self, ranged: list[KeyPair]) -> tuple[int, list[tuple[Any, Any]]]:
        """The source's row count and each key's (min, max), which bound the target files a match
        can be in: from the rows of a source held on the driver (a projection of a local relation:
        no job) when every key is of a type Python orders as Spark does, else one aggregate."""
        source = self.source
        if is_local(source):
            keys = source.select(*[p.source.alias(f"__b{i}") for i, p in enumerate(ranged)] or [F.lit(1)])
            if all(_python_ordered(f.dataType) for f in keys.schema.fields):
                rows = keys.collect()
                columns = [[r[i] for r in rows if r[i] is not None] for i in range(len(ranged))]
                return len(rows), [(min(c), max(c)) if c else (None, None) for c in columns]
        row = source.agg(F.count(F.lit(1)), *[f(p.source) for p in ranged for f in (F.min, F.max)]).first()
        return int(row[0]), [(row[1 + 2 * i], row[2 + 2 * i]) for i in range(len(ranged))]

    def _broadcastable(self) -> bool:
        """Whether the kept source is small enough to broadcast (`BROADCAST_SOURCE_CONF`): the copy
        is filled by now, and its size is measured, not estimated. A source held on the driver (not
        kept, or kept as it is: no size) is broadcast by Spark anyway; -1 turns this off."""
        if self.kept is None:
            return False
        bound = parse_bytes(conf_get(self.spark, BROADCAST_SOURCE_CONF, DEFAULT_BROADCAST_SOURCE_BYTES))
        size = self.kept.kept_bytes()
        broadcast = bound >= 0 and size is not None and size <= bound
        log.info("Merge source of %s: %s bytes kept, broadcast: %s", self.table_path, size, broadcast)
        return broadcast

    def _held_source(self) -> DataFrame | None:
        """A small source held on the driver (Spark 4: a local relation made from its Arrow
        batches, nested types included), so that every join with it broadcasts without a job;
        None when it is not small (Spark's estimate above `DRIVER_SOURCE_BYTES`, or more than
        `DRIVER_ROWS` rows), or on Spark 3.5 and Connect. Rows Spark has no estimate for, made
        from an RDD (`createDataFrame` of Python rows or a pandas frame), are tried too: the
        limited collect reads at most `DRIVER_ROWS` + 1 of them, the kept copy's job would read
        them all. Read once either way: a non-deterministic source gives every pass the same rows."""
        source, spark = self.user_source, self.spark
        if spark_version(spark) < (4, 0):
            return None
        size = plan_bytes(source)
        if size is None and not rdd_rows(source) or size is not None and size > DRIVER_SOURCE_BYTES:
            return None
        qualifier = _single_qualifier(source)
        if qualifier is None:
            return None
        try:
            table = source.limit(DRIVER_ROWS + 1).toArrow()
            if table.num_rows > DRIVER_ROWS:
                return None
            held = spark.createDataFrame(table, schema=source.schema)
        except Exception as exc:  # noqa: BLE001 - a type Arrow does not carry: cached instead
            log.info("Merge source of %s not held on the driver: %s", self.table_path, exc)
            return None
        return held.alias(qualifier) if qualifier else held

    def _candidates(
        self, parts: ConditionParts, ranges: list[tuple[Any, Any]], source_rows: int
    ) -> DataFrame | None:
        """The files that can hold a target row the merge reads (None: none can)."""
        snapshot = self.snapshot
        if self.by_source:  # every target row not matched is a candidate for those clauses
            self.txn.readWholeTable()
            files = snapshot.files()
        elif source_rows == 0 or any(low is None for low, _ in ranges):
            log.info("Merge into %s: no source key can match, no target file is read", self.table_path)
            return None
        else:
            predicate = all_of(key_ranges(self.ranged, ranges) + parts.target_only())
            if predicate is None:
                self.txn.readWholeTable()
                files = snapshot.files()
            else:
                self.txn.readPredicate(predicate)
                files = snapshot.files(predicate)
        candidates = persist_sized(files, snapshot.stateBytes)
        self.cached.append(candidates)
        self.txn.readFiles(candidates)
        return candidates

    # ---- 2. the joined rows, each tagged with its clause --------------------------------------
    def _target(self, files: DataFrame | None, listed: list[Any] | None = None) -> DataFrame:
        """The candidate files' rows: the table's columns (for the user's expressions), the row as
        a struct, its file and position, and its row id and commit version when rows are tracked
        (`listed`: what the read collects of `files`, when held)."""
        schema = self.snapshot.schema
        tracked = bool(self.hidden)
        if files is None:
            fields = [
                *schema.fields,
                StructField(LOCATION, StringType()),
                StructField("_row_index", LongType()),
            ]
            if tracked:
                meta = StructType(
                    [StructField("row_id", LongType()), StructField("row_commit_version", LongType())]
                )
                fields.append(StructField("_metadata", meta))
            rows = self.spark.createDataFrame([], StructType(fields))
        else:
            rows = read_files(
                self.snapshot,
                files,
                row_tracking=tracked,
                keep_row_index=True,
                locate=True,
                listed=listed,
            )
        table = [F.col(quote(f.name)) for f in schema.fields]
        tracking = (
            [
                F.col("_metadata.row_id").alias(ROW_ID),
                F.col("_metadata.row_commit_version").alias(ROW_VERSION),
            ]
            if tracked
            else []
        )
        return rows.select(
            *table,
            F.col(LOCATION),
            F.col("_row_index").alias(ROW_INDEX),
            *tracking,
            F.struct(*table).alias(TARGET_ROW),
        ).alias(self.alias)

    def _join_condition(self) -> Column:
        return F.expr(self.condition) if isinstance(self.condition, str) else self.condition

    def _joined(
        self, files: DataFrame | None, keep_target_rows: bool, listed: list[Any] | None = None
    ) -> DataFrame:
        """The rows of `files` joined with the source, tagged with `CLAUSE`: matched pairs, and
        with `keep_target_rows` every target row (left join: the source is the side Spark can
        broadcast). Source rows without a match are found apart (`_inserted`)."""
        how = "left" if keep_target_rows else "inner"
        source = F.broadcast(self.source) if self.broadcast_source else self.source
        joined = self._target(files, listed).join(source, self._join_condition(), how)
        return joined.withColumn(CLAUSE, self._tag(inserting=False))

    def _tag(self, inserting: bool) -> Column:
        """The index of the first clause whose condition holds for a joined row (null: none).
        `inserting`: the rows are source rows without a match (insert clauses); otherwise target
        rows, each joined with a matching source row or with none (the other clauses)."""
        source_here = F.col(SOURCE_HERE).isNotNull()
        scope = {MATCHED: source_here, NOT_MATCHED: F.lit(True), NOT_MATCHED_BY_SOURCE: ~source_here}
        tag: Any = None
        for i, clause in enumerate(self.clauses):
            if (clause.kind == NOT_MATCHED) != inserting:
                continue
            holds = scope[clause.kind]
            if clause.condition is not None:
                holds = holds & F.coalesce(expression_of(clause.condition), F.lit(False))
            tag = F.when(holds, F.lit(i)) if tag is None else tag.when(holds, F.lit(i))
        return tag if tag is not None else F.lit(None).cast("int")

    def _check_condition(self) -> None:
        """The condition and each clause's resolved now, before any job: errors name them."""
        probe = self._target(None).join(self.source, F.lit(True), "inner")
        _check_boolean(probe, self._join_condition(), f"The merge condition {shown(self.condition)}")
        for clause in self.clauses:
            if clause.condition is not None:
                what = f"{clause.method}'s condition {shown(clause.condition)}"
                _check_boolean(probe, expression_of(clause.condition), what)
        self.values = ClauseValues(
            self.clauses,
            self.snapshot.schema,
            self.schema,
            self.alias,
            self.source_types,
            self.evolve,
            self.hidden,
            self.table_path,
            probe,
        )

    # ---- 3. which target rows change, checked for ambiguity -----------------------------------
    def _change(self, scan_seconds: float) -> None:
        use_dvs = writes_deletion_vectors(self.snapshot)
        size = None if self.by_source else self.metrics["numSourceRows"] * PAIR_BYTES
        few = size is not None and self.metrics["numSourceRows"] <= DRIVER_ROWS
        listed = held_listing(self.candidates) if few else None
        joined = self._joined(self.candidates, keep_target_rows=self.by_source, listed=listed)
        here = F.col(SOURCE_HERE).isNotNull()
        # The target row's key names it in a cardinality error. Through the alias, not the row's
        # struct: only the columns the condition and the clauses read are scanned.
        key = (
            F.struct(*[F.col(f"{quote(self.alias)}.{quote(p.target)}").alias(p.target) for p in self.pairs])
            if self.pairs
            else F.struct(F.col(LOCATION).alias("file"), F.col(ROW_INDEX).alias("row"))
        )
        keys = [p.source.alias(f"__k{i}") for i, p in enumerate(self.pairs)] if self.keyed else []
        # One pass over the candidates: the matched pairs and the target rows a
        # not-matched-by-source clause changes (kept when the inserts need the matched keys too).
        # Each pair's file as the scan names it: its path in the log is found for the touched files
        # alone (`tie_to_files`), not joined to every row read.
        narrow = joined.where(here | F.col(CLAUSE).isNotNull()).select(
            LOCATION, ROW_INDEX, CLAUSE, here.alias("__matched"), key.alias("key"), *keys
        )
        # a pair per matched source row (and, by source, the target rows those clauses change)
        kinds = [
            self.indexes[(MATCHED, UPDATE)],
            self.indexes[(NOT_MATCHED_BY_SOURCE, UPDATE)],
            self.indexes[(MATCHED, DELETE)],
            self.indexes[(NOT_MATCHED_BY_SOURCE, DELETE)],
        ]
        changes = F.col("changes")
        # A small source's pairs held on the driver: the changed rows, their totals, the files
        # they touch and the matched keys all come from one collect, with no cache.
        counted = (
            Total("changed", "count", "__changed"),
            Total("ambiguous", "count", "__ambiguous"),
            Total("most_pairs", "max", "pairs"),
            *[Total(f"kind{i}", "count", f"__kind{i}") for i in range(len(kinds))],
        )
        narrow = in_one_task(narrow, listed)  # small files: the collect below is one job
        held = self._held_pairs(narrow, len(keys), kinds) if few else None
        # Candidate files held on the driver are few: the files holding a changed row come with
        # the totals (one aggregate), not from a distinct of their own (one job more).
        with_files = held is None and self.candidates is not None and is_local(self.candidates)
        if with_files:
            counted = (*counted, Total("files", "values", "__changed_file"))
        lists = None  # the DV route's per-file lists, when held on the driver
        if held is not None:
            totals = {t.name: t.of([r[t.column] for r in held]) for t in counted}
            per_row = None
        else:
            if self.keyed and self.inserts:
                narrow = persist_sized(narrow, size, StorageLevel.MEMORY_AND_DISK)
                self.cached.append(narrow)
                self.matched_keys = narrow.where("__matched").select(*[f"__k{i}" for i in range(len(keys))])
            per_row = narrow.groupBy(LOCATION, ROW_INDEX).agg(
                F.count(F.lit(1)).alias("pairs"),
                F.count(CLAUSE).alias("changes"),
                F.max(CLAUSE).alias("clause"),
            )
            per_row = per_row.select(
                "*",
                F.when(changes > 0, 1).alias("__changed"),
                *(
                    [F.when(changes > 0, F.col(LOCATION)).alias("__changed_file")]
                    if with_files and not use_dvs
                    else []
                ),
                F.when(changes > 1, 1).alias("__ambiguous"),
                *[
                    F.when((changes > 0) & F.col("clause").isin(k), 1).alias(f"__kind{i}")
                    for i, k in enumerate(kinds)
                ],
            )
            if use_dvs:
                # The DV route marks the changed rows: each file's, listed by one more aggregate
                # (its shuffle carries lists), cached in place of the rows, and totalled.
                per_file = per_row.groupBy(LOCATION).agg(
                    *[F.count(t.column).alias(t.column) for t in counted if t.kind == "count"],
                    F.max("pairs").alias("pairs"),
                    F.collect_list(F.when(changes > 0, F.col(ROW_INDEX))).alias("rows"),
                )
                if with_files:
                    touching = F.when(F.col("__changed") > 0, F.col(LOCATION))
                    per_file = per_file.select("*", touching.alias("__changed_file"))
                summed = tuple(Total(t.name, "sum", t.column) if t.kind == "count" else t for t in counted)
                listed_bytes = None if self.by_source else self.metrics["numSourceRows"] * LISTED_ROW_BYTES
                lists = self._held_lists(per_file, listed_bytes) if with_files else None
                if lists is not None:
                    per_file, self.held_lists, values = lists
                    totals = {t.name: t.of(values[t.column]) for t in summed}
                else:
                    # Merged into few partitions, not reshuffled (as `persist_sized` does small
                    # data): the lists' last stage only concatenates each file's partial lists.
                    if listed_bytes is not None:  # a changed row per source row at most
                        per_file = per_file.coalesce(coalesced_partitions(self.spark, listed_bytes))
                    per_file = per_file.persist(StorageLevel.MEMORY_AND_DISK)
                    self.cached.append(per_file)
                    totals = totals_of(per_file, summed)
            else:
                # Cached only when read again: without the candidates held the touched files come
                # from their distinct. Copy-on-write with the touched files in the totals reads it
                # once (and, on a cardinality error, once more).
                if not with_files:
                    per_row = persist_sized(per_row, size, StorageLevel.MEMORY_AND_DISK)
                    self.cached.append(per_row)
                totals = totals_of(per_row, counted)
        if totals["ambiguous"] and not self.duplicates_allowed:
            if held is not None:
                worst = next(r for r in held if r["changes"] > 1)
            else:
                worst = per_row.where(changes > 1).select(LOCATION, ROW_INDEX, "changes").first()
            at = (F.col(LOCATION) == worst[LOCATION]) & (F.col(ROW_INDEX) == worst[ROW_INDEX])
            key = narrow.where(at).select("key").first()[0]  # a second pass, on this error only
            raise MergeCardinalityError(self.table_path, _key_text(key), int(worst["changes"]))
        counts = [int(totals.get(f"kind{i}") or 0) for i in range(len(kinds))]
        m = self.metrics
        m["numTargetRowsMatchedUpdated"], m["numTargetRowsNotMatchedBySourceUpdated"] = counts[0], counts[1]
        m["numTargetRowsMatchedDeleted"], m["numTargetRowsNotMatchedBySourceDeleted"] = counts[2], counts[3]
        m["numTargetRowsUpdated"] = counts[0] + counts[1]
        m["numTargetRowsDeleted"] = counts[2] + counts[3]
        m["scanTimeMs"] = int(scan_seconds * 1000)
        rewrite_started = time.time()
        self.multiple = (totals["most_pairs"] or 0) > 1  # some target row matched more than one source row
        changed_rows = int(totals["changed"] or 0)  # a sum of no file's count: None
        if held is not None:  # the changed rows, as held on the driver
            marked = [r for r in held if r["changes"] > 0]
            rows = {LOCATION: [r[LOCATION] for r in marked], ROW_INDEX: [r[ROW_INDEX] for r in marked]}
            changed_frame = local_frame(self.spark, rows, _CHANGED_ROWS)
            files: list[str] | None = sorted({r[LOCATION] for r in marked})
            if use_dvs:  # their DVs encoded on the driver from these lists
                self.held_lists = _listed_per_file(marked)
        elif use_dvs:  # the lists held on the driver are those of files with a changed row only
            changed_frame = per_file if lists is not None else per_file.where(F.col("__changed") > 0)
            changed_frame = changed_frame.select(LOCATION, "rows")
            files = list(totals["files"] or []) if with_files else None
        else:
            changed_frame = per_row.where(changes > 0).select(LOCATION, ROW_INDEX)
            files = list(totals["files"] or []) if with_files else None
        # the touched files' locations held on the driver when known there, else Spark's distinct
        if files is not None:
            located = local_frame(self.spark, {LOCATION: files}, _TOUCHED)
        else:
            located = changed_frame.select(LOCATION)
            located = located if use_dvs else located.distinct()  # listed rows: one per file already
        touched = self._touched(located) if changed_rows else None
        if touched is None:
            if self.inserts:
                m["numTargetRowsInserted"] = self._write(self._inserted()).rows
        else:
            # Every live row of the touched files changed: each would get a DV of all its rows and
            # be removed, so no DV is built - the same commit, copy-on-write.
            live = touched.count("records") - touched.count("dv_rows")
            if use_dvs and not touched.count("no_stats") and changed_rows < live:
                self._merge_on_read(touched, changed_frame)
            else:
                if use_dvs and touched.count("no_stats"):  # DVs need each touched file's row count
                    log.info("Rewriting files of %s: some have no numRecords statistic", self.table_path)
                elif use_dvs:
                    log.info("Merge into %s: every row of the touched files changes, no DV", self.table_path)
                self._copy_on_write(touched, changed_rows)
        m["rewriteTimeMs"] = int((time.time() - rewrite_started) * 1000)

    def _held_lists(
        self, per_file: DataFrame, listed_bytes: int | None
    ) -> tuple[DataFrame, Any, dict[str, list[Any]]] | None:
        """The DV route's per-file aggregate (one row per candidate file holding a pair, with its
        changed rows listed) collected as Arrow and held on the driver (Spark 4, classic): the
        changed files' lists as a local relation (`LOCATION`, `rows`) and as a pyarrow Table
        (`path`, `rows`, as `mark_rows_deleted` takes them), and each column but the lists as
        values for the totals. One job, where caching the lists and totalling the cache cost
        three (0.3 s for 1M changed rows of 100 files). Only where the candidates are held on the
        driver (so the rows are few) and the lists are at most `DRIVER_LISTS_BYTES` (a changed row
        per source row at most); None otherwise (Spark's cache)."""
        spark = self.spark
        if listed_bytes is None or listed_bytes > DRIVER_LISTS_BYTES:
            return None
        if spark_version(spark) < (4, 0) or is_connect(spark):
            return None
        import pyarrow as pa

        table = per_file.toArrow()
        values = {name: table.column(name).to_pylist() for name in table.column_names if name != "rows"}
        changed = [bool(v) for v in values["__changed"]]
        held = table.filter(pa.array(changed, pa.bool_())).select([LOCATION, "rows"])
        schema = StructType([per_file.schema[LOCATION], per_file.schema["rows"]])
        return spark.createDataFrame(held, schema=schema), held.rename_columns(["path", "rows"]), values

    def _held_pairs(self, narrow: DataFrame, keys: int, kinds: list[Any]) -> list[dict[str, Any]] | None:
        """The changed target rows of `narrow`'s matched pairs, held on the driver when the pairs
        are at most `DRIVER_ROWS`: each target row's pairs, changes, (last) clause and the marker
        columns the distributed route aggregates (`__changed`, `__ambiguous`, `__kind<i>`), and the
        matched source keys as a held frame when the inserts need them. None when they are more, or
        a key cannot be held (then: Spark)."""
        names = [f"__k{i}" for i in range(keys)]
        rows = (
            narrow.select(LOCATION, ROW_INDEX, CLAUSE, "__matched", *names).limit(DRIVER_ROWS + 1).collect()
        )
        if len(rows) > DRIVER_ROWS:
            return None
        if self.keyed and self.inserts:
            matched = [r for r in rows if r["__matched"]]
            try:
                self.matched_keys = local_frame(
                    self.spark,
                    {name: [r[name] for r in matched] for name in names},
                    StructType([narrow.schema[name] for name in names]),
                )
            except Exception:  # noqa: BLE001 - a key type the driver cannot hold: Spark's route
                return None
        per: dict[tuple[str, int], dict[str, Any]] = {}
        for r in rows:
            key = (r[LOCATION], r[ROW_INDEX])
            row = per.get(key)
            if row is None:
                row = {LOCATION: key[0], ROW_INDEX: key[1], "pairs": 0, "changes": 0, "clause": None}
                per[key] = row
            row["pairs"] += 1
            if r[CLAUSE] is not None:
                row["changes"] += 1
                row["clause"] = r[CLAUSE] if row["clause"] is None else max(row["clause"], r[CLAUSE])
        held = list(per.values())
        for row in held:
            changed = row["changes"] > 0
            row["__changed"] = 1 if changed else None
            row["__ambiguous"] = 1 if row["changes"] > 1 else None
            for i, k in enumerate(kinds):
                row[f"__kind{i}"] = 1 if changed and row["clause"] in k else None
        return held

    def _touched(self, located: DataFrame) -> FileSet:
        """The candidate files holding a changed row (`LOCATION`: as the scan names them), with their
        totals. Their paths in the log are found here (`tie_to_files`), for these files alone: a
        changed row of a file the candidates do not hold fails the merge."""
        assert self.candidates is not None
        paths = tie_to_files(located, self.candidates, self.snapshot.tableRoot, "__touched")
        touched = FileSet.among(self.candidates, paths, self.now, self.cached, self.snapshot.stateBytes)
        self.touched_files = touched.frame
        return touched

    # ---- 4. the new files -------------------------------------------------------------------
    def _merge_on_read(self, touched: FileSet, changed: DataFrame) -> None:
        """Changed rows marked in the touched files' DVs; updated and inserted rows written."""
        # each row's file as the scan names it: DVs are keyed by canonical path, as the log's are
        if "rows" in changed.columns:
            marked = changed.select(F.col(LOCATION).alias("path"), "rows")
        else:
            marked = changed.select(F.col(LOCATION).alias(FILE_COLUMN), F.col(ROW_INDEX).alias("_row_index"))
        marking = mark_rows_deleted(
            self.spark,
            self.storage,
            self.snapshot,
            self.txn,
            touched,
            marked,
            self.now,
            self.cached,
            held=self.held_lists,
        )
        self.changed = self.changed or marking.changed_files > 0
        m = self.metrics
        m["numTargetFilesRemoved"] = marking.emptied_files
        m["numTargetBytesRemoved"] = marking.emptied_bytes
        m["numTargetDeletionVectorsAdded"] = marking.changed_files - marking.emptied_files
        m["numTargetDeletionVectorsUpdated"] = marking.had_dv - marking.emptied_with_dv
        m["numTargetDeletionVectorsRemoved"] = marking.had_dv
        if self.updates or self.inserts:
            written_rows = self._write(self._rows(touched, dv=True)).rows
        else:  # a delete-only merge writes no data file
            written_rows = 0
            self._record_changes(None)
        m["numTargetRowsInserted"] = written_rows - m["numTargetRowsUpdated"]
        log.info(
            "Merge into %s: %d row(s) marked in the deletion vectors of %d file(s), %d row(s) written",
            self.table_path,
            m["numTargetRowsUpdated"] + m["numTargetRowsDeleted"],
            marking.changed_files,
            written_rows,
        )

    def _copy_on_write(self, touched: FileSet, changed_rows: int) -> None:
        """The touched files rewritten: their unchanged rows copied, updated rows in their new
        values, deleted rows left out; inserted rows written with them; the originals removed."""
        touched.remove_from(self.txn)
        self.changed = True
        m = self.metrics
        m["numTargetFilesRemoved"] = touched.count("files")
        m["numTargetBytesRemoved"] = touched.count("bytes")
        m["numTargetDeletionVectorsRemoved"] = touched.count("dvs")
        written_rows = self._write(self._rows(touched, dv=False)).rows
        if touched.count("no_stats"):
            inserted = self._inserted().count() if self.inserts else 0
            copied = written_rows - m["numTargetRowsUpdated"] - inserted
        else:
            copied = touched.count("records") - touched.count("dv_rows") - changed_rows
        m["numTargetRowsCopied"] = copied
        m["numTargetRowsInserted"] = written_rows - m["numTargetRowsUpdated"] - copied

    def _inserted(self) -> DataFrame:
        """The rows the insert clauses add, in the table's columns (`_Values.project`): source rows
        without a match - not among the matched pairs' keys when the keys decide matches, else
        anti-joined with the candidate rows - that a clause inserts."""
        if self.inserted_rows is not None:
            return self.inserted_rows
        matched_keys = self.matched_keys
        if matched_keys is not None:
            on = [p.source.eqNullSafe(F.col(f"__k{i}")) for i, p in enumerate(self.pairs)]
            unmatched = self.source.join(matched_keys, _all(on), "left_anti")
        else:
            unmatched = self.source.join(self._target(self.candidates), self._join_condition(), "left_anti")
        tagged = unmatched.withColumn(CLAUSE, self._tag(inserting=True))
        rows = self.values.project(tagged.where(F.col(CLAUSE).isNotNull()), with_target=False)
        self.inserted_rows = self._with_identity_values(rows)
        return self.inserted_rows

    def _with_identity_values(self, rows: DataFrame) -> DataFrame:
        """`rows` with values generated for the identity columns their clause leaves out (as a
        write generates them), cached: the data files and the change data must hold the same
        values, and the values depend on how rows reach partitions."""
        missing = self.values.identity_missing
        if not missing:
            return rows
        given = rows.select(
            *[F.col(quote(c)).alias(f"__given_{c}" if c in missing else c) for c in rows.columns]
        )
        generated, _ = with_identity_values(
            self.spark, given, [info for info, _ in missing.values()], self.table_path
        )
        clause = F.col(CLAUSE)
        out = generated.select(
            *[
                F.when(clause.isin(missing[c][1]), F.col(quote(c)))
                .otherwise(F.col(quote(f"__given_{c}")))
                .alias(c)
                if c in missing
                else F.col(quote(c))
                for c in rows.columns
            ]
        ).persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(out)
        return out

    def _rows(self, touched: FileSet, dv: bool) -> DataFrame:
        """The rows the merge writes: the insert clauses' rows, and from the touched `files` the
        updated rows (with DVs), or (copy-on-write) also the rows no clause changes, once each (a
        target row matched by several source rows is kept once)."""
        clause = F.col(CLAUSE)
        joined = self._joined(touched.frame, keep_target_rows=self.by_source or not dv, listed=touched.listed)
        if dv:
            target_side = joined.where(clause.isin(self.updates))
        else:
            target_side = joined
            if self.multiple:
                # the pair a clause changes comes first; without one, any pair stands for the row
                order = Window.partitionBy(LOCATION, ROW_INDEX).orderBy(clause.isNull(), clause)
                numbered = target_side.withColumn("__n", F.row_number().over(order))
                target_side = numbered.where(F.col("__n") == 1).drop("__n")
            if self.deletes:
                target_side = target_side.where(~clause.isin(self.deletes) | clause.isNull())
        rows = self.values.project(target_side, with_target=True)
        return rows.unionByName(self._inserted()) if self.inserts else rows

    def _write(self, rows: DataFrame) -> Any:
        """`rows` (`_Values.project`ed) written as data files and added; change data recorded."""
        snapshot = self.snapshot
        self._record_changes(rows)
        written = write_data_files(
            self.spark,
            snapshot.tableRoot,
            self.schema,
            snapshot.partitionColumns,
            self.configuration,
            rows.select(
                *[F.col(quote(f.name)) for f in self.schema.fields], *[F.col(h) for h in self.hidden]
            ),
            mode=snapshot.columnMappingMode,
            hidden_columns=self.hidden,
            extra_aggregates=tuple(
                (F.max if info.step > 0 else F.min)(F.col(quote(name))).alias(f"__identity_{i}")
                for i, (name, (info, _)) in enumerate(self.values.identity_missing.items())
            ),
        )
        self.cached.append(written)
        if written.files and self.values.identity_missing:
            self._move_high_water_marks(written)
        if written.files:
            self.changed = True
            self.txn.addFiles(written.adds, written.files, written.lines)  # type: ignore[arg-type]
        self.metrics["numTargetFilesAdded"] = written.files
        self.metrics["numTargetBytesAdded"] = written.bytes
        self.metrics["numOutputRows"] = written.rows
        return written

    def _move_high_water_marks(self, written: Any) -> None:
        """The identity columns' high-water marks past every value written (never moved back; a
        concurrent writer that also generated values then conflicts on the metadata)."""
        missing = self.values.identity_missing
        ends = written.cached.agg(
            *[
                (F.max if info.step > 0 else F.min)(f"__identity_{i}")
                for i, (info, _) in enumerate(missing.values())
            ]
        ).first()
        marks = {name: int(ends[i]) for i, name in enumerate(missing) if ends[i] is not None}
        if marks:
            metadata = self.txn.metadata
            schema = with_high_water_marks(metadata.schema(self.table_path), marks)
            self.txn.updateMetadata(replace(metadata, schemaString=schema.json()))

    def _record_changes(self, rows: DataFrame | None) -> None:
        """With the change data feed on: updated rows before and after, deleted and inserted rows
        (`rows`: the rows written, None when only deleted rows changed)."""
        if self.configuration.get("delta.enableChangeDataFeed", "").lower() != "true":
            return
        clause = F.col(CLAUSE)
        columns = [F.col(quote(f.name)) for f in self.schema.fields]
        old = [self.values.old(f).alias(f.name) for f in self.schema.fields]
        source = self._deleted_rows() if rows is None else rows
        if rows is not None and self.deletes:
            source = rows.unionByName(self._deleted_rows(), allowMissingColumns=True)
        changes = source.where(clause.isNotNull()).select(
            *[
                F.when(clause.isin(self.updates + self.inserts), new).otherwise(prior).alias(f.name)
                for f, new, prior in zip(self.schema.fields, columns, old, strict=True)
            ],
            F.when(clause.isin(self.inserts), F.lit("insert"))
            .when(clause.isin(self.deletes), F.lit("delete"))
            .otherwise(F.lit("update_postimage"))
            .alias("_change_type"),
        )
        if self.updates:
            before = source.where(clause.isin(self.updates)).select(
                *old, F.lit("update_preimage").alias("_change_type")
            )
            changes = changes.unionByName(before)
        files, _ = write_change_files(self.spark, self.snapshot, self.txn, changes, self.cached, self.schema)
        self.metrics["numTargetChangeFilesAdded"] = files

    def _deleted_rows(self) -> DataFrame:
        """The deleted target rows, once each, projected as `_Values.project` does."""
        joined = self._joined(self.touched_files, keep_target_rows=self.by_source)
        deleted = joined.where(F.col(CLAUSE).isin(self.deletes)).dropDuplicates([LOCATION, ROW_INDEX])
        return self.values.project(deleted, with_target=True)

    # ---- 5. the commit ----------------------------------------------------------------------
    def _commit(self) -> MergeOutcome:
        m = self.metrics
        if not self.changed:
            log.info("Merge into %s changed nothing: nothing committed", self.table_path)
            return MergeOutcome(None, m)
        parameters = {
            "predicate": [shown(self.condition)],
            "matchedPredicates": [c.describe() for c in self.clauses if c.kind == MATCHED],
            "notMatchedPredicates": [c.describe() for c in self.clauses if c.kind == NOT_MATCHED],
            "notMatchedBySourcePredicates": [
                c.describe() for c in self.clauses if c.kind == NOT_MATCHED_BY_SOURCE
            ],
        }
        return MergeOutcome(self.txn.commit("MERGE", parameters, m), m)


def _python_ordered(data_type: Any) -> bool:
    """Whether Python's `min`/`max` of collected values order them as Spark's do: integers,
    decimals, booleans, dates, timestamps without a time zone, strings of the binary collation
    (UTF-8 byte order is code point order); not floating point, zoned timestamps or collated
    strings (the key pairs never range nested types)."""
    if isinstance(data_type, StringType):
        return getattr(data_type, "collation", "UTF8_BINARY") in ("UTF8_BINARY", None)
    return isinstance(data_type, _ORDERED_TYPES)


def _single_qualifier(frame: DataFrame) -> str | None:
    """The one name the columns of `frame` are qualified by (`df.alias("s")`: "s"; none: ""), so
    that a copy of its rows can be given it back; None when they have several or a multi-part one."""
    try:
        output = frame._jdf.queryExecution().analyzed().output()
        names = {
            tuple(str(output.apply(i).qualifier().mkString("\u0000")).split("\u0000"))
            for i in range(output.size())
        }
    except Exception:  # noqa: BLE001 - a plan of another shape: keep the frame as it is
        return None
    if len(names) != 1:
        return None
    (parts,) = names
    if parts == ("",):
        return ""
    return parts[0] if len(parts) == 1 else None


def _check_boolean(probe: DataFrame, condition: Column, what: str) -> None:
    """Refuse a condition that does not resolve over the joined rows, or is not boolean."""
    try:
        found = probe.select(condition.alias("_c")).schema["_c"].dataType
    except Exception as exc:
        raise InvalidArgumentError(f"{what} cannot be used: {first_line(exc)}") from None
    if not isinstance(found, BooleanType):
        raise InvalidArgumentError(f"{what} is {found.simpleString()}, not boolean")


def _all(columns: list[Column]) -> Column:
    out = columns[0]
    for column in columns[1:]:
        out = out & column
    return out


def _key_text(key: Any) -> str:
    values = key.asDict() if hasattr(key, "asDict") else {"key": key}
    return "(" + ", ".join(f"{k} = {v!r}" for k, v in values.items()) + ")"

"""Checks that every derived copy of the log's state equals the replay of the commits it stands for:
checkpoints (classic, multi-part, V2 with sidecars), log compaction files and version checksums.

Each comparison is a distributed diff keyed by logical file against `Timeline`, never a count:
a checkpoint that lists the right number of files but a wrong one is found.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from deltaspark.audit import checksum_compare, file_tasks
from deltaspark.audit.context import AuditContext
from deltaspark.audit.findings import FINDINGS_SCHEMA, Finding, findings_of, from_findings
from deltaspark.audit.timeline import (
    SmallState,
    Timeline,
    clean_document,
    listed,
    load_checkpoint_snapshot,
)
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.reconciliation import file_action_rows, newest_per_file
from deltaspark.log.replay import read_json_actions
from deltaspark.log.segment import complete_checkpoints
from deltaspark.spark_compat import check_python_workers, held_frame
from deltaspark.transaction.checksum import FILE_SIZE_BINS

cloudpickle.register_pickle_by_value(checksum_compare)
cloudpickle.register_pickle_by_value(file_tasks)  # checksum_compare emits with it

KEY = ["path_key", "dv_id"]


def _fingerprint_fields(action: str) -> Column:
    """What must agree between two copies of one logical file's action (stats may be dropped or
    re-encoded by a checkpoint, so they are not part of it), as a struct: two are equal when
    their JSON (`_fingerprint`) is (a null field is equal to a null field, and absent from it)."""
    a = F.col(action)
    return F.struct(
        a.getField("size").alias("size"),
        F.array_sort(F.map_entries(F.coalesce(a.getField("partitionValues"), F.create_map()))).alias(
            "partitionValues"
        ),
        a.getField("deletionVector").getField("cardinality").alias("dvCardinality"),
        a.getField("baseRowId").alias("baseRowId"),
        a.getField("defaultRowCommitVersion").alias("defaultRowCommitVersion"),
    )


def _fingerprint(action: str) -> Column:
    """`_fingerprint_fields` as the JSON a finding shows."""
    return F.to_json(_fingerprint_fields(action))


def _diff(check: str, version: int, where: str, copy: DataFrame, replay: DataFrame, what: str) -> DataFrame:
    """Findings for the logical files on which `copy` (rows of the checked file) and `replay` differ."""
    left = copy.select(
        *KEY, F.col("path").alias("_c_path"), F.col("fp").alias("_c_fp"), F.col("kind").alias("_c_kind")
    )
    right = replay.select(
        *KEY, F.col("path").alias("_r_path"), F.col("fp").alias("_r_fp"), F.col("kind").alias("_r_kind")
    )
    joined = left.join(right, KEY, "full_outer")
    path = F.coalesce("_c_path", "_r_path")
    detail = (
        F.when(
            F.col("_c_fp").isNull(),
            F.concat(F.lit(f"the log has {what} "), F.col("_r_kind"), F.lit(f" that {where} lacks")),
        )
        .when(
            F.col("_r_fp").isNull(),
            F.concat(
                F.lit(f"{where} has "),
                F.col("_c_kind"),
                F.lit(f" that the log does not have at version {version}"),
            ),
        )
        .when(
            F.col("_c_kind") != F.col("_r_kind"),
            F.concat(F.lit(f"{where} has "), F.col("_c_kind"), F.lit(", the log has "), F.col("_r_kind")),
        )
        .otherwise(F.concat(F.lit(f"{where} has "), F.col("_c_fp"), F.lit(", the log has "), F.col("_r_fp")))
    )
    different = (
        F.col("_c_fp").isNull()
        | F.col("_r_fp").isNull()
        | (F.col("_c_fp") != F.col("_r_fp"))
        | (F.col("_c_kind") != F.col("_r_kind"))
    )
    return findings_of(joined.where(different), check, "error", detail, F.lit(version), path)


def _checkpoint_differences(
    check: str, version: int, where: str, rows: DataFrame, timeline: Timeline
) -> DataFrame:
    """Findings of the checkpoint's file action `rows` (as read, not reconciled) against the
    replay's state at `version`, from one read of each: the checkpoint's rows are counted per
    logical file with a window (the row they lead with carries the key's findings), then joined
    once with the replay's live files and tombstones. Found, as the protocol keys files: a live
    file the checkpoint lacks; an add the log does not have live, or whose size, partition
    values, DV cardinality or row ids differ; a remove of a file that is not a tombstone; a key
    listed more than once."""
    logged = F.coalesce("add.path", "remove.path")
    by_key = Window.partitionBy(*KEY)
    # One sort serves both windows (and the sort-merge join after them): same keys, same order.
    leading = by_key.orderBy(F.col("is_add").desc())
    whole = leading.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    copy = rows.select(
        *KEY,
        F.col("is_add").alias("_c_add"),
        F.when(F.col("is_add"), _fingerprint_fields("add")).alias("_c_fp"),
        logged.alias("_c_logged"),
        F.count(F.lit(1)).over(whole).alias("_c_n"),
        F.count(F.when(F.col("is_add"), 1)).over(whole).alias("_c_adds"),
        F.row_number().over(leading).alias("_c_rank"),
    )
    replay = timeline.files_at(version).select(
        *KEY,
        F.col("is_add").alias("_r_add"),
        F.when(F.col("is_add"), _fingerprint_fields("add")).alias("_r_fp"),
    )
    joined = copy.join(replay, KEY, "full_outer")
    live, tombstone = F.coalesce(F.col("_r_add"), F.lit(False)), F.coalesce(~F.col("_r_add"), F.lit(False))
    leads = F.col("_c_rank").isNull() | (F.col("_c_rank") == 1)  # one row per key carries its own findings
    path = F.col("path_key")

    def found(condition: Column, detail: Column, at: Column = path) -> Column:
        return F.when(condition, F.struct(detail.alias("detail"), at.alias("path")))

    problems = F.array(
        found(
            leads & live & (F.coalesce(F.col("_c_adds"), F.lit(0)) == 0),
            F.lit(f"the log has a live file as an add that {where} lacks"),
        ),
        found(
            F.col("_c_add") & ~live,
            F.lit(f"{where} has an add that the log does not have at version {version}"),
        ),
        found(
            F.col("_c_add") & live & (F.col("_c_fp") != F.col("_r_fp")),
            F.concat(F.lit(f"{where} has "), F.to_json("_c_fp"), F.lit(", the log has "), F.to_json("_r_fp")),
        ),
        found(
            ~F.col("_c_add") & ~tombstone,
            F.lit(f"{where} has a remove of a file that is not a tombstone at version {version}"),
        ),
        found(
            leads & (F.col("_c_n") > 1),
            F.concat(F.lit(f"{where} lists a file "), F.col("_c_n").cast("string"), F.lit(" times")),
            F.col("_c_logged"),
        ),
    )
    each = joined.select(F.explode(F.filter(problems, lambda p: p.isNotNull())).alias("_p"))
    return findings_of(each, check, "error", F.col("_p.detail"), F.lit(version), F.col("_p.path"))


def _keyed(rows: DataFrame) -> DataFrame:
    return rows.select(
        *KEY,
        F.col("path_key").alias("path"),
        F.when(F.col("is_add"), _fingerprint("add")).otherwise(F.lit("{}")).alias("fp"),
        F.when(F.col("is_add"), F.lit("an add")).otherwise(F.lit("a remove")).alias("kind"),
    )


def _small_differences(
    check: str, version: int, where: str, have: SmallState, want: SmallState
) -> list[Finding]:
    out = []
    if have.protocol != want.protocol:
        out.append(
            Finding(
                check, "error", f"{where} has protocol {have.protocol}, the log has {want.protocol}", version
            )
        )
    if have.metadata != want.metadata:
        keys = sorted(
            k
            for k in set(have.metadata or {}) | set(want.metadata or {})
            if (have.metadata or {}).get(k) != (want.metadata or {}).get(k)
        )
        out.append(
            Finding(check, "error", f"{where} has other metaData ({', '.join(keys)}) than the log", version)
        )
    have_txns = {k: v.get("version") for k, v in have.txns.items()}
    want_txns = {k: v.get("version") for k, v in want.txns.items()}
    if have_txns != want_txns:
        out.append(
            Finding(check, "error", f"{where} has txn versions {have_txns}, the log has {want_txns}", version)
        )
    have_domains = {k: v.get("configuration") for k, v in have.domains.items()}
    want_domains = {k: v.get("configuration") for k, v in want.domains.items()}
    if have_domains != want_domains:
        out.append(
            Finding(
                check,
                "error",
                f"{where} has domains {sorted(have_domains)}, the log has {sorted(want_domains)}",
                version,
            )
        )
    return out


def checkpoints(ctx: AuditContext) -> DataFrame:
    """Every complete checkpoint in range equals the replay at its version: the same live files with
    the same size, partition values, DV and row ids; only tombstones the replay has; no key twice;
    the same protocol, metadata, transactions and domains."""
    check, timeline = "log.checkpoint", ctx.timeline
    frames: list[DataFrame] = []
    in_range = sorted((v, c) for v, c in complete_checkpoints(ctx.listing).items() if ctx.in_range(v))
    older = [v for v, _ in in_range if v < timeline.base_version]
    small = _not_compared(check, "checkpoint", older, timeline)
    for version, checkpoint in in_range:
        if version <= timeline.base_version:
            continue
        where = f"checkpoint {checkpoint.files[0].name}" + (
            f" ({len(checkpoint.files)} parts)" if len(checkpoint.files) > 1 else ""
        )
        try:
            snapshot = load_checkpoint_snapshot(
                ctx.spark, ctx.storage, ctx.table_path, ctx.root, ctx.listing, version
            )
        except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint is the finding
            small.append(
                Finding(check, "error", f"{where} cannot be read: {exc}", version, checkpoint.files[0].path)
            )
            continue
        frames.append(_checkpoint_differences(check, version, where, snapshot.fileActions(), timeline))
        have = SmallState(
            _clean_dict(snapshot.protocol.asDict()),
            _clean_dict(snapshot.metadata.asDict()),
            {
                r["appId"]: _clean_dict(r.asDict())
                for r in snapshot.smallActions("txn").where("txn is not null").select("txn.*").collect()
            },
            {
                r["domain"]: _clean_dict(r.asDict())
                for r in snapshot.smallActions("domainMetadata")
                .where("domainMetadata is not null")
                .select("domainMetadata.*")
                .collect()
                if not r["removed"]
            },
        )
        small += _small_differences(check, version, where, have, timeline.small_states([version])[version])
    frames.append(from_findings(ctx.spark, small))
    return _union(frames)


def _clean_dict(value: dict[str, Any]) -> dict[str, Any]:
    return clean_document(value)


def compactions(ctx: AuditContext) -> DataFrame:
    """Every log compaction file `x.y.compacted.json` holds, per logical file, the newest action of
    the commits x..y (an add or a remove, with the same fingerprint), and their newest protocol and
    metaData."""
    check, timeline = "log.compaction", ctx.timeline
    frames: list[DataFrame] = []
    small: list[Finding] = []
    for f in ctx.files_of(LogFileKind.COMPACTION):
        start, end = f.start_version or 0, f.version
        if (
            not (ctx.in_range(start) or ctx.in_range(end))
            or start <= timeline.base_version
            or end > timeline.latest
        ):
            continue
        where = f"log compaction {f.name}"
        actions = read_json_actions(ctx.spark, [f], ["add", "remove"], select_lines=False)
        # Read as readers read it: a compaction written without full reconciliation may hold an add
        # and a remove of one key, and then the remove is the later event.
        copy = _keyed(newest_per_file(file_action_rows(actions, ctx.root), table_root=ctx.root))
        newest = timeline.intervals.where(
            (F.col("start") >= start)
            & (F.col("start") <= end)
            & (F.col("end").isNull() | (F.col("end") > end))
        )
        frames.append(_diff(check, end, where, copy, _keyed(newest), "an action as"))
        kinds = read_json_actions(ctx.spark, [f], ["protocol", "metaData"]).select(
            F.to_json("protocol").alias("protocol"), F.to_json("metaData").alias("metaData")
        )
        rows = kinds.collect()
        have = {
            kind: next((_clean_dict(json.loads(r[kind])) for r in reversed(rows) if r[kind]), None)
            for kind in ("protocol", "metaData")
        }
        states = (
            timeline.small_states([start - 1, end]) if start > 0 else {end: timeline.small_states([end])[end]}
        )
        before, after = states.get(start - 1, SmallState()), states[end]
        want = {
            "protocol": after.protocol if after.protocol != before.protocol else None,
            "metaData": after.metadata if after.metadata != before.metadata else None,
        }
        for kind in ("protocol", "metaData"):
            if have[kind] != want[kind]:
                small.append(
                    Finding(
                        check,
                        "error",
                        _compaction_difference(where, kind, have[kind], want[kind]),
                        end,
                        f.path,
                    )
                )
    frames.append(from_findings(ctx.spark, small))
    return _union(frames)


def _compaction_difference(where: str, kind: str, have: Any, want: Any) -> str:
    if have is None:
        return f"{where} lacks the {kind} change of the commits it covers"
    if want is None:
        return f"{where} has a {kind} action, but the commits it covers do not change it"
    return f"{where} has another {kind} than the commits it covers end with"


def checksums(ctx: AuditContext) -> DataFrame:
    """Every `N.crc` in range equals the replay at N in every field (see `checksum_compare`)."""
    timeline = ctx.timeline
    in_range = [f for f in ctx.files_of(LogFileKind.CHECKSUM) if ctx.in_range(f.version)]
    older = [f.version for f in in_range if f.version < timeline.base_version]
    skipped = _not_compared("log.checksum", "checksum", older, timeline)
    files = [f for f in in_range if timeline.base_version <= f.version <= timeline.latest]
    if not files:
        return from_findings(ctx.spark, skipped)
    versions = [f.version for f in files]
    if timeline.small:
        return _checksums_on_driver(ctx, files, versions) + skipped
    bins = list(FILE_SIZE_BINS)
    states = timeline.file_states(versions).select(
        "version",
        F.to_json(
            F.struct(
                "numFiles",
                "tableSizeBytes",
                "numDeletedRecords",
                "numDeletionVectors",
                "fileCounts",
                "totalBytes",
                "deletedRecordCounts",
                F.array(*[F.lit(b) for b in bins]).alias("bins"),
            )
        ).alias("state"),
    )
    smalls = timeline.small_states(versions)
    small_docs = [(v, json.dumps(_small_document(s))) for v, s in smalls.items()]
    small = held_frame(ctx.spark, small_docs, "version long, small string")
    texts = (
        ctx.spark.read.text([f.path for f in files], wholetext=True)
        .select(F.col("_metadata.file_path").alias("path"), F.col("value").alias("text"))
        .select(F.regexp_extract("path", r"(\d{20})\.crc$", 1).cast("long").alias("version"), "path", "text")
    )
    check_python_workers(ctx.spark)
    rows = texts.join(states, "version").join(small, "version")
    compared = rows.mapInArrow(checksum_compare.compare_batches, FINDINGS_SCHEMA)
    return compared.unionByName(from_findings(ctx.spark, skipped)) if skipped else compared


def _small_document(state: SmallState) -> dict[str, Any]:
    """The small-action state as `checksum_compare.findings` takes it."""
    return {
        "protocol": state.protocol,
        "metadata": state.metadata,
        "txns": list(state.txns.values()),
        "domains": list(state.domains.values()),
        "ict": state.ict,
    }


def _checksums_on_driver(ctx: AuditContext, files: list[LogFile], versions: list[int]) -> list[Finding]:
    """`checksums` of a small log: the replay's states swept on the driver, each file read and
    compared there (no job beyond collecting the add intervals)."""
    timeline = ctx.timeline
    states = timeline.file_states_on_driver(versions)
    smalls = timeline.small_states(versions)
    out = []
    for f in files:
        small = _small_document(smalls[f.version])
        try:
            text = ctx.storage.read_text(f.path)
        except Exception as exc:  # noqa: BLE001 - reported as the finding
            text, found = None, [("error", f"unreadable checksum file: {exc}")]
        else:
            found = checksum_compare.text_findings(text, states[f.version], small)
        out += [Finding(checksum_compare.CHECK, level, detail, f.version, f.path) for level, detail in found]
    return out


def _not_compared(check: str, what: str, versions: list[int], timeline: Timeline) -> list[Finding]:
    """One note for the files older than the replay's base: nothing to replay them from."""
    if not versions:
        return []
    return [
        Finding(
            check,
            "info",
            f"{len(versions)} {what}(s) not compared, at version(s) {listed(versions)}: "
            + timeline.why_not_before_base(),
            versions[-1],
            value=float(len(versions)),
        )
    ]


def _dv_text(dv_id: str) -> str:
    return f"deletion vector {dv_id}" if dv_id else "no deletion vector"


def reconciliation(ctx: AuditContext) -> list[Finding]:
    """No version holds a data file twice: a path added again under another deletion vector (or
    without one) while its older logical file is still live. The protocol keys files by (path,
    DV id), so both stay in the table: readers that follow it read the file's rows twice, those
    one DV deleted coming back through the other; deltaspark refuses such a version."""
    out = []
    for o in ctx.overlapping_adds():
        until = o.overlap_end
        if o.version > ctx.end_version or (until is not None and until <= ctx.start_version):
            continue
        when = f"from version {o.version} on" if until is None else f"at versions {o.version} to {until - 1}"
        removed = (
            "was never removed" if o.older_end is None else f"was not removed until version {o.older_end}"
        )
        out.append(
            Finding(
                "log.reconciliation",
                "error",
                f"the data file is added at version {o.version} ({_dv_text(o.dv)}) while its add at version "
                f"{o.older_version} ({_dv_text(o.older_dv)}) {removed}: two live logical files of one data "
                f"file {when}. Readers that key files by path and deletion vector, as the protocol does "
                "(delta-rs), read its rows twice, the rows one deletion vector deleted coming back through "
                "the other; deltaspark refuses to read these versions. A writer that changes a file's "
                "deletion vector must remove the old logical file: commit a remove of the wrong one",
                o.version,
                o.path,
            )
        )
    return out


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out

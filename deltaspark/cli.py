"""`deltaspark` command line: describe, files, history, checkpoint, cleanup, vacuum, audit, repair and a demo.

Runs on an embedded local Spark by default, on spark-submit's cluster when spark-submit runs it
(`jobs/deltaspark_cli.py`); `--master` points at a cluster, `--remote` at a Spark Connect server.
Output is human-readable tables, or JSON with `--json` (listings as JSON lines, other results as
one JSON document); `--quiet` prints nothing but errors. Spark's log lines and console progress
bars stay out of the output; long commands show deltaspark's own progress on stderr when it is a
terminal.

Exit codes: 0 done; 1 findings (an audit with errors) or a failure (no table at the path, any
error deltaspark or Spark raised), printed on stderr as one `deltaspark: ...` line; 2 bad usage
(unknown options, missing or malformed arguments).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from typing import Any

from deltaspark import cli_iceberg, cli_output
from deltaspark.cli_output import _emit_json, _human_bytes, _print_rows, emit_document, print_files, warn
from deltaspark.errors import DeltaSparkError, InvalidArgumentError
from deltaspark.features.schema import tree_string

log = logging.getLogger("deltaspark")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
TABLE_HELP = "a table path, or a name in the session catalog (db.table)"


class UsageError(Exception):
    """Arguments argparse accepts but the command cannot use (exit code 2)."""


# A long session plans many queries, whose generated code the JIT compiles into the JVM's code
# cache; at Java's default (240 MiB) a long run of small tables can fill it, and the JVM then stops
# compiling ("CodeCache is full. Compiler has been disabled"): every later plan runs interpreted.
CODE_CACHE_OPTION = "-XX:ReservedCodeCacheSize=512m"


def driver_java_options(log4j: str, given: str | None) -> str:
    """The JVM options of a driver the CLI starts: its log configuration, a larger code cache
    unless `given` (the user's `--conf spark.driver.extraJavaOptions=...`) sets one, then `given`."""
    options = [log4j]
    if not given or "ReservedCodeCacheSize" not in given:
        options.append(CODE_CACHE_OPTION)
    return " ".join([*options, given] if given else options)


def _under_spark_submit() -> bool:
    """Whether this Python was started by spark-submit (its JVM is already running, configured
    by spark-submit's options and spark-defaults.conf)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _session(args: argparse.Namespace):  # noqa: ANN202 - SparkSession imported lazily
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # Local Python workers (deletion vector decoding) run this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("deltaspark")
    conf = dict(item.partition("=")[::2] for item in args.conf or [])
    starts_jvm = not args.remote and SparkContext._active_spark_context is None
    if args.remote:
        builder = builder.remote(args.remote)
    else:
        # Spark's console progress bars would land in the middle of the output: off (--conf wins).
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        master = args.master or (None if _under_spark_submit() else "local[*]")
        if master is not None:  # under spark-submit, its --master (or spark-defaults.conf) decides
            builder = builder.master(master)
        builder = builder.config("spark.sql.shuffle.partitions", "8")
    if starts_jvm:  # Spark's log lines, from the JVM's first one on: errors only (--verbose: WARN)
        java = cli_output.log4j_java_option(args.verbose)
        given = conf.get("spark.driver.extraJavaOptions")
        conf["spark.driver.extraJavaOptions"] = driver_java_options(java, given)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if starts_jvm:  # a session that was already there keeps its owner's log level
        spark.sparkContext.setLogLevel("WARN" if args.verbose else "ERROR")
        if not args.verbose:
            _quiet_pyspark_loggers()
    return spark


def _quiet_pyspark_loggers() -> None:
    """pyspark 4 logs a failed query's error (plan and JVM stack, as JSON) on stderr before raising
    it; the command line reports the error itself, on one line."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark 3.5: no such logger
        return
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def _snapshot(spark, args: argparse.Namespace):  # noqa: ANN001, ANN202
    from deltaspark.table import DeltaTable

    table = DeltaTable.forPathOrName(spark, args.path)
    timestamp: Any = args.timestamp
    return table.snapshot(version=args.version, timestamp=timestamp)


def describe_table(snapshot) -> dict[str, Any]:  # noqa: ANN001
    """The facts `describe` prints, as a dict (also used by the demo and the JSON output)."""
    summary = snapshot.summary()
    checkpoint = snapshot.segment.checkpoint
    return {
        "path": snapshot.tableRoot,
        "version": snapshot.version,
        "timestamp": snapshot.timestamp.isoformat(timespec="milliseconds"),
        "id": snapshot.metadata.id,
        "name": snapshot.metadata.name,
        "description": snapshot.metadata.description,
        "minReaderVersion": snapshot.protocol.minReaderVersion,
        "minWriterVersion": snapshot.protocol.minWriterVersion,
        "tableFeatures": snapshot.tableFeatures,
        "partitionColumns": snapshot.partitionColumns,
        "schema": json.loads(snapshot.schema.json()),
        "numFiles": summary["numFiles"],
        "sizeInBytes": summary["sizeInBytes"],
        "configuration": snapshot.configuration,
        "checkpointVersion": checkpoint.version if checkpoint else None,
        "commitsAfterCheckpoint": len(snapshot.segment.tail_files),
    }


def _print_describe(facts: dict[str, Any], schema_tree: str) -> None:
    rows = [
        ("Table", facts["path"]),
        ("Version", f"{facts['version']} (committed {facts['timestamp']})"),
        ("Id / name", f"{facts['id']} / {facts['name'] or '-'}"),
        ("Protocol", f"reader {facts['minReaderVersion']}, writer {facts['minWriterVersion']}"),
        ("Features", ", ".join(facts["tableFeatures"]) or "-"),
        ("Partition columns", ", ".join(facts["partitionColumns"]) or "-"),
        (
            "Files",
            f"{facts['numFiles']:,} ({_human_bytes(facts['sizeInBytes'])}, {facts['sizeInBytes']:,} bytes)",
        ),
        (
            "Log segment",
            (f"checkpoint {facts['checkpointVersion']} + " if facts["checkpointVersion"] is not None else "")
            + f"{facts['commitsAfterCheckpoint']} JSON file(s)",
        ),
        ("Configuration", ", ".join(f"{k}={v}" for k, v in sorted(facts["configuration"].items())) or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    print("Schema")
    print(schema_tree.rstrip())


def cmd_describe(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    snap = _snapshot(spark, args)
    facts = describe_table(snap)
    if args.json:
        emit_document(facts)
    else:
        _print_describe(facts, tree_string(snap.schema))
    return 0


def cmd_files(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from pyspark.sql import functions as F

    snap = _snapshot(spark, args)
    # Partition values by logical name (physical names under column mapping mean nothing to users),
    # typed, as strings the way they are written in the log; null stays null.
    partitions = [
        F.col("partitionValues_parsed").getField(name).cast("string").alias(name)
        for name in snap.partitionColumns
    ]
    files = snap.files().select(
        "path",
        "size",
        (F.struct(*partitions) if partitions else F.lit(None).cast("struct<>")).alias("partitionValues"),
        F.col("stats_parsed.numRecords").alias("numRecords"),
        F.col("deletionVector.cardinality").alias("deletedRows"),
        "modificationTime",
    )
    columns = ["path", "size", "partitionValues", "numRecords", "deletedRows"]
    columns = columns if partitions else [c for c in columns if c != "partitionValues"]
    print_files(files, args.json, "path", args.limit, f"at version {snap.version}", columns)
    return 0


def cmd_history(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    history = DeltaTable.forPathOrName(spark, args.path).history(limit=args.limit)
    columns = ["version", "timestamp", "operation", "operationParameters", "engineInfo", "clientVersion"]
    rows = [r.asDict(recursive=True) for r in history.select(*columns).collect()]
    if args.json:
        _emit_json(rows)
    else:
        _print_rows(rows, columns)
    return 0


def cmd_demo(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.demo import build_demo_table
    from deltaspark.table import DeltaTable

    root = args.path or tempfile.mkdtemp(prefix="deltaspark-demo-")
    log.info("Building the sample table")
    path = build_demo_table(f"{root}/orders", spark)
    steps = (
        ("describe", "describe", ["describe", path]),
        ("files", "files", ["files", path]),
        ("filesAtVersion1", "files --version 1 (time travel)", ["files", path, "--version", "1"]),
        ("history", "history", ["history", path]),
    )
    document: dict[str, Any] = {"path": path}
    if not args.json:
        print(f"Built a sample Delta table at {path}\n")
    for key, title, argv in steps:
        sub = build_parser().parse_args([*argv, "--json"] if args.json else argv)
        if args.json:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                sub.func(spark, sub)
            text = out.getvalue()
            document[key] = (
                json.loads(text) if key == "describe" else [json.loads(x) for x in text.splitlines()]
            )
            continue
        print(f"$ deltaspark {' '.join(argv)}    # {title}")
        sub.func(spark, sub)
        print()
    snap = DeltaTable.forPath(spark, path).snapshot()
    txns = {r["appId"]: r["version"] for r in snap.transactions().collect()}
    tombstones = snap.tombstones().count()
    if args.json:
        emit_document({**document, "transactions": txns, "tombstones": tombstones})
    else:
        print(f"Transactions: {txns}; tombstones kept for VACUUM: {tombstones}")
    return 0


def cmd_checkpoint(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    table = DeltaTable.forPathOrName(spark, args.path)
    result = table.checkpoint(
        version=args.version, actionsPerPart=args.actions_per_part, v2Format=args.v2_format
    )
    if args.json:
        emit_document(result.asDict())
        return 0
    facts = (
        f"{result.numOfAddFiles:,} file(s), {result.numOfRemoves:,} tombstone(s), "
        f"{result.numActions:,} action(s), {_human_bytes(result.sizeInBytes)}"
    )
    kept = set(result.keptExisting)
    if kept and kept >= set(result.files):
        print(f"A {result.kind} checkpoint of version {result.version} is already there ({facts}); kept it:")
    else:
        print(
            f"Wrote a {result.kind} checkpoint of version {result.version} in {result.seconds:.1f}s: {facts}"
        )
    for name in result.files:
        print(f"  _delta_log/{name}" + ("  (already there, kept)" if name in kept else ""))
    for name in result.sidecars:
        print(f"  _delta_log/_sidecars/{name}")
    return 0


def cmd_cleanup(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    result = DeltaTable.forPathOrName(spark, args.path).cleanupLog(dryRun=args.dry_run)
    for warning in result.warnings:
        warn(warning)
    if args.json:
        emit_document(result.asDict())
        return 0
    if result.skipped:
        print(f"Nothing to delete: {result.skipped}")
        return 0
    verb = "Would delete" if result.dryRun else "Deleted"
    print(
        f"{verb} {result.numFiles} log file(s) (retention {result.logRetentionDuration}, cutoff "
        f"{result.cutoffTimestamp}); versions from checkpoint {result.checkpointVersion} on are kept"
    )
    for path in result.files:
        print(f"  {path}")
    return 0


def cmd_vacuum(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from pyspark.sql import functions as F

    from deltaspark.table import DeltaTable

    if args.no_retention_check:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    inventory = spark.table(args.inventory) if args.inventory else None
    dry_run = not args.delete
    table = DeltaTable.forPathOrName(spark, args.path)
    frame = table.vacuum(args.retain_hours, dry_run, args.lite, inventory)
    totals = frame.agg(
        F.count(F.lit(1)).alias("entries"),
        F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
        F.sum(F.col("isDir").cast("int")).alias("directories"),
        *([] if dry_run else [F.sum(F.col("deleted").cast("int")).alias("deleted")]),
    ).first()
    facts = totals.asDict() if totals is not None else {}
    rows = [r.asDict() for r in frame.orderBy("path").limit(args.limit).collect()]
    if args.json:
        emit_document({"dryRun": dry_run, **facts, "first": rows})
        return 0
    entries, directories = facts.get("entries") or 0, facts.get("directories") or 0
    summary = (
        f"{entries - directories} file(s) ({facts.get('bytes') or 0} bytes) and {directories} directory(ies)"
    )
    if dry_run:
        print(f"Would delete {summary} (dry run; --delete to delete them)")
    else:
        print(f"Deleted {facts.get('deleted') or 0} of {summary}")
    for row in rows:
        state = "" if dry_run else ("  deleted" if row["deleted"] else f"  NOT deleted: {row['error']}")
        print(f"  {row['path']}  ({row['reason']}){state}")
    if entries > len(rows):
        print(f"  ... {entries - len(rows)} more (--limit)")
    return 0


def cmd_audit(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    checks = args.checks.split(",") if args.checks else None
    report = DeltaTable.forPathOrName(spark, args.path).audit(
        args.level, args.start_version, args.end_version, checks, timed=args.timed
    )
    if args.findings:
        report.findings.coalesce(1).write.mode("error").json(args.findings)
    print(report.toJSON() if args.json else report.text(limit=args.limit))
    return 0 if report.passed else 1


def cmd_repair(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    found = DeltaTable.forPathOrName(spark, args.path).repair(dryRun=not args.apply).collect()
    if args.json:
        emit_document(
            {"dryRun": not args.apply, "references": len(found), "missing": [r.asDict() for r in found]}
        )
        return 0
    verb = "Removed" if args.apply else "Would remove"
    print(
        f"{verb} {len(found)} reference(s) to missing files"
        + ("" if args.apply or not found else " (--apply to commit)")
    )
    for row in found:
        what = "data file" if row["dataFileMissing"] else f"deletion vector {row['deletionVectorPath']}"
        print(f"  {row['path']}: {what} missing")
    return 0


def commit_facts(result: Any, nothing: str = "nothing committed") -> dict[str, Any]:
    """A commit as the JSON output gives it: committed, version, operation, parameters, metrics."""
    if result is None:
        return {"committed": False, "message": nothing}
    info = result.commitInfo or {}
    return {
        "committed": True,
        "version": result.version,
        "operation": info.get("operation"),
        "operationParameters": info.get("operationParameters") or {},
        "metrics": result.metrics or info.get("operationMetrics") or {},
        "attempts": result.attempts,
    }


def _print_commit(result: Any, nothing: str, args: argparse.Namespace) -> None:
    if args.json:
        emit_document(commit_facts(result, nothing))
    elif result is None:
        print(nothing)
    else:
        print(f"Committed version {result.version} ({result.commitInfo['operation']})")


def cmd_set_properties(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    pairs = {}
    for item in args.properties:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Give properties as KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    _print_commit(DeltaTable.forPathOrName(spark, args.path).setProperties(pairs), "Nothing committed", args)
    return 0


def cmd_unset_properties(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    result = DeltaTable.forPathOrName(spark, args.path).unsetProperties(args.keys, ifExists=args.if_exists)
    _print_commit(result, "None of those properties is set; nothing committed", args)
    return 0


def cmd_add_feature(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    result = DeltaTable.forPathOrName(spark, args.path).addFeatureSupport(args.feature)
    _print_commit(result, f"The table already supports {args.feature}; nothing committed", args)
    return 0


def cmd_upgrade_protocol(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    result = DeltaTable.forPathOrName(spark, args.path).upgradeTableProtocol(args.reader, args.writer)
    _print_commit(result, "The table is already at that protocol; nothing committed", args)
    return 0


def cmd_delete(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    result = DeltaTable.forPathOrName(spark, args.path).delete(args.condition)
    if args.json or result is None:
        _print_commit(result, "No file can hold a matching row; nothing committed", args)
        return 0
    m = result.metrics
    print(
        f"Committed version {result.version} (DELETE): {m['numDeletedRows']:,} row(s) deleted, "
        f"{m['numRemovedFiles']:,} file(s) removed, {m['numAddedFiles']:,} rewritten"
    )
    return 0


def cmd_update(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    assigned = {}
    for item in args.set:
        name, sep, expression = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"update: --set takes column=expression, got {item!r}")
        assigned[name.strip()] = expression
    result = DeltaTable.forPathOrName(spark, args.path).update(args.where, assigned)
    if args.json or result is None:
        _print_commit(result, "No row matches; nothing committed", args)
        return 0
    m = result.metrics
    print(
        f"Committed version {result.version} (UPDATE): {m['numUpdatedRows']:,} row(s) updated, "
        f"{m['numRemovedFiles']:,} file(s) removed, {m['numAddedFiles']:,} written"
    )
    return 0


def cmd_optimize(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    if args.purge and args.zorder_by:
        raise UsageError("optimize: --purge and --zorder-by are separate runs")
    builder = DeltaTable.forPathOrName(spark, args.path).optimize()
    if args.where:
        builder = builder.where(args.where)
    if args.purge:
        row = builder.purgeDeletionVectors().first()
    elif args.zorder_by:
        row = builder.executeZOrderBy(*[c.strip() for c in args.zorder_by.split(",") if c.strip()]).first()
    else:
        row = builder.executeCompaction().first()
    metrics = row["metrics"]
    if args.json:
        emit_document({"committed": bool(metrics["numFilesRemoved"]), **row.asDict(recursive=True)})
        return 0
    if not metrics["numFilesRemoved"]:
        print(f"Nothing to rewrite among {metrics['totalConsideredFiles']:,} file(s); nothing committed")
        return 0
    dvs = metrics["deletionVectorStats"]
    print(
        f"Rewrote {metrics['numFilesRemoved']:,} file(s) ({metrics['filesRemoved']['totalSize']:,} bytes, "
        f"{dvs['numDeletionVectorsRemoved']:,} with deletion vectors) as {metrics['numFilesAdded']:,} "
        f"({metrics['filesAdded']['totalSize']:,} bytes) in {metrics['partitionsOptimized']:,} partition(s); "
        f"{metrics['totalFilesSkipped']:,} file(s) left as they were"
    )
    return 0


def cmd_restore(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    table = DeltaTable.forPathOrName(spark, args.path)
    if args.version is not None:
        metrics = table.restoreToVersion(args.version).first().asDict()
    elif args.timestamp is not None:
        metrics = table.restoreToTimestamp(args.timestamp).first().asDict()
    else:
        raise UsageError("Give --version or --timestamp to restore to")
    version = table.snapshot().version
    if args.json:
        emit_document({"committed": True, "version": version, "operation": "RESTORE", "metrics": metrics})
        return 0
    print(f"Committed version {version} (RESTORE): " + ", ".join(f"{k}={v:,}" for k, v in metrics.items()))
    return 0


def cmd_convert(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from deltaspark.table import DeltaTable

    table = DeltaTable.convertToDelta(spark, f"parquet.`{args.path}`", args.partition_schema)
    snapshot = table.snapshot()
    facts = snapshot.summary()
    if args.json:
        emit_document(
            {
                "path": args.path,
                "version": snapshot.version,
                **facts,
                "partitionColumns": snapshot.partitionColumns,
            }
        )
        return 0
    print(
        f"{args.path} is a Delta table at version {snapshot.version}: {facts['numFiles']:,} file(s), "
        f"{_human_bytes(facts['sizeInBytes'])}, partitioned by {snapshot.partitionColumns or 'nothing'}"
    )
    return 0


def _add_version_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--version", type=int, help="read the table at this version")
    group.add_argument(
        "--timestamp", help="read the table as of this timestamp (e.g. 2024-05-01 or 2024-05-01T10:00:00Z)"
    )


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from deltaspark import __version__

    try:
        pyspark = version("pyspark")
    except PackageNotFoundError:  # pragma: no cover - pyspark is a dependency
        pyspark = "not installed"
    return f"deltaspark {__version__} (pyspark {pyspark}, Python {sys.version.split()[0]})"


def _add_output_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """--json, --quiet and --verbose, before the command or after it (`default` SUPPRESS on the
    commands, so that an option given before the command is not reset by the command's default)."""
    parser.add_argument(
        "--json", action="store_true", default=default, help="results as JSON (listings: one JSON line each)"
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="print nothing but errors (see the exit code)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log what deltaspark does; Spark's WARN lines",
    )


class _Commands:
    """The subcommands' `add_parser`, giving each the shared output options."""

    def __init__(self, commands: Any, shared: argparse.ArgumentParser) -> None:
        self.commands, self._shared = commands, shared

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return self.commands.add_parser(name, parents=[self._shared], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltaspark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=_version_text())
    parser.add_argument(
        "--master",
        help="Spark master (default: local[*], or spark-submit's --master when run by spark-submit)",
    )
    parser.add_argument("--remote", help="Spark Connect URL, e.g. sc://host:15002")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="extra Spark configuration")
    _add_output_options(parser, False)
    shared = argparse.ArgumentParser(add_help=False)
    _add_output_options(shared, argparse.SUPPRESS)
    commands = _Commands(
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands"), shared
    )

    describe = commands.add_parser("describe", help="version, protocol, features, schema, files and bytes")
    describe.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    _add_version_options(describe)
    describe.set_defaults(func=cmd_describe)

    files = commands.add_parser("files", help="the live data files")
    files.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    _add_version_options(files)
    files.add_argument("--limit", type=int, default=20, help="rows to print (table output)")
    files.set_defaults(func=cmd_files)

    history = commands.add_parser("history", help="commitInfo of each commit, newest first")
    history.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    history.add_argument("--limit", type=int, default=None)
    history.set_defaults(func=cmd_history)

    checkpoint = commands.add_parser("checkpoint", help="write a checkpoint (distributed write)")
    checkpoint.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    checkpoint.add_argument("--version", type=int, help="checkpoint this version (default: the latest)")
    checkpoint.add_argument("--actions-per-part", type=int, help="file actions per part or sidecar")
    checkpoint.add_argument("--v2-format", choices=["json", "parquet"], help="V2 top-level file format")
    checkpoint.set_defaults(func=cmd_checkpoint)

    cleanup = commands.add_parser("cleanup", help="delete log files older than delta.logRetentionDuration")
    cleanup.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    cleanup.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    cleanup.set_defaults(func=cmd_cleanup)

    vac = commands.add_parser("vacuum", help="delete data files no version within retention needs (dry run)")
    vac.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    vac.add_argument("--delete", action="store_true", help="delete them (default: dry run, only list)")
    vac.add_argument(
        "--retain-hours", type=float, help="retention (default: delta.deletedFileRetentionDuration)"
    )
    vac.add_argument(
        "--no-retention-check", action="store_true", help="allow a retention shorter than the table's"
    )
    vac.add_argument("--lite", action="store_true", help="candidates from the log instead of a listing")
    vac.add_argument("--inventory", metavar="TABLE", help="a table of path, length, isDir, modificationTime")
    vac.add_argument("--limit", type=int, default=20, help="paths to print")
    vac.set_defaults(func=cmd_vacuum)

    audit = commands.add_parser("audit", help="check the log, the files and the table's hygiene")
    audit.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    audit.add_argument("--level", choices=["quick", "full"], default="full", help="quick: the log only")
    audit.add_argument("--start-version", type=int, help="check log files from this version on")
    audit.add_argument("--end-version", type=int, help="audit this version (default: the latest)")
    audit.add_argument("--checks", help="only checks starting with these comma-separated prefixes")
    audit.add_argument("--limit", type=int, default=20, help="findings to print (text output)")
    audit.add_argument("--findings", metavar="DIR", help="also write every finding as JSON lines to DIR")
    audit.add_argument("--timed", action="store_true", help="run the checks one by one, each timed")
    audit.set_defaults(func=cmd_audit)

    repair = commands.add_parser("repair", help="remove references to missing data or DV files (FSCK)")
    repair.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    repair.add_argument("--apply", action="store_true", help="commit the removal (default: dry run)")
    repair.set_defaults(func=cmd_repair)

    props = commands.add_parser("set-properties", help="set table properties (adds the features they need)")
    props.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    props.add_argument("properties", nargs="+", metavar="KEY=VALUE")
    props.set_defaults(func=cmd_set_properties)

    unset = commands.add_parser("unset-properties", help="remove table properties")
    unset.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    unset.add_argument("keys", nargs="+", metavar="KEY")
    unset.add_argument("--if-exists", action="store_true", help="ignore properties that are not set")
    unset.set_defaults(func=cmd_unset_properties)

    feature = commands.add_parser("add-feature", help="add a table feature to the protocol")
    feature.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    feature.add_argument("feature", help="e.g. deletionVectors, v2Checkpoint, domainMetadata")
    feature.set_defaults(func=cmd_add_feature)

    upgrade = commands.add_parser("upgrade-protocol", help="raise the protocol's reader/writer versions")
    upgrade.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    upgrade.add_argument("reader", type=int)
    upgrade.add_argument("writer", type=int)
    upgrade.set_defaults(func=cmd_upgrade_protocol)

    delete = commands.add_parser(
        "delete", help="delete the rows matching a SQL condition (all rows without one)"
    )
    delete.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    delete.add_argument("condition", nargs="?", help="e.g. \"region = 'eu' AND amount < 0\"")
    delete.set_defaults(func=cmd_delete)

    upd = commands.add_parser("update", help="set columns of the rows matching a SQL condition")
    upd.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    upd.add_argument(
        "--set", action="append", required=True, metavar="COL=EXPR", help='e.g. --set "amount=amount * 2"'
    )
    upd.add_argument("--where", help="the rows to update (all rows without it), e.g. \"region = 'eu'\"")
    upd.set_defaults(func=cmd_update)

    opt = commands.add_parser(
        "optimize",
        help="compact small files, Z-order, or purge deletion vectors (one dataChange=false commit)",
    )
    opt.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    opt.add_argument("--where", help="only these partitions, e.g. \"day >= '2026-11-01'\"")
    opt.add_argument("--zorder-by", metavar="COLS", help="Z-order by these columns, e.g. a,b")
    opt.add_argument(
        "--purge", action="store_true", help="rewrite every file with a deletion vector without it"
    )
    opt.set_defaults(func=cmd_optimize)

    restore = commands.add_parser("restore", help="restore the table to an earlier version (one new commit)")
    restore.add_argument("path", metavar="TABLE", help=TABLE_HELP)
    _add_version_options(restore)
    restore.set_defaults(func=cmd_restore)

    conv = commands.add_parser("convert", help="convert a parquet directory to a Delta table in place")
    conv.add_argument("path")
    conv.add_argument("--partition-schema", help='partition columns as DDL, e.g. "day DATE, region STRING"')
    conv.set_defaults(func=cmd_convert)

    cli_iceberg.add_commands(commands.commands, [shared])

    demo = commands.add_parser("demo", help="build a sample table and run the other commands on it")
    demo.add_argument("--path", help="folder to build the sample table in (default: a new temp folder)")
    demo.set_defaults(func=cmd_demo)
    return parser


def _error_line(exc: BaseException) -> str:
    """`deltaspark: <Error>: <message>` on one line (Spark's messages: their first line)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # deltaspark's messages whole; Spark's first line (the rest is its query plan and stack)
    text = " ".join(lines) if isinstance(exc, DeltaSparkError) else (lines[0] if lines else "")
    name = "" if isinstance(exc, UsageError) else f"{type(exc).__name__}: "
    return f"deltaspark: {name}{text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (argparse's own errors exit with 2 before)."""
    args = build_parser().parse_args(argv)
    level = logging.ERROR if args.quiet else logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltaspark").setLevel(level)
    cli_output.QUIET["on"] = bool(args.quiet)
    command = " ".join(x for x in (args.command, getattr(args, "iceberg_command", None)) if x)
    try:
        with contextlib.ExitStack() as stack:
            if args.quiet:
                stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            spark = _session(args)
            progress = not args.quiet and not args.verbose and args.command != "demo"
            stack.enter_context(cli_output.Progress(spark, command, enabled=progress))
            return args.func(spark, args)
    except (UsageError, InvalidArgumentError) as exc:
        print(_error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("deltaspark: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, no traceback (--verbose: the traceback too)
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        print(_error_line(exc), file=sys.stderr)
        return EXIT_FAILED
    finally:
        cli_output.QUIET["on"] = False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

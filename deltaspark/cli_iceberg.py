"""`deltaspark iceberg describe|files|history|export`: the Iceberg side of the command line."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from deltaspark.cli_output import _emit_json, _human_bytes, _print_rows, emit_document, print_files
from deltaspark.iceberg.job_errors import eager


def _table(spark, args: argparse.Namespace):  # noqa: ANN001, ANN202
    from deltaspark.iceberg import IcebergTable

    relocate = dict(item.split("=", 1) for item in (args.relocate or []))
    return IcebergTable.forPath(spark, args.path, args.metadata, relocate)


def _snapshot(spark, args: argparse.Namespace):  # noqa: ANN001, ANN202
    table = _table(spark, args)
    as_of = int(args.as_of) if args.as_of and args.as_of.isdigit() else args.as_of
    return table, table.snapshot(snapshotId=args.snapshot_id, ref=args.ref, asOfTimestamp=as_of)


def _spec_text(fields: Any, schema: dict[str, Any]) -> str:
    from deltaspark.iceberg.types import field_index

    names = {fid: f["name"] for fid, f in field_index(schema).items()}
    return (
        ", ".join(f"{f.transform}({names.get(f.source_id, f.source_id)}) as {f.name}" for f in fields) or "-"
    )


def describe_facts(table, snapshot) -> dict[str, Any]:  # noqa: ANN001
    """What `describe` prints: metadata facts plus file, row and byte counts of the snapshot."""
    from pyspark.sql import functions as F

    meta = table.metadata
    totals = (
        snapshot.files()
        .groupBy()
        .agg(
            F.count(F.when(F.col("content") == 0, 1)).alias("dataFiles"),
            F.count(F.when((F.col("content") == 1) & (F.col("file_format") != "PUFFIN"), 1)).alias(
                "positionDeleteFiles"
            ),
            F.count(F.when((F.col("content") == 1) & (F.col("file_format") == "PUFFIN"), 1)).alias(
                "deletionVectors"
            ),
            F.count(F.when(F.col("content") == 2, 1)).alias("equalityDeleteFiles"),
            F.sum(F.when(F.col("content") == 0, F.col("record_count"))).alias("dataRecords"),
            F.sum(F.when(F.col("content") == 0, F.col("file_size_in_bytes"))).alias("dataBytes"),
        )
        .first()
        .asDict()
    )
    schema = meta.schema_for(snapshot._snapshot)
    return {
        "location": meta.table_root,
        "metadataFile": meta.metadata_file,
        "formatVersion": meta.format_version,
        "tableUuid": meta.raw.get("table-uuid"),
        "snapshotId": snapshot.snapshotId,
        "sequenceNumber": snapshot.sequenceNumber,
        "snapshots": len(meta.snapshots),
        "refs": {name: ref.get("snapshot-id") for name, ref in sorted(meta.refs.items())},
        "partitionSpec": _spec_text(meta.specs.get(meta.default_spec_id, ()), schema),
        "partitionSpecs": len(meta.specs),
        "properties": meta.properties,
        **{k: (v or 0) for k, v in totals.items()},
        "schema": [{"id": f["id"], "name": f["name"], "type": f["type"]} for f in schema["fields"]],
    }


@eager  # the Spark jobs these run fail as deltaspark's errors, which main() prints
def cmd_describe(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    table, snapshot = _snapshot(spark, args)
    facts = describe_facts(table, snapshot)
    if args.json:
        emit_document(facts)
        return 0
    rows = [(k, v) for k, v in facts.items() if k not in ("schema", "properties")]
    rows.append(("properties", ", ".join(f"{k}={v}" for k, v in sorted(facts["properties"].items())) or "-"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        text = _human_bytes(value) if key == "dataBytes" else value
        print(f"{key.ljust(width)}  {text}")
    print("schema")
    for f in facts["schema"]:
        kind = f["type"] if isinstance(f["type"], str) else f["type"].get("type")
        print(f"  {f['id']:>4}  {f['name']}: {kind}")
    return 0


@eager  # the Spark jobs these run fail as deltaspark's errors, which main() prints
def cmd_files(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from pyspark.sql import functions as F

    _, snapshot = _snapshot(spark, args)
    from deltaspark.iceberg.table import CONTENT_NAMES

    names = F.create_map(*[F.lit(x) for pair in CONTENT_NAMES.items() for x in pair])
    content = F.element_at(names, F.col("content"))
    files = snapshot.files().select(
        "file_path",
        F.when(F.col("file_format") == "PUFFIN", F.lit("DELETION_VECTOR"))
        .otherwise(content)
        .alias("content"),
        "file_format",
        "partition",
        "record_count",
        "file_size_in_bytes",
        "sequence_number",
    )
    columns = ["file_path", "content", "partition", "record_count", "file_size_in_bytes"]
    print_files(files, args.json, "file_path", args.limit, f"in snapshot {snapshot.snapshotId}", columns)
    return 0


@eager  # the Spark jobs these run fail as deltaspark's errors, which main() prints
def cmd_history(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    from pyspark.sql import functions as F

    table = _table(spark, args)
    snaps = table.snapshots().select("snapshot_id", "sequence_number", "operation", "summary")
    history = (
        table.history()
        .join(snaps, "snapshot_id", "left")
        .select(
            "made_current_at",
            "snapshot_id",
            "parent_id",
            "sequence_number",
            "operation",
            "is_current_ancestor",
            F.col("summary")["added-records"].alias("added_records"),
            F.col("summary")["deleted-records"].alias("deleted_records"),
        )
        .orderBy(F.col("made_current_at").desc())
    )
    rows = [r.asDict(recursive=True) for r in history.limit(args.limit or 1_000_000).collect()]
    if args.json:
        _emit_json(rows)
    else:
        _print_rows(rows, list(history.columns))
    return 0


def cmd_export(spark, args: argparse.Namespace) -> int:  # noqa: ANN001
    """Iceberg metadata for the latest version of a Delta table, written under `<table>/metadata/`."""
    from deltaspark.table import DeltaTable

    table = DeltaTable.forPathOrName(spark, args.path)
    logging.getLogger("deltaspark").info("Writing Iceberg metadata for %s", args.path)
    result = table.toIceberg(formatVersion=args.format_version)
    facts = {
        "metadataLocation": result.metadata_location,
        "snapshotId": result.snapshot_id,
        "deltaVersion": result.delta_version,
        "dataFiles": result.data_files,
        "deletionVectors": result.deletion_vectors,
        "written": result.written,
        "incremental": result.incremental,
    }
    if args.json:
        emit_document(facts)
    elif not result.written:
        print(f"{result.metadata_location} already describes version {result.delta_version}; nothing written")
    else:
        how = "incrementally" if result.incremental else "in full"
        print(
            f"Wrote {result.metadata_location} ({how}): Iceberg snapshot {result.snapshot_id} of Delta "
            f"version {result.delta_version}, {result.data_files:,} data file(s), "
            f"{result.deletion_vectors:,} deletion vector(s)"
        )
    return 0


def add_commands(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Adds `iceberg` and its subcommands to the main parser's subcommands; `parents` hold the
    options every command takes (--json, --quiet, --verbose)."""
    iceberg = commands.add_parser(
        "iceberg", parents=parents, help="Iceberg tables: describe, files, history; export a Delta table"
    )
    sub = iceberg.add_subparsers(dest="iceberg_command", required=True, metavar="COMMAND")

    def common(parser: argparse.ArgumentParser, snapshot: bool) -> None:
        parser.add_argument("path", help="the table folder (holding metadata/)")
        parser.add_argument("--metadata", help="metadata JSON to read (a name in metadata/ or a path)")
        parser.add_argument(
            "--relocate", action="append", metavar="OLD=NEW", help="path prefix where the table was written"
        )
        if snapshot:
            parser.add_argument("--snapshot-id", type=int)
            parser.add_argument("--ref", help="branch or tag name")
            parser.add_argument("--as-of", help="the snapshot current at this time (ISO or epoch ms)")

    describe = sub.add_parser(
        "describe", parents=parents, help="format, snapshot, specs, file/row/byte counts, schema"
    )
    common(describe, True)
    describe.set_defaults(func=cmd_describe)
    files = sub.add_parser("files", parents=parents, help="the live data and delete files of a snapshot")
    common(files, True)
    files.add_argument("--limit", type=int, default=20)
    files.set_defaults(func=cmd_files)
    history = sub.add_parser("history", parents=parents, help="the snapshot log, newest first")
    common(history, False)
    history.add_argument("--limit", type=int, default=None)
    history.set_defaults(func=cmd_history)
    export = sub.add_parser(
        "export", parents=parents, help="write Iceberg metadata for a Delta table's latest version, in place"
    )
    export.add_argument("path", metavar="TABLE", help="a Delta table path, or a name in the catalog")
    export.add_argument("--format-version", type=int, choices=[1, 2, 3], default=2)
    export.set_defaults(func=cmd_export)

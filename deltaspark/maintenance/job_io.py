"""What the scheduled jobs share: their start (arguments, logging, session), the tables they were
given, the loop that keeps going past a failing table, and where their JSON summary goes."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from deltaspark.catalog import location_of, looks_like_name
from deltaspark.storage import HadoopStorage


def add_common_arguments(parser: argparse.ArgumentParser, what: str = "table") -> None:
    """The arguments every job takes: its tables (paths or catalog names, given and/or in a file),
    where the JSON summary goes, and `-v`."""
    parser.add_argument("paths", nargs="*", help=f"{what} paths, or names in the session catalog (db.table)")
    parser.add_argument("--paths-file", help="a local file with one table path or name per line (# comments)")
    parser.add_argument("--output", help="write the JSON summary here (local or Hadoop path)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what deltaspark does")


def table_paths(args: argparse.Namespace) -> list[str]:
    paths = list(args.paths)
    if args.paths_file:
        with open(args.paths_file, encoding="utf-8") as fh:
            paths += [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
    return paths


def write_summary(spark, location: str, document: dict[str, Any]) -> None:  # noqa: ANN001
    text = json.dumps(document, indent=2, default=str)
    if "://" in location or location.startswith(("s3a:", "s3:", "gs:", "abfss:", "hdfs:", "dbfs:")):
        HadoopStorage(spark).write_text(location, text, overwrite=True)
    else:
        with open(location, "w", encoding="utf-8") as fh:
            fh.write(text)


def start_job(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, spark: Any, app_name: str
) -> tuple[argparse.Namespace, list[str], Any]:
    """Parse the arguments (table paths required), set deltaspark's log level (`-v`: INFO), and
    return the session (`spark`, or one created as `app_name`)."""
    args = parser.parse_args(argv)
    paths = table_paths(args)
    if not paths:
        parser.error("give table paths or --paths-file")
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltaspark").setLevel(logging.INFO if args.verbose else logging.WARNING)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(app_name).getOrCreate()
    return args, paths, spark


def each_table(
    spark: Any,
    tables: list[str],
    work: Callable[[str, str], dict[str, Any]],
    error_status: str = "failed",
) -> list[dict[str, Any]]:
    """`work(path, table)` on every table (a path, or a name in the session catalog, resolved to
    its location) in turn, printing progress; its result joins the table's (`status` ok unless it
    says otherwise). A table that raises is reported (`error_status`, the error named) and the
    others still run."""
    results: list[dict[str, Any]] = []
    for table in tables:
        print(f"[{len(results) + 1}/{len(tables)}] {table}", flush=True)
        named = {"table": table} if looks_like_name(table) else {}
        path = table
        try:
            path = location_of(spark, table)
            results.append({"path": path, **named, "status": "ok", **work(path, table)})
        except Exception as exc:  # one broken table must not stop the others
            error = f"{type(exc).__name__}: {exc}"
            results.append({"path": path, **named, "status": error_status, "error": error})
    return results


def finish_job(spark: Any, output: str | None, results: list[dict[str, Any]], started: float) -> int:
    """Write the JSON summary (when `output` is given); the exit code: 1 if any table failed."""
    if output:
        summary = {
            "tables": results,
            "ok": sum(r["status"] == "ok" for r in results),
            "failed": sum(r["status"] != "ok" for r in results),
            "seconds": round(time.time() - started, 2),
        }
        write_summary(spark, output, summary)
    return 1 if any(r["status"] != "ok" for r in results) else 0

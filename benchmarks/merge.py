"""MERGE benchmark: deltaspark and delta-rs merging the same sources into copies of the same table,
each engine in its own monitored process.

    .venv/bin/python -m benchmarks.merge --rows 10000000 --out benchmarks/results/x.json

The target has `--rows` rows in 100 files of disjoint, contiguous `id` ranges (written once by
Spark). Cases (sources written once as parquet, read by each engine inside its timed call):

- `upsert`: 1% of the table's size, half updates of existing keys in 10% of the files, half new
  keys (`whenMatchedUpdateAll` + `whenNotMatchedInsertAll`);
- `delete`: 1% of the keys, spread over every file (`whenMatchedDelete`);
- `insert`: 10% new keys (`whenNotMatchedInsertAll` only);
- `unique-keys`: 10% of the keys, all in the first 10% of the files, updated; must succeed
  (delta-rs issue 4572 reports a spurious multiple-match error for such a merge);
- `duplicate-key` (deltaspark only): the same with one key twice; must fail with a named error;
- `update-where` / `delete-where`: UPDATE (`v = v + 1`) and DELETE of the rows matching
  `id % 10 = 0 AND id < rows / 10` (1% of the rows, in 10 of the 100 files), not a merge.

Each merge runs on a fresh copy of the table. deltaspark runs every case in one process: first
copy-on-write (as delta-rs) - the first call of a process pays the JVM's warm-up (`seconds`) -
and once on a copy of the table written with deletion vectors on (`first_seconds`, which pays
the deletion-vector route's own warm-up); then `--repeat` rounds (default 3) of: copy-on-write
(`warm_seconds`, their median; `warm_runs`), with deletion vectors (`with_dvs`: `seconds` the
median, `runs`), and the same merge done by hand with plain Spark over the table's parquet files,
with no log at all (`spark_plain_seconds`, the median; `spark_plain_runs`) - interleaved, so
that each side meets the machine in the same state. Bytes written and dropped are read off each
commit (a file removed and added back with a deletion vector is neither). The plain-Spark merge
is the floor of any merge that runs as Spark jobs on
this machine, doing what a MERGE must beyond the rewrite (the cardinality check, the written
files' statistics) so that it is a fair equivalent and not only a lower bound. Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.procmon import emit, monitored_record, run_monitored

DV = "delta.enableDeletionVectors"
CASES = ("upsert", "delete", "insert", "unique-keys", "duplicate-key", "update-where", "delete-where")
# UPDATE and DELETE by condition: 1% of the rows (every tenth id below 1M rows in, the first 10%
# of the table: 10 of its 100 files), as `update` / `delete` of each engine.
DML_CONDITION = "id % 10 = 0 AND id < {limit}"
DML_CASES = ("update-where", "delete-where")


def _session(driver_memory: str) -> Any:
    from benchmarks.worker_deltaspark import start_session

    return start_session(driver_memory, ["spark.sql.shuffle.partitions=8"], None)


def generate(workdir: Path, rows: int, driver_memory: str) -> None:
    """The base table and one parquet source per case."""
    spark = _session(driver_memory)
    from pyspark.sql import functions as F

    from deltaspark.table import write

    base = workdir / "base"
    shutil.rmtree(base, ignore_errors=True)
    table = spark.range(rows).select(
        "id",
        (F.col("id") * 0.5).alias("v"),
        F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
    )
    write(table.repartitionByRange(100, "id"), str(base))
    # the same table with deletion vectors enabled from its first commit (each commit's .crc then
    # follows from the last one's, as on a table that has had them for a while)
    shutil.rmtree(workdir / "base-dv", ignore_errors=True)
    write(table.repartitionByRange(100, "id"), str(workdir / "base-dv"), properties={DV: "true"})
    per_file = rows // 100
    one_pct = rows // 100

    def columns(ids: Any) -> Any:
        return ids.select(
            "id",
            (F.col("id") * 2.0).alias("v"),
            F.concat(F.lit("new-"), F.col("id").cast("string")).alias("name"),
        )

    # upsert: half of 1% in files 0, 10, ..., 90; half new keys
    in_files = spark.range(one_pct // 2).select(
        ((F.col("id") % 10) * 10 * per_file + (F.col("id") / 10).cast("long") * 2).alias("id")
    )
    new = spark.range(rows, rows + one_pct // 2)
    sources = {
        "upsert": columns(in_files.unionByName(new)),
        "delete": columns(spark.range(0, rows, 100)),  # 1%, in every file
        "insert": columns(spark.range(rows, rows + rows // 10)),
        "unique-keys": columns(spark.range(0, rows // 10)),
        "duplicate-key": columns(spark.range(0, rows // 10).unionByName(spark.range(7, 8))),
    }
    for name, frame in sources.items():
        frame.coalesce(1).write.mode("overwrite").parquet(str(workdir / f"source-{name}"))
    spark.stop()


def _commit_bytes(table: Path, version: int) -> dict[str, int]:
    """What a commit wrote: new data files (a file removed and added back with a deletion vector
    is not rewritten) and the files it dropped."""
    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in lines]
    adds = {a["add"]["path"]: a["add"]["size"] for a in actions if "add" in a}
    removes = {a["remove"]["path"]: a["remove"].get("size") or 0 for a in actions if "remove" in a}
    return {
        "bytes_written": sum(size for path, size in adds.items() if path not in removes),
        "files_written": sum(1 for path in adds if path not in removes),
        "bytes_dropped": sum(size for path, size in removes.items() if path not in adds),
        "files_dropped": sum(1 for path in removes if path not in adds),
        "files_given_dvs": sum(1 for path in adds if path in removes),
    }


def _fresh_copy(workdir: Path, name: str, base: str = "base") -> Path:
    copy = workdir / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(workdir / base, copy)
    return copy


def deltaspark_worker(workdir: Path, case: str, driver_memory: str, repeat: int) -> None:
    start = time.perf_counter()
    spark = _session(driver_memory)
    session = time.perf_counter() - start
    from deltaspark import DeltaTable
    from deltaspark.errors import MergeCardinalityError

    def run(table: Path) -> dict[str, Any]:
        dt = DeltaTable.forPath(spark, str(table))
        version = dt.snapshot().version
        if case in DML_CASES:
            condition = DML_CONDITION.format(limit=_rows(table) // 10)
            began = time.perf_counter()
            if case == "update-where":
                dt.update(condition, {"v": "v + 1"})
            else:
                dt.delete(condition)
            seconds = round(time.perf_counter() - began, 2)
            return {"seconds": seconds, **_commit_bytes(table, version + 1)}
        source = spark.read.parquet(str(workdir / f"source-{case}"))
        builder = dt.alias("t").merge(source.alias("s"), "t.id = s.id")
        if case in ("upsert", "insert"):
            builder = builder.whenNotMatchedInsertAll()
        if case in ("upsert", "unique-keys", "duplicate-key"):
            builder = builder.whenMatchedUpdateAll()
        if case == "delete":
            builder = builder.whenMatchedDelete()
        began = time.perf_counter()
        try:
            metrics = builder.execute().first().asDict()
        except MergeCardinalityError as exc:
            return {"seconds": round(time.perf_counter() - began, 2), "error": str(exc)[:200]}
        seconds = round(time.perf_counter() - began, 2)
        return {"seconds": seconds, "metrics": metrics, **_commit_bytes(table, version + 1)}

    cold = run(_fresh_copy(workdir, "deltaspark-a"))
    dv_first = run(_fresh_copy(workdir, "deltaspark-c", "base-dv"))
    floor = spark_plain_dml if case in DML_CASES else spark_plain_merge
    warm, dv, plain = [], [], []
    for _ in range(max(1, repeat)):
        warm.append(run(_fresh_copy(workdir, "deltaspark-b")))
        dv.append(run(_fresh_copy(workdir, "deltaspark-c", "base-dv")))
        plain.append(floor(spark, workdir, case))
    with_dvs = {
        **dv[-1],
        "seconds": statistics.median(r["seconds"] for r in dv),
        "runs": [r["seconds"] for r in dv],
        "first_seconds": dv_first["seconds"],
    }
    emit(
        {
            "session_seconds": round(session, 2),
            **cold,
            "warm_seconds": statistics.median(r["seconds"] for r in warm),
            "warm_runs": [r["seconds"] for r in warm],
            "with_dvs": with_dvs,
            "spark_plain_seconds": statistics.median(plain),
            "spark_plain_runs": plain,
        }
    )


def _footer_statistics(out: Path) -> int:
    """Each written file's row count and per-column min / max / null count, read from its parquet
    footer on the driver (as deltaspark's write takes them): the statistics any Delta writer must
    log for the files it adds. Returns the files described."""
    import pyarrow.parquet as pq

    described = 0
    for path in sorted(out.rglob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            row_group = meta.row_group(group)
            for column in range(row_group.num_columns):
                stats = row_group.column(column).statistics
                if stats is not None and stats.has_min_max:
                    _ = (stats.min, stats.max, stats.null_count)
        described += 1
    return described


def spark_plain_merge(spark: Any, workdir: Path, case: str) -> float:
    """The merge as plain Spark would do it over the same parquet files, with no log: scan the
    key column within the source's key range, find the files holding matches and check that no
    target row matches two source rows (one aggregate: the cardinality check every MERGE must
    make), rewrite those files joined with the source, write the new keys, and read the written
    files' statistics from their footers (what any Delta writer logs). No log, no commit."""
    from pyspark.sql import functions as F

    out = workdir / "spark-plain"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    source = spark.read.parquet(str(workdir / f"source-{case}"))
    low, high = source.agg(F.min("id"), F.max("id")).first()
    base = workdir / "base"
    files = sorted(str(path) for path in base.rglob("*.parquet") if "_delta_log" not in path.parts)
    target = spark.read.parquet(*files).where(F.col("id").between(low, high))
    matched = target.select("id", F.input_file_name().alias("file")).join(
        F.broadcast(source.select("id")), "id"
    )
    parts = []
    if case != "insert":
        per_file = (
            matched.groupBy("file", "id").count().groupBy("file").agg(F.max("count").alias("most")).collect()
        )
        if any(row.most > 1 for row in per_file):
            raise ValueError("a target row matches two source rows")
        touched = [row.file for row in per_file]
        rows = spark.read.parquet(*touched)
        if case == "delete":
            parts.append(rows.join(F.broadcast(source.select("id")), "id", "left_anti"))
        else:
            new = source.select("id", F.col("v").alias("new_v"), F.col("name").alias("new_name"))
            joined = rows.join(F.broadcast(new), "id", "left")
            parts.append(
                joined.select(
                    "id",
                    F.coalesce("new_v", "v").alias("v"),
                    F.coalesce("new_name", "name").alias("name"),
                )
            )
    if case in ("upsert", "insert"):
        parts.append(source.join(matched.select("id"), "id", "left_anti"))
    result = parts[0]
    for part in parts[1:]:
        result = result.unionByName(part)
    result.write.parquet(str(out))
    _footer_statistics(out)
    return round(time.perf_counter() - began, 2)


def _rows(table: Path) -> int:
    """The table's row count, from its first commit's statistics (the generated base)."""
    lines = (table / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    adds = [json.loads(line)["add"] for line in lines if '"add"' in line]
    return sum(json.loads(a["stats"])["numRecords"] for a in adds)


def spark_plain_dml(spark: Any, workdir: Path, case: str) -> float:
    """UPDATE or DELETE as plain Spark would do it over the table's parquet files, with no log:
    find the files holding a matching row (the scan prunes row groups by the footers' statistics,
    as Delta's data skipping prunes files), rewrite them with the rows updated or left out, and read
    the written files' statistics from their footers. No log, no commit."""
    from pyspark.sql import functions as F

    out = workdir / "spark-plain"
    shutil.rmtree(out, ignore_errors=True)
    base = workdir / "base"
    condition = F.expr(DML_CONDITION.format(limit=_rows(base) // 10))
    began = time.perf_counter()
    files = sorted(str(path) for path in base.rglob("*.parquet") if "_delta_log" not in path.parts)
    matching = spark.read.parquet(*files).where(condition).select(F.input_file_name().alias("file"))
    touched = [row.file for row in matching.distinct().collect()]
    rows = spark.read.parquet(*touched)
    if case == "update-where":
        result = rows.select("id", F.when(condition, F.col("v") + 1).otherwise(F.col("v")).alias("v"), "name")
    else:
        result = rows.where(~condition)
    result.write.parquet(str(out))
    _footer_statistics(out)
    return round(time.perf_counter() - began, 2)


def delta_rs_worker(workdir: Path, case: str) -> None:
    import deltalake
    import pyarrow.parquet as pq

    table = _fresh_copy(workdir, "delta-rs")
    if case in DML_CASES:
        condition = DML_CONDITION.format(limit=_rows(table) // 10)
        began = time.perf_counter()
        dt = deltalake.DeltaTable(str(table))
        if case == "update-where":
            metrics = dt.update(updates={"v": "v + 1"}, predicate=condition)
        else:
            metrics = dt.delete(condition)
        seconds = round(time.perf_counter() - began, 2)
        emit({"seconds": seconds, "metrics": metrics, **_commit_bytes(table, 1)})
        return
    began = time.perf_counter()
    source = pq.read_table(str(workdir / f"source-{case}"))
    merger = deltalake.DeltaTable(str(table)).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    if case in ("upsert", "insert"):
        merger = merger.when_not_matched_insert_all()
    if case in ("upsert", "unique-keys", "duplicate-key"):
        merger = merger.when_matched_update_all()
    if case == "delete":
        merger = merger.when_matched_delete()
    try:
        metrics = merger.execute()
    except Exception as exc:  # delta-rs's errors are its own; report them
        emit(
            {"seconds": round(time.perf_counter() - began, 2), "error": f"{type(exc).__name__}: {exc}"[:300]}
        )
        return
    seconds = round(time.perf_counter() - began, 2)
    emit({"seconds": seconds, "metrics": metrics, **_commit_bytes(table, 1)})


def _run(engine: str, case: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.merge", "--worker", engine, case, "--workdir", args.workdir]
    cmd += ["--repeat", str(args.repeat)]
    outcome = run_monitored(cmd + ["--driver-memory", args.driver_memory], args.timeout, 20 * 1024**3)
    return monitored_record(outcome, engine=engine, case=case)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench/merge")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="warm rounds (deltaspark, DVs, plain Spark)")
    parser.add_argument("--out")
    parser.add_argument("--reuse", action="store_true", help="keep the tables and sources of a previous run")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    if args.worker:
        engine, case = args.worker
        if engine == "deltaspark":
            deltaspark_worker(workdir, case, args.driver_memory, args.repeat)
        else:
            delta_rs_worker(workdir, case)
        return 0
    workdir.mkdir(parents=True, exist_ok=True)
    if not (args.reuse and (workdir / "base" / "_delta_log").is_dir()):
        start = time.perf_counter()
        generate(workdir, args.rows, args.driver_memory)
        print(
            f"generated {args.rows} rows and the sources in {time.perf_counter() - start:.0f} s", flush=True
        )
    runs = []
    for case in args.cases.split(","):
        engines = ["deltaspark"] if case == "duplicate-key" else ["deltaspark", "delta-rs"]
        for engine in engines:
            runs.append(_run(engine, case, args))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "metrics"}), flush=True)
    result = {"table": {"rows": args.rows, "files": 100}, "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Commit benchmarks, deltaspark beside delta-rs on the same generated table:

- `append`: one commit adding N files (default 10,000 add actions with stats; the files themselves
  are not written, so only the commit path is timed): deltaspark's `Transaction.addFiles` +
  `commit`, delta-rs's `create_write_transaction`;
- `restore`: `restoreToVersion(v)` / delta-rs `restore(v)` across the whole table (the diff of two
  snapshots, the existence check of the files to re-add, the commit), deltaspark's phases timed
  apart: `restore` (what delta-rs does) and `checkpoint` (the checkpoint the table's interval asks
  for after the commit, which delta-spark writes too and delta-rs's restore does not);

Every engine runs in a process of its own (peak RSS of the process tree sampled, as in `run.py`);
the log is put back after each repetition, so every run commits the same version. deltaspark runs
with `spark.deltaspark.commit.checksum=incremental`: the generated table has no checksum, so the
first commit would otherwise aggregate the whole state once to write one (timed apart as
`checksum_full`).

    python -m benchmarks.commits --files 1000000 --commits 100 --append 10000 --repeat 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import LogState, Timer, own_peak_rss, repeat
from benchmarks.generate import PARTITION_COLUMN, LogSpec, file_paths, generate, plan_batches
from benchmarks.procmon import emit, run_monitored


def _touch_removed(root: Path, spec: LogSpec) -> None:
    """Placeholders for files removed by the log too: a restore re-adds them and checks they exist."""
    batches, _ = plan_batches(spec)
    for b in batches:
        if b.remove_count:
            for rel in file_paths(
                np.arange(b.remove_start, b.remove_start + b.remove_count), spec
            ).to_pylist():
                os.close(os.open(root / rel, os.O_CREAT | os.O_WRONLY, 0o644))


def _add_rows(n: int) -> list[dict[str, Any]]:
    stats = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'
    return [
        {
            "path": f"{PARTITION_COLUMN}=p{i % 100:05d}/bench-append-{i:08d}.parquet",
            "partitionValues": {PARTITION_COLUMN: f"p{i % 100:05d}"},
            "size": 1000 + i,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": stats,
        }
        for i in range(n)
    ]


# ---- workers ----------------------------------------------------------------------------------------


def _deltaspark(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.worker_deltaspark import jvm_heap_peak, start_session

    timer = Timer()
    with timer.phase("session"):
        spark = start_session("8g", ["spark.deltaspark.commit.checksum=incremental"], None)
    from pyspark.sql import functions as F

    from deltaspark import DeltaTable
    from deltaspark.log import action_schemas as schemas
    from deltaspark.storage import storage_for
    from deltaspark.transaction.transaction import Transaction

    state = LogState(args.table)

    def append() -> tuple[Timer, dict[str, Any]]:
        t = Timer()
        try:
            with t.phase("snapshot"):
                table = DeltaTable.forPath(spark, args.table)
                snapshot = table.snapshot()
            with t.phase("commit"):
                rows = spark.createDataFrame(_add_rows(args.append), schemas.ADD)
                txn = Transaction(spark, storage_for(spark), args.table, snapshot)
                txn.addFiles(
                    rows.select(F.struct(*rows.columns).alias("add"), F.lit(100).alias("num_records"))
                )
                result = txn.commit("WRITE", {"mode": "Append"})
            facts = {"version": result.version, "written": state.new_files()}
        finally:
            state.restore()
        return t, facts

    def restore() -> tuple[Timer, dict[str, Any]]:
        from deltaspark.operations.restore import restore as restore_commit

        t = Timer()
        try:
            table = DeltaTable.forPath(spark, args.table)
            with t.phase("restore"):  # what delta-rs's restore does: the diff and the commit
                listing = table._listing()
                latest, target = table._load(None, listing), table._load(args.restore_to, listing)
                result = restore_commit(
                    spark, table._storage, table._path, latest, target, {"version": args.restore_to}
                )
            with t.phase("checkpoint"):  # then, as delta-spark, the checkpoint the interval asks for
                table._after_commit(result)
            facts = {"metrics": result.metrics, "written": state.new_files()}
        finally:
            state.restore()
        return t, facts

    def checksum_full() -> tuple[Timer, dict[str, Any]]:
        from deltaspark.transaction.checksum import full_checksum

        t = Timer()
        with t.phase("checksum_full"):
            doc = full_checksum(DeltaTable.forPath(spark, args.table).snapshot())
        return t, {"numFiles": doc["numFiles"]}

    run = {"append": append, "restore": restore, "checksum_full": checksum_full}[args.op]
    result = repeat(run, args.repeat)
    result["session_seconds"] = timer.phases["session"]
    result["jvm_heap_peak"] = jvm_heap_peak(spark)
    result["python_peak_rss"] = own_peak_rss()
    return result


def _deltars(args: argparse.Namespace) -> dict[str, Any]:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    state = LogState(args.table)

    def append() -> tuple[Timer, dict[str, Any]]:
        t = Timer()
        try:
            with t.phase("snapshot"):
                table = DeltaTable(args.table)
            with t.phase("commit"):
                actions = [
                    AddAction(
                        r["path"], r["size"], r["partitionValues"], r["modificationTime"], True, r["stats"]
                    )
                    for r in _add_rows(args.append)
                ]
                table.create_write_transaction(actions, "append", table.schema(), [PARTITION_COLUMN])
            facts = {"version": DeltaTable(args.table).version(), "written": state.new_files()}
        finally:
            state.restore()
        return t, facts

    def restore() -> tuple[Timer, dict[str, Any]]:
        t = Timer()
        try:
            with t.phase("restore"):
                metrics = DeltaTable(args.table).restore(args.restore_to)
            facts = {"metrics": metrics, "written": state.new_files()}
        finally:
            state.restore()
        return t, facts

    run = {"append": append, "restore": restore}[args.op]
    result = repeat(run, args.repeat)
    result["python_peak_rss"] = own_peak_rss()
    return result


# ---- orchestration ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--append", type=int, default=10_000)
    parser.add_argument(
        "--restore-to", type=int, default=None, help="version to restore to (default: half way)"
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--ops", default="append,restore,checksum_full", help="operations to run")
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", choices=["deltaspark", "deltars"], help=argparse.SUPPRESS)
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        emit((_deltaspark if args.worker == "deltaspark" else _deltars)(args))
        return 0

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltaspark-commits-"))
    spec = LogSpec(files=args.files, commits=args.commits)
    table = generate(workdir / "table", spec, touch=True)
    _touch_removed(Path(table.path), spec)
    ops = set(args.ops.split(","))
    restore_to = args.restore_to if args.restore_to is not None else table.version // 2
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "table": {"files": table.live_files, "version": table.version, "log_bytes": table.log_bytes},
        "append_files": args.append,
        "restore_to": restore_to,
        "runs": {},
    }
    for engine, op in (
        ("deltaspark", "append"),
        ("deltars", "append"),
        ("deltaspark", "restore"),
        ("deltars", "restore"),
        ("deltaspark", "checksum_full"),
    ):
        if op not in ops:
            continue
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.commits",
            "--worker",
            engine,
            "--op",
            op,
            "--table",
            table.path,
        ]
        cmd += ["--repeat", str(args.repeat), "--append", str(args.append), "--restore-to", str(restore_to)]
        outcome = run_monitored(cmd, timeout=3600, mem_cap_bytes=16 * 1024**3)
        entry: dict[str, Any] = {"peak_tree_rss": outcome.peak_tree_rss, "returncode": outcome.returncode}
        if outcome.results:
            entry.update(outcome.results[-1])
        else:
            entry["error"] = outcome.killed or outcome.stderr_tail
        report["runs"][f"{engine}/{op}"] = entry
        print(
            f"{engine:10s} {op:14s} median {entry.get('median')} s  "
            f"cold {entry.get('cold', {}).get('total')} s  "
            f"peak RSS {outcome.peak_tree_rss / 1024**3:.2f} GiB",
            flush=True,
        )
    for op in ("append", "restore"):
        ours, theirs = report["runs"].get(f"deltaspark/{op}", {}), report["runs"].get(f"deltars/{op}", {})
        if ours.get("median") and theirs.get("median"):
            report[f"{op}_ratio"] = round(ours["median"] / theirs["median"], 2)
            same_work = ours.get("median_phases", {}).get(op)
            if same_work:
                report[f"{op}_ratio_same_work"] = round(same_work / theirs["median"], 2)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

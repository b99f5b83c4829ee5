"""The scheduled checkpoint job (`jobs/checkpoint_job.py`) and the `checkpoint` / `cleanup` commands:
in process on the test session (tests/test_cluster.py submits it to a standalone cluster)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.cli import main as cli
from tests.conftest import REPO
from tests.log_builder import LogBuilder, add, commit_info, metadata, protocol

DAY = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 60 * DAY


def _load_job():
    spec = importlib.util.spec_from_file_location("checkpoint_job", REPO / "jobs" / "checkpoint_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(
    root: Path, commits: int, config: dict | None = None, v2: bool = False, old: bool = True
) -> LogBuilder:
    """A table of `commits` commits, each adding a file; sixty days old when `old`."""
    log = LogBuilder(root)
    features = ["v2Checkpoint"] if v2 else None
    proto = protocol(3, 7, features, features) if v2 else protocol()
    conf = {**(config or {}), **({"delta.checkpointPolicy": "v2"} if v2 else {})}
    for v in range(commits):
        first = [proto, metadata(configuration=conf)] if v == 0 else []
        mtime = OLD + v * 1000 if old else NOW - (commits - v) * 60_000
        log.commit(v, *first, add(f"f{v}"), commit_info(), mtime_ms=mtime)
    return log


def _checkpoints(log: LogBuilder) -> list[str]:
    return sorted(n for n in os.listdir(log.log) if ".checkpoint." in n)


# ---- the job, in process ---------------------------------------------------------------------------------


def test_job_checkpoints_due_tables_cleans_their_logs_and_reports_failures(spark, tmp_path, capsys):
    due = _table(tmp_path / "due", 12)  # 12 commits, no checkpoint: due (interval 10), all expired
    fresh = _table(tmp_path / "fresh", 3)  # 3 commits: not due
    custom = _table(tmp_path / "custom", 3, {"delta.checkpointInterval": "2"}, v2=True, old=False)
    listing = tmp_path / "tables.txt"
    listing.write_text(f"# nightly\n{fresh.path}\n{tmp_path / 'missing'}\n")
    output = tmp_path / "summary.json"
    code = _load_job().main(
        [due.path, custom.path, "--paths-file", str(listing), "--output", str(output)], spark=spark
    )

    assert code == 1  # one table failed; the others were still maintained
    summary = json.loads(output.read_text())
    tables = {Path(t["path"]).name: t for t in summary["tables"]}
    assert (summary["ok"], summary["failed"]) == (3, 1)
    assert tables["missing"]["status"] == "failed" and "TableNotFoundError" in tables["missing"]["error"]

    assert tables["due"]["checkpoint"]["kind"] == "classic" and tables["due"]["checkpoint"]["version"] == 11
    assert _checkpoints(due) == [f"{11:020d}.checkpoint.parquet"]
    # cleanup ran after the checkpoint: the new checkpoint is the boundary, older commits are gone
    assert tables["due"]["cleanup"]["checkpointVersion"] == 11 and tables["due"]["cleanup"]["numFiles"] == 11
    assert sorted(n for n in os.listdir(due.log) if n.endswith(".json")) == [f"{11:020d}.json"]
    assert DeltaTable.forPath(spark, due.path).snapshot().summary()["numFiles"] == 12

    assert tables["fresh"]["checkpoint"] is None and tables["fresh"]["commitsSinceCheckpoint"] == 3
    assert _checkpoints(fresh) == [] and tables["fresh"]["cleanup"]["skipped"]
    assert tables["custom"]["checkpointInterval"] == 2 and tables["custom"]["checkpoint"]["kind"] == "v2"
    out = capsys.readouterr().out
    assert "FAILED" in out and "not due" in out and "4 table(s): 3 ok, 1 failed" in out


def test_job_options_interval_no_cleanup_and_dry_run(spark, tmp_path):
    job = _load_job()
    log = _table(tmp_path / "t", 4)
    assert job.main([log.path, "--interval", "100", "--dry-run-cleanup"], spark=spark) == 0
    assert _checkpoints(log) == []
    assert (
        job.main([log.path, "--interval", "4", "--no-cleanup", "--actions-per-part", "2"], spark=spark) == 0
    )
    # Multi-part: the 4 file actions hash by their absolute path (so by this run's temporary
    # folder) into 2 partitions, one possibly empty, then the part holding protocol and metadata.
    parts = _checkpoints(log)
    assert len(parts) in (2, 3)
    assert parts == [
        f"{3:020d}.checkpoint.{o:010d}.{len(parts):010d}.parquet" for o in range(1, len(parts) + 1)
    ]
    assert len([n for n in os.listdir(log.log) if n.endswith(".json")]) == 4  # --no-cleanup kept them
    assert job.main([log.path, "--interval", "100", "--dry-run-cleanup"], spark=spark) == 0
    assert len([n for n in os.listdir(log.log) if n.endswith(".json")]) == 4  # a dry run deletes nothing


def test_the_job_is_also_the_console_script_for_wheel_tasks():
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["deltaspark-checkpoint-job"].partition(":")
    assert getattr(importlib.import_module(module), function) is _load_job().main


# ---- the command line ------------------------------------------------------------------------------------


def test_cli_checkpoint_and_cleanup(spark, tmp_path, capsys):
    log = _table(tmp_path / "t", 5)
    assert cli(["cleanup", log.path, "--dry-run"]) == 0
    assert "Nothing to delete: no usable checkpoint" in capsys.readouterr().out
    assert cli(["checkpoint", log.path, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "classic" and result["version"] == 4 and result["numOfAddFiles"] == 5
    assert cli(["cleanup", log.path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Would delete 4 log file(s)" in out and len(os.listdir(log.log)) == 7
    assert cli(["cleanup", log.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["numFiles"] == 4
    assert sorted(n for n in os.listdir(log.log) if n.endswith(".json")) == [f"{4:020d}.json"]
    assert cli(["checkpoint", str(tmp_path / "nothing")]) == 1
    assert "TableNotFoundError" in capsys.readouterr().err

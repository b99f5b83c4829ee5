"""Audits: every check finds the damage made for it, and stays silent on healthy tables.

One table is written through deltaspark (partitioned by an int, deletion vectors, change data feed,
a checkpoint, in-commit timestamps, checksums at every version); damaged copies of it are audited
once each, with every damage of a kind at once, and each check must report its own damage with
the path it concerns. Real tables of other engines (the conformance folder) must audit clean.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaspark import AuditReport, DeltaTable, InvalidArgumentError, write
from deltaspark.audit.job import main as audit_job
from deltaspark.cli import main as cli
from deltaspark.features.dv_codec import uuid_relative_path
from deltaspark.maintenance.table_listing import is_hidden, list_table_files
from tests.conftest import CONNECT

pytestmark = pytest.mark.skipif(CONNECT, reason="audits list and repair tables through Hadoop and pyarrow")


def _log(path: str) -> Path:
    return Path(path) / "_delta_log"


@pytest.fixture(scope="module")
def healthy(spark, tmp_path_factory) -> str:
    """v0 create (p = 0, 1, 2), v1 append, v2 DV delete (CDC files), v3 append (checkpoint),
    v4 DV delete, v5 enable in-commit timestamps, v6 append (checkpoint), v7 append."""
    path = str(tmp_path_factory.mktemp("audit") / "healthy")
    rows = [(i, i % 3, f"s{i}") for i in range(60)]
    frame = spark.createDataFrame(rows, "id long, p int, s string").repartition(2)
    properties = {
        "delta.checkpointInterval": "3",
        "delta.enableDeletionVectors": "true",
        "delta.enableChangeDataFeed": "true",
    }
    write(frame, path, partitionBy=["p"], properties=properties)
    write(spark.createDataFrame([(100 + i, i % 3, "x") for i in range(9)], "id long, p int, s string"), path)
    table = DeltaTable.forPath(spark, path)
    table.delete("id % 7 = 0")
    write(spark.createDataFrame([(200, 1, "y")], "id long, p int, s string"), path)
    table.delete("id = 5")
    table.setProperties({"delta.enableInCommitTimestamps": "true"})
    write(spark.createDataFrame([(300, 2, "z")], "id long, p int, s string"), path)
    write(
        spark.createDataFrame([(400, 0, "w"), (401, 0, None)], "id long, p int, s string").coalesce(1), path
    )
    return path


def _copy(healthy: str, tmp_path: Path, name: str) -> str:
    target = tmp_path / name
    shutil.copytree(healthy, target)
    return str(target)


def _by_check(report: AuditReport, severity: str | None = None) -> dict[str, list[tuple]]:
    """Findings per check, sorted (a DataFrame's row order means nothing)."""
    rows = report.findings.collect()
    out: dict[str, list[tuple]] = {}
    for r in rows:
        if severity is None or r["severity"] == severity:
            out.setdefault(r["check"], []).append((r["version"], r["path"], r["detail"]))
    return {
        k: sorted(v, key=lambda f: (f[0] if f[0] is not None else -1, f[1] or "", f[2]))
        for k, v in out.items()
    }


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_lines(path: Path, actions: list[dict]) -> None:
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_healthy_table_passes_every_check(spark, healthy):
    report = DeltaTable.forPath(spark, healthy).audit()
    problems = report.findings.where("severity != 'info'").collect()
    assert problems == [] and report.passed
    assert {c["check"] for c in report.checks} >= {
        "log.versions",
        "log.checkpoint",
        "log.checksum",
        "log.in_commit_timestamps",
        "files.exist",
        "files.deletion_vectors",
        "files.footers",
        "files.change_data",
        "hygiene.orphans",
    }
    snapshot = DeltaTable.forPath(spark, healthy).snapshot()
    assert report.version == snapshot.version == 7
    assert report.metrics["numFiles"] == snapshot.summary()["numFiles"]
    assert report.metrics["numRecords"] - report.metrics["deletedRecords"] == snapshot.toDF().count()
    assert "orphanFiles" not in report.metrics  # every file under the table is referenced
    assert json.loads(report.toJSON())["passed"] is True
    frames = report.frames
    assert frames["files"].count() == snapshot.summary()["numFiles"]
    assert sorted(r["partition"] for r in frames["partitions"].collect()) == [
        '{"p":"0"}',
        '{"p":"1"}',
        '{"p":"2"}',
    ]
    assert [r["version"] for r in frames["commits"].orderBy("version").collect()] == list(range(8))
    report.unpersist()


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_damaged_files_are_each_found_and_repair_removes_the_missing_ones(spark, healthy, tmp_path):
    path = _copy(healthy, tmp_path, "files")
    table = DeltaTable.forPath(spark, path)
    files = table.snapshot().files().collect()
    plain = sorted(f["path"] for f in files if f["deletionVector"] is None)
    with_dv = sorted((f["path"], f["deletionVector"]) for f in files if f["deletionVector"] is not None)
    missing, grown = plain[0], plain[1]
    os.remove(Path(path) / missing)
    with open(Path(path) / grown, "ab") as fh:
        fh.write(b"junk")
    live_dvs = sorted({f"{path}/{uuid_relative_path(dv['pathOrInlineDv'])}" for _, dv in with_dv})
    assert len(live_dvs) >= 2
    damaged_dv = bytearray(Path(live_dvs[0]).read_bytes())
    damaged_dv[12] ^= 0xFF  # inside the first bitmap: its CRC no longer holds
    Path(live_dvs[0]).write_bytes(bytes(damaged_dv))
    cdc = sorted(glob.glob(f"{path}/_change_data/**/*.parquet", recursive=True))
    os.remove(cdc[0])
    folder = (Path(path) / plain[2]).parent  # a partition folder of a data file
    (folder / "stray.parquet").write_bytes(b"x" * 7)
    (Path(path) / "_hidden.parquet").write_bytes(b"x")
    (folder / ".hidden.crc").write_bytes(b"x")
    (folder / "_tmp").mkdir()
    (folder / "_tmp" / "leftover.parquet").write_bytes(b"x")
    # The last commit's file (after the checkpoint at 6): its stats and partition value damaged.
    last = _log(path) / f"{7:020d}.json"
    actions = _lines(last)
    for action in actions:
        if "add" in action:
            stats = json.loads(action["add"]["stats"])
            stats["numRecords"] += 1
            stats["minValues"]["id"], stats["maxValues"]["id"] = 999, 1
            stats["nullCount"]["s"] = stats["numRecords"] + 5
            action["add"]["stats"] = json.dumps(stats)
            action["add"]["partitionValues"] = {"p": "not-an-int", "q": "extra"}
            damaged_add = action["add"]["path"]
    _write_lines(last, actions)

    report = table.audit()
    found = _by_check(report, "error")
    root = "file:" + path
    exist = {(p, d) for _, p, d in found["files.exist"]}
    assert (f"{root}/{missing}", "data file does not exist") in exist
    assert any(p == f"{root}/{grown}" and "the log says" in d for p, d in exist)
    assert any("CRC-32 mismatch" in d for _, _, d in found["files.deletion_vectors"])
    footers = {(p, d) for _, p, d in found["files.footers"]}
    assert any(p == f"{root}/{grown}" and "not a readable parquet file" in d for p, d in footers)
    assert any(p == f"{root}/{damaged_add}" and "numRecords" in d for p, d in footers)
    stats = [d for _, p, d in found["files.statistics"] if p == f"{root}/{damaged_add}"]
    assert any("minValues.id (999) > maxValues.id (1)" in d for d in stats)
    assert any("nullCount of s" in d for d in stats)
    assert any("'not-an-int' of p is not a valid int" in d for _, _, d in found["files.partition_values"])
    warnings = _by_check(report, "warning")
    assert any("q" in d for _, _, d in warnings["files.partition_values"])
    assert [d for _, _, d in found["files.change_data"]] == ["change data file does not exist"]
    orphans = [p for _, p, _ in _by_check(report, "info")["hygiene.orphans"]]
    assert orphans == [f"{root}/{plain[2].rsplit('/', 1)[0]}/stray.parquet"]  # hidden names never are
    assert report.metrics["orphanBytes"] == 7
    assert not report.passed
    assert {"log.checkpoint", "log.checksum"}.isdisjoint(found)  # the log itself is sound

    # Repair: a dry run lists the reference to the missing file; applying it commits its removal.
    # (The damaged DV file exists, so it is no repair candidate: FSCK removes only missing files.)
    dry = table.repair().collect()
    assert [(r["path"], r["dataFileMissing"], r["deletionVectorFileMissing"]) for r in dry] == [
        (missing, True, False)
    ]
    assert table.snapshot().version == 7  # a dry run commits nothing
    os.remove(live_dvs[-1])
    applied = table.repair(dryRun=False).collect()
    dv_missing = [r for r in applied if r["deletionVectorFileMissing"]]
    assert len(applied) == 1 + len(dv_missing) and dv_missing
    latest = table.snapshot()
    assert latest.version == 8 and latest.commitInfo["operation"] == "FSCK"
    # (files() refuses this table: its damaged partition value; the actions are read as logged)
    remaining = {r["path"] for r in latest.fileActions().where("is_add").select("add.path").collect()}
    assert missing not in remaining and not any(r["path"] in remaining for r in dv_missing)
    assert table.repair().count() == 0


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_damaged_log_copies_are_each_found(spark, healthy, tmp_path):
    path = _copy(healthy, tmp_path, "log")
    log = _log(path)
    crc1 = json.loads((log / f"{1:020d}.crc").read_text())
    crc1["numFiles"] += 1
    crc1["histogramOpt"]["fileCounts"][2] += 3
    (log / f"{1:020d}.crc").write_text(json.dumps(crc1))
    crc2 = json.loads((log / f"{2:020d}.crc").read_text())
    crc2["metadata"]["configuration"]["delta.appendOnly"] = "true"
    crc2["numDeletedRecordsOpt"] += 1
    (log / f"{2:020d}.crc").write_text(json.dumps(crc2))
    # The checkpoint at version 3 loses one add, misstates another's size and repeats a third.
    checkpoint = log / f"{3:020d}.checkpoint.parquet"
    written = pq.read_table(checkpoint)
    rows = written.to_pylist()
    adds = [i for i, r in enumerate(rows) if r.get("add")]
    dropped = rows[adds[0]]["add"]["path"]
    rows[adds[1]]["add"]["size"] += 11
    resized = rows[adds[1]]["add"]["path"]
    rows.append(rows[adds[2]])
    del rows[adds[0]]
    pq.write_table(pa.Table.from_pylist(rows, schema=written.schema), checkpoint)
    # A log compaction of commits 1-2, reconciled but missing one of its adds.
    newest: dict[tuple, dict] = {}
    for version in (1, 2):
        for action in _lines(log / f"{version:020d}.json"):
            kind = "add" if "add" in action else "remove" if "remove" in action else None
            if kind:
                dv = action[kind].get("deletionVector") or {}
                newest[(action[kind]["path"], dv.get("pathOrInlineDv"))] = action
    compacted = list(newest.values())
    skipped = next(a for a in compacted if "add" in a)
    compacted.remove(skipped)
    _write_lines(log / f"{1:020d}.{2:020d}.compacted.json", compacted)
    # The last commit's in-commit timestamp goes back in time.
    last = log / f"{7:020d}.json"
    actions = _lines(last)
    actions[0]["commitInfo"]["inCommitTimestamp"] = 1000
    _write_lines(last, actions)
    hint = json.loads((log / "_last_checkpoint").read_text())
    hint.pop("checksum", None)
    hint["sizeInBytes"] = 5
    (log / "_last_checkpoint").write_text(json.dumps(hint))

    report = DeltaTable.forPath(spark, path).audit("quick")
    found = _by_check(report, "error")
    checksum = {(v, d) for v, _, d in found["log.checksum"]}
    assert any(v == 1 and d.startswith("numFiles is") for v, d in checksum)
    assert any(v == 1 and d.startswith("histogramOpt.fileCounts differs at bin 2") for v, d in checksum)
    assert any(v == 2 and d.startswith("metadata.configuration") for v, d in checksum)
    assert any(v == 2 and d.startswith("numDeletedRecordsOpt") for v, d in checksum)
    assert any(v == 7 and d.startswith("inCommitTimestampOpt") for v, d in checksum)
    assert {v for v, _ in checksum} == {1, 2, 7}  # only the damaged versions
    root = "file:" + path
    checkpoints = {(p, d) for _, p, d in found["log.checkpoint"]}
    assert any(p == f"{root}/{dropped}" and "lacks" in d for p, d in checkpoints)
    assert any(p == f"{root}/{resized}" and '"size"' in d for p, d in checkpoints)
    assert any("lists a file 2 times" in d for _, d in checkpoints)
    compaction = [(p, d) for _, p, d in found["log.compaction"]]
    assert compaction == [(f"{root}/{skipped['add']['path']}", compaction[0][1])]
    assert "lacks" in compaction[0][1]
    assert [v for v, _, _ in found["log.in_commit_timestamps"]] == [7]
    assert any("sizeInBytes 5" in d for _, _, d in _by_check(report, "warning")["log.last_checkpoint"])
    assert "files.footers" not in {c["check"] for c in report.checks}  # quick: no file is opened


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_a_checkpoint_is_compared_file_by_file_not_by_count(spark, healthy, tmp_path):
    """The checkpoint at version 3 keeps its number of rows but lists another file in place of one
    live file, and misstates another's partition values, another's DV cardinality and another's
    row id; it also holds a remove of a file that was never a tombstone and a tombstone twice.
    Each is its own finding, on its own file, and nothing else is found."""
    path = _copy(healthy, tmp_path, "checkpoint")
    checkpoint = _log(path) / f"{3:020d}.checkpoint.parquet"
    written = pq.read_table(checkpoint)
    rows = written.to_pylist()
    adds = [i for i, r in enumerate(rows) if r.get("add")]
    plain = [i for i in adds if not rows[i]["add"].get("deletionVector")]
    with_dv = [i for i in adds if rows[i]["add"].get("deletionVector")]
    removes = [i for i, r in enumerate(rows) if r.get("remove")]
    assert len(plain) >= 3 and with_dv and removes
    replaced = rows[plain[0]]["add"]["path"]
    other = replaced.replace("part-", "part-other-")
    rows[plain[0]]["add"]["path"] = other
    moved = rows[plain[1]]["add"]
    moved["partitionValues"] = [(k, "9") for k, _ in moved["partitionValues"]]
    recounted = rows[with_dv[0]]["add"]
    recounted["deletionVector"]["cardinality"] += 1
    renumbered = rows[plain[2]]["add"]
    renumbered["baseRowId"] = 7
    tombstone = rows[removes[0]]
    ghost = {**tombstone, "remove": {**tombstone["remove"], "path": "p=1/ghost.parquet"}}
    rows += [ghost, tombstone]
    pq.write_table(pa.Table.from_pylist(rows, schema=written.schema), checkpoint)

    report = DeltaTable.forPath(spark, path).audit("quick", checks=["log.checkpoint"])
    found = _by_check(report, "error")["log.checkpoint"]
    root, where = "file:" + path, f"checkpoint {checkpoint.name}"
    assert {v for v, _, _ in found} == {3}
    by_path = {p: d for _, p, d in found}
    assert len(by_path) == len(found) == 7  # one finding per damaged file
    assert by_path[f"{root}/{other}"] == f"{where} has an add that the log does not have at version 3"
    assert by_path[f"{root}/{replaced}"] == f"the log has a live file as an add that {where} lacks"
    assert by_path[f"{root}/p=1/ghost.parquet"] == (
        f"{where} has a remove of a file that is not a tombstone at version 3"
    )
    assert by_path[tombstone["remove"]["path"]] == f"{where} lists a file 2 times"
    for changed, field in (
        (moved, '"partitionValues":[{"key":"p","value":"9"}]'),
        (recounted, f'"dvCardinality":{recounted["deletionVector"]["cardinality"]}'),
        (renumbered, '"baseRowId":7'),
    ):
        detail = by_path[f"{root}/{changed['path']}"]
        assert detail.startswith(f"{where} has {{") and ", the log has {" in detail
        assert field in detail.split(", the log has ")[0] and field not in detail.split(", the log has ")[1]


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_a_missing_commit_is_reported_once_and_the_checks_run_from_the_checkpoint_after_it(
    spark, healthy, tmp_path
):
    """Commit 1 is gone; the checkpoint at 3 bridges the gap. The gap is `log.versions`' finding
    alone: the replay starts at checkpoint 3, so the checkpoint at 6 and the checksums at 3..7 are
    compared (and their damage found), those before 3 are noted as not compared."""
    path = _copy(healthy, tmp_path, "gap")
    log = _log(path)
    os.remove(log / f"{1:020d}.json")
    crc5 = json.loads((log / f"{5:020d}.crc").read_text())
    crc5["numFiles"] += 1
    (log / f"{5:020d}.crc").write_text(json.dumps(crc5))
    checkpoint = log / f"{6:020d}.checkpoint.parquet"
    written = pq.read_table(checkpoint)
    rows = written.to_pylist()
    (first_add,) = [i for i, r in enumerate(rows) if r.get("add")][:1]
    rows[first_add]["add"]["size"] += 11
    pq.write_table(pa.Table.from_pylist(rows, schema=written.schema), checkpoint)

    report = DeltaTable.forPath(spark, path).audit("quick")
    found = _by_check(report, "error")
    assert report.version == 7
    assert found["log.versions"] == [(1, None, "commit 1 is missing between 0 and 7")]
    assert [(v, d) for v, _, d in found["log.checksum"]] == [
        (5, f"numFiles is {crc5['numFiles']}, the log replays to {crc5['numFiles'] - 1}")
    ]
    resized = f"file:{path}/{rows[first_add]['add']['path']}"
    assert [(v, p) for v, p, d in found["log.checkpoint"] if '"size"' in d] == [(6, resized)]
    assert set(found) == {"log.versions", "log.checksum", "log.checkpoint"}
    assert not any("could not run" in r["detail"] for r in report.findings.collect())
    notes = [d for _, _, d in _by_check(report, "info")["log.checksum"]]
    assert notes == [
        "3 checksum(s) not compared, at version(s) 0, 1, 2: the replay starts from the checkpoint at "
        "version 3: commit(s) 1 are not in the log"
    ]


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_an_older_format_checksum_is_compared_on_the_fields_it_holds(spark, healthy, tmp_path):
    """Older Databricks runtimes wrote `.crc` files with five fields only: what they hold is
    compared (a wrong value is an error), the absent protocol and metadata are a note."""
    path = _copy(healthy, tmp_path, "old-crc")
    log = _log(path)
    for version, wrong in ((3, 0), (4, 1)):
        crc = json.loads((log / f"{version:020d}.crc").read_text())
        old = {"tableSizeBytes": crc["tableSizeBytes"], "numFiles": crc["numFiles"] + wrong}
        old.update(numMetadata=1, numProtocol=1, numTransactions=0)
        (log / f"{version:020d}.crc").write_text(json.dumps(old))
    report = DeltaTable.forPath(spark, path).audit("quick", checks=["log.checksum"])
    errors = _by_check(report, "error")["log.checksum"]
    assert [(v, d) for v, _, d in errors] == [
        (4, f"numFiles is {old['numFiles']}, the log replays to {old['numFiles'] - 1}")
    ]
    notes = {v: d for v, _, d in _by_check(report, "info")["log.checksum"]}
    fields = "tableSizeBytes, numFiles, numMetadata, numProtocol, numTransactions"
    assert notes == {
        3: "metadata, protocol absent (required by the current protocol; older writers did not record "
        f"them): compared the fields it holds, {fields}: every one matches the log",
        4: "metadata, protocol absent (required by the current protocol; older writers did not record "
        f"them): compared the fields it holds, {fields}: the errors say which differ",
    }


def test_protocol_and_properties_must_agree(spark, log):
    from tests import log_builder as lb

    log.commit(
        0,
        lb.protocol(3, 7, ["deletionVectors"], ["changeDataFeed"]),
        lb.metadata(configuration={"delta.enableChangeDataFeed": "true", "delta.enableRowTracking": "true"}),
        lb.add("a.parquet"),
    )
    report = DeltaTable.forPath(spark, log.path).audit("quick")
    details = [d for _, _, d in _by_check(report, "error")["log.protocol"]]
    assert "reader feature deletionVectors is not listed as a writer feature" in details
    assert "a property enables rowTracking, which the protocol does not support" in details
    assert not any("changeDataFeed" in d for d in details)


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_version_range_and_level_are_checked(spark, healthy):
    table = DeltaTable.forPath(spark, healthy)
    with pytest.raises(InvalidArgumentError):
        table.audit("deep")
    with pytest.raises(InvalidArgumentError):
        table.audit("quick", startVersion=5, endVersion=2)
    with pytest.raises(InvalidArgumentError, match="no audit check starts with nope"):
        table.audit("quick", checks=["nope"])
    report = table.audit("quick", startVersion=4, endVersion=4, checks=["log.", "files.statistics"])
    assert report.version == 4 and report.passed
    assert {c["check"] for c in report.checks} == {
        "log.snapshot",
        "log.versions",
        "log.last_checkpoint",
        "log.protocol",
        "log.in_commit_timestamps",
        "log.reconciliation",
        "log.checkpoint",
        "log.compaction",
        "log.checksum",
        "files.statistics",
    }


def test_listing_follows_vacuums_hidden_rules(spark, tmp_path):
    for name in ["a.parquet", "_delta_log/0.json", ".x", "_x=1/f.parquet", "p=1/q=2/f.parquet", "p=1/_tmp/x"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    for name in ["_change_data/c.parquet", "_delta_index/i", "metadata/m.json", "p=2/metadata/ok.parquet"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    listed = list_table_files(spark, "file:" + str(tmp_path), ["_x", "p"]).collect()
    files = sorted(r["path"][len("file:" + str(tmp_path)) + 1 :] for r in listed if not r["isDir"])
    assert files == [
        "_change_data/c.parquet",
        "_delta_index/i",
        "_x=1/f.parquet",
        "a.parquet",
        "p=1/q=2/f.parquet",
        "p=2/metadata/ok.parquet",
    ]
    assert all(r["size"] == 1 and r["modificationTime"] > 0 for r in listed if not r["isDir"])
    assert is_hidden("_SUCCESS", []) and not is_hidden("_x=1", ["_x"]) and is_hidden("metadata", [], True)


@pytest.mark.one_suite("4.x")  # thin wrappers over DeltaTable.audit, which both suites test
def test_cli_and_job(spark, healthy, tmp_path, capsys):
    assert cli(["audit", healthy, "--level", "quick", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    broken = _copy(healthy, tmp_path, "broken")
    os.remove(_log(broken) / f"{2:020d}.json")
    assert cli(["audit", broken, "--level", "quick"]) == 1
    assert "FAILED" in capsys.readouterr().out
    findings, summary = str(tmp_path / "findings"), tmp_path / "summary.json"
    code = audit_job(
        [
            healthy,
            broken,
            str(tmp_path / "nothing"),
            "--level",
            "quick",
            "--findings",
            findings,
            "--output",
            str(summary),
        ],
        spark=spark,
    )
    assert code == 1
    document = json.loads(summary.read_text())
    assert [t["status"] for t in document["tables"]] == ["passed", "failed", "error"]
    saved = DeltaTable.forPath(spark, findings).toDF()
    assert saved.where("severity = 'error'").select("table").distinct().collect()[0]["table"] == broken
    assert saved.select("runId").distinct().count() == 1


def test_hygiene_findings_on_a_hand_built_log(spark, log):
    """Skew, stats coverage, DV rewrite candidates, tombstones past retention, checkpoint lag."""
    from tests import log_builder as lb

    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    full = {"numRecords": 10, "minValues": {"id": 0, "v": 1}, "maxValues": {"id": 9, "v": 5}, "nullCount": {}}
    partial = {"numRecords": 10, "minValues": {"id": 0}, "maxValues": {"id": 9}, "nullCount": {}}
    adds = [
        lb.add(f"part={p}/f{i}.parquet", size=1000, partition_values={"part": str(p)}, stats=full)
        for p in range(4)
        for i in range(2)
    ]
    adds.append(lb.add("part=9/big.parquet", size=10**9, partition_values={"part": "9"}, stats=partial))
    adds.append(lb.add("part=9/nostats.parquet", size=10**9, partition_values={"part": "9"}))
    dv = lb.dv("vBn[lx{q8@P<9BNH/isA", cardinality=6)
    adds.append(lb.add("part=0/dv.parquet", size=1000, partition_values={"part": "0"}, stats=full, dv=dv))
    log.commit(
        0,
        lb.protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
        lb.metadata(schema=schema, partition_columns=["part"]),
        *adds,
    )
    log.commit(
        1, lb.remove("part=0/old.parquet", deletion_timestamp=1_000_000, partitionValues={"part": "0"})
    )
    for version in range(2, 25):
        log.commit(version, lb.commit_info())
    report = DeltaTable.forPath(spark, log.path).audit("quick")
    info = _by_check(report, "info")
    assert report.passed and not _by_check(report, "warning")
    skew = [d for _, _, d in info["hygiene.partition_skew"]]
    assert len(skew) == 1 and skew[0].startswith('partition {"part":"9"} holds 2000000000 bytes')
    small = sorted(d for _, _, d in info["hygiene.small_files"])
    assert len(small) == 4 and small[1].startswith('partition {"part":"1"}: 2 of its files are under')
    assert all(
        d.endswith("(compaction candidate: dt.optimize().executeCompaction(), or deltaspark optimize PATH)")
        for d in small
    )
    coverage = sorted(d for _, _, d in info["hygiene.stats_coverage"] if d.startswith("column"))
    assert coverage == [
        "column id has min/max statistics in 10 of 11 files",  # not in the file without stats
        "column v has min/max statistics in 9 of 11 files",
    ]
    assert any(d == "1 of 11 files have no statistics" for _, _, d in info["hygiene.stats_coverage"])
    assert [(p.rsplit("/", 1)[-1], d) for _, p, d in info["hygiene.deletion_vectors"]] == [
        (
            "dv.parquet",
            "6 of 10 rows deleted by its deletion vector (rewrite candidate: "
            "dt.optimize().purgeDeletionVectors(), or deltaspark optimize PATH --purge)",
        )
    ]
    assert any("1 past the retention period" in d for _, _, d in info["hygiene.tombstones"])
    assert any(
        d.startswith("25 commits since the last checkpoint") for _, _, d in info["hygiene.checkpoint_lag"]
    )
    assert report.metrics["commitsSinceCheckpoint"] == 25 and report.metrics["expiredTombstones"] == 1


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_torn_files_incomplete_checkpoints_and_a_tampered_hint(spark, healthy, tmp_path):
    path = _copy(healthy, tmp_path, "torn")
    log = _log(path)
    (log / f"{8:020d}.json").write_bytes(b"")
    shutil.copy(
        log / f"{6:020d}.checkpoint.parquet", log / f"{7:020d}.checkpoint.0000000001.0000000002.parquet"
    )
    hint = json.loads((log / "_last_checkpoint").read_text())
    hint["version"], hint["checksum"] = 6, "0" * 32
    (log / "_last_checkpoint").write_text(json.dumps(hint))
    report = DeltaTable.forPath(spark, path).audit("quick")
    errors, warnings = _by_check(report, "error"), _by_check(report, "warning")
    assert (8, f"file:{path}/_delta_log/{8:020d}.json", "empty log file (a torn write)") in errors[
        "log.versions"
    ]
    assert any("lacks part(s) [2] of 2" in d for _, _, d in errors["log.versions"])
    assert [v for v, _, _ in errors["log.snapshot"]] == [8]
    assert any("does not match its content" in d for _, _, d in warnings["log.last_checkpoint"])
    assert "files.statistics" not in {c["check"] for c in report.checks}  # no snapshot to check


@pytest.mark.one_suite("4.x")  # damage found by the audit jobs both suites run on the healthy table
def test_a_check_failing_while_evaluated_is_named_and_the_others_still_report(
    spark, healthy, tmp_path, caplog
):
    """The checks' findings are evaluated in one action; when it fails (a commit the snapshot does not
    read has a corrupt line: only the replay from commit 0 reads it, inside Spark tasks), each check
    is evaluated on its own, the failing ones become `could not run` errors and the rest report."""
    path = _copy(healthy, tmp_path, "corrupt-line")
    with open(_log(path) / f"{2:020d}.json", "a") as f:
        f.write('{"add": {"path": \n')
    with caplog.at_level("WARNING", logger="deltaspark.audit.report"):
        together = DeltaTable.forPath(spark, path).audit("quick")
    assert "evaluated together failed" in caplog.text  # the fallback ran, not a build-time error
    timed = DeltaTable.forPath(spark, path).audit("quick", timed=True)
    for report in (together, timed):
        status = {c["check"]: c["status"] for c in report.checks}
        failed = {c for c, s in status.items() if s == "failed"}
        replaying = {"log.reconciliation", "log.checkpoint", "log.checksum", "log.compaction"}
        assert failed and failed <= replaying, status
        for _, _, detail in _by_check(report, "error")["log.checkpoint"]:
            assert "could not run" in detail and f"{2:020d}.json" in detail
        assert status["log.versions"] == status["files.statistics"] == status["hygiene.log"] == "ok"
        assert report.version == 7 and report.metrics["numFiles"] > 0
    assert sorted(map(tuple, together.findings.collect())) == sorted(map(tuple, timed.findings.collect()))
    assert all(c["seconds"] >= 0 for c in timed.checks)
    together.unpersist()
    timed.unpersist()

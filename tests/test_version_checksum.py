"""Protocol and metadata from version checksum files (`log/version_checksum.py`).

A `.crc` at or below the snapshot version (not older than its checkpoint) answers protocol and
metadata with the commits after it read on the driver; an unclear one is ignored and the log read
as before. On real tables (every `.crc` of the conformance tables) the answer must be the log's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltaspark import DeltaTable, write
from deltaspark.log import protocol_metadata, protocol_metadata_cache, small_log, version_checksum
from deltaspark.log.files import parse_log_file
from deltaspark.log.listing import plan_segment
from deltaspark.log.segment import build_log_segment
from deltaspark.storage import HadoopStorage
from tests.conftest import CONNECT
from tests.test_conformance import TABLES

pytestmark = pytest.mark.skipif(CONNECT, reason="classic sessions only (Connect reads the log through Spark)")


def _crc(table: str | Path, version: int) -> Path:
    return Path(table) / "_delta_log" / f"{version:020d}.crc"


def _edit_crc(table: str | Path, version: int, change) -> None:  # noqa: ANN001 - a callable
    path = _crc(table, version)
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def _describe(description: str):  # noqa: ANN202
    def change(document: dict) -> None:
        document["metadata"]["description"] = description

    return change


@pytest.fixture
def table(spark, tmp_path) -> str:
    """Two commits written by deltaspark, each with its `.crc`."""
    path = str(tmp_path / "t")
    write(spark.range(3), path)
    write(spark.range(3, 5), path, mode="append")
    assert _crc(path, 0).is_file() and _crc(path, 1).is_file()
    return path


@pytest.fixture
def log_needs_spark(monkeypatch) -> None:
    """Logs too big for `small_log`: without a checksum, protocol and metadata need the Spark job;
    no answer held from the writes (the cache keys on the log's files, not on the checksums)."""
    monkeypatch.setattr(small_log, "MAX_BYTES", 0)
    monkeypatch.setattr(small_log, "DEFAULT_LOCAL_BYTES", 0)
    protocol_metadata_cache.clear()


def test_the_checksum_answers_with_no_spark_job(spark, table, log_needs_spark, spark_job_count):
    # A description only the checksum has shows where the answer came from.
    _edit_crc(table, 1, _describe("from the checksum"))
    snapshot = DeltaTable.forPath(spark, table).snapshot()
    assert snapshot.metadata.description == "from the checksum"
    assert snapshot.commitInfo["operation"] == "WRITE"  # the version's own commit, read beside it
    assert spark_job_count == []


def test_turned_off_the_log_is_read(spark, table, log_needs_spark, spark_job_count):
    _edit_crc(table, 1, _describe("from the checksum"))
    spark.conf.set(version_checksum.ENABLED_CONF, "false")
    try:
        snapshot = DeltaTable.forPath(spark, table).snapshot()
    finally:
        spark.conf.unset(version_checksum.ENABLED_CONF)
    assert snapshot.metadata.description is None
    assert spark_job_count == [1]


def test_commits_after_the_checksum_update_its_answer(spark, table, log_needs_spark, spark_job_count):
    DeltaTable.forPath(spark, table).setProperties({"delta.appendOnly": "true"})  # version 2
    _crc(table, 2).unlink()  # a writer that wrote no checksum
    _edit_crc(table, 1, _describe("from the checksum"))
    protocol_metadata_cache.clear()  # the commit held version 1's answer
    spark_job_count.clear()
    latest = DeltaTable.forPath(spark, table).snapshot()
    assert latest.version == 2
    assert latest.configuration.get("delta.appendOnly") == "true"  # commit 2's metaData wins
    assert latest.metadata.description is None
    assert latest.commitInfo["operation"] == "SET TBLPROPERTIES"
    assert DeltaTable.forPath(spark, table).snapshot(1).metadata.description == "from the checksum"
    assert spark_job_count == []


def test_time_travel_uses_no_newer_checksum(spark, table, log_needs_spark, spark_job_count):
    write(spark.range(5, 6), table, mode="append")
    protocol_metadata_cache.clear()
    spark_job_count.clear()
    _edit_crc(table, 2, _describe("version 2"))
    _edit_crc(table, 1, _describe("version 1"))
    assert DeltaTable.forPath(spark, table).snapshot(1).metadata.description == "version 1"
    assert spark_job_count == []


def test_the_versions_own_commit_wins_over_its_checksum(spark, table, log_needs_spark, spark_job_count):
    # Commit 0 holds protocol and metaData: read beside the checksum (for its commitInfo), they win.
    _edit_crc(table, 0, _describe("from the checksum"))
    assert DeltaTable.forPath(spark, table).snapshot(0).metadata.description is None
    assert spark_job_count == []


def _unparseable(path: Path) -> None:
    path.write_text('{"protocol": ')


def _not_an_object(path: Path) -> None:
    path.write_text("[]")


def _without(key: str):  # noqa: ANN202
    def damage(path: Path) -> None:
        document = json.loads(path.read_text())
        del document[key]
        path.write_text(json.dumps(document))

    return damage


def _reader_version_as_text(path: Path) -> None:
    document = json.loads(path.read_text())
    document["protocol"]["minReaderVersion"] = str(document["protocol"]["minReaderVersion"])
    path.write_text(json.dumps(document))


def _metadata_without_id(path: Path) -> None:
    document = json.loads(path.read_text())
    document["metadata"]["description"] = "from the checksum"
    del document["metadata"]["id"]
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    "damage",
    [
        _unparseable,
        _not_an_object,
        _without("protocol"),
        _without("metadata"),
        _reader_version_as_text,
        _metadata_without_id,
    ],
    ids=["unparseable", "not-an-object", "no-protocol", "no-metadata", "reader-version-as-text", "no-id"],
)
def test_an_unclear_checksum_is_ignored_and_the_log_read(
    spark, table, log_needs_spark, spark_job_count, damage
):
    damage(_crc(table, 1))
    snapshot = DeltaTable.forPath(spark, table).snapshot()
    assert snapshot.metadata.description is None
    assert snapshot.protocol.minReaderVersion == 1
    assert spark_job_count == [1]


# ---- which checksum, which commits (no Spark) -----------------------------------------------------


def _segment(names: list[str], version: int | None = None):  # noqa: ANN202
    files = [parse_log_file(n, f"file:/t/_delta_log/{n}", 100, 0) for n in names]
    return build_log_segment("file:/t", [f for f in files if f is not None], version)


def _names(*versions: int, crc: tuple[int, ...] = (), checkpoint: int | None = None) -> list[str]:
    names = [f"{v:020d}.json" for v in versions] + [f"{v:020d}.crc" for v in crc]
    if checkpoint is not None:
        names.append(f"{checkpoint:020d}.checkpoint.parquet")
    return names


def test_the_newest_checksum_and_the_commits_after_it():
    crc, commits = version_checksum.plan(_segment(_names(0, 1, 2, 3, crc=(0, 1))))
    assert crc.version == 1 and [c.version for c in commits] == [2, 3]
    crc, commits = version_checksum.plan(_segment(_names(0, 1, 2, crc=(0, 1, 2))))
    assert crc.version == 2 and [c.version for c in commits] == [2]  # the version's own, for commitInfo
    crc, commits = version_checksum.plan(_segment(_names(0, 1, 2, crc=(0, 1, 2)), version=1))
    assert crc.version == 1 and [c.version for c in commits] == [1]


def test_no_checksum_older_than_the_checkpoint_nor_across_a_gap_nor_too_many_commits():
    assert version_checksum.plan(_segment(_names(0, 1, 2, 3, crc=(1,), checkpoint=2))) is None
    crc, commits = version_checksum.plan(_segment(_names(0, 1, 2, 3, crc=(2,), checkpoint=2)))
    assert crc.version == 2 and [c.version for c in commits] == [3]
    compacted = [*_names(0, 1, 4, crc=(1,)), f"{2:020d}.{3:020d}.compacted.json"]
    assert version_checksum.plan(_segment(compacted)) is None  # commits 2 and 3 not listed
    many = version_checksum.MAX_COMMITS + 2
    assert version_checksum.plan(_segment(_names(*range(many), crc=(0,)))) is None
    assert version_checksum.plan(_segment(_names(0, 1))) is None
    uuid_named = [
        *_names(0, 1, 2, 3, crc=(2,)),
        f"{2:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json",
    ]
    assert version_checksum.plan(_segment(uuid_named)) is None


def test_a_v2_checkpoint_table_needs_its_checkpoint_for_the_sidecars():
    crc = parse_log_file("00000000000000000002.crc", "file:/t/_delta_log/00000000000000000002.crc", 1, 0)
    document = {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["v2Checkpoint"],
            "writerFeatures": ["v2Checkpoint"],
        },
        "metadata": {
            "id": "x",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": "{}",
            "partitionColumns": [],
            "configuration": {},
        },
    }
    text = json.dumps(document)
    assert version_checksum.base_answer(crc, text, has_checkpoint=True) is None
    answer = version_checksum.base_answer(crc, text, has_checkpoint=False)
    assert answer["protocol"]["readerFeatures"] == ["v2Checkpoint"] and answer["metaData"]["id"] == "x"
    assert answer["protocolFile"] == crc.path and answer["sidecars"] == []


# ---- real tables -------------------------------------------------------------------------------


def test_every_conformance_checksum_gives_the_logs_protocol_and_metadata(spark, conformance):
    """Every `.crc` of the conformance tables, at its own version, answers as the log does."""
    answered = ignored = 0
    for name in TABLES:
        path = conformance / name
        versions = sorted({int(p.name[:20]) for p in path.glob("_delta_log/*.crc") if p.name[:20].isdigit()})
        for version in versions:
            storage = HadoopStorage(spark)
            try:
                segment = plan_segment(storage, str(path), version)
            except Exception:  # noqa: BLE001 - fixtures the conformance suite checks for their errors
                continue
            found = protocol_metadata._from_checksum(spark, storage, segment)
            if found is None:
                ignored += 1
                continue
            row = protocol_metadata.frame(spark, segment).first().asDict(recursive=True)
            row["commitInfo"] = json.loads(row["commitInfo"]) if row["commitInfo"] else None
            for key in ("protocol", "metaData", "commitInfo", "sidecars"):
                assert found[key] == row[key], (name, version, key, found[key], row[key])
            answered += 1
    assert answered >= 70, (answered, ignored)  # 74 of 94; the rest are v2Checkpoint tables past a checkpoint


def test_the_benchmark_generators_checksum_describes_its_log(spark, tmp_path):
    """`benchmarks.generate --checksum` (the `*-crc` scales): the `.crc` agrees with the log."""
    from benchmarks.generate import LogSpec, generate

    generated = generate(tmp_path / "t", LogSpec(files=40, commits=3, checksum=True))
    storage = HadoopStorage(spark)
    segment = plan_segment(storage, generated.path)
    found = protocol_metadata._from_checksum(spark, storage, segment)
    assert found is not None and found["protocolFile"].endswith(f"{generated.version:020d}.crc")
    row = protocol_metadata.frame(spark, segment).first().asDict(recursive=True)
    assert (found["protocol"], found["metaData"]) == (row["protocol"], row["metaData"])
    crc = json.loads(_crc(generated.path, generated.version).read_text())
    files = DeltaTable.forPath(spark, generated.path).snapshot().files()
    assert crc["numFiles"] == files.count() == generated.live_files
    assert crc["tableSizeBytes"] == files.agg({"size": "sum"}).first()[0]

"""Damaged tables: every kind of damage is a named deltaspark error, never a silently wrong answer.

Each case damages a copy of a hand-built or real table the way storage, a crashed writer or a
careless edit does - empty or truncated files, actions missing required fields, values that do not
parse, broken deletion vectors, unreadable files, missing file systems - and checks the rule:
eager operations raise a `DeltaSparkError` naming the file (or feature, or version); lazy
DataFrames fail with a message that contains `deltaspark:` and names the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from deltaspark import (
    CorruptDataFileError,
    CorruptLogError,
    DeletionVectorError,
    DeltaSparkError,
    DeltaTable,
    NonContiguousVersionsError,
    PermissionDeniedError,
    UnsupportedFeatureError,
    UnsupportedFileSystemError,
)
from deltaspark.features import dv_codec
from tests import damage
from tests.conftest import CONNECT, REPO
from tests.log_builder import add, commit_info, metadata, protocol, remove, write_parquet

INT_PARTITIONED = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
    ],
}
IDS = pa.table({"id": pa.array(range(10), pa.int64())})
DV_PROTOCOL = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])


def copy_table(conformance: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(conformance / name, target)
    return target


def file_paths(snap) -> list[str]:
    return sorted(r["path"] for r in snap.files().select("path").collect())


def lazy_failure(action) -> str:
    """The message of a lazy DataFrame's failure (Spark wraps deltaspark's own)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - a Spark/py4j error carrying our message
        action()
    assert not isinstance(caught.value, DeltaSparkError), "expected a lazy (Spark) failure"
    return str(caught.value)


def read_failure(action, replay: str) -> str:
    """The message of a failing read: an eager deltaspark error where the driver read the damaged
    part itself (a small log or few deletion vectors, `replay == "driver"`), else Spark's lazy
    failure carrying deltaspark's message."""
    if replay == "spark":
        return lazy_failure(action)
    with pytest.raises(DeltaSparkError) as caught:
        action()
    return str(caught.value)


# ---- the log: empty, blank and truncated files -------------------------------------------------


def test_empty_commit_file_is_not_an_empty_commit(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.raw("00000000000000000001.json", "")  # a torn write of a commit that added `b`
    with pytest.raises(CorruptLogError, match=r"00001\.json.*empty \(0 bytes\)"):
        DeltaTable.forPath(spark, log.path).snapshot()
    assert file_paths(DeltaTable.forPath(spark, log.path).snapshot(version=0)) == ["a"]


def test_blank_commit_file_is_not_an_empty_commit(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.raw("00000000000000000001.json", "\n  \n")
    with pytest.raises(CorruptLogError, match=r"00001\.json.*no action"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_history_takes_a_commit_info_written_twice_once_and_refuses_two(spark, log):
    log.commit(0, commit_info(operation="CREATE TABLE"), protocol(), metadata(), add("a"))
    log.commit(1, commit_info(operation="WRITE"), add("b"), commit_info(operation="WRITE"))
    history = DeltaTable.forPath(spark, log.path).history()
    assert sorted((r["version"], r["operation"]) for r in history.collect()) == [
        (0, "CREATE TABLE"),
        (1, "WRITE"),
    ]
    log.commit(2, commit_info(operation="WRITE"), add("c"), commit_info(operation="DELETE"))
    message = lazy_failure(lambda: DeltaTable.forPath(spark, log.path).history().collect())
    assert "00000000000000000002.json" in message and "two different `commitInfo`" in message


def test_history_over_a_gap_is_refused_where_the_gap_is_asked_for(spark, log):
    """Commit 1 gone, a checkpoint at 2: the latest version reads, but a history without commit 1
    would be a shorter history presented as the whole one. `limit` asks only for newer commits."""
    log.commit(0, commit_info(operation="CREATE TABLE"), protocol(), metadata(), add("a"))
    log.commit(1, commit_info(operation="WRITE"), add("b"))
    log.commit(2, commit_info(operation="WRITE"), add("c"))
    log.classic_checkpoint(2, [protocol(), metadata(), add("a"), add("b"), add("c")])
    log.commit(3, commit_info(operation="DELETE"), remove("a", 5))
    (log.log / "00000000000000000001.json").unlink()
    table = DeltaTable.forPath(spark, log.path)
    assert table.snapshot().version == 3
    with pytest.raises(NonContiguousVersionsError, match=r"missing commit\(s\) 1"):
        table.history()
    assert [(r["version"], r["operation"]) for r in table.history(limit=2).collect()] == [
        (3, "DELETE"),
        (2, "WRITE"),
    ]
    with pytest.raises(NonContiguousVersionsError):
        table.history(limit=3)


def test_empty_checkpoint_is_passed_over_or_named(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.raw("00000000000000000001.checkpoint.parquet", b"")
    log.last_checkpoint(1)
    assert file_paths(DeltaTable.forPath(spark, log.path).snapshot()) == ["a", "b"]
    (log.log / "00000000000000000000.json").unlink()
    with pytest.raises(CorruptLogError, match=r"00001\.checkpoint\.parquet.*empty"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_truncated_real_checkpoint_is_passed_over_or_named(spark, conformance, tmp_path):
    table = copy_table(conformance, "basic-with-checkpoint", tmp_path)
    expected = file_paths(DeltaTable.forPath(spark, str(table)).snapshot())
    (checkpoint,) = (table / "_delta_log").glob("*.checkpoint.parquet")
    checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    assert file_paths(DeltaTable.forPath(spark, str(table)).snapshot()) == expected
    for commit in (table / "_delta_log").glob("*.json"):
        if int(commit.name.split(".")[0]) <= int(checkpoint.name.split(".")[0]):
            commit.unlink()
    with pytest.raises(CorruptLogError, match=checkpoint.name):
        DeltaTable.forPath(spark, str(table)).snapshot()


def test_checkpoint_with_damaged_pages_is_passed_over_or_named(spark, conformance, tmp_path):
    """A checkpoint whose footer is intact but whose pages do not decode: passed over when the load
    reads it (a small checkpoint is read whole on the driver), else named with its path."""
    table = copy_table(conformance, "basic-with-checkpoint", tmp_path)
    expected = file_paths(DeltaTable.forPath(spark, str(table)).snapshot())
    (checkpoint,) = (table / "_delta_log").glob("*.checkpoint.parquet")
    damage.damage_pages(checkpoint)
    snap = DeltaTable.forPath(spark, str(table)).snapshot()
    assert snap.segment.checkpoint is None and file_paths(snap) == expected
    for commit in (table / "_delta_log").glob("*.json"):
        if int(commit.name.split(".")[0]) <= int(checkpoint.name.split(".")[0]):
            commit.unlink()
    with pytest.raises(CorruptLogError, match=checkpoint.name):
        DeltaTable.forPath(spark, str(table)).snapshot()


def test_damaged_pages_of_a_checkpoint_the_load_did_not_read_are_named(spark, tmp_path, replay):
    """With a version checksum the load reads no checkpoint: a damaged one is named by the read
    of the files (eagerly on the driver, by Spark's failure naming it in a lazy read)."""
    import deltaspark

    path = str(tmp_path / "t")
    for i in range(3):
        deltaspark.write(spark.range(i * 5, i * 5 + 5), path)
    dt = DeltaTable.forPath(spark, path)
    (name,) = dt.checkpoint().files
    damage.damage_pages(tmp_path / "t" / "_delta_log" / name)
    snap = DeltaTable.forPath(spark, path).snapshot()
    assert snap.segment.checkpoint is not None  # the protocol and metadata came from the .crc
    with pytest.raises(CorruptLogError, match=name):
        DeltaTable.forPath(spark, path).toDF().count()
    if replay == "spark":
        assert name in lazy_failure(lambda: snap.files().collect())


def test_a_path_added_again_without_its_deletion_vector_is_named(spark, conformance, tmp_path):
    """A file re-added without its DV and without a `remove` of the DV'd file: two live logical
    files of one data file. Rows the DV deleted must not come back (nor be read twice)."""
    table = copy_table(conformance, "table-with-dv-small", tmp_path)
    assert DeltaTable.forPath(spark, str(table)).toDF().count() == 8
    (dv_add,) = [
        json.loads(line)["add"]
        for line in (table / "_delta_log" / "00000000000000000001.json").read_text().splitlines()
        if line.startswith('{"add"')
    ]
    readded = {k: v for k, v in dv_add.items() if k != "deletionVector"}
    (table / "_delta_log" / "00000000000000000002.json").write_text(json.dumps({"add": readded}) + "\n")
    with pytest.raises(CorruptLogError) as caught:
        DeltaTable.forPath(spark, str(table)).toDF().count()
    message = str(caught.value)
    assert "00000000000000000002.json" in message and dv_add["path"] in message
    assert "at version 2 (no deletion vector)" in message and "add at version 1 (deletion vector" in message


@pytest.mark.parametrize("after", [None, "}"], ids=["mid-line", "after-a-brace"])
def test_a_torn_last_line_fails_every_reader_of_the_commit(spark, conformance, tmp_path, after):
    """A commit whose last line is cut short (a torn write) is corrupt as a whole: no reader of it
    answers as if nothing were wrong, even the ones that parse only some of its lines. A cut just
    after a nested `}` leaves a line ending in a brace."""
    table = copy_table(conformance, "cdf-table", tmp_path)
    commit = table / "_delta_log" / "00000000000000000003.json"
    damage.cut_last_line(commit, after)
    readers = {
        "snapshot": lambda: DeltaTable.forPath(spark, str(table)).snapshot(),
        "history": lambda: DeltaTable.forPath(spark, str(table)).history(),
        "changes": lambda: DeltaTable.forPath(spark, str(table)).changes(0, 3).collect(),
        "files": lambda: DeltaTable.forPath(spark, str(table)).snapshot(version=3).files().collect(),
    }
    for name, read in readers.items():
        with pytest.raises(
            CorruptLogError, match=rf"{commit.name}: the last line is not a complete"
        ) as caught:
            read()
        assert caught.value.path.endswith(commit.name), name
    assert DeltaTable.forPath(spark, str(table)).snapshot(version=2).version == 2
    assert DeltaTable.forPath(spark, str(table)).changes(0, 2).count() > 0


def test_sidecar_of_another_size_is_passed_over(spark, conformance, tmp_path):
    """A sidecar whose size is not the one its `sidecar` action records was truncated or replaced:
    the checkpoint is passed over at load (the commits give the answer), never read."""
    table = copy_table(conformance, "v2-checkpoints-parquet-with-sidecars", tmp_path)
    expected = file_paths(DeltaTable.forPath(spark, str(table)).snapshot())
    for sidecar in sorted((table / "_delta_log" / "_sidecars").glob("*.parquet")):
        sidecar.write_bytes(b"PAR1" + b"\0" * 40 + b"PAR1")
    snap = DeltaTable.forPath(spark, str(table)).snapshot()
    assert snap.segment.checkpoint is None and file_paths(snap) == expected


def test_sidecar_with_damaged_pages_is_named_with_its_checkpoint(spark, conformance, tmp_path):
    table = copy_table(conformance, "v2-checkpoints-parquet-with-sidecars", tmp_path)
    snap = DeltaTable.forPath(spark, str(table)).snapshot()
    (sidecar,) = [Path(p.split(":", 1)[1]).name for p in snap.statePlan.sidecars][:1]
    damage.damage_pages(table / "_delta_log" / "_sidecars" / sidecar)
    snap = DeltaTable.forPath(spark, str(table)).snapshot()  # the size is right: the load uses it
    with pytest.raises(
        CorruptLogError,
        match=rf"_sidecars/{sidecar}: .*a sidecar of checkpoint .*{snap.segment.checkpoint.files[0].name}",
    ):
        snap.summary()
    # Collected by the user, long after `files()` returned: the same message, from the query.
    message = lazy_failure(lambda: snap.files().collect())
    checkpoint = snap.segment.checkpoint.files[0].name
    assert re.search(rf"deltaspark: corrupt Delta log file \S*_sidecars/{sidecar}: .*{checkpoint}", message)


# ---- actions missing what the protocol requires ------------------------------------------------


@pytest.mark.parametrize("kind", ["add", "remove"])
def test_file_action_without_path_is_named(spark, log, kind):
    log.commit(0, protocol(), metadata(), add("a"))
    action = add("b") if kind == "add" else remove("a", 1)
    del action[kind]["path"]
    log.commit(1, action)
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    with pytest.raises(CorruptLogError, match=rf"00001\.json.*`{kind}` action has no path"):
        snap.summary()
    message = lazy_failure(lambda: snap.files().count())
    assert "deltaspark: corrupt Delta log file" in message and "00001.json" in message


def test_line_with_two_file_actions_is_named(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.raw("00000000000000000001.json", json.dumps({**add("b"), **remove("a", 1)}) + "\n")
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    with pytest.raises(CorruptLogError, match=r"00001\.json.*both an `add` and a `remove`"):
        snap.summary()


def test_sidecar_without_path_is_named(spark, log):
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    log.commit(0, v2, metadata(), add("a"))
    top = [{"checkpointMetadata": {"version": 0}}, v2, metadata(), {"sidecar": {"sizeInBytes": 1}}]
    name = "00000000000000000000.checkpoint.3a4d1593-4000-446a-a55a-88dad19286a4.json"
    log.raw(name, "".join(json.dumps(a) + "\n" for a in top))
    (log.log / "00000000000000000000.json").unlink()
    with pytest.raises(CorruptLogError, match=r"checkpoint\.3a4d.*`sidecar` action has no path"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_protocol_without_versions_is_named(spark, log):
    log.commit(0, {"protocol": {"minWriterVersion": 2}}, metadata(), add("a"))
    with pytest.raises(CorruptLogError, match=r"00000\.json.*no minReaderVersion"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_metadata_without_schema_string_is_an_empty_schema(spark, log):
    """Lenient as Spark's Delta is with what old writers left: an empty schema, not an error."""
    meta = metadata()
    del meta["metaData"]["schemaString"]
    log.commit(0, protocol(), meta, add("a"))
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.schema.fields == []
    assert file_paths(snap) == ["a"]


def test_deletion_vector_without_the_feature_is_named(spark, log):
    """Two adds of one path with different DVs are only told apart when DVs are supported; a DV in a
    table whose protocol lacks the feature is a damaged log, not something to ignore."""
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("a", dv=_inline_dv([0])))
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    with pytest.raises(CorruptLogError, match=r"00001\.json.*does not support deletionVectors"):
        snap.summary()


# ---- metadata that cannot be read correctly ----------------------------------------------------


def test_partition_column_missing_from_schema_is_named(spark, log):
    log.commit(
        0, protocol(), metadata(partition_columns=["region"]), add("a", partition_values={"region": "eu"})
    )
    with pytest.raises(CorruptLogError, match=r"00000\.json.*`region`.*not a column"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_partition_column_of_nested_type_is_named(spark, log):
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "s", "type": {"type": "struct", "fields": []}, "nullable": True, "metadata": {}},
        ],
    }
    log.commit(0, protocol(), metadata(schema, ["s"]), add("a"))
    with pytest.raises(CorruptLogError, match="partition column `s` has type struct"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_unknown_column_mapping_mode_is_refused(spark, log):
    config = {"delta.columnMapping.mode": "fancy"}
    log.commit(0, protocol(2, 5), metadata(configuration=config), add("a"))
    with pytest.raises(UnsupportedFeatureError, match="'fancy' is not a column mapping mode") as caught:
        DeltaTable.forPath(spark, log.path).snapshot()
    assert caught.value.features == ["columnMapping"]


def test_unknown_data_format_is_refused(spark, log):
    meta = metadata()
    meta["metaData"]["format"]["provider"] = "orc"
    log.commit(0, protocol(), meta, add("a"))
    with pytest.raises(UnsupportedFeatureError, match="`orc`"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_partition_value_that_does_not_parse_is_named(spark, log, replay):
    good = write_parquet(log.root, "p=1/a.parquet", IDS)
    bad = write_parquet(log.root, "p=abc/b.parquet", IDS)
    log.commit(
        0,
        protocol(),
        metadata(INT_PARTITIONED, ["p"]),
        {"add": {**good["add"], "partitionValues": {"p": "1"}}},
        {"add": {**bad["add"], "partitionValues": {"p": "abc"}}},
    )
    table = DeltaTable.forPath(spark, log.path)
    # A partition filter must not drop the damaged file's rows as if its value were null: it fails.
    with pytest.raises(
        CorruptLogError, match=r"00000\.json.*'abc' of column `p` is not a valid int.*b\.parquet"
    ):
        table.toDF("p = 1")
    message = read_failure(lambda: table.toDF().collect(), replay)
    assert "corrupt delta log file" in message.lower() and "'abc'" in message and "b.parquet" in message
    message = lazy_failure(lambda: table.snapshot().files().select("partitionValues_parsed").collect())
    assert "'abc' of column `p`" in message


def test_in_commit_timestamp_missing_where_required_is_named(spark, log):
    ict = protocol(3, 7, [], ["inCommitTimestamp"])
    config = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "0"}
    log.commit(
        0, commit_info(inCommitTimestamp=1_700_000_000_000), ict, metadata(configuration=config), add("a")
    )
    log.commit(1, commit_info(), add("b"))  # no inCommitTimestamp: a time travel could land anywhere
    table = DeltaTable.forPath(spark, log.path)
    with pytest.raises(CorruptLogError, match=r"00001\.json.*no inCommitTimestamp"):
        table.snapshot().timestamp  # noqa: B018
    with pytest.raises(CorruptLogError, match=r"00001\.json.*no inCommitTimestamp"):
        table.snapshot(timestamp=1_700_000_000_000)
    message = lazy_failure(lambda: table.history().collect())
    assert "00001.json" in message and "no inCommitTimestamp" in message


def test_corrupt_stats_never_prune_wrongly(spark, log):
    """Statistics that do not parse are unknown: nothing is skipped by them, nothing is lost."""
    data = write_parquet(log.root, "a.parquet", IDS)
    damaged = {**data["add"], "stats": '{"numRecords": 10, "minValues": {"id": "not a number"'}
    log.commit(0, protocol(), metadata(), {"add": damaged})
    assert DeltaTable.forPath(spark, log.path).toDF("id = 5").count() == 1


# ---- data files ---------------------------------------------------------------------------------


def test_corrupt_data_file_is_named(spark, log):
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, protocol(), metadata(), data)
    damage.garbage(log.root / "a.parquet")  # the logged size still holds
    # Spark's own parquet reader fails naming the file; the executor-side reader says `deltaspark:`.
    assert "a.parquet" in lazy_failure(lambda: DeltaTable.forPath(spark, log.path).toDF().collect())
    spark.conf.set("spark.deltaspark.read.maxDriverFiles", "0")
    try:
        message = lazy_failure(lambda: DeltaTable.forPath(spark, log.path).toDF().collect())
    finally:
        spark.conf.unset("spark.deltaspark.read.maxDriverFiles")
    assert "deltaspark: corrupt data file" in message and "a.parquet" in message


@pytest.mark.parametrize("size", [0, 30])
def test_a_data_file_of_another_size_than_logged_is_named(spark, log, size, replay):
    """Spark's parquet reader reads a 0-byte file as no rows: without the size check the read would
    silently lose them. Spark's own listing of the files gives their total size in one call."""
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, protocol(), metadata(), data, write_parquet(log.root, "b.parquet", IDS))
    target = log.root / "a.parquet"
    target.write_bytes(target.read_bytes()[:size])
    says = r"a\.parquet: the file (is empty \(0 bytes\)|has 30 bytes) where the log records"
    with pytest.raises(CorruptDataFileError, match=says):
        DeltaTable.forPath(spark, log.path).toDF().collect()


def test_truncated_data_file_fails_an_eager_read_by_name(spark, log):
    from deltaspark.spark_errors import translate

    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, protocol(), metadata(), data)
    target = log.root / "a.parquet"
    target.write_bytes(target.read_bytes()[:20])
    with pytest.raises(Exception) as caught:  # noqa: PT011
        DeltaTable.forPath(spark, log.path).toDF().collect()
    translated = translate(caught.value)
    assert isinstance(translated, CorruptDataFileError) and translated.path.endswith("a.parquet")


# ---- deletion vectors ---------------------------------------------------------------------------


def _on_disk_dv(log, rows: list[int], offset: int = 1) -> tuple[dict, Path]:
    import uuid

    identifier = uuid.uuid4()
    data = dv_codec.encode_bitmap(rows)
    target = log.root / f"deletion_vector_{identifier}.bin"
    target.write_bytes(b"\x01" + dv_codec.frame(data))
    return {
        "storageType": "u",
        "pathOrInlineDv": dv_codec.z85_encode(identifier.bytes),
        "offset": offset,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }, target


def _inline_dv(rows: list[int]) -> dict:
    raw = dv_codec.encode_bitmap(rows)
    return {
        "storageType": "i",
        "pathOrInlineDv": dv_codec.z85_encode(raw + b"\0" * (-len(raw) % 4)),
        "sizeInBytes": len(raw),
        "cardinality": len(rows),
    }


def _read_with_dv(spark, log, descriptor: dict, replay: str) -> str:
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data["add"], "deletionVector": descriptor}})
    return read_failure(lambda: DeltaTable.forPath(spark, log.path).toDF().collect(), replay)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("crc", "CRC-32 mismatch"),
        ("cardinality", "cardinality says 3"),
        ("offset-beyond", "truncated deletion vector"),
        ("offset-negative", "offset -4 is negative"),
        ("size", "stored size"),
        ("no-cardinality", "cardinality is None"),
    ],
)
def test_damaged_deletion_vector_on_disk_is_named(spark, log, damage, reason, replay):
    descriptor, target = _on_disk_dv(log, [1, 2])
    if damage == "crc":
        blob = bytearray(target.read_bytes())
        blob[-1] ^= 0xFF
        target.write_bytes(bytes(blob))
    elif damage == "cardinality":
        descriptor["cardinality"] = 3
    elif damage == "offset-beyond":
        descriptor["offset"] = 1000
    elif damage == "offset-negative":
        descriptor["offset"] = -4
    elif damage == "size":
        descriptor["sizeInBytes"] -= 1
    elif damage == "no-cardinality":
        del descriptor["cardinality"]
    message = _read_with_dv(spark, log, descriptor, replay)
    assert "deltaspark: deletion vector" in message and target.name in message
    assert "a.parquet" in message and reason in message


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("z85", "invalid Z85 character"),
        ("cardinality", "cardinality says 5"),
        ("length", "not a multiple of 5"),
    ],
)
def test_damaged_inline_deletion_vector_is_named(spark, log, damage, reason, replay):
    descriptor = _inline_dv([0, 9])
    if damage == "z85":
        descriptor["pathOrInlineDv"] = "~" + descriptor["pathOrInlineDv"][1:]
    elif damage == "cardinality":
        descriptor["cardinality"] = 5
    else:
        descriptor["pathOrInlineDv"] = descriptor["pathOrInlineDv"][:-1]
    message = _read_with_dv(spark, log, descriptor, replay)
    assert "deltaspark: deletion vector (inline" in message and "a.parquet" in message and reason in message


def test_missing_deletion_vector_file_is_named(spark, log, replay):
    descriptor, target = _on_disk_dv(log, [1, 2])
    target.unlink()
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data["add"], "deletionVector": descriptor}})
    with pytest.raises(DeletionVectorError, match=rf"{target.name}.*does not exist"):
        DeltaTable.forPath(spark, log.path).toDF()


def test_bad_uuid_of_deletion_vector_is_named(spark, log, replay):
    descriptor, _ = _on_disk_dv(log, [1])
    descriptor["pathOrInlineDv"] = "ab~~~"
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data["add"], "deletionVector": descriptor}})
    with pytest.raises(DeletionVectorError, match=r"a\.parquet.*too short for a Z85 UUID"):
        DeltaTable.forPath(spark, log.path).toDF()


def test_deletion_vector_errors_are_deltaspark_errors():
    assert issubclass(DeletionVectorError, DeltaSparkError) and issubclass(DeletionVectorError, ValueError)


# ---- storage --------------------------------------------------------------------------------------


def test_path_without_a_hadoop_file_system_is_named(spark):
    with pytest.raises(UnsupportedFileSystemError, match="hadoop-aws") as caught:
        DeltaTable.forPath(spark, "s3a://bucket/table")
    assert "s3a://" in str(caught.value)
    with pytest.raises(UnsupportedFileSystemError):  # not "False": the table may well be there
        DeltaTable.isDeltaTable(spark, "s3a://bucket/table")


PERMISSION_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    from deltaspark import DeltaTable, PermissionDeniedError

    table, commit = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    results = {}
    for case, target in (("log-dir", os.path.join(table, "_delta_log")), ("commit", commit)):
        os.chmod(target, 0o000)
        try:
            DeltaTable.forPath(spark, table).snapshot().summary()
            results[case] = "no error"
        except PermissionDeniedError as exc:
            results[case] = "PermissionDeniedError: " + str(exc)
        except Exception as exc:
            results[case] = type(exc).__name__ + ": " + str(exc)[:500]
        finally:
            os.chmod(target, 0o755 if os.path.isdir(target) else 0o644)
    print("RESULTS " + json.dumps(results))
    """
)


@pytest.mark.skipif(CONNECT, reason="runs its own classic session in a child process")
def test_permission_denied_is_named(tmp_path, log):
    """File permissions do not bind root, so as root the child drops the capabilities that let
    root read anything (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) before starting Spark."""
    log.commit(0, protocol(), metadata(), add("a"))
    commit = log.commit(1, add("b"))
    script = tmp_path / "permissions.py"
    script.write_text(PERMISSION_SCRIPT)
    command = [sys.executable, str(script), log.path, str(commit)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("running as root needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        command = [
            "setpriv",
            "--bounding-set",
            "-dac_override,-dac_read_search",
            "--inh-caps",
            "-all",
            *command,
        ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(line[len("RESULTS ") :])
    assert results["log-dir"].startswith("PermissionDeniedError") and "_delta_log" in results["log-dir"]
    assert results["commit"].startswith("PermissionDeniedError") and "00001.json" in results["commit"]
    assert PermissionDeniedError.__mro__[1].__name__ == "StorageError"


# ---- Spark's Python workers ---------------------------------------------------------------------


@pytest.mark.skipif(CONNECT, reason="the workers' interpreter is a classic SparkContext setting")
def test_python_workers_without_dependencies_are_named_before_the_job(spark, log, tmp_path, spark_replay):
    """Spark starts its Python workers with PYSPARK_PYTHON, or `python3` from PATH: in a script run
    from a virtual environment that is often a Python without pyarrow. Caught before the job runs.
    (A read of a few DVs decodes them on the driver; `spark_replay` makes it use the workers.)"""
    import venv

    from deltaspark import WorkerEnvironmentError, spark_compat
    from deltaspark.spark_errors import translate

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    descriptor, _ = _on_disk_dv(log, [1])
    data = write_parquet(log.root, "a.parquet", IDS)
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data["add"], "deletionVector": descriptor}})
    context = spark.sparkContext
    previous = context.pythonExec
    context.pythonExec = str(bare / "bin" / "python")
    try:
        with pytest.raises(WorkerEnvironmentError, match=r"bare/bin/python.*PYSPARK_PYTHON="):
            DeltaTable.forPath(spark, log.path).toDF()
        # On a cluster the driver cannot look at the workers' Python: the query fails there, and
        # the failure is named as what it is.
        spark_compat._checked_workers[context.pythonExec] = None
        with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's PythonException
            DeltaTable.forPath(spark, log.path).toDF().collect()
        assert isinstance(translate(caught.value), WorkerEnvironmentError)
        assert "No module named" in str(caught.value)
    finally:
        context.pythonExec = previous
        spark_compat._checked_workers.pop(str(bare / "bin" / "python"), None)
    assert DeltaTable.forPath(spark, log.path).toDF().count() == 9

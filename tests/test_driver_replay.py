"""Small logs replayed on the driver (`log/driver_replay.py`) and DVs of small reads decoded there.

The driver's answer must be the Spark path's, field for field, or no answer at all: every log the
driver cannot read exactly as Spark does is left to Spark, which gives its answer or its error.
The reconciliation rules themselves run under both replays in `test_reconciliation.py`, and every
conformance table is replayed both ways in `test_conformance.py`.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

from deltaspark import DeltaTable
from deltaspark.errors import CorruptLogError
from deltaspark.log import driver_replay
from deltaspark.log.paths import canonical_path, path_key
from deltaspark.log.typed_json import UnclearError, typed
from tests.conftest import CONNECT, DRIVER_REPLAY_CONF
from tests.log_builder import add, commit_info, dv, metadata, protocol, remove, write_parquet

pytestmark = pytest.mark.skipif(CONNECT, reason="Spark Connect sessions read the log with Spark only")

DVS = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
COLUMNS = ["version", "is_add", "path_key", "dv_id", "add", "remove", "checkpoint_stats"]


def _rows_json(frame) -> list[str]:
    return sorted(r[0] for r in frame.select(F.to_json(F.struct(*COLUMNS))).collect())


def spark_answer(spark, table_path: str, version: int | None = None):
    """The reconciled file actions of Spark's replay (JSON rows), or the error it raises."""
    spark.conf.set(DRIVER_REPLAY_CONF, "0")
    try:
        snap = DeltaTable.forPath(spark, table_path).snapshot(version=version)
        assert snap.statePlan.held_rows is None
        return _rows_json(snap.fileActions())
    except Exception as exc:  # noqa: BLE001 - compared with the driver's outcome below
        return type(exc)
    finally:
        spark.conf.unset(DRIVER_REPLAY_CONF)


def driver_answer(spark, table_path: str, version: int | None = None):
    """(whether the driver replayed it, the reconciled actions or the error type)."""
    try:
        snap = DeltaTable.forPath(spark, table_path).snapshot(version=version)
        return snap.statePlan.held_rows is not None, _rows_json(snap.fileActions())
    except Exception as exc:  # noqa: BLE001
        return False, type(exc)


# ---- the canonical path, computed on the driver ---------------------------------------------------

PATHS = [
    "a.parquet",
    "p=1/a b.parquet",
    "p=x%20y/a.parquet",
    "p%3D1/a%2Bb.parquet",
    "a+b.parquet",
    "a%2Bb+c.parquet",
    "p=%C3%A9t%C3%A9/a.parquet",
    "p=été/a.parquet",
    "/abs/dir/a.parquet",
    "file:/abs/a.parquet",
    "file:///abs/a.parquet",
    "file://localhost/abs/a.parquet",
    "s3a://bucket/t/a.parquet",
    "hdfs://nn:8020/t/a%20b.parquet",
    "C:x.parquet",
    "1abc:def.parquet",
    "dir/a:b.parquet",
    "p=%F0%9F%98%80/a.parquet",
]
AMBIGUOUS = ["a%zz.parquet", "a%.parquet", "a%2.parquet", "p=%C3/a.parquet", "p=%FF%FE/a.parquet", "%C3x%A9"]


@pytest.mark.parametrize("root", ["file:/data/t", "file:///data/t/", "s3a://bucket/warehouse/t", "/plain/t"])
def test_path_key_is_spark_canonical_path(spark, root):
    frame = spark.createDataFrame([(p,) for p in PATHS + AMBIGUOUS], "path string")
    try:
        spark_keys = dict(frame.select("path", canonical_path("path", root)).collect())
    except Exception:  # noqa: BLE001 - Spark 3.5's url_decode fails on malformed escapes
        frame = spark.createDataFrame([(p,) for p in PATHS], "path string")
        spark_keys = dict(frame.select("path", canonical_path("path", root)).collect())
    for path in PATHS:
        assert path_key(path, root) == spark_keys[path], path
    for path in AMBIGUOUS:
        assert path_key(path, root) is None, path  # left to Spark, whatever it makes of them


def test_typed_accepts_only_what_spark_reads_verbatim():
    from deltaspark.log import action_schemas as schemas

    ok = {"path": "a", "size": 2**40, "dataChange": True, "partitionValues": {"p": None}, "extra": [1.5]}
    typed_add = typed(ok, schemas.ADD)
    assert typed_add["size"] == 2**40 and typed_add["partitionValues"] == {"p": None}
    assert "extra" not in typed_add and typed_add["stats"] is None
    for bad in (
        {"path": 5},  # Spark would read the number's text
        {"size": "12"},
        {"size": 1.0},
        {"size": True},
        {"size": 2**63},
        {"dataChange": "true"},
        {"partitionValues": {"p": 1}},
        {"partitionValues": ["p"]},
        {"deletionVector": {"offset": 2**31}},
        {"path": "\ud800"},  # a lone surrogate escape
    ):
        with pytest.raises(UnclearError):
            typed(bad, schemas.ADD)


# ---- what the driver replays, and what it leaves to Spark -----------------------------------------


def test_the_driver_answer_is_the_spark_answer(spark, log):
    log.commit(
        0, commit_info(), DVS, metadata(), add("a", stats={"numRecords": 3}), add("b", tags={"t": "1"})
    )
    log.commit(1, remove("a", 5), add("a", dv=dv("DV1")), add("c%20d"))
    log.classic_checkpoint(
        1, [DVS, metadata(), add("a", dv=dv("DV1")), add("b"), add("c%20d"), remove("a", 5)]
    )
    log.commit(2, remove("a", 6, dv=dv("DV1")), add("a", dv=dv("DV2")), {"txn": {"appId": "x", "version": 1}})
    log.commit(3, remove("b", 7), add("b", dv=dv("B1")))  # b gains a DV
    for version in (0, 1, 2, 3):
        replayed, rows = driver_answer(spark, log.path, version)
        assert replayed and rows == spark_answer(spark, log.path, version)


def test_listed_adds_are_the_rows_a_read_collects_from_the_frame(spark, log):
    """`listed_adds` stands in for the read's collect of `files()`: the same rows, in the same
    order, field for field (DV descriptors and sizes included)."""
    log.commit(0, commit_info(), DVS, metadata(), add("a", dv=dv("DV1")), add("b%20c"), add("d", dv=dv("D1")))
    log.commit(1, remove("a", 5, dv=dv("DV1")), add("a", dv=dv("DV2")), remove("d", 6, dv=dv("D1")), add("d"))
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    collected = (
        snap.files()
        .select(
            "path",
            F.col("deletionVector").isNotNull().alias("hasDv"),
            F.col("deletionVector.cardinality").alias("deleted"),
            "deletionVector",
            "size",
        )
        .collect()
    )
    listed = driver_replay.listed_adds(snap.statePlan.held)
    read = [{name: r[name] for name in collected[0].__fields__} for r in listed]
    assert [Row(**r).asDict(recursive=True) for r in read] == [r.asDict(recursive=True) for r in collected]
    assert {r["path"] for r in listed} == {"a", "b%20c", "d"} and sum(r["hasDv"] for r in listed) == 1
    # What the read ties to each file's rows, as the frame has it.
    entries = snap.files().select(
        "path",
        "partitionValues",
        "baseRowId",
        "defaultRowCommitVersion",
        canonical_path("path", snap.tableRoot).alias("key"),
    )
    expected = {r["path"]: r for r in entries.collect()}
    for r in listed:
        frame_row = expected[r["path"]]
        assert r["fileKey"] == frame_row["key"]
        assert json.loads(r["partitionValues"]) == frame_row["partitionValues"]
        assert (r["baseRowId"], r["defaultRowCommitVersion"]) == (
            frame_row["baseRowId"],
            frame_row["defaultRowCommitVersion"],
        )


def test_a_small_read_builds_the_file_list_frame_only_when_it_needs_it(spark, tmp_path):
    from deltaspark import write

    plain, partitioned = str(tmp_path / "plain"), str(tmp_path / "partitioned")
    write(spark.range(10).selectExpr("id", "id % 2 as p"), plain)
    write(spark.range(10).selectExpr("id", "id % 2 as p"), partitioned, partitionBy=["p"])
    snap = DeltaTable.forPath(spark, plain).snapshot()
    assert sorted(r["id"] for r in snap.toDF().collect()) == list(range(10))
    assert "held_rows" not in vars(snap.statePlan)  # listed from the driver's state alone
    snap = DeltaTable.forPath(spark, partitioned).snapshot()
    assert sorted((r["id"], r["p"]) for r in snap.toDF().collect()) == [(i, i % 2) for i in range(10)]
    assert "held_rows" not in vars(snap.statePlan)  # partition values from the driver's state too
    snap = DeltaTable.forPath(spark, plain).snapshot()
    assert sorted(r["id"] for r in snap.toDF("id > 6").collect()) == [7, 8, 9]  # a filter prunes in Spark
    assert vars(snap.statePlan)["held_rows"] is not None


def test_small_reads_run_no_replay_job(spark, tmp_path):
    from deltaspark import write

    path = str(tmp_path / "t")
    write(spark.range(10).selectExpr("id", "id % 2 as p"), path, partitionBy=["p"])
    context = spark.sparkContext
    context.setJobGroup("files", "files")
    table = DeltaTable.forPath(spark, path)
    files = table.snapshot().files().collect()
    assert {r["partitionValues_parsed"]["p"] for r in files} == {0, 1}
    assert len(context.statusTracker().getJobIdsForGroup("files")) == 0  # folded into the local relation
    context.setJobGroup("read", "read")
    assert sorted(r["id"] for r in table.toDF().collect()) == list(range(10))
    # The data files' scan, and the broadcast of the held file entries that attach partition values.
    assert len(context.statusTracker().getJobIdsForGroup("read")) == 2
    context.setJobGroup("other", "other")


def test_a_new_commit_is_read_alone(spark, log, monkeypatch):
    read: list[str] = []
    original = driver_replay.file_actions

    def spy(storage, f, root, dvs, counted=None, small=None, budget=None):
        read.append(f.name)
        return original(storage, f, root, dvs, counted, small, budget)

    monkeypatch.setattr(driver_replay, "file_actions", spy)
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    assert driver_answer(spark, log.path)[0] and read == [
        "00000000000000000000.json",
        "00000000000000000001.json",
    ]
    read.clear()
    log.commit(2, remove("a", 1))
    replayed, rows = driver_answer(spark, log.path)
    assert replayed and read == ["00000000000000000002.json"]
    assert rows == spark_answer(spark, log.path)
    read.clear()
    assert driver_answer(spark, log.path)[0] and read == []  # the same version: nothing read
    # A file written again (another size) is never answered from memory.
    log.commit(2, remove("a", 1), add("c"))
    replayed, rows = driver_answer(spark, log.path)
    assert replayed and "00000000000000000002.json" in read and rows == spark_answer(spark, log.path)
    # Time travel to an older version starts over (an answer is only ever extended).
    read.clear()
    assert driver_answer(spark, log.path, 0)[0] and read == ["00000000000000000000.json"]


def test_a_load_reads_each_log_file_once(spark, log, monkeypatch):
    """A small log's files are read on the driver for protocol and metadata, then for the file
    actions: the first reader holds their bytes for the second (`held_bytes`), so each commit and
    checkpoint part is read once per load, and a file written again (another size) is read anew."""
    from deltaspark.storage import HadoopStorage

    reads: list[str] = []

    def counted(original):  # noqa: ANN001, ANN202
        def spy(self, path, *args, **kwargs):  # noqa: ANN001, ANN202
            reads.append(path.rsplit("/", 1)[-1])
            return original(self, path, *args, **kwargs)

        return spy

    for name in ("read_bytes", "read_text"):
        monkeypatch.setattr(HadoopStorage, name, counted(getattr(HadoopStorage, name)))

    def log_reads() -> list[str]:
        found = sorted(r for r in reads if r[:1].isdigit())
        reads.clear()
        return found

    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    assert driver_answer(spark, log.path)[0]
    assert log_reads() == ["00000000000000000000.json", "00000000000000000001.json"]
    log.commit(2, remove("a", 1))
    assert driver_answer(spark, log.path)[0] and log_reads() == ["00000000000000000002.json"]
    log.commit(2, remove("a", 1), add("c"))  # written again: another size
    replayed, rows = driver_answer(spark, log.path)
    assert replayed and log_reads() == ["00000000000000000002.json"] and rows == spark_answer(spark, log.path)
    log.classic_checkpoint(2, [protocol(), metadata(), add("b"), add("c"), remove("a", 1)])
    log.commit(3, add("d"))
    assert driver_answer(spark, log.path)[0]
    assert log_reads() == ["00000000000000000002.checkpoint.parquet", "00000000000000000003.json"]


def _stats_parsed_checkpoint(log) -> None:
    schema = pa.schema(
        [
            pa.field(
                "add",
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("size", pa.int64()),
                        ("dataChange", pa.bool_()),
                        ("stats_parsed", pa.struct([("numRecords", pa.int64())])),
                    ]
                ),
            ),
            pa.field(
                "protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
            ),
        ]
    )
    proto = {"minReaderVersion": 1, "minWriterVersion": 2}
    rows = [
        {"add": None, "protocol": proto},
        {
            "add": {"path": "a", "size": 1, "dataChange": True, "stats_parsed": {"numRecords": 7}},
            "protocol": None,
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema), log.log / "00000000000000000001.checkpoint.parquet")


def _capitalized_checkpoint(log) -> None:
    rows = [{"Add": {"path": "a", "size": 1, "dataChange": True}}]
    schema = pa.schema(
        [("Add", pa.struct([("path", pa.string()), ("size", pa.int64()), ("dataChange", pa.bool_())]))]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema), log.log / "00000000000000000001.checkpoint.parquet")


def _int_size_checkpoint(log) -> None:
    rows = [{"add": {"path": "a", "size": 1, "dataChange": True}}]
    schema = pa.schema(
        [("add", pa.struct([("path", pa.string()), ("size", pa.int32()), ("dataChange", pa.bool_())]))]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema), log.log / "00000000000000000001.checkpoint.parquet")


def _checkpoint_listing_a_file_twice(log) -> None:
    log.classic_checkpoint(1, [protocol(), metadata(), add("a"), add("a", size=5)])


UNCLEAR = {
    # JSON Spark reads otherwise than its plain meaning, or not at all
    "size as a string": lambda log: log.raw(
        "00000000000000000001.json", '{"add": {"path": "b", "size": "12"}}\n'
    ),
    "path as a number": lambda log: log.raw("00000000000000000001.json", '{"add": {"path": 12}}\n'),
    "single quotes": lambda log: log.raw("00000000000000000001.json", "{'add': {'path': 'b', 'size': 1}}\n"),
    "not an object": lambda log: log.raw("00000000000000000001.json", '[{"add": {"path": "b"}}]\n'),
    "truncated line": lambda log: log.raw("00000000000000000001.json", '{"add": {"path": "b"\n'),
    "add and remove on one line": lambda log: log.raw(
        "00000000000000000001.json", json.dumps({**add("b"), **remove("a", 1)}) + "\n"
    ),
    "add without a path": lambda log: log.raw("00000000000000000001.json", '{"add": {"size": 1}}\n'),
    "DV without the feature": lambda log: log.commit(1, add("b", dv=dv("X"))),
    "malformed escape": lambda log: log.commit(1, add("b%zz.parquet")),
    "bytes that are not UTF-8": lambda log: log.raw(
        "00000000000000000001.json", b'{"add": {"path": "\xff"}}\n'
    ),
    # checkpoints Spark reads its own way
    "parsed stats in the checkpoint": _stats_parsed_checkpoint,
    "a column named in other case": _capitalized_checkpoint,
    "an int32 size": _int_size_checkpoint,
    "a checkpoint listing a file twice": _checkpoint_listing_a_file_twice,
}


@pytest.mark.parametrize("case", list(UNCLEAR))
def test_what_the_driver_cannot_read_exactly_is_left_to_spark(spark, log, case):
    log.commit(0, protocol(), metadata(), add("a"))
    UNCLEAR[case](log)
    replayed, answer = driver_answer(spark, log.path)
    assert not replayed
    assert answer == spark_answer(spark, log.path)  # the same rows, or the same error


def test_a_log_above_the_limit_is_replayed_by_spark(spark, log):
    log.commit(0, protocol(), metadata(), *[add(f"f{i}.parquet") for i in range(50)])
    spark.conf.set(DRIVER_REPLAY_CONF, "1000")
    try:
        assert driver_answer(spark, log.path)[0] is False
    finally:
        spark.conf.unset(DRIVER_REPLAY_CONF)
    assert driver_answer(spark, log.path)[0] is True


def test_a_log_whose_state_would_exceed_the_limit_is_not_parsed_on_the_driver(spark, log, monkeypatch):
    """The limit bounds what the driver holds (each action, its key and `LINE_CHARS`), not only the
    log's bytes: a commit of many small adds within the bytes but not the state goes to Spark
    before a line is parsed (a 20,000-file commit of 7.8 MB was parsed in 0.9 s, then refused)."""
    log.commit(0, protocol(), metadata())
    log.commit(1, *[add(f"p=1/part-{i:05d}.parquet") for i in range(200)])
    sizes = sum(f.stat().st_size for f in (log.root / "_delta_log").glob("*.json"))
    parsed: list[str] = []
    original = driver_replay.json_object

    def counting(line):
        parsed.append(line)
        return original(line)

    monkeypatch.setattr(driver_replay, "json_object", counting)
    spark.conf.set(DRIVER_REPLAY_CONF, str(sizes + 1000))  # the bytes fit; 200 entries do not
    try:
        replayed, rows = driver_answer(spark, log.path)
    finally:
        spark.conf.unset(DRIVER_REPLAY_CONF)
    assert not replayed and len(parsed) <= 3  # version 0's lines only: version 1 was judged unread
    assert rows == spark_answer(spark, log.path)
    parsed.clear()
    assert driver_answer(spark, log.path)[0] is True  # the default limit holds it
    assert len(parsed) >= 200


def test_a_corrupt_line_is_named_by_the_spark_path(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.raw(
        "00000000000000000001.json",
        '{"add": {\n{"add": {"path": "b", "size": 1, "modificationTime": 1, "dataChange": true}}\n',
    )
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.statePlan.held_rows is None
    with pytest.raises(CorruptLogError, match="00000000000000000001.json"):
        snap.summary()


def test_deletion_vectors_of_a_small_read_are_decoded_on_the_driver(spark, log):
    """Decoded on the driver (no Python worker, no job to find or read DV files), with the rows
    the executors' decoder gives."""
    from deltaspark.features import dv_codec

    data = write_parquet(log.root, "a.parquet", pa.table({"id": pa.array(range(10), pa.int64())}))
    raw = dv_codec.encode_bitmap([1, 4, 9])
    inline = {
        "storageType": "i",
        "pathOrInlineDv": dv_codec.z85_encode(raw + b"\0" * (-len(raw) % 4)),
        "sizeInBytes": len(raw),
        "cardinality": 3,
    }
    log.commit(0, DVS, metadata(), {"add": {**data["add"], "deletionVector": inline}})
    context = spark.sparkContext
    context.setJobGroup("dv", "dv")
    frame = DeltaTable.forPath(spark, log.path).toDF()
    rows = sorted(r["id"] for r in frame.collect())
    assert rows == [0, 2, 3, 5, 6, 7, 8]
    # The data file's scan and the broadcast of the decoded rows, which come from the driver.
    assert len(context.statusTracker().getJobIdsForGroup("dv")) == 2
    context.setJobGroup("other", "other")
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" in plan and "MapInArrow" not in plan and "binaryFile" not in plan
    spark.conf.set("spark.deltaspark.read.driverDeletedRows", "0")
    try:
        assert sorted(r["id"] for r in DeltaTable.forPath(spark, log.path).toDF().collect()) == rows
    finally:
        spark.conf.unset("spark.deltaspark.read.driverDeletedRows")

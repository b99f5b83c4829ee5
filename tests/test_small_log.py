"""Protocol and metadata of small logs read on the driver (`log/small_log.py`).

The driver path must give exactly the Spark path's answer, or no answer at all: every unclear
line (corrupt, untyped, ambiguous) hands the log back to the Spark path, whose errors the damaged
table tests pin down.
"""

from __future__ import annotations

import json

import pytest

from deltaspark import CorruptLogError, DeltaTable
from deltaspark.log import protocol_metadata, protocol_metadata_cache, small_log
from deltaspark.log.files import parse_log_file
from deltaspark.log.listing import plan_segment
from deltaspark.storage import HadoopStorage
from tests.conftest import CONNECT
from tests.log_builder import add, commit_info, metadata, protocol
from tests.test_conformance import TABLES


def _files(*texts: str) -> tuple[list, list[bytes]]:
    names = [f"{v:020d}.json" for v in range(len(texts))]
    pairs = zip(names, texts, strict=True)
    files = [parse_log_file(n, f"file:/t/_delta_log/{n}", len(t), 0) for n, t in pairs]
    return files, [t.encode() for t in texts]


def _lines(*actions: dict) -> str:
    return "".join(json.dumps(a) + "\n" for a in actions)


P1 = protocol(1, 2)["protocol"]
P3 = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])["protocol"]


def test_newest_protocol_and_metadata_win_and_commit_info_is_the_versions_own():
    files, texts = _files(
        _lines(commit_info(), {"protocol": P1}, metadata(configuration={"a": "1"})),
        _lines({"commitInfo": {"operation": "WRITE"}}, add("x.parquet")),
        _lines({"commitInfo": {"operation": "SET"}}, {"protocol": P3}, metadata(configuration={"a": "2"})),
        _lines(add("y.parquet")),
    )
    found = small_log.protocol_and_metadata(files, texts, 3)
    assert found["protocol"]["minReaderVersion"] == 3
    assert found["protocol"]["readerFeatures"] == ["deletionVectors"]
    assert found["metaData"]["configuration"] == {"a": "2"}
    assert found["protocolFile"].endswith("00000000000000000002.json")
    assert found["commitInfo"] is None  # version 3 has none; older ones never count
    assert small_log.protocol_and_metadata(files[:3], texts[:3], 2)["commitInfo"] == {"operation": "SET"}


def test_file_action_lines_are_not_parsed_as_the_spark_path_does_not_parse_them():
    # The Spark path drops `{"add":`/`{"remove":` lines before parsing; replay reports them later.
    files, texts = _files(_lines({"protocol": P1}, metadata()) + '{"add": {"path": broken\n')
    assert small_log.protocol_and_metadata(files, texts, 0)["protocol"] == {
        "minReaderVersion": 1,
        "minWriterVersion": 2,
        "readerFeatures": None,
        "writerFeatures": None,
    }


@pytest.mark.parametrize(
    "bad_line",
    [
        "not json at all",
        '{"protocol": {"minReaderVersion": 1, ',  # truncated
        '{"protocol": {"minReaderVersion": "1", "minWriterVersion": 2}}',  # a string, not an int
        '{"protocol": {"minReaderVersion": 1.0, "minWriterVersion": 2}}',
        '{"protocol": {"minReaderVersion": true, "minWriterVersion": 2}}',
        '{"protocol": {"minReaderVersion": 4294967296, "minWriterVersion": 2}}',  # beyond int32
        '{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2, "readerFeatures": "x"}}',
        '{"metaData": {"id": 5}}',
        '{"metaData": {"configuration": {"a": 1}}}',
        '{"metaData": {"createdTime": "yesterday"}}',
        '{"protocol": [1, 2]}',
        '\t{"protocol": {}}\x85',
        '{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}',  # a second, different one
    ],
)
def test_anything_unclear_goes_to_the_spark_path(bad_line):
    files, texts = _files(_lines({"protocol": P1}, metadata()) + bad_line + "\n")
    assert small_log.protocol_and_metadata(files, texts, 0) is None


def test_a_vanished_file_goes_to_the_spark_path():
    files, _ = _files(_lines({"protocol": P1}, metadata()))
    assert small_log.protocol_and_metadata(files, [None], 0) is None


def test_only_small_checkpoint_less_segments_are_eligible():
    files, _ = _files(_lines({"protocol": P1}))
    assert small_log.eligible(files, has_checkpoint=False)
    assert not small_log.eligible(files, has_checkpoint=True)
    assert not small_log.eligible(files * (small_log.MAX_FILES + 1), has_checkpoint=False)
    big = parse_log_file("00000000000000000000.json", "file:/t/x", small_log.MAX_BYTES + 1, 0)
    assert not small_log.eligible([big], has_checkpoint=False)


def test_longer_logs_are_read_on_the_driver_only_from_a_local_disk_and_within_the_budget():
    def commit(version: int, size: int, where: str = "file:/t/_delta_log") -> object:
        name = f"{version:020d}.json"
        return parse_log_file(name, f"{where}/{name}", size, 0)

    long = [commit(v, small_log.MAX_BYTES) for v in range(small_log.MAX_FILES + 1)]
    budget = sum(f.size for f in long)
    assert not small_log.eligible(long, has_checkpoint=False)  # the budget defaults to 0 here
    assert small_log.eligible(long, has_checkpoint=False, local_bytes=budget)
    assert not small_log.eligible(long, has_checkpoint=False, local_bytes=budget - 1)
    assert not small_log.eligible(long, has_checkpoint=True, local_bytes=budget)
    remote = [*long[:-1], commit(len(long), 10, "s3a://b/t/_delta_log")]
    assert not small_log.eligible(remote, has_checkpoint=False, local_bytes=budget)
    huge = [commit(0, small_log.MAX_LOCAL_FILE_BYTES + 1)]
    assert not small_log.eligible(huge, has_checkpoint=False, local_bytes=1 << 40)


def test_lines_break_as_hadoop_breaks_them():
    text = (
        json.dumps({"protocol": P1})
        + "\r"
        + json.dumps(metadata(configuration={"a": "\u00e9"}))
        + "\r\n"
        + json.dumps({"commitInfo": {"note": "caf\u00e9"}}, ensure_ascii=False)
        + "\n  \n"
    )
    files, contents = _files(text)
    # A file action is dropped by its first bytes, whatever follows.
    contents = [contents[0] + b'{"add": {"path": "\xff\xfe"}}\n']
    found = small_log.protocol_and_metadata(files, contents, 0)
    assert found["protocol"]["minReaderVersion"] == 1
    assert found["metaData"]["configuration"] == {"a": "\u00e9"}
    assert found["commitInfo"] == {"note": "caf\u00e9"}


# ---- against the Spark path ---------------------------------------------------------------------


def _both(spark, table_path: str) -> tuple[dict | None, dict]:
    storage = HadoopStorage(spark)
    segment = plan_segment(storage, table_path)
    files = protocol_metadata.json_files(segment)
    texts = [storage.read_bytes(f.path) for f in files]
    base = None
    if segment.checkpoint is not None:
        parts = list(segment.checkpoint.files)
        base = small_log.checkpoint_protocol_and_metadata(parts, [storage.read_bytes(f.path) for f in parts])
        assert base is not None
    driver = small_log.protocol_and_metadata(files, texts, segment.version, base) if files else base
    row = protocol_metadata.frame(spark, segment).first().asDict(recursive=True)
    row["commitInfo"] = json.loads(row["commitInfo"]) if row["commitInfo"] else None
    return driver, row


def _same(driver: dict, spark_row: dict) -> None:
    for key in ("protocol", "metaData", "commitInfo", "sidecars"):
        assert driver[key] == spark_row[key], (key, driver, spark_row)
    for key in ("protocolFile", "metaDataFile"):
        assert driver[key].rsplit("/", 1)[-1] == spark_row[key].rsplit("/", 1)[-1], key


@pytest.mark.skipif(CONNECT, reason="classic sessions only (Connect reads files through Spark jobs)")
def test_driver_and_spark_agree_on_every_conformance_table_that_qualifies(spark, conformance):
    compared = 0
    for name in TABLES:
        path = str(conformance / name)
        storage = HadoopStorage(spark)
        try:
            segment = plan_segment(storage, path)
        except Exception:  # noqa: BLE001 - tables the conformance suite checks for their errors
            continue
        checkpoint = segment.checkpoint
        if checkpoint is not None and not small_log.checkpoint_eligible(list(checkpoint.files)):
            continue  # (V2 JSON checkpoints, big ones) the Spark path reads them
        commits = protocol_metadata.json_files(segment)
        if commits and not small_log.eligible(commits, False):
            continue
        driver, spark_row = _both(spark, path)
        assert driver is not None, name  # real tables are clean: the driver path must answer
        _same(driver, spark_row)
        compared += 1
    assert compared >= 50, compared


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_driver_and_spark_agree_on_an_evolving_hand_built_log(spark, log):
    log.commit(0, commit_info(), protocol(), metadata(configuration={"k": "v"}), add("a.parquet"))
    log.commit(1, {"commitInfo": {"operation": "SET TBLPROPERTIES"}}, metadata(configuration={"k": "w"}))
    log.commit(2, commit_info(), protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
    driver, spark_row = _both(spark, log.path)
    _same(driver, spark_row)
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.configuration == {"k": "w"} and snap.protocol.minReaderVersion == 3


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_driver_and_spark_agree_on_lines_broken_by_carriage_returns(spark, log):
    log.raw(
        "00000000000000000000.json",
        "\r\n".join(json.dumps(a) for a in (commit_info(), protocol(), metadata())),
    )
    log.raw(
        "00000000000000000001.json",
        "\r".join(json.dumps(a) for a in ({"commitInfo": {"n": 1}}, metadata(configuration={"k": "\u00e9"})))
        + "\r",
    )
    driver, spark_row = _both(spark, log.path)
    _same(driver, spark_row)
    assert driver["metaData"]["configuration"] == {"k": "\u00e9"} and driver["commitInfo"] == {"n": 1}


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_a_long_local_log_is_read_on_the_driver_within_the_session_s_budget(
    spark, log, spark_job_count, monkeypatch
):
    monkeypatch.setattr(small_log, "MAX_BYTES", 0)  # every log is "long" here
    log.commit(0, commit_info(), protocol(), metadata(configuration={"k": "0"}), add("a.parquet"))
    log.commit(1, {"commitInfo": {"n": 1}}, metadata(configuration={"k": "1"}), add("b.parquet"))
    protocol_metadata_cache.clear()
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.configuration == {"k": "1"} and snap.commitInfo["n"] == 1 and spark_job_count == []
    protocol_metadata_cache.clear()
    spark.conf.set(small_log.LOCAL_BYTES_CONF, "0")
    try:
        assert DeltaTable.forPath(spark, log.path).snapshot().configuration == {"k": "1"}
    finally:
        spark.conf.unset(small_log.LOCAL_BYTES_CONF)
    assert spark_job_count == [1]


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_a_corrupt_commit_is_still_named_by_the_spark_path(spark, log):
    log.commit(0, commit_info(), protocol(), metadata())
    # Not the last line, which a torn-write check reads on the driver itself (`torn_writes`).
    log.raw("00000000000000000001.json", '{"protocol": {"minReaderVersion": 1, \n{"commitInfo": {}}\n')
    storage = HadoopStorage(spark)
    segment = plan_segment(storage, log.path)
    assert small_log.eligible(protocol_metadata.json_files(segment), False)
    with pytest.raises(Exception, match="deltaspark: corrupt Delta log file .*00000000000000000001.json"):
        protocol_metadata.load(spark, storage, segment)
    with pytest.raises(CorruptLogError, match="00000000000000000001.json"):
        DeltaTable.forPath(spark, log.path).snapshot()


# ---- the cache of answers per segment -----------------------------------------------------------


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_a_small_parquet_checkpoint_is_read_on_the_driver(spark, log, spark_job_count):
    p0, m0 = protocol(), metadata(configuration={"k": "0"})
    log.commit(0, commit_info(), p0, m0, add("a.parquet"))
    log.classic_checkpoint(0, [p0, m0, add("a.parquet")])
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.configuration == {"k": "0"} and snap.commitInfo is not None and spark_job_count == []
    log.commit(1, commit_info(), metadata(configuration={"k": "1"}))
    assert DeltaTable.forPath(spark, log.path).snapshot().configuration == {"k": "1"}
    assert spark_job_count == []
    # Two different protocols in one checkpoint: the Spark path decides (max_by picks one of them).
    other = log.root.parent / "two-protocols"
    two = log.__class__(other)
    two.commit(0, commit_info(), p0, m0)
    two.classic_checkpoint(0, [p0, protocol(3, 7, [], []), m0])
    storage = HadoopStorage(spark)
    parts = list(plan_segment(storage, str(other)).checkpoint.files)
    assert (
        small_log.checkpoint_protocol_and_metadata(parts, [storage.read_bytes(f.path) for f in parts]) is None
    )


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_reloads_after_a_checkpoint_read_only_the_new_commits(spark, log, spark_job_count, monkeypatch):
    # The checkpoint goes to the Spark path here (as a big one would): the held answer is Spark's.
    monkeypatch.setattr(small_log, "checkpoint_eligible", lambda files: False)
    p0, m0 = protocol(), metadata(configuration={"k": "0"})
    log.commit(0, commit_info(), p0, m0, add("a.parquet"))
    log.commit(1, commit_info(), add("b.parquet"))
    log.classic_checkpoint(1, [p0, m0, add("a.parquet"), add("b.parquet")])
    log.commit(2, {"commitInfo": {"operation": "WRITE", "n": 2}}, add("c.parquet"))

    def load():
        return DeltaTable.forPath(spark, log.path).snapshot()

    assert load().configuration == {"k": "0"}
    assert spark_job_count == [2]  # a checkpoint: the Spark path, once
    assert load().commitInfo["n"] == 2 and spark_job_count == [2]  # the same segment: held
    log.commit(3, {"commitInfo": {"operation": "SET", "n": 3}}, metadata(configuration={"k": "3"}))
    snap = load()
    assert snap.version == 3 and snap.configuration == {"k": "3"} and snap.commitInfo["n"] == 3
    assert spark_job_count == [2]  # only commit 3 was read, on the driver
    old = DeltaTable.forPath(spark, log.path).snapshot(version=2)
    assert old.configuration == {"k": "0"} and old.commitInfo["n"] == 2 and spark_job_count == [2]

    # A file that changed (here: commit 2 written again, longer) is never answered from memory.
    log.commit(2, {"commitInfo": {"operation": "WRITE", "n": 22}}, add("c.parquet"), add("d.parquet"))
    assert load().configuration == {"k": "3"}
    assert spark_job_count == [2, 3]
    assert DeltaTable.forPath(spark, log.path).snapshot(version=2).commitInfo["n"] == 22


@pytest.mark.skipif(CONNECT, reason="classic sessions only")
def test_a_commit_gone_corrupt_after_it_was_read_is_still_named(spark, log):
    log.commit(0, commit_info(), protocol(), metadata(), add("a.parquet"))
    log.commit(1, commit_info(), add("b.parquet"))
    assert DeltaTable.forPath(spark, log.path).snapshot().version == 1
    log.raw("00000000000000000001.json", '{"commitInfo": {}}\n{"protocol": {"minReaderVersion": 1,\n')
    with pytest.raises(CorruptLogError, match="00000000000000000001.json"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_the_cache_is_bounded():
    from deltaspark.log import protocol_metadata_cache as cache
    from deltaspark.log.segment import LogSegment

    cache.clear()
    answer = {"protocol": P1, "metaData": {"schemaString": "{}"}, "sidecars": []}
    for i in range(cache.MAX_ENTRIES + 10):
        cache.store(LogSegment(f"file:/t{i}", 0, None, ()), answer)
    assert len(cache._cache._entries) == cache.MAX_ENTRIES
    assert cache.lookup(LogSegment("file:/t0", 0, None, ()))[0] is None  # the oldest went first
    assert cache.lookup(LogSegment(f"file:/t{cache.MAX_ENTRIES + 9}", 0, None, ()))[2]
    huge = {"protocol": P1, "metaData": {"schemaString": "x" * (cache.MAX_SCHEMA_CHARS + 1)}, "sidecars": []}
    cache.store(LogSegment("file:/huge", 0, None, ()), huge)
    assert cache.lookup(LogSegment("file:/huge", 0, None, ()))[0] is None
    cache.clear()

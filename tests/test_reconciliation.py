"""Every reconciliation rule of the protocol, on hand-built logs."""

from __future__ import annotations

import json
import re
import time

import pytest
from chispa import assert_df_equality

from deltaspark import CorruptLogError, DeltaTable
from tests.conftest import DRIVER_REPLAY_CONF, replay_plan
from tests.log_builder import add, commit_info, domain, dv, metadata, protocol, remove, txn

NOW = int(time.time() * 1000)
DV_PROTOCOL = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])


def _keys(rows) -> list[tuple[str, str | None]]:
    return sorted(((r[0], r[1]) for r in rows), key=lambda k: (k[0], k[1] or ""))


def replayed_where_expected(snap) -> None:
    """A small log is replayed on the driver unless the session turns that off (or cannot read
    files directly, as over Spark Connect) or the checkpoint has sidecars: a test meant to check
    the driver replay never passes through Spark unnoticed, nor the other way round."""
    expected = (
        snap._spark.conf.get(DRIVER_REPLAY_CONF, None) != "0"
        and snap._storage.direct_reads
        and not snap.statePlan.sidecars
    )
    assert (snap.statePlan.held_rows is not None) is expected


def live(snap) -> list[tuple[str, str | None]]:
    replayed_where_expected(snap)
    return _keys(snap.files().select("path", "deletionVector.pathOrInlineDv").collect())


def tombs(snap, **kw) -> list[tuple[str, str | None]]:
    replayed_where_expected(snap)
    return _keys(snap.tombstones(**kw).select("path", "deletionVector.pathOrInlineDv").collect())


def table(spark, log, **kw):
    return DeltaTable.forPath(spark, log.path).snapshot(**kw)


@pytest.fixture(params=["driver", "broadcast", "union"])
def plan(request, spark):
    """Run a test under every replay plan of a small log (they must agree): on the driver, and by
    Spark jobs with either reconciliation plan."""
    with replay_plan(spark, request.param):
        yield request.param


@pytest.mark.connect
def test_add_remove_and_readd_across_commits(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a"), add("b"))
    log.commit(1, remove("a", NOW))
    log.commit(2, add("c"))
    log.commit(3, add("a", size=7))
    assert live(table(spark, log, version=1)) == [("b", None)]
    assert tombs(table(spark, log, version=1)) == [("a", None)]
    snap = table(spark, log)
    assert live(snap) == [("a", None), ("b", None), ("c", None)]
    assert tombs(snap) == []  # re-adding cancels the tombstone
    assert snap.files().where("path = 'a'").first()["size"] == 7


def test_same_path_with_a_new_deletion_vector_replaces_the_old_one(spark, log, replay):
    log.commit(0, DV_PROTOCOL, metadata(), add("f", dv=None))
    log.commit(1, remove("f", NOW), add("f", dv=dv("AAAA")))
    log.commit(2, remove("f", NOW, dv=dv("AAAA")), add("f", dv=dv("BBBB")))
    snap = table(spark, log)
    assert live(snap) == [("f", "BBBB")]
    assert tombs(snap) == [("f", None), ("f", "AAAA")]  # the same data file, different logical files


def test_dv_unique_id_includes_storage_type_and_offset(spark, log, replay):
    log.commit(0, DV_PROTOCOL, metadata(), add("f", dv=dv("XYZ", offset=1)))
    # Same pathOrInlineDv but another offset or storage type: a different logical file.
    log.commit(
        1,
        remove("f", NOW, dv=dv("XYZ", offset=9)),
        remove("f", NOW, dv=dv("XYZ", storage_type="i", offset=None)),
    )
    assert live(table(spark, log)) == [("f", "XYZ")]
    # The same uniqueId with other (non-key) fields changed is the same logical file.
    log.commit(2, remove("f", NOW, dv={**dv("XYZ", offset=1), "cardinality": 99}))
    assert live(table(spark, log)) == []


def two_live_adds_failure(snap, plan: str) -> str:
    """The failure of reading a state where a path has two live adds: lazy (Spark names it) from
    `files()` under Spark's plans, eager from the driver's replay; a `CorruptLogError` from an
    eager operation either way."""
    if plan == "driver":
        with pytest.raises(CorruptLogError):
            snap.files()
    else:
        with pytest.raises(Exception) as lazy:  # noqa: PT011 - a Spark error carrying deltaspark's message
            snap.files().collect()
        assert "deltaspark: corrupt Delta log file" in str(lazy.value)
    with pytest.raises(CorruptLogError) as eager:
        snap.summary()
    return str(eager.value)


@pytest.mark.parametrize("first_dv, second_dv", [("OLD", None), ("OLD", "NEW"), (None, "NEW")])
def test_a_path_with_two_live_adds_is_named(spark, log, plan, first_dv, second_dv):
    """The protocol keys logical files by (path, DV id): a file added again under another DV id
    without a `remove` of the old one leaves two live logical files of one data file, whose rows
    would be read twice (or, keeping one add, deleted rows come back). Neither is an answer."""
    log.commit(0, DV_PROTOCOL, metadata(), add("other"))
    log.commit(1, add("f", dv=dv(first_dv) if first_dv else None))
    log.commit(2, add("f", dv=dv(second_dv) if second_dv else None))
    message = two_live_adds_failure(table(spark, log), plan)
    assert "00000000000000000002.json" in message and "the data file f " in message
    assert "at version 2" in message and "add at version 1" in message
    first = f"deletion vector u{first_dv}@1" if first_dv else "no deletion vector"
    assert first in message
    # Removing the old logical file makes the log valid again.
    log.commit(3, remove("f", NOW, dv=dv(first_dv) if first_dv else None))
    assert live(table(spark, log)) == [("f", second_dv), ("other", None)]


@pytest.mark.parametrize("plan", ["driver", "union"], indirect=True)
def test_a_checkpoint_holding_two_adds_of_one_path_is_named(spark, log, plan):
    """A checkpoint another engine wrote from such a state holds both adds. The driver's replay and
    the union plan rank the checkpoint's rows too; the broadcast plan takes a checkpoint as
    reconciled (ranking it would shuffle all of it), and the audit's checks find it there."""
    log.commit(0, DV_PROTOCOL, metadata(), add("f", dv=dv("D0")))
    log.commit(1, add("f"))
    log.classic_checkpoint(1, [DV_PROTOCOL, metadata(), add("f", dv=dv("D0")), add("f")])
    log.commit(2, add("g"))
    message = two_live_adds_failure(table(spark, log), plan)
    assert "the data file f is added at version 1" in message and "add at version 1" in message


def test_a_checkpointed_add_never_removed_is_named(spark, log, plan):
    """The same rule across a checkpoint and its tail (the broadcast plan matches them by path)."""
    log.commit(0, DV_PROTOCOL, metadata(), add("g", dv=dv("G0")), add("h"))
    log.classic_checkpoint(0, [DV_PROTOCOL, metadata(), add("g", dv=dv("G0")), add("h")])
    log.commit(1, add("h", size=5))  # the same key again: a stats update, valid
    log.commit(2, add("g"))  # g without its DV, the DV'd add never removed
    message = two_live_adds_failure(table(spark, log), plan)
    assert "the data file g is added at version 2 (no deletion vector)" in message
    assert "add at version 0 (deletion vector uG0@1)" in message
    assert live(table(spark, log, version=1)) == [("g", "G0"), ("h", None)]


def test_recommitted_add_updates_stats(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a", stats={"numRecords": 1}))
    log.commit(1, add("a", stats={"numRecords": 5}))
    rows = table(spark, log).files().select("path", "stats_parsed.numRecords").collect()
    assert [(r[0], r[1]) for r in rows] == [("a", 5)]


def test_paths_are_compared_after_canonicalization(spark, log, replay):
    root = log.root.resolve()
    log.commit(
        0,
        protocol(),
        metadata(),
        add("x%20y.parquet"),
        add("p%2Bq.parquet"),
        add("dir/z.parquet"),
        add("k.parquet"),
    )
    log.commit(
        1,
        remove(f"file://{root}/x%20y.parquet", NOW),  # file:/// form, encoded
        remove("p%2Bq.parquet".replace("%2B", "+"), NOW),  # '+' is not a space in a URI path
        remove(f"file:{root}/dir/z.parquet", NOW),  # file:/ form
        remove(f"{root}/k.parquet", NOW),  # absolute path without a scheme
    )
    assert live(table(spark, log)) == []


def test_plus_sign_is_not_decoded_as_space(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a+b.parquet"), add("a b.parquet"))
    log.commit(1, remove("a%20b.parquet", NOW))
    assert live(table(spark, log)) == [("a+b.parquet", None)]


def test_remove_wins_over_add_of_the_same_key_within_one_version(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a"))
    log.compaction(1, 2, add("b"), remove("b", NOW), add("c"))  # an unreconciled compaction
    log.commit(1, add("b"))
    log.commit(2, remove("b", NOW), add("c"))
    snap = table(spark, log)
    assert len(snap.segment.compactions) == 1
    assert live(snap) == [("a", None), ("c", None)]


@pytest.mark.connect
def test_checkpoint_plus_tail(spark, log, plan):
    log.commit(0, protocol(), metadata(), add("p1"), add("p2"), add("p3"))
    log.commit(1, remove("p3", NOW), add("p4"))
    log.classic_checkpoint(1, [protocol(), metadata(), add("p1"), add("p2"), add("p4"), remove("p3", NOW)])
    log.commit(2, remove("p1", NOW), add("p3"))
    log.commit(3, add("p5"))
    snap = table(spark, log)
    assert snap.segment.checkpoint.version == 1
    assert live(snap) == [("p2", None), ("p3", None), ("p4", None), ("p5", None)]
    assert tombs(snap) == [("p1", None)]


def test_checkpoint_paths_are_matched_to_the_tail_in_any_spelling(spark, log, plan):
    """The broadcast plan joins the checkpoint's rows on `paths.join_key`, not on the canonical
    path: every spelling of one file must still meet, and different files must not."""
    root = log.root.resolve()
    checkpointed = [
        add("a.parquet"),
        add("x%20y.parquet"),
        add(f"file:{root}/b.parquet"),
        add(f"{root}/c.parquet"),
        add("d:e.parquet"),  # a scheme-like first segment: an absolute URI, not under the root
        add("dir/a:b.parquet"),
        add("keep.parquet"),
        add("dir/%2Fk.parquet"),  # an escaped slash: `dir//k.parquet` once decoded
        add(f"file:{root}/dir/plain.parquet"),
        add("gs://g/x.parquet"),  # a URI in another scheme, taken as logged
        add("p%3Aq.parquet"),  # an escaped colon: the absolute URI `p:q.parquet` once decoded
        add("x%2525y.parquet"),  # `x%25y.parquet` once decoded: not the tail's `x%y.parquet`
    ]
    log.commit(0, protocol(), metadata(), *checkpointed)
    log.classic_checkpoint(0, [protocol(), metadata(), *checkpointed])
    log.commit(
        1,
        remove(f"file://{root}/a.parquet", NOW),
        remove("x y.parquet", NOW),
        remove("b.parquet", NOW),
        remove(f"file:{root}/c.parquet", NOW),
        remove("d:e.parquet", NOW),
        remove(f"{root}/dir/a:b.parquet", NOW),
        remove(f"file:{root}/dir//k.parquet", NOW),
        remove("/dir/plain.parquet", NOW),  # rooted at `/`, not under the table: another file
        remove("gs://g/%78.parquet", NOW),
        remove("p:q.parquet", NOW),
        remove("x%25y.parquet", NOW),
    )
    snap = table(spark, log)
    assert snap.segment.checkpoint.version == 0
    assert live(snap) == [
        (f"file:{root}/dir/plain.parquet", None),
        ("keep.parquet", None),
        ("x%2525y.parquet", None),
    ]


@pytest.mark.parametrize(
    "root",
    ["file:/data/t", "s3a://b/w/t+(1)$^.*\\E[x]", "s3a://b/it's/t", "/plain/\u00e9t\u00e9", "relative/t"],
)
def test_join_key_is_equal_exactly_when_canonical_paths_are(spark, root):
    from deltaspark.log.paths import (
        canonical_path,
        canonical_path_sql,
        join_key,
        join_key_of_canonical,
        normalize_root,
        path_key,
    )

    base = normalize_root(root)
    paths = [
        "a.parquet",
        "p=x%20y/a.parquet",
        "p=x y/a.parquet",
        "a+b.parquet",
        "a%2Bb.parquet",
        f"{base}/a.parquet",
        f"{base}//a.parquet",
        f"{base}/p=x y/a.parquet",
        "/a.parquet",
        "//a.parquet",
        f"{base}/s3a:/a.parquet",
        "s3a:/a.parquet",
        "s3a%3A/a.parquet",
        "s3a://b/w/other.parquet",
        "s3a://b/w/%6Fther.parquet",
        "gs://g/x.parquet",
        "gs://g/%78.parquet",
        "gs%3A//g/x.parquet",
        "GS://g/x.parquet",
        "dir/a:b.parquet",
        "dir%2Fa:b.parquet",
        "C:x.parquet",
        "C%3Ax.parquet",
        "x%2525y.parquet",
        "x%25y.parquet",
        "file:/data/t/a.parquet",
        "file:///data/t/a.parquet",
        "FILE:/data/t/a.parquet",
        "file://localhost/data/t/q.parquet",
        "file:/data/t/q.parquet",
        "file:/data/t/%71.parquet",
        "/data/t/a.parquet",
        "",
    ]
    frame = spark.createDataFrame([(p,) for p in paths], "path string")
    rows = frame.select(
        "path",
        canonical_path("path", root).alias("canonical"),
        join_key("path", root).alias("key"),
        join_key_of_canonical(canonical_path_sql("path", root), root).alias("key_of_canonical"),
    ).collect()
    for r in rows:
        assert r["key"] == r["key_of_canonical"], r
        # the SQL expression gives what the driver's own decoding gives (None: left to Spark)
        expected = path_key(r["path"], root)
        assert expected is None or r["canonical"] == expected, (r, expected)
    for r in rows:
        for q in rows:
            assert (r["key"] == q["key"]) == (r["canonical"] == q["canonical"]), (r, q)
    assert len({r["canonical"] for r in rows}) > 15  # the spellings do not all collapse
    if root != "relative/t":  # a resolved table's root: plain paths and other schemes' URIs are keys
        assert {"a.parquet", "gs://g/x.parquet", "C:x.parquet"} <= {
            r["path"] for r in rows if r["key"] == r["path"]
        }


def test_checkpoint_plus_tail_with_deletion_vectors(spark, log, plan):
    log.commit(0, DV_PROTOCOL, metadata(), add("f"), add("g"), add("h", dv=dv("H1")))
    log.commit(1, remove("f", NOW), add("f", dv=dv("D1")))
    log.classic_checkpoint(
        1, [DV_PROTOCOL, metadata(), add("f", dv=dv("D1")), add("g"), add("h", dv=dv("H1")), remove("f", NOW)]
    )
    log.commit(2, remove("f", NOW, dv=dv("D1")), add("f", dv=dv("D2")))
    log.commit(3, remove("g", NOW), add("g", dv=dv("G1")))
    log.commit(4, add("h", dv=dv("H2")), remove("h", NOW, dv=dv("H2")))  # a tail key of h removed
    snap = table(spark, log)
    assert live(snap) == [("f", "D2"), ("g", "G1"), ("h", "H1")]
    assert tombs(snap) == [("f", None), ("f", "D1"), ("g", None), ("h", "H2")]


def test_tombstones_expire_by_deleted_file_retention(spark, log, replay):
    week, hour = 7 * 24 * 3600 * 1000, 3600 * 1000
    now = int(time.time() * 1000)
    log.commit(0, protocol(), metadata(), add("old"), add("new"), add("nots"))
    log.commit(1, remove("old", now - week - hour), remove("new", now - week + hour), remove("nots"))
    snap = table(spark, log)
    assert tombs(snap) == [("new", None)]  # a missing deletionTimestamp counts as 0: expired
    assert tombs(snap, includeExpired=True) == [("new", None), ("nots", None), ("old", None)]
    longer = {"delta.deletedFileRetentionDuration": "interval 2 weeks"}
    log.commit(2, metadata(configuration=longer))
    assert tombs(table(spark, log)) == [("new", None), ("old", None)]


@pytest.mark.connect
def test_transactions_latest_per_app_even_when_version_decreases(spark, log, replay):
    log.commit(0, protocol(), metadata(), txn("app-1", 5), txn("app-2", 1))
    log.commit(1, txn("app-1", 9))
    log.commit(2, txn("app-1", 3))  # a rollback: the newest action wins, not the highest version
    rows = table(spark, log).transactions().collect()
    assert sorted((r["appId"], r["version"]) for r in rows) == [("app-1", 3), ("app-2", 1)]


def test_transactions_from_checkpoint_and_tail(spark, log, replay):
    log.commit(0, protocol(), metadata(), txn("a", 1), txn("b", 1))
    log.classic_checkpoint(0, [protocol(), metadata(), txn("a", 1), txn("b", 1)])
    log.commit(1, txn("b", 2), txn("c", 1, last_updated=5))
    expected = spark.createDataFrame(
        [("a", 1, None), ("b", 2, None), ("c", 1, 5)], "appId string, version long, lastUpdated long"
    )
    assert_df_equality(
        table(spark, log).transactions(), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_transaction_retention_drops_stale_and_undated_transactions(spark, log, replay):
    conf = {"delta.setTransactionRetentionDuration": "interval 1 days"}
    log.commit(
        0,
        protocol(),
        metadata(configuration=conf),
        txn("fresh", 1, NOW - 1000),
        txn("stale", 1, NOW - 2 * 86_400_000),
        txn("undated", 1),
    )
    rows = table(spark, log).transactions().collect()
    assert [r["appId"] for r in rows] == ["fresh"]


@pytest.mark.connect
def test_domain_metadata_latest_wins_and_tombstones_drop(spark, log, replay):
    log.commit(
        0,
        protocol(1, 7, writer_features=["domainMetadata"]),
        metadata(),
        domain("d1", '{"v":1}'),
        domain("d2", "x"),
    )
    log.commit(1, domain("d1", '{"v":2}'), domain("d2", "x", removed=True))
    log.commit(2, domain("d3", "y"), domain("d4", "z"))
    snap = table(spark, log)
    assert sorted((r["domain"], r["configuration"]) for r in snap.domainMetadata().collect()) == [
        ("d1", '{"v":2}'),
        ("d3", "y"),
        ("d4", "z"),
    ]
    log.commit(3, domain("d2", "back"))
    assert "d2" in {r["domain"] for r in table(spark, log).domainMetadata().collect()}


def test_row_id_high_water_mark_from_draft_action_and_domain(spark, log, replay):
    log.commit(
        0, protocol(), metadata(), {"rowIdHighWaterMark": {"highWaterMark": 10, "preservedRowIds": False}}
    )
    log.commit(1, {"rowIdHighWaterMark": {"highWaterMark": 25, "preservedRowIds": True}})
    assert table(spark, log).rowIdHighWaterMark == 25
    log.commit(2, domain("delta.rowTracking", json.dumps({"rowIdHighWaterMark": 40})))
    assert table(spark, log).rowIdHighWaterMark == 40


@pytest.mark.connect
def test_latest_protocol_and_metadata_win(spark, log, replay):
    schema2 = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    log.commit(0, protocol(1, 2), metadata(table_id="first"), add("a"))
    log.commit(
        1,
        commit_info(operation="SET TBLPROPERTIES"),
        metadata(schema2, table_id="second", configuration={"k": "v"}),
    )
    log.commit(2, protocol(1, 4))
    snap = table(spark, log)
    assert (snap.protocol.minReaderVersion, snap.protocol.minWriterVersion) == (1, 4)
    assert snap.metadata.id == "second" and snap.configuration == {"k": "v"}
    assert snap.schema.fieldNames() == ["id"]
    assert table(spark, log, version=0).metadata.id == "first"


def test_multipart_checkpoint(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a"), add("b"), add("c"))
    log.commit(1, remove("b", NOW))
    log.multipart_checkpoint(1, [[protocol(), add("a")], [metadata(), remove("b", NOW)], [add("c")]])
    log.commit(2, add("d"))
    snap = table(spark, log)
    assert snap.segment.checkpoint.version == 1 and len(snap.segment.checkpoint.files) == 3
    assert live(snap) == [("a", None), ("c", None), ("d", None)]


def test_incomplete_multipart_checkpoint_falls_back_to_older_state(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.multipart_checkpoint(1, [[protocol(), add("a")], [metadata(), add("b")]], skip=(2,))
    snap = table(spark, log)
    assert snap.segment.checkpoint is None
    assert live(snap) == [("a", None), ("b", None)]


@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.connect
def test_v2_checkpoint_with_sidecars(spark, log, fmt, replay):
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    log.commit(0, v2, metadata(), add("a"), add("b"), add("c"))
    log.commit(1, remove("a", NOW), txn("app", 4))
    log.v2_checkpoint(1, [v2, metadata(), txn("app", 4)], [[add("b"), remove("a", NOW)], [add("c")]], fmt=fmt)
    log.commit(2, add("d"))
    snap = table(spark, log)
    assert snap.segment.checkpoint.is_v2_named and len(snap.statePlan.sidecars) == 2
    assert live(snap) == [("b", None), ("c", None), ("d", None)]
    assert tombs(snap) == [("a", None)]
    assert [(r["appId"], r["version"]) for r in snap.transactions().collect()] == [("app", 4)]


def test_classic_named_v2_checkpoint_with_sidecar(spark, log, replay):
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    log.commit(0, v2, metadata(), add("a"), add("b"))
    sidecar = log.parquet("_sidecars/only.parquet", [add("a"), add("b")])
    log.classic_checkpoint(
        0,
        [
            {"checkpointMetadata": {"version": 0}},
            v2,
            metadata(),
            {
                "sidecar": {
                    "path": "only.parquet",
                    "sizeInBytes": sidecar.stat().st_size,
                    "modificationTime": 0,
                }
            },
        ],
    )
    snap = table(spark, log)
    assert snap.segment.checkpoint.version == 0
    assert live(snap) == [("a", None), ("b", None)]


def test_log_compaction_gives_the_same_state_as_commits(spark, log, replay):
    log.commit(0, protocol(), metadata(), add("a"), add("b"), txn("t", 1))
    log.commit(1, remove("a", NOW), add("c"))
    log.commit(2, add("d"), txn("t", 2))
    log.commit(3, remove("d", NOW))
    log.compaction(1, 2, remove("a", NOW), add("c"), add("d"), txn("t", 2))
    with_compaction = table(spark, log)
    assert [f.name for f in with_compaction.segment.compactions] == [f"{1:020d}.{2:020d}.compacted.json"]
    spark.conf.set("spark.deltaspark.replay.useLogCompaction", "false")
    try:
        without = table(spark, log)
    finally:
        spark.conf.unset("spark.deltaspark.replay.useLogCompaction")
    assert without.segment.compactions == ()
    assert live(with_compaction) == live(without) == [("b", None), ("c", None)]
    assert tombs(with_compaction) == tombs(without) == [("a", None), ("d", None)]
    assert with_compaction.transactions().collect() == without.transactions().collect()


def test_unknown_actions_and_fields_are_ignored(spark, log, replay):
    log.commit(
        0,
        protocol(),
        metadata(),
        {"futureAction": {"x": 1}},
        {"add": {**add("a")["add"], "newField": [1, 2]}},
    )
    assert live(table(spark, log)) == [("a", None)]


@pytest.mark.connect
def test_files_have_typed_partition_values_and_parsed_stats(spark, log, replay):
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": "d", "type": "date", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "amount", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
            {"name": "flag", "type": "boolean", "nullable": True, "metadata": {}},
            {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
    parts = {"d": "2024-05-01", "ts": "2024-05-01 10:11:12.5", "amount": "12.34", "flag": "true", "n": ""}
    stats = {
        "numRecords": 3,
        "minValues": {"id": 1, "name": "a"},
        "maxValues": {"id": 9, "name": "z"},
        "nullCount": {"id": 0, "name": 1},
    }
    log.commit(
        0,
        protocol(),
        metadata(schema, ["d", "ts", "amount", "flag", "n"]),
        add("f", partition_values=parts, stats=stats),
    )
    row = table(spark, log).files().first()
    pv = row["partitionValues_parsed"]
    import datetime as dt
    from decimal import Decimal

    assert pv["d"] == dt.date(2024, 5, 1)
    assert pv["ts"].replace(tzinfo=None) == dt.datetime(2024, 5, 1, 10, 11, 12, 500000)
    assert pv["amount"] == Decimal("12.34") and pv["flag"] is True and pv["n"] is None
    st = row["stats_parsed"]
    assert st["numRecords"] == 3 and st["minValues"]["id"] == 1 and st["maxValues"]["name"] == "z"
    assert st["nullCount"]["name"] == 1 and st["tightBounds"] is None
    assert row["partitionValues"] == parts


def test_column_mapping_physical_names_in_partition_values_and_stats(spark, log, replay):
    def field(name, typ, fid, phys):
        return {
            "name": name,
            "type": typ,
            "nullable": True,
            "metadata": {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": phys},
        }

    schema = {
        "type": "struct",
        "fields": [field("id", "long", 1, "col-1"), field("region", "string", 2, "col-2")],
    }
    conf = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"}
    stats = {"numRecords": 2, "minValues": {"col-1": 4}, "maxValues": {"col-1": 8}, "nullCount": {"col-1": 0}}
    log.commit(
        0,
        protocol(2, 5),
        metadata(schema, ["region"], conf),
        add("col-2=eu/f", partition_values={"col-2": "eu"}, stats=stats),
    )
    row = table(spark, log).files().first()
    assert row["partitionValues_parsed"].asDict() == {"region": "eu"}
    assert row["stats_parsed"]["minValues"].asDict() == {"id": 4}
    assert row["stats_parsed"]["maxValues"]["id"] == 8


def _scan_ancestors(plan: str, marker: str) -> list[str]:
    """Operators above the first plan line containing `marker`, nearest first."""
    lines = [line for line in plan.splitlines() if line.strip()]

    def depth(line: str) -> int:
        return len(line) - len(line.lstrip(" :+-"))

    index = next(i for i, line in enumerate(lines) if marker in line)
    level, ancestors = depth(lines[index]), []
    for line in reversed(lines[:index]):
        if depth(line) < level:
            ancestors.append(line.strip(" :+-"))
            level = depth(line)
    return ancestors


def test_small_tail_leaves_the_checkpoint_unshuffled(spark, log, capsys, spark_replay):
    """With a small tail the checkpoint is filtered by broadcast anti-joins, never shuffled; with
    the union plan it is shuffled by path (the plan a long tail needs)."""
    log.commit(0, protocol(), metadata(), add("a"), add("b"))
    log.classic_checkpoint(0, [protocol(), metadata(), add("a"), add("b")])
    log.commit(1, remove("a", NOW))
    key = "spark.deltaspark.replay.broadcastTailBytes"
    try:
        for limit, shuffled in ((str(1 << 30), False), ("0", True)):
            spark.conf.set(key, limit)
            table(spark, log).files().select("path").explain()
            above_checkpoint = _scan_ancestors(capsys.readouterr().out, "FileScan parquet")
            exchanges = [op for op in above_checkpoint if op.startswith("Exchange hashpartitioning")]
            assert bool(exchanges) is shuffled, above_checkpoint
            if not shuffled:
                assert any(op.startswith("BroadcastHashJoin") and "LeftAnti" in op for op in above_checkpoint)
    finally:
        spark.conf.unset(key)


def _window_count(frame) -> int:
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return sum(1 for line in plan.splitlines() if line.strip(" :+-").startswith("Window ["))


def test_one_window_without_deletion_vectors(spark, log, spark_replay):
    """Without the deletionVectors feature every key is a path, so the one-add-per-path window is
    skipped; with it both windows run."""
    log.commit(0, protocol(), metadata(), add("a"), add("b"))
    log.commit(1, remove("a", NOW))
    assert _window_count(table(spark, log).files()) == 1
    dv_log = log.__class__(log.root.parent / "with-dvs")
    dv_log.commit(0, DV_PROTOCOL, metadata(), add("a"))
    assert _window_count(table(spark, dv_log).files()) == 2


def test_protocol_and_metadata_filter_reaches_the_checkpoint_reader(spark, log, spark_replay):
    """The checkpoint scan of the protocol/metadata job pushes a filter on required fields into
    the parquet reader, so row groups holding only file actions can be skipped by their stats."""
    from deltaspark.log import protocol_metadata

    log.commit(0, protocol(), metadata(), add("a"))
    log.classic_checkpoint(0, [protocol(), metadata(), add("a")])
    log.commit(1, add("b"))
    segment = table(spark, log).segment
    plan = protocol_metadata.frame(spark, segment)._jdf.queryExecution().executedPlan().toString()
    scan = next(line for line in plan.splitlines() if "FileScan parquet" in line)
    assert "IsNotNull(protocol.minReaderVersion)" in scan and "IsNotNull(metaData.id)" in scan, scan


@pytest.mark.parametrize("plan", ["broadcast", "union", "json-only"])
def test_a_file_list_builds_no_canonical_path(spark, log, plan):
    """Every plan groups and matches files by `paths.join_key` (for a plain relative path, the path
    as logged), so `path_key`, the canonical path, is built only where a consumer reads it: a file
    list's plan has none, while `fileActions()` still carries it. Every shuffle is by the key: the
    union plan's one, or the broadcast plan's of its tail (ranked once per use)."""
    log.commit(0, protocol(), metadata(), add("a"), add("b"))
    if plan != "json-only":
        log.classic_checkpoint(0, [protocol(), metadata(), add("a"), add("b")])
    log.commit(1, remove("a", NOW), add("c"))
    with replay_plan(spark, plan):
        snap = table(spark, log)
        assert (snap.segment.checkpoint is None) is (plan == "json-only")
        text = snap.files()._jdf.queryExecution().executedPlan().toString()
        assert "path_key" not in text, text
        exchanges = re.findall(r"Exchange hashpartitioning\((\w+)#", text)
        assert set(exchanges) == {"join_key"} and (plan == "broadcast" or len(exchanges) == 1), text
        assert "path_key" in snap.fileActions().columns
        assert live(snap) == [("b", None), ("c", None)]


@pytest.mark.one_suite("3.5")  # the choice is Python's; every route runs in both suites' other tests
def test_the_state_plan_chooses_one_route_per_snapshot(spark, log):
    """`log/state_plan.py` chooses the file state's route once per snapshot, from the segment's
    shape and the session's settings; every route gives the same files, and a setting changed
    after the choice does not switch a snapshot's plan halfway."""
    log.commit(0, protocol(), metadata(), add("a"), add("b"))
    log.commit(1, remove("a", NOW), add("c"))
    expected = [("b", None), ("c", None)]
    for plan, route in (("driver", "driver"), ("json-only", "tail")):
        with replay_plan(spark, plan):
            snap = table(spark, log)
            assert snap.statePlan.route == route and live(snap) == expected
    log.classic_checkpoint(1, [protocol(), metadata(), add("b"), add("c"), remove("a", NOW)])
    with replay_plan(spark, "union"):
        snap = table(spark, log)
        assert snap.statePlan.route == "checkpoint" and live(snap) == expected
        plan = snap.files()._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan, plan  # a checkpoint is reconciled as written: no shuffle
    log.commit(2, remove("b", NOW), add("d"))
    expected = [("c", None), ("d", None)]
    for plan in ("broadcast", "union"):
        with replay_plan(spark, plan):
            snap = table(spark, log)
            assert snap.statePlan.route == plan and live(snap) == expected
            other = "0" if plan == "broadcast" else str(1 << 40)
            spark.conf.set("spark.deltaspark.replay.broadcastTailBytes", other)
            text = snap.files()._jdf.queryExecution().executedPlan().toString()
            assert snap.statePlan.route == plan and ("LeftAnti" in text) is (plan == "broadcast"), text
            assert live(snap) == expected

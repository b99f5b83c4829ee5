"""MERGE: every clause kind, checked against an oracle written from SQL's MERGE semantics in plain
Python (first clause whose condition holds, NULL keys never match, a target row changed by at most
one source row), against delta-rs's own merge of the same inputs (copy-on-write), against delta-rs's
reader (deletion vectors applied by its engine) and against the protocol's writer rules
(`writer_rules.check_table`)."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deltaspark import DeltaTable
from deltaspark.errors import (
    AppendOnlyTableError,
    InvalidArgumentError,
    InvariantViolationError,
    MergeCardinalityError,
    MergeSourceLostError,
)
from deltaspark.table import write
from tests.conftest import CLUSTER_MASTER
from tests.writer_rules import check_table

deltalake = pytest.importorskip("deltalake")

SCHEMA = "id long, amount double, name string, part int"
COLUMNS = ("id", "amount", "name", "part")
TARGET = [(i, i * 1.5, f"n{i}", i % 3) for i in range(24)] + [
    (None, 0.5, "null-key", 1),
    (5, 99.0, "dup5", 2),
]
SOURCE = [(i, i * 2.0, f"s{i}", i % 3) for i in (1, 2, 5, 7, 8, 11, 30, 31)] + [
    (None, 1.0, "s-null", 0),
    (31, 3.0, "s31b", 1),
]

Row = dict[str, Any]


class CardinalityError(Exception):
    pass


@dataclass(frozen=True)
class Spec:
    """A clause given three ways: deltaspark's builder call, delta-rs's, and the oracle's."""

    method: str  # deltaspark/delta-spark builder method
    condition: str | None = None
    assignments: dict[str, str] | None = None
    holds: Callable[[Row | None, Row | None], bool] | None = None  # the condition, in Python
    values: Callable[[Row | None, Row | None], Row] | None = None  # the new row, in Python

    @property
    def kind(self) -> str:
        if self.method.startswith("whenNotMatchedBySource"):
            return "bySource"
        return "notMatched" if self.method.startswith("whenNotMatched") else "matched"


def _not_null(*values: Any) -> bool:
    return all(v is not None for v in values)


def oracle(target: list[tuple], source: list[tuple], specs: list[Spec]) -> tuple[list[tuple], list[tuple]]:
    """The table after the merge, and its change rows (row + change type), by SQL's semantics."""
    rows = [dict(zip(COLUMNS, t, strict=True)) for t in target]
    sources = [dict(zip(COLUMNS, s, strict=True)) for s in source]
    matched = [s for s in specs if s.kind == "matched"]
    exempt = len(matched) == 1 and matched[0].method == "whenMatchedDelete" and matched[0].condition is None

    def first(kind: str, t: Row | None, s: Row | None) -> Spec | None:
        return next((c for c in specs if c.kind == kind and (c.holds is None or c.holds(t, s))), None)

    out, changes, used = [], [], set()
    for t in rows:
        hits = [j for j, s in enumerate(sources) if t["id"] is not None and s["id"] == t["id"]]
        used.update(hits)
        acts = [(c, sources[j]) for j in hits if (c := first("matched", t, sources[j])) is not None]
        if len(acts) > 1 and not exempt:
            raise CardinalityError(t)
        spec, s = acts[0] if acts else (first("bySource", t, None) if not hits else None, None)
        if spec is None:
            out.append(t)
        elif "Delete" in spec.method:
            changes.append((*t.values(), "delete"))
        else:
            new = {**t, **spec.values(t, s)}
            out.append(new)
            changes += [(*t.values(), "update_preimage"), (*new.values(), "update_postimage")]
    for j, s in enumerate(sources):
        if j not in used and (spec := first("notMatched", None, s)) is not None:
            new = {c: None for c in COLUMNS} | spec.values(None, s)
            out.append(new)
            changes.append((*new.values(), "insert"))
    return sorted((tuple(r.values()) for r in out), key=repr), sorted(changes, key=repr)


SCENARIOS = {
    "update-delete-insert": (
        SOURCE,
        [
            Spec("whenMatchedDelete", "s.amount > 20", holds=lambda t, s: s["amount"] > 20),
            Spec(
                "whenMatchedUpdate",
                assignments={"amount": "s.amount", "t.name": "t.name || '+'"},
                values=lambda t, s: {"amount": s["amount"], "name": t["name"] + "+"},
            ),
            Spec(
                "whenNotMatchedInsertAll",
                "s.part != 2",
                holds=lambda t, s: s["part"] != 2,
                values=lambda t, s: dict(s),
            ),
        ],
    ),
    "by-source": (
        SOURCE,
        [
            Spec(
                "whenMatchedUpdateAll",
                "t.part = s.part",
                holds=lambda t, s: t["part"] == s["part"],
                values=lambda t, s: dict(s),
            ),
            Spec(
                "whenNotMatchedInsert",
                assignments={"id": "s.id", "amount": "0.0", "name": "'new'", "part": "s.part"},
                values=lambda t, s: {"id": s["id"], "amount": 0.0, "name": "new", "part": s["part"]},
            ),
            Spec("whenNotMatchedBySourceDelete", "t.part = 0", holds=lambda t, s: t["part"] == 0),
            Spec(
                "whenNotMatchedBySourceUpdate",
                assignments={"name": "'gone'"},
                values=lambda t, s: {"name": "gone"},
            ),
        ],
    ),
    # duplicate source keys are fine when the only matched clause is an unconditional delete
    "delete-duplicates": (SOURCE + [(7, 0.0, "s7b", 1), (7, 0.5, "s7c", 1)], [Spec("whenMatchedDelete")]),
    "insert-only": (SOURCE, [Spec("whenNotMatchedInsertAll", values=lambda t, s: dict(s))]),
}

MODES = {
    "copy-on-write": {"delta.enableChangeDataFeed": "true"},
    "deletion-vectors": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    "column-mapping": {"delta.columnMapping.mode": "name", "delta.enableRowTracking": "true"},
}


def _rows(table: DeltaTable, version: int | None = None) -> list[tuple]:
    frame = table.snapshot(version=version).toDF().select(*COLUMNS)
    return sorted((tuple(r) for r in frame.collect()), key=repr)


def _delta_rs_rows(path: Path) -> list[tuple]:
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = deltalake.DeltaTable(str(path))
    result = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return sorted((tuple(r[c] for c in COLUMNS) for r in result.to_pylist()), key=repr)


def _run(table: DeltaTable, source, specs: list[Spec], alias: str = "t") -> Any:
    builder = table.alias(alias).merge(source.alias("s"), "t.id = s.id")
    for spec in specs:
        kwargs: dict[str, Any] = {}
        if spec.condition is not None:
            kwargs["condition"] = spec.condition
        if spec.assignments is not None:
            kwargs["values" if "Insert" in spec.method else "set"] = spec.assignments
        builder = getattr(builder, spec.method)(**kwargs)
    return builder.execute().first()


def _delta_rs_merge(path: Path, source: list[tuple], specs: list[Spec]) -> None:
    import pyarrow as pa

    data = pa.table({c: [row[i] for row in source] for i, c in enumerate(COLUMNS)})
    merger = deltalake.DeltaTable(str(path)).merge(data, "t.id = s.id", source_alias="s", target_alias="t")
    names = {
        "whenMatchedUpdate": "when_matched_update",
        "whenMatchedUpdateAll": "when_matched_update_all",
        "whenMatchedDelete": "when_matched_delete",
        "whenNotMatchedInsert": "when_not_matched_insert",
        "whenNotMatchedInsertAll": "when_not_matched_insert_all",
        "whenNotMatchedBySourceUpdate": "when_not_matched_by_source_update",
        "whenNotMatchedBySourceDelete": "when_not_matched_by_source_delete",
    }
    for spec in specs:
        kwargs: dict[str, Any] = {}
        if spec.condition is not None:
            kwargs["predicate"] = spec.condition
        if spec.assignments is not None:
            kwargs["updates"] = {k.removeprefix("t."): v for k, v in spec.assignments.items()}
        merger = getattr(merger, names[spec.method])(**kwargs)
    merger.execute()


def _new_table(spark, path: Path, properties: dict[str, str], partitioned: bool) -> DeltaTable:
    frame = spark.createDataFrame(TARGET, SCHEMA).repartition(3, "part")
    write(frame, str(path), partitionBy=["part"] if partitioned else None, properties=properties)
    return DeltaTable.forPath(spark, str(path))


@pytest.mark.one_suite("4.x")  # the 3.5 suite merges both ways in test_each_clause_kind_on_both_paths
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_merge_matches_the_oracle_delta_rs_and_the_writer_rules(spark, tmp_path, scenario, mode):
    source_rows, specs = SCENARIOS[scenario]
    partitioned = (list(SCENARIOS).index(scenario) + list(MODES).index(mode)) % 2 == 0
    path = tmp_path / "t"
    table = _new_table(spark, path, MODES[mode], partitioned)
    before = _rows(table)
    expected, expected_changes = oracle(before, source_rows, specs)
    if mode == "copy-on-write":  # delta-rs merges a copy of the same version
        theirs = tmp_path / "delta-rs"
        shutil.copytree(path, theirs)
        _delta_rs_merge(theirs, source_rows, specs)
        assert _delta_rs_rows(theirs) == expected
    metrics = _run(table, spark.createDataFrame(source_rows, SCHEMA), specs)
    assert _rows(table) == expected
    assert _delta_rs_rows(path) == expected
    check_table(path)
    updated = sum(1 for c in expected_changes if c[-1] == "update_postimage")
    deleted = sum(1 for c in expected_changes if c[-1] == "delete")
    inserted = sum(1 for c in expected_changes if c[-1] == "insert")
    assert tuple(metrics) == (updated + deleted + inserted, updated, deleted, inserted)
    commit = [json.loads(x) for x in (path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
    assert info["operation"] == "MERGE"
    assert info["operationMetrics"]["numTargetRowsInserted"] == str(inserted)
    assert info["operationMetrics"]["numSourceRows"] == str(len(source_rows))
    if mode == "deletion-vectors":
        assert info["operationMetrics"]["numTargetRowsCopied"] == "0"  # merge-on-read copies nothing
        removed = {a["remove"]["path"] for a in commit if "remove" in a}
        for add in (a["add"] for a in commit if "add" in a):  # a file keeps its path, gains a DV
            assert (add["path"] in removed) == (add.get("deletionVector") is not None), add["path"]
    if scenario == "insert-only":
        assert not any("remove" in a for a in commit)
    if "delta.enableChangeDataFeed" in MODES[mode]:
        changes = table.changes(startingVersion=1).select(*COLUMNS, "_change_type").collect()
        assert sorted((tuple(r) for r in changes), key=repr) == expected_changes
    if mode == "copy-on-write":  # delta-rs's change feed reads copy-on-write change data
        import pyarrow as pa

        feed = pa.table(deltalake.DeltaTable(str(path)).load_cdf(starting_version=1).read_all()).to_pylist()
        theirs = sorted((tuple(r[c] for c in (*COLUMNS, "_change_type")) for r in feed), key=repr)
        assert theirs == expected_changes


def test_each_clause_kind_on_both_paths(spark, tmp_path):
    """The first two scenarios, copy-on-write and with deletion vectors (both Spark lines)."""
    for dvs in (False, True):
        for name in ("update-delete-insert", "by-source"):
            source_rows, specs = SCENARIOS[name]
            path = tmp_path / f"{name}-{dvs}"
            table = _new_table(spark, path, {"delta.enableDeletionVectors": "true"} if dvs else {}, dvs)
            expected, _ = oracle(_rows(table), source_rows, specs)
            _run(table, spark.createDataFrame(source_rows, SCHEMA), specs)
            assert _rows(table) == expected, (name, dvs)
            check_table(path)


def test_a_target_row_matched_twice_by_an_update_is_a_named_error(spark, tmp_path):
    path = tmp_path / "t"
    table = _new_table(spark, path, {}, partitioned=False)
    source_rows = SOURCE + [(8, 1.0, "s8b", 2)]
    specs = [
        Spec("whenMatchedUpdate", assignments={"name": "s.name"}, values=lambda t, s: {"name": s["name"]})
    ]
    with pytest.raises(CardinalityError):
        oracle(_rows(table), source_rows, specs)
    with pytest.raises(MergeCardinalityError, match=r"2 source rows matched the target row \(id = 8\)"):
        _run(table, spark.createDataFrame(source_rows, SCHEMA), specs)
    assert table.snapshot().version == 0  # nothing committed
    # Only rows a clause changes count: the second match of 8 is left alone by its condition.
    guarded = [
        Spec(
            "whenMatchedUpdate",
            "s.name != 's8b'",
            {"name": "s.name"},
            holds=lambda t, s: s["name"] != "s8b",
            values=lambda t, s: {"name": s["name"]},
        )
    ]
    expected, _ = oracle(_rows(table), source_rows, guarded)
    _run(table, spark.createDataFrame(source_rows, SCHEMA), guarded)
    assert _rows(table) == expected  # row 8 once, updated by s8 (copy-on-write keeps one copy)


def test_only_files_the_source_keys_can_match_are_read(spark, tmp_path, caplog):
    path = tmp_path / "t"
    # ten files with disjoint id ranges (statistics prune all but one)
    frame = spark.range(0, 1000).selectExpr("id", "cast(id AS double) AS amount", "'x' AS name", "0 AS part")
    write(frame.repartitionByRange(10, "id"), str(path))
    table = DeltaTable.forPath(spark, str(path))
    assert table.snapshot().files().count() == 10
    source = spark.createDataFrame([(250, 1.0, "y", 0), (260, 2.0, "y", 0)], SCHEMA)
    with caplog.at_level(logging.INFO, logger="deltaspark.read.scan"):
        (table.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute())
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Reading ")]
    assert reads and all(m.startswith("Reading 1 data files") for m in reads), reads
    assert table.toDF().where("name = 'y'").count() == 2
    # Insert-only, keys outside every file's range: no target file is read, one file added.
    caplog.clear()
    new = spark.createDataFrame([(5000, 1.0, "z", 0)], SCHEMA)
    with caplog.at_level(logging.INFO, logger="deltaspark.read.scan"):
        table.alias("t").merge(
            new.alias("s"), "t.id = s.id AND t.part = 0"
        ).whenNotMatchedInsertAll().execute()
    assert not [r for r in caplog.records if r.getMessage().startswith("Reading ")]
    commit = (path / "_delta_log" / f"{2:020d}.json").read_text()
    assert '"remove"' not in commit and commit.count('"add"') == 1
    assert table.toDF().count() == 1001


@pytest.mark.parametrize(
    "key_type, keys, source_keys, prunes",
    [
        ("string", [f"k{i:02d}" for i in range(39)] + ["é"], ["k33", "é"], True),
        ("date", [f"2026-01-{i % 28 + 1:02d}" for i in range(40)], ["2026-01-02", "2026-01-04"], True),
        (
            "timestamp_ntz",
            [f"2026-01-01 {i % 24:02d}:00:00" for i in range(40)],
            ["2026-01-01 05:00:00"],
            True,
        ),
        # collected, a zoned timestamp is a wall-clock time of the client's zone: no range from it
        ("timestamp", [f"2026-01-01 {i % 24:02d}:00:00" for i in range(40)], ["2026-01-01 05:00:00"], False),
    ],
)
def test_a_sources_key_bounds_prune_the_files_no_key_can_match(
    spark, tmp_path, caplog, key_type, keys, source_keys, prunes
):
    """The source's smallest and largest key prune the target's files (on Spark 4 a small source's
    bounds come from its rows on the driver, where Python orders the type as Spark does): only
    the files between them are read, and every matching row is updated."""
    path = str(tmp_path / "t")
    target = spark.createDataFrame([(k, 0) for k in keys], "k string, v int").selectExpr(
        f"CAST(k AS {key_type}) AS k", "v"
    )
    write(target.repartitionByRange(4, "k"), path)
    source = spark.createDataFrame([(k,) for k in source_keys], "k string").selectExpr(
        f"CAST(k AS {key_type}) AS k"
    )
    expected = target.join(source, "k").count()
    table = DeltaTable.forPath(spark, path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="deltaspark.read.scan"):
        merge = table.alias("t").merge(source.alias("s"), "t.k = s.k").whenMatchedUpdate(set={"v": "1"})
        updated = merge.execute().first()["num_updated_rows"]
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Reading ")]
    assert updated == expected > 0
    assert table.toDF().where("v = 1").count() == expected
    assert reads and reads[0].startswith("Reading 4 data files") is not prunes, reads


def test_row_tracking_schema_evolution_and_generated_columns(spark, tmp_path):
    path = tmp_path / "t"
    spark.sql("SELECT 1").collect()
    frame = spark.createDataFrame(
        [(i, f"n{i}", (i, f"c{i}")) for i in range(6)], "id long, name string, info struct<a:long,b:string>"
    ).coalesce(1)
    write(frame, str(path), properties={"delta.enableRowTracking": "true"})
    table = DeltaTable.forPath(spark, str(path))

    def tracked():
        rows = table.toDF(rowTracking=True).select(
            "id", "name", "_metadata.row_id", "_metadata.row_commit_version"
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows.collect()}

    before = tracked()
    source = spark.createDataFrame(
        [(1, "one", (10, "x", 1.5), "new1"), (9, "nine", (90, "y", 2.5), "new9")],
        "id long, name string, info struct<a:long,b:string,c:double>, extra string",
    )
    with pytest.raises(InvalidArgumentError, match="mergeSchema|withSchemaEvolution|does not have"):
        table.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute()
    result = (
        table.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
        .first()
    )
    assert tuple(result) == (2, 1, 0, 1)
    version = table.snapshot().version
    after = tracked()
    assert after[1][0] == "one" and after[1][1] == before[1][1] and after[1][2] == version  # same id
    for key in (0, 2, 3, 4, 5):
        assert after[key] == before[key]
    assert after[9][2] == version and after[9][1] not in {v[1] for v in before.values()}  # a fresh id
    rows = {r["id"]: r for r in table.toDF().collect()}
    assert table.snapshot().schema.simpleString() == (
        "struct<id:bigint,name:string,info:struct<a:bigint,b:string,c:double>,extra:string>"
    )
    assert rows[1]["info"]["c"] == 1.5 and rows[1]["extra"] == "new1"
    assert rows[0]["info"]["c"] is None and rows[0]["extra"] is None
    check_table(path)
    assert _sorted_ids(deltalake.DeltaTable(str(path))) == sorted(rows)

    # Generated columns are recomputed; CHECK constraints refuse a bad row and nothing commits.
    gen = tmp_path / "g"
    (
        DeltaTable.create(spark)
        .location(str(gen))
        .addColumn("id", "long")
        .addColumn("v", "long")
        .addColumn("doubled", "long", generatedAlwaysAs="v * 2")
        .property("delta.constraints.positive", "v >= 0")
        .execute()
    )
    write(spark.createDataFrame([(1, 1), (2, 2)], "id long, v long"), str(gen))
    gtable = DeltaTable.forPath(spark, str(gen))
    src = spark.createDataFrame([(2, 20), (3, 30)], "id long, v long")
    gtable.alias("t").merge(src.alias("s"), "t.id = s.id").whenMatchedUpdate(
        set={"v": "s.v"}
    ).whenNotMatchedInsert(values={"id": "s.id", "v": "s.v"}).execute()
    assert sorted(tuple(r) for r in gtable.toDF().collect()) == [(1, 1, 2), (2, 20, 40), (3, 30, 60)]
    bad = spark.createDataFrame([(1, -5)], "id long, v long")
    with pytest.raises(InvariantViolationError, match="positive"):
        gtable.alias("t").merge(bad.alias("s"), "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}).execute()
    assert gtable.snapshot().version == 2


def _sorted_ids(table) -> list[int]:
    import pyarrow as pa

    return sorted(r["id"] for r in pa.table(table.to_pyarrow_dataset().to_table()).to_pylist())


def test_refusals_name_what_is_wrong(spark, tmp_path):
    path = tmp_path / "t"
    table = _new_table(spark, path, {"delta.appendOnly": "true"}, partitioned=False)
    source = spark.createDataFrame(SOURCE, SCHEMA)
    merge = table.alias("t").merge(source.alias("s"), "t.id = s.id")
    with pytest.raises(InvalidArgumentError, match="at least one clause"):
        merge.execute()
    with pytest.raises(InvalidArgumentError, match="must be the last of its kind"):
        merge.whenMatchedDelete().whenMatchedUpdate(set={"name": "s.name"}).execute()
    with pytest.raises(InvalidArgumentError, match="needs `set`"):
        merge.whenMatchedUpdate()
    with pytest.raises(InvalidArgumentError, match="no column `nope`"):
        merge.whenNotMatchedInsert(values={"nope": "s.id"}).execute()
    with pytest.raises(InvalidArgumentError, match="merge condition"):
        table.alias("t").merge(source.alias("s"), "t.id = s.missing").whenNotMatchedInsertAll().execute()
    with pytest.raises(InvalidArgumentError, match="whenNotMatchedInsertAll's condition"):
        merge.whenNotMatchedInsertAll("s.amount").execute()
    with pytest.raises(InvalidArgumentError, match="out of the range of int"):
        table.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsert(
            values={"id": "s.id", "part": "s.id * 10000000000"}
        ).execute()
    with pytest.raises(AppendOnlyTableError):
        merge.whenMatchedDelete().execute()
    assert table.snapshot().version == 0
    # an insert-only merge appends, which an append-only table allows
    merge.whenNotMatchedInsertAll().execute()
    assert table.toDF().count() == len(TARGET) + 4  # 30, 31 (twice) and the NULL key


def test_isolation_against_commits_made_after_the_merge_read_the_table(spark, tmp_path):
    """A merge that read version v commits after others landed: the conflict rules decide, with
    the files it read and its predicate (the source's key range and the condition's target-only
    part). Deterministic stand-in for racing writers: the merge runs on the stale snapshot."""
    from deltaspark.errors import ConcurrentAppendError, ConcurrentModificationError
    from deltaspark.operations.merge.clauses import INSERT, MATCHED, NOT_MATCHED, UPDATE, new_clause
    from deltaspark.operations.merge.execute import merge as merge_rows
    from deltaspark.storage import storage_for

    path = tmp_path / "t"
    rows = [(i, f"n{i}", "x") for i in range(4)] + [(10 + i, f"n{10 + i}", "y") for i in range(4)]
    write(spark.createDataFrame(rows, "id long, name string, p string"), str(path), partitionBy=["p"])
    table = DeltaTable.forPath(spark, str(path))
    storage = storage_for(spark)

    def stale_merge(snapshot, partition: str, source_rows: list[tuple]):
        source = spark.createDataFrame(source_rows, "id long, name string, p string").alias("s")
        clauses = [
            new_clause(MATCHED, UPDATE, None, {"name": "s.name"}),
            new_clause(NOT_MATCHED, INSERT, None, None, all_columns=True),
        ]
        condition = f"t.id = s.id AND t.p = '{partition}'"
        return merge_rows(spark, storage, str(path), snapshot, "t", source, condition, clauses).commit

    def names() -> dict[int, str]:
        return {r["id"]: r["name"] for r in table.toDF().collect()}

    # A blind append to the merge's partition inside its key range: under WriteSerializable (the
    # default) it is ordered after the merge, as in delta-spark, so both commit (the merge inserted
    # 16, the append added it again).
    read = table.snapshot()
    write(spark.createDataFrame([(16, "racer", "y")], "id long, name string, p string"), str(path))
    assert stale_merge(read, "y", [(16, "merged", "y")]).version == 2
    assert sorted(r["name"] for r in table.toDF().where("id = 16").collect()) == ["merged", "racer"]
    # Under Serializable the merge must have seen every append it could match: an append to
    # another partition inside the key range commits beside it; one to its partition conflicts.
    table.setProperties({"delta.isolationLevel": "Serializable"})
    read = table.snapshot()
    write(spark.createDataFrame([(15, "appended", "x")], "id long, name string, p string"), str(path))
    assert stale_merge(read, "y", [(11, "merged", "y"), (20, "new", "y")]).version == 5
    assert names()[11] == "merged" and names()[20] == "new" and names()[15] == "appended"
    read = table.snapshot()
    write(spark.createDataFrame([(17, "racer", "y")], "id long, name string, p string"), str(path))
    with pytest.raises(ConcurrentAppendError):
        stale_merge(read, "y", [(17, "merged", "y")])
    assert table.snapshot().version == 6
    # A delete of the rows the merge updates: a conflict, and the delete stands.
    read = table.snapshot()
    table.delete("id = 10")
    with pytest.raises(ConcurrentModificationError):
        stale_merge(read, "y", [(10, "merged", "y")])
    assert table.snapshot().version == 7 and 10 not in names()
    # Two merges on disjoint partitions both commit.
    read = table.snapshot()
    assert stale_merge(table.snapshot(), "x", [(1, "first", "x")]).version == 8
    assert stale_merge(read, "y", [(11, "second", "y")]).version == 9
    assert names()[1] == "first" and names()[11] == "second"
    check_table(path)


def test_inserted_rows_get_identity_values_and_the_high_water_mark_moves(spark, tmp_path):
    from deltaspark import IdentityGenerator

    path = tmp_path / "t"
    (
        DeltaTable.create(spark)
        .location(str(path))
        .addColumn("id", "BIGINT", generatedAlwaysAs=IdentityGenerator(start=1, step=1))
        .addColumn("key", "STRING")
        .addColumn("v", "INT")
        .property("delta.enableChangeDataFeed", "true")
        .execute()
    )
    write(spark.createDataFrame([("a", 1), ("b", 2)], "key string, v int"), str(path))
    table = DeltaTable.forPath(spark, str(path))
    source = spark.createDataFrame([("b", 20), ("c", 30), ("d", 40)], "key string, v int")
    merge = table.alias("t").merge(source.alias("s"), "t.key = s.key")
    with pytest.raises(InvalidArgumentError, match="GENERATED ALWAYS"):
        merge.whenNotMatchedInsert(values={"id": "1", "key": "s.key"}).execute()
    merge.whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll().execute()
    rows = {r["key"]: (r["id"], r["v"]) for r in table.toDF().collect()}
    assert rows["b"] == (rows["b"][0], 20) and rows["a"][1] == 1
    ids = [r[0] for r in rows.values()]
    assert len(set(ids)) == 4 and min(rows["c"][0], rows["d"][0]) > max(rows["a"][0], rows["b"][0])
    field = table.snapshot().schema["id"]
    assert field.metadata["delta.identity.highWaterMark"] == max(ids)
    # the change data holds the values the data files hold
    inserted = table.changes(startingVersion=2).where("_change_type = 'insert'").collect()
    assert sorted((r["key"], r["id"]) for r in inserted) == [("c", rows["c"][0]), ("d", rows["d"][0])]
    # a later plain append continues above the mark
    write(spark.createDataFrame([("e", 5)], "key string, v int"), str(path))
    assert table.toDF().where("key = 'e'").first()["id"] > max(ids)


def test_schema_evolution_widens_a_column_when_the_table_allows_it(spark, tmp_path):
    path = tmp_path / "t"
    properties = {"delta.enableTypeWidening": "true"}
    write(spark.createDataFrame([(1, 10)], "id long, n int"), str(path), properties=properties)
    write(spark.createDataFrame([(2, 20)], "id long, n int"), str(path))  # a file the merge leaves
    table = DeltaTable.forPath(spark, str(path))
    source = spark.createDataFrame([(2, 2**40), (3, 7)], "id long, n long")

    def merge():
        builder = table.alias("t").merge(source.alias("s"), "t.id = s.id")
        return builder.whenMatchedUpdateAll().whenNotMatchedInsertAll()

    with pytest.raises(InvalidArgumentError, match="out of the range of int"):
        merge().execute()  # without evolution the value must fit the column: refused, never wrapped
    assert table.snapshot().version == 1
    merge().withSchemaEvolution().execute()
    assert table.snapshot().schema["n"].dataType.simpleString() == "bigint"
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(1, 10), (2, 2**40), (3, 7)]
    commit = [json.loads(x) for x in (path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()]
    schema = json.loads(next(a["metaData"] for a in commit if "metaData" in a)["schemaString"])
    field = next(f for f in schema["fields"] if f["name"] == "n")
    assert field["type"] == "long"
    assert field["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    check_table(path)


def test_a_kept_source_within_the_bound_is_broadcast_to_the_join(spark, tmp_path, monkeypatch):
    """Spark broadcasts by its own threshold (10 MB of its estimates); a merge's kept source up to
    `spark.deltaspark.merge.broadcastSourceBytes` (its size as kept, measured once filled) is
    broadcast too. Spark's own broadcast is turned off here, so that only the merge's rule decides."""
    from deltaspark.operations.merge import execute

    path = str(tmp_path / "t")
    write(
        spark.range(0, 30_000, 1, 3).selectExpr(
            "id", "cast(id AS double) AS amount", "'x' AS name", "0 AS part"
        ),
        path,
    )
    plans = []
    joined = execute._Plan._joined

    def recorded(self, *args, **kwargs):
        frame = joined(self, *args, **kwargs)
        plans.append(str(frame._jdf.queryExecution().executedPlan().toString()))
        return frame

    monkeypatch.setattr(execute._Plan, "_joined", recorded)
    source = spark.range(0, 30_000, 2).selectExpr(
        "id", "cast(-id AS double) AS amount", "'y' AS name", "0 AS part"
    )
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        for bound, broadcast in (("64MB", True), ("-1", False), ("1kb", False)):
            plans.clear()
            spark.conf.set(execute.BROADCAST_SOURCE_CONF, bound)
            table = DeltaTable.forPath(spark, path)
            table.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute()
            # the source's join: broadcast, or (Spark's threshold off) a sort-merge join of both sides
            assert plans and all(("SortMergeJoin" in p) != broadcast for p in plans), (
                bound,
                plans[0][:2000],
            )
            assert table.toDF().where("name = 'y'").count() == 15_000
            assert table.toDF().where("amount < 0").count() == 14_999  # id 0's new amount is 0
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
        spark.conf.unset(execute.BROADCAST_SOURCE_CONF)


def _operation_metrics(path: str, version: int) -> dict[str, int]:
    """The `operationMetrics` of the commit at `version`, as numbers."""
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    info = next(json.loads(x)["commitInfo"] for x in lines if "commitInfo" in x)
    return {k: int(v) for k, v in info["operationMetrics"].items()}


def _classic_spark_4(spark: Any) -> bool:
    """Whether the merge holds Arrow data on the driver (Spark 4, not over Connect)."""
    from deltaspark.spark_compat import is_connect, spark_version

    return spark_version(spark) >= (4, 0) and not is_connect(spark)


@pytest.mark.parametrize("route", ["held", "spark"])
def test_a_non_deterministic_source_is_read_once(spark, tmp_path, monkeypatch, route):
    """Every pass of a merge reads the same source rows, even from a source that gives other rows
    each time it is computed (a Python UDF drawing random numbers: Spark's own `rand()` is seeded
    and repeats itself). Were the source computed again by a pass, the keys the update finds and
    those the insert finds would be two different draws: rows lost or inserted twice."""
    import random

    from pyspark.sql import functions as F

    from deltaspark.operations.merge import execute

    if route == "spark":
        monkeypatch.setattr(execute, "DRIVER_ROWS", 0)
    path = str(tmp_path / "t")
    write(spark.range(0, 1000, 1, 2).selectExpr("id", "'old' AS name"), path)
    draw = F.udf(lambda _: random.random() < 0.5, "boolean").asNondeterministic()
    source = spark.range(0, 2000, 1, 2).where(draw(F.col("id"))).selectExpr("id", "'new' AS name")
    table = DeltaTable.forPath(spark, path)
    merge = table.alias("t").merge(source.alias("s"), "t.id = s.id")
    merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    metrics = _operation_metrics(path, 1)
    drawn = metrics["numSourceRows"]
    assert 700 < drawn < 1300  # about half of 2,000
    assert metrics["numTargetRowsUpdated"] + metrics["numTargetRowsInserted"] == drawn
    rows = table.toDF()
    assert rows.count() == 1000 + metrics["numTargetRowsInserted"]
    assert rows.select("id").distinct().count() == rows.count()
    assert rows.where("name = 'new'").count() == drawn
    assert rows.where("name = 'old' AND id >= 1000").count() == 0
    check_table(Path(path))


def test_a_merge_whose_kept_source_loses_rows_starts_over(spark, tmp_path, monkeypatch, caplog):
    """The source is kept once by the executors that computed it (a local checkpoint); when some
    of it is lost (an executor gone, its blocks evicted) the next pass fails, and the merge starts
    over with a new copy, kept on two executors - never reading the source again within a pass,
    never committing half. After `SOURCE_ATTEMPTS` losses, `MergeSourceLostError`, nothing
    committed. The loss is made here by releasing the copy's blocks once it is filled."""
    from deltaspark.operations.merge import execute

    monkeypatch.setattr(execute, "DRIVER_ROWS", 0)  # kept by Spark, not held on the driver (4.x)
    path = str(tmp_path / "t")
    write(spark.range(0, 100, 1, 2).selectExpr("id", "'old' AS name"), path)
    source = spark.range(50, 150, 1, 2).selectExpr("id", "'new' AS name")
    losses: list[bool] = []
    broadcastable = execute._Plan._broadcastable

    def lose_once(self):  # the copy is filled by the key bounds, just before this
        if self.kept is not None and self.kept._rdd is not None and len(losses) < lose:
            losses.append(self.replicated)
            self.kept._rdd.unpersist(True)
        return broadcastable(self)

    monkeypatch.setattr(execute._Plan, "_broadcastable", lose_once)
    table = DeltaTable.forPath(spark, path)

    def upsert():
        merge = table.alias("t").merge(source.alias("s"), "t.id = s.id")
        merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    lose = 1
    with caplog.at_level(logging.WARNING, logger="deltaspark.operations.merge.execute"):
        upsert()
    metrics = _operation_metrics(path, 1)
    assert losses == [False]  # the first copy was lost; the second, replicated, was not
    assert any("lost its kept source; attempt 2" in r.getMessage() for r in caplog.records)
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (50, 50)
    assert table.history().count() == 2  # the write and one merge
    rows = table.toDF()
    assert rows.count() == 150 and rows.where("name = 'new'").count() == 100
    check_table(Path(path))
    if CLUSTER_MASTER is not None:
        # The cluster run proves the restart where the blocks live in executors; giving up after
        # `SOURCE_ATTEMPTS` is the driver's count, checked in local mode (on a cluster each of the
        # four failing passes also waits out Spark's retries of its failing tasks).
        return

    losses.clear()
    lose = execute.SOURCE_ATTEMPTS
    with pytest.raises(MergeSourceLostError, match="lost in each of 4 attempts") as raised:
        upsert()
    assert raised.value.attempts == execute.SOURCE_ATTEMPTS
    assert losses == [False, True, True, True]
    assert table.history().count() == 2  # nothing committed
    assert table.toDF().count() == 150


@pytest.mark.parametrize("route", ["held", "spark"])
@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_a_merge_finds_its_files_by_their_logged_paths_however_spelled(
    spark, tmp_path, monkeypatch, dvs, route
):
    """The merge reads the target naming each row's file as the scan does, and finds the logged
    path of the files it changes afterwards (`tie_to_files`): files logged with an escape, as an
    absolute `file:` URI or plainly are each updated, given a DV or removed under the path the log
    gives them, and no row is lost or doubled. On both routes of the changed rows: held on the
    driver, and Spark's per-row aggregate (`DRIVER_ROWS` 0), whose totals bring the touched files'
    locations when the candidate files are held (no distinct of their own). With DVs, each file's
    changed rows listed on the driver (the held pairs; on Spark 4 the aggregate's too) and their
    DVs encoded there, keyed by the paths the driver computes."""
    import pyarrow as pa

    from deltaspark.operations import deletion_vector_writer
    from deltaspark.operations.merge import execute
    from deltaspark.spark_compat import is_local
    from tests.log_builder import LogBuilder, metadata, protocol, write_parquet

    located: list[Any] = []
    encoded: list[bool] = []  # whether the driver encoded the DVs of lists it held
    on_driver = deletion_vector_writer._lists_on_driver

    def encoding(*args: Any) -> Any:
        lists = on_driver(*args)
        encoded.append(lists is not None)
        return lists

    monkeypatch.setattr(deletion_vector_writer, "_lists_on_driver", encoding)
    if route == "spark":
        monkeypatch.setattr(execute, "DRIVER_ROWS", 0)
        tie = execute.tie_to_files

        def spied(rows: Any, *args: Any) -> Any:
            located.append(is_local(rows))
            return tie(rows, *args)

        monkeypatch.setattr(execute, "tie_to_files", spied)

    log = LogBuilder(tmp_path / "t")
    names = {"plain.parquet": [1, 2, 3], "a b.parquet": [4, 5, 6], "abs.parquet": [7, 8, 9]}
    entries = {
        n: write_parquet(log.root, n, pa.table({"id": pa.array(v, pa.int64()), "part": ["x"] * 3}))
        for n, v in names.items()
    }
    entries["a b.parquet"]["add"]["path"] = "a%20b.parquet"
    entries["abs.parquet"]["add"]["path"] = "file://" + str(log.root / "abs.parquet")
    if dvs:
        features = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
        log.commit(
            0, features, metadata(configuration={"delta.enableDeletionVectors": "true"}), *entries.values()
        )
    else:
        log.commit(0, protocol(), metadata(), *entries.values())
    source = spark.createDataFrame([(2, "u"), (5, "u"), (8, "u"), (10, "new")], "id long, part string")
    table = DeltaTable.forPath(spark, log.path)
    metrics = (
        table.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .first()
    )
    assert (metrics["num_updated_rows"], metrics["num_inserted_rows"]) == (3, 1)
    rows = sorted((r["id"], r["part"]) for r in DeltaTable.forPath(spark, log.path).toDF().collect())
    assert rows == [(i, "u" if i in (2, 5, 8) else "new" if i == 10 else "x") for i in range(1, 11)]
    commit = [
        json.loads(line) for line in (log.root / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    ]
    removed = sorted(a["remove"]["path"] for a in commit if "remove" in a)
    assert removed == sorted(e["add"]["path"] for e in entries.values())
    given_dvs = sorted(a["add"]["path"] for a in commit if "add" in a and a["add"].get("deletionVector"))
    assert given_dvs == (removed if dvs else [])
    assert located == ([True] if route == "spark" else [])  # the files came with the totals
    # lists held on the driver: the pairs' (held) or, on Spark 4, the aggregate's (Arrow)
    assert encoded == ([route == "held" or _classic_spark_4(spark)] if dvs else [])


@pytest.mark.parametrize("route", ["held", "spark"])
def test_keys_a_cast_compares_bound_no_files_and_match_as_cast(spark, tmp_path, monkeypatch, route):
    """A string source key against a number column is cast to compare: "9" and "10" order the other
    way as strings, so their range must not prune the files holding 9 and 10; "8" and "08" are two
    source rows matching one target row, ambiguous for an update. On both routes: the source's
    rows held on the driver (Spark 4) and Spark's aggregate (`DRIVER_ROWS` 0)."""
    from deltaspark.operations.merge import execute

    if route == "spark":
        monkeypatch.setattr(execute, "DRIVER_ROWS", 0)
    path = str(tmp_path / "t")
    frame = spark.range(0, 40).selectExpr("id", "cast(id AS double) AS amount", "'x' AS name", "0 AS part")
    write(frame.repartitionByRange(4, "id"), path)
    table = DeltaTable.forPath(spark, path)
    assert table.snapshot().files().count() == 4  # 0-9, 10-19, 20-29, 30-39
    as_text = spark.createDataFrame([("9", "y"), ("10", "y")], "id string, name string")
    table.alias("t").merge(as_text.alias("s"), "t.id = s.id").whenMatchedUpdate(
        set={"name": "s.name"}
    ).execute()
    assert sorted(r["id"] for r in table.toDF().where("name = 'y'").collect()) == [9, 10]

    twice = spark.createDataFrame([("8", "a"), ("08", "b")], "id string, name string")
    with pytest.raises(MergeCardinalityError, match=r"2 source rows matched the target row \(id = 8\)"):
        table.alias("t").merge(twice.alias("s"), "t.id = s.id").whenMatchedUpdate(
            set={"name": "s.name"}
        ).execute()
    assert table.snapshot().version == 1  # the failed merge committed nothing


@pytest.mark.parametrize("route", ["held", "spark"])
def test_files_whose_every_live_row_changes_are_rewritten_without_a_dv(spark, tmp_path, monkeypatch, route):
    """With deletion vectors on, a file whose every live row the merge changes would get a DV of
    all its rows and be removed: no DV file is written for it (it would be referenced by nothing),
    the file is removed and its rows written anew. Rows an earlier DV deleted do not count as live;
    a file with one row left unchanged still gets a DV. On both routes of the changed rows."""
    from deltaspark.operations.merge import execute

    if route == "spark":
        monkeypatch.setattr(execute, "DRIVER_ROWS", 0)
    marked_files: list[int] = []
    mark = execute.mark_rows_deleted

    def spied(*args: Any, **kwargs: Any) -> Any:
        marked_files.append(args[4].count("files"))  # how many files get their rows marked
        return mark(*args, **kwargs)

    monkeypatch.setattr(execute, "mark_rows_deleted", spied)
    path = tmp_path / "t"
    rows = spark.range(0, 30, 1, 3).selectExpr(
        "id", "cast(id AS double) AS amount", "'x' AS name", "0 AS part"
    )
    write(rows, str(path), properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, str(path))
    table.delete("id IN (0, 10)")  # DVs on the files of ids 0-9 and 10-19: 9 live rows left in each
    assert len(list(path.glob("deletion_vector_*.bin"))) == 1

    def merged(ids: range) -> list[dict[str, Any]]:
        source = spark.range(ids.start, ids.stop).selectExpr(
            "id", "-1.0 AS amount", "'u' AS name", "0 AS part"
        )
        table.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute()
        version = table.snapshot().version
        lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        return [json.loads(line) for line in lines]

    commit = merged(range(1, 10))  # every live row of the first file
    removed = [a["remove"]["path"] for a in commit if "remove" in a]
    added = [a["add"] for a in commit if "add" in a]
    assert len(removed) == 1 and len(added) == 1
    assert added[0]["path"] not in removed and added[0].get("deletionVector") is None
    assert json.loads(added[0]["stats"])["numRecords"] == 9
    assert len(list(path.glob("deletion_vector_*.bin"))) == 1  # no DV file written for it
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)["operationMetrics"]
    assert (info["numTargetRowsUpdated"], info["numTargetRowsCopied"]) == ("9", "0")

    commit = merged(range(10, 19))  # all but one live row of the second file: a DV holding its old one
    removed = [a["remove"]["path"] for a in commit if "remove" in a]
    added = [a["add"] for a in commit if "add" in a]
    assert [a["path"] for a in added if a.get("deletionVector")] == removed
    assert len(list(path.glob("deletion_vector_*.bin"))) == 2
    assert marked_files == [1]  # the second file's rows only
    result = sorted((r["id"], r["name"]) for r in table.toDF().collect())
    assert result == [(i, "u" if 1 <= i <= 18 else "x") for i in range(1, 30) if i != 10]
    # a source key in a candidate file's range matching no live row (10 was deleted): no file's
    # rows listed, nothing marked (no DV file), the row inserted
    source = spark.createDataFrame([(10, -1.0, "n", 0)], "id long, amount double, name string, part int")
    table.alias("t").merge(
        source.alias("s"), "t.id = s.id"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    assert [r["name"] for r in table.toDF().where("id = 10").collect()] == ["n"]
    assert len(list(path.glob("deletion_vector_*.bin"))) == 2
    check_table(path)


@pytest.mark.parametrize("route", ["held", "spark"])
def test_marked_rows_join_the_rows_a_files_old_dv_deletes(spark, tmp_path, monkeypatch, route):
    """With deletion vectors, each touched file's new DV holds the rows its old DV deleted and the
    rows this merge updates or deletes. On both routes of the changed rows: held on the driver,
    and Spark's, where each file's changed rows are listed by the aggregate that totals them, and
    cached (`DRIVER_LISTS_BYTES` 0: not held on the driver, as lists of many rows are not)."""
    from deltaspark.operations.merge import execute
    from tests.reference_rows import deleted_rows

    if route == "spark":
        monkeypatch.setattr(execute, "DRIVER_ROWS", 0)
        monkeypatch.setattr(execute, "DRIVER_LISTS_BYTES", 0)
    path = tmp_path / "t"
    rows = spark.range(0, 30, 1, 3).selectExpr(
        "id", "cast(id AS double) AS amount", "'x' AS name", "0 AS part"
    )
    write(rows, str(path), properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, str(path))
    table.delete("id IN (0, 1, 12)")  # old DVs: rows 0, 1 of the first file, row 2 of the second
    source = spark.createDataFrame(
        [(2, "u"), (3, "u"), (11, "del"), (25, "u"), (40, "u")], "id long, name string"
    )
    metrics = (
        table.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.name = 'del'")
        .whenMatchedUpdate(set={"name": "s.name"})
        .whenNotMatchedInsert(values={"id": "s.id", "amount": "0.0", "name": "s.name", "part": "0"})
        .execute()
        .first()
    )
    assert tuple(metrics) == (5, 3, 1, 1)
    lines = (path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    commit = [json.loads(line) for line in lines]
    dvs = {
        json.loads(a["add"]["stats"])["minValues"]["id"]: deleted_rows(str(path), a["add"]["deletionVector"])
        for a in commit
        if "add" in a and a["add"].get("deletionVector")
    }
    assert dvs == {0: {0, 1, 2, 3}, 10: {1, 2}, 20: {5}}  # by each file's first id: its row indexes
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)["operationMetrics"]
    added, updated = info["numTargetDeletionVectorsAdded"], info["numTargetDeletionVectorsUpdated"]
    assert (added, updated, info["numTargetDeletionVectorsRemoved"]) == ("3", "2", "2")
    expected = [(i, "u" if i in (2, 3, 25, 40) else "x") for i in [*range(2, 30), 40] if i not in (11, 12)]
    assert sorted((r["id"], r["name"]) for r in table.toDF().collect()) == expected
    assert _delta_rs_rows(path) == sorted(
        ((i, 0.0 if i == 40 else float(i), n, 0) for i, n in expected), key=repr
    )
    check_table(path)

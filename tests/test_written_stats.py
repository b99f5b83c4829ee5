"""Every written file's statistics against the file's own contents.

A write's `add.stats` are computed apart from the parquet files they describe (from the footers
Spark's writer wrote, or, where footers cannot say, by reading the files back); data skipping trusts
them. So each file of a multi-file, partitioned write of many types is opened with pyarrow and its
rows counted, nulls counted and bounds taken by the protocol's rules ("Per-file Statistics"): nulls
of a struct count for its fields; floats with NaN have no bounds; strings keep their minimum cut to
32 characters, and a maximum only when it is exact (the footer route: the maximum has at most 32
characters; the read-back route: no value is longer); timestamps are in milliseconds, the minimum
rounded down and the maximum up. Any disagreement fails. Both routes are run, each made sure of.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltaspark.operations.write as write_module
from deltaspark import DeltaTable, write

PREFIX = 32
SCHEMA = (
    "id long, small int, f double, g float, s string, ts timestamp, d date, dec decimal(10,2), "
    "st struct<a: long, b: string>, arr array<int>, flag boolean, p int"
)


def _rows() -> list[tuple]:
    rows = []
    for i in range(240):
        text = (
            None
            if i % 7 == 0
            else (("é" if i % 5 == 0 else "") + f"v{i:03d}" + ("x" * 40 if i % 11 == 0 else ""))
        )
        rows.append(
            (
                i * 37 % 1000 - 500,
                None if i % 13 == 0 else i % 50,
                float("nan") if i == 17 else (None if i % 9 == 0 else i / 8),
                float("nan") if i == 23 else (None if i % 10 == 0 else i / 4),
                text,
                dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i * 3601, microseconds=(i * 977) % 1_000_000),
                None if i % 6 == 0 else dt.date(2023, 1, 1) + dt.timedelta(days=i * 3),
                Decimal(i * 7 % 1000) / 100,
                None if i % 8 == 0 else (i * 3, None if i % 4 == 1 else f"b{i % 17}"),
                [i, i + 1],
                i % 2 == 0,
                i % 3,
            )
        )
    return rows


def _utc_ms(value: dt.datetime, up: bool) -> str:
    micros = value.microsecond
    ms = micros // 1000 + (1 if up and micros % 1000 else 0)
    base = value.replace(microsecond=0, tzinfo=None) + dt.timedelta(milliseconds=ms)
    return base.strftime("%Y-%m-%dT%H:%M:%S.") + f"{base.microsecond // 1000:03d}Z"


def _bounds(values: list[Any], arrow_type: Any, footers: bool) -> tuple[Any, Any] | None:
    """(min, max) as the stats JSON holds them; None for no bounds; (min, None) for no maximum."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if pa.types.is_floating(arrow_type):
        if any(math.isnan(v) for v in present):
            return None
        return min(present), max(present)
    if pa.types.is_string(arrow_type):
        low, high = min(present)[:PREFIX], max(present)
        longest = len(high) if footers else max(len(v) for v in present)
        return (low, None) if longest > PREFIX else (low, high)
    if pa.types.is_timestamp(arrow_type):
        return _utc_ms(min(present), False), _utc_ms(max(present), True)
    if pa.types.is_date(arrow_type):
        return min(present).isoformat(), max(present).isoformat()
    if pa.types.is_decimal(arrow_type) or pa.types.is_integer(arrow_type):
        return min(present), max(present)
    return None  # booleans, arrays: null counts only


def _expected(table: pa.Table, footers: bool) -> dict[str, Any]:
    stats: dict[str, Any] = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}

    def leaf(array: Any, path: list[str]) -> None:
        if pa.types.is_struct(array.type):
            for field, child in zip(array.type, array.flatten(), strict=True):  # parent nulls included
                leaf(child, [*path, field.name])
            return
        values = array.to_pylist()
        target = {"nullCount": sum(v is None for v in values)}
        bounds = _bounds(values, array.type, footers)
        if bounds is not None:
            target["minValues"] = bounds[0]
            if bounds[1] is not None:
                target["maxValues"] = bounds[1]
        for key, value in target.items():
            node = stats[key]
            for name in path[:-1]:
                node = node.setdefault(name, {})
            node[path[-1]] = value

    for name in table.column_names:
        leaf(table.column(name).combine_chunks(), [name])
    return stats


@pytest.mark.parametrize("footers", [True, False], ids=["footers", "read-back"])
def test_every_files_statistics_match_its_contents(spark, tmp_path, monkeypatch, footers):
    path = tmp_path / "t"
    df = spark.createDataFrame(_rows(), SCHEMA).repartition(3)
    if footers:  # an array column's null count is not in footers: that write reads files back
        df = df.drop("arr")

        def no_read_back(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("the footer route read the written files back")

        monkeypatch.setattr(write_module, "describe_files", no_read_back)
    else:
        monkeypatch.setattr(write_module, "footer_adds", lambda *a, **k: None)
    write(df, str(path), partitionBy=["p"])
    commit = (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    adds = [json.loads(line)["add"] for line in commit if line.startswith('{"add"')]
    assert len(adds) >= 6  # 3 partitions x several tasks: files with different contents
    for add in adds:
        file = pq.read_table(path / add["path"])
        file = file.cast(
            pa.schema(
                [f.with_type(pa.timestamp("us")) if pa.types.is_timestamp(f.type) else f for f in file.schema]
            )
        )
        stats = json.loads(add["stats"], parse_float=Decimal)
        expected = _expected(
            file, footers
        )  # Decimal == float holds for these values (exact binary fractions)
        assert stats == expected, f"{add['path']}: {stats} != {expected}"
    assert sum(a["size"] for a in adds) == sum((path / a["path"]).stat().st_size for a in adds)
    assert all(Path(path / a["path"]).exists() for a in adds)


ODD = [
    "a b",
    "x%y",
    "é",
    "a/b",
    "a=b",
    "#?&",
    "{}|^`",
    "日本",
    "",
    None,
    "tab\t",
    "nb\u00a0sp",
    "[x]",
    '"q"',
    "back\\",
    "+:;@$,",
]


def test_footer_and_read_back_routes_agree_on_paths_and_partition_values(spark, tmp_path, monkeypatch):
    df = spark.createDataFrame([(i, v) for i, v in enumerate(ODD)], "id long, p string")
    write(df, str(tmp_path / "footers"), partitionBy=["p"])
    monkeypatch.setattr(write_module, "footer_adds", lambda *a, **k: None)
    write(df, str(tmp_path / "read-back"), partitionBy=["p"])

    def adds(name: str) -> list[tuple[str, Any, Any]]:
        lines = (tmp_path / name / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
        found = [json.loads(line)["add"] for line in lines if line.startswith('{"add"')]
        # the partition directory (a file's name holds its job's id), partition values, stats
        directory = [a["path"].split("/", 1)[1].rsplit("/", 1)[0] for a in found]
        values = [json.dumps(a["partitionValues"]) for a in found]
        return sorted(zip(directory, values, [json.loads(a["stats"]) for a in found], strict=True))

    assert adds("footers") == adds("read-back")
    assert len(adds("footers")) == len(ODD) - 1  # "" and None are both the null partition
    rows = DeltaTable.forPath(spark, str(tmp_path / "footers")).toDF().select("id", "p").collect()
    assert sorted((r.id, r.p) for r in rows) == sorted((i, v if v != "" else None) for i, v in enumerate(ODD))


def test_uri_path_quotes_as_hadoop_does(spark):
    from deltaspark.operations.footer_stats import uri_path

    jvm = spark._jvm
    for name in [*[v for v in ODD if v], "p=a%20b/part-0.parquet", "ü€😀", "\u2028x", "\x7f", "~!*'()"]:
        expected = jvm.org.apache.hadoop.fs.Path("file:/t/" + name.replace("/", "_")).toUri().toString()
        assert "file:/t/" + uri_path(name.replace("/", "_")) == expected, name


def test_footers_read_through_hadoop_equal_footers_read_locally(spark, tmp_path):
    from deltaspark.operations.footer_stats import read_footer
    from deltaspark.storage import storage_for

    pq.write_table(
        pa.table({"a": list(range(5000)), "s": [f"v{i}" * 50 for i in range(5000)]}), tmp_path / "f.parquet"
    )
    storage = storage_for(spark)
    uri, size = f"file:{tmp_path}/f.parquet", (tmp_path / "f.parquet").stat().st_size
    local, hadoop = read_footer(storage, uri, size), read_footer(storage, uri, size, local=False)
    assert local.to_dict() == hadoop.to_dict() and local.num_rows == 5000


def test_footer_rules_on_types_spark_tests_above_do_not_write(tmp_path):
    """Decimals stored as fixed-length bytes, timestamps before 1970 with sub-millisecond parts and in
    other units, a string maximum longer than the prefix: footers written by pyarrow (no NaN here:
    Arrow's writer leaves NaN out of its bounds, which parquet-java, the only writer this route
    reads, does not)."""
    from pyspark.sql import types as T

    from deltaspark.operations.file_stats import indexed_leaves
    from deltaspark.operations.footer_stats import file_stats

    base = dt.datetime(1969, 12, 31, 23, 59, 59)
    table = pa.table(
        {
            "dec": pa.array(
                [Decimal("-12345678901234567890.125"), Decimal("3.500"), None], pa.decimal128(25, 3)
            ),
            "ts": pa.array(
                [base + dt.timedelta(microseconds=1500), base + dt.timedelta(microseconds=2), None]
            ),
            "s": pa.array(["b" * 40, "a", "c" * 33]),
            "g": pa.array([1.5, -0.25, None], pa.float32()),
        }
    )
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=2)  # two row groups, combined
    types = {"dec": T.DecimalType(25, 3), "ts": T.TimestampNTZType(), "s": T.StringType(), "g": T.FloatType()}
    schema = T.StructType([T.StructField(name, t) for name, t in types.items()])
    stats = json.loads(file_stats(pq.read_metadata(tmp_path / "f.parquet"), indexed_leaves(schema, {})))
    assert stats == {
        "numRecords": 3,
        "minValues": {
            "dec": -12345678901234567890.125,
            "ts": "1969-12-31T23:59:59.000",
            "s": "a",
            "g": -0.25,
        },
        "maxValues": {"dec": 3.5, "ts": "1969-12-31T23:59:59.002", "g": 1.5},
        "nullCount": {"dec": 1, "ts": 1, "s": 0, "g": 1},
    }
    text = file_stats(pq.read_metadata(tmp_path / "f.parquet"), indexed_leaves(schema, {}))
    assert '"dec":-12345678901234567890.125' in text  # every digit (a float would round it)


def test_paths_spark_s_index_skips_are_skipped():
    from deltaspark.operations.footer_stats import _hidden

    assert _hidden("_temporary/0/part-1.parquet") and _hidden("p=1/.part-1.parquet.crc")
    assert _hidden("_SUCCESS") and _hidden("p=1/part-1.parquet._COPYING_")
    assert not _hidden("_p=1/part-1.parquet") and not _hidden("p=_x/part-1.parquet")

"""Every written file's statistics against the file's own contents.

A write's `add.stats` are computed apart from the parquet files they describe (in the write's
read-back); data skipping trusts them. So each file of a multi-file, partitioned write of many types
is opened with pyarrow and its rows counted, nulls counted and bounds taken by the protocol's rules
("Per-file Statistics"): nulls of a struct count for its fields; floats with NaN have no bounds;
strings longer than 32 characters keep their minimum cut to 32 characters and no maximum;
timestamps are in milliseconds, the minimum rounded down and the maximum up. Any disagreement fails.
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

from deltaspark import write

PREFIX = 32
SCHEMA = (
    "id long, small int, f double, s string, ts timestamp, d date, dec decimal(10,2), "
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


def _bounds(values: list[Any], arrow_type: Any) -> tuple[Any, Any] | None:
    """(min, max) as the stats JSON holds them; None for no bounds; (min, None) for no maximum."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if pa.types.is_floating(arrow_type):
        if any(math.isnan(v) for v in present):
            return None
        return min(present), max(present)
    if pa.types.is_string(arrow_type):
        low = min(present)[:PREFIX]
        return (low, None) if max(len(v) for v in present) > PREFIX else (low, max(present))
    if pa.types.is_timestamp(arrow_type):
        return _utc_ms(min(present), False), _utc_ms(max(present), True)
    if pa.types.is_date(arrow_type):
        return min(present).isoformat(), max(present).isoformat()
    if pa.types.is_decimal(arrow_type) or pa.types.is_integer(arrow_type):
        return min(present), max(present)
    return None  # booleans, arrays: null counts only


def _expected(table: pa.Table) -> dict[str, Any]:
    stats: dict[str, Any] = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}

    def leaf(array: Any, path: list[str]) -> None:
        if pa.types.is_struct(array.type):
            for field, child in zip(array.type, array.flatten(), strict=True):  # parent nulls included
                leaf(child, [*path, field.name])
            return
        values = array.to_pylist()
        target = {"nullCount": sum(v is None for v in values)}
        bounds = _bounds(values, array.type)
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


def test_every_files_statistics_match_its_contents(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame(_rows(), SCHEMA).repartition(3)
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
        expected = _expected(file)  # Decimal == float holds for these values (exact binary fractions)
        assert stats == expected, f"{add['path']}: {stats} != {expected}"
    assert sum(a["size"] for a in adds) == sum((path / a["path"]).stat().st_size for a in adds)
    assert all(Path(path / a["path"]).exists() for a in adds)

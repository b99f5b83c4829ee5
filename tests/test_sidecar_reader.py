"""V2 sidecars decoded by pyarrow in Spark tasks (`deltaspark/log/sidecar_reader.py`): the same
actions as Spark's parquet reader gives, and damage named in deltaspark's words, lazily too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaspark import DeltaTable
from deltaspark.log import sidecar_reader
from deltaspark.log.action_schemas import action_schema
from deltaspark.log.replay import read_parquet_actions
from deltaspark.log.sidecar_reader import conform, read_sidecar_actions

SIDECAR_TABLES = ["v2-checkpoints-json-with-sidecars", "v2-checkpoints-parquet-with-sidecars"]


def _rows(frame) -> list:
    return sorted(frame.collect(), key=lambda r: (str(r["add"]), str(r["remove"])))


@pytest.mark.parametrize("name", SIDECAR_TABLES)
def test_sidecars_read_as_sparks_reader_reads_them(spark, conformance, name, monkeypatch):
    plan = DeltaTable.forPath(spark, str(conformance / name)).snapshot().statePlan
    checkpoint, sidecars = plan.segment.checkpoint, plan.sidecars
    assert sidecars, "the table is meant to have sidecars"
    schema = action_schema(["add", "remove"], add_stats_parsed=plan.checkpoint_stats_type)
    spark_rows = _rows(read_parquet_actions(spark, sidecars, schema, checkpoint.version))
    first = checkpoint.files[0].path
    ours = read_sidecar_actions(spark, sidecars, schema, checkpoint.version, first)
    assert ours.schema == read_parquet_actions(spark, sidecars, schema, checkpoint.version).schema
    assert _rows(ours) == spark_rows and len(spark_rows) > 0
    # A sidecar too big for one `binaryFile` value is read by Spark's reader: the same rows.
    monkeypatch.setattr(sidecar_reader, "MAX_SIDECAR_BYTES", 0)
    sizes = [Path(p.split(":", 1)[1]).stat().st_size for p in sidecars]
    routed = read_sidecar_actions(spark, sidecars, schema, checkpoint.version, first, sizes)
    assert _rows(routed) == spark_rows


def test_a_column_that_cannot_take_its_type_is_named_lazily(spark, tmp_path):
    sidecar = tmp_path / "_sidecars" / "0a1b.parquet"
    sidecar.parent.mkdir()
    add = pa.StructArray.from_arrays(
        [pa.array(["a.parquet"]), pa.array(["12x"])], names=["path", "size"]
    )  # `size` stored as text that is not a number
    pq.write_table(pa.table({"add": add}), sidecar)
    frame = read_sidecar_actions(
        spark, [sidecar.as_uri()], action_schema(["add"]), 3, "/t/_delta_log/3.checkpoint.u.json"
    )
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's wrapper around our message
        frame.collect()
    message = str(caught.value)
    assert "deltaspark: corrupt Delta log file" in message and "0a1b.parquet" in message
    assert "column add.size is string" in message and "a sidecar of checkpoint /t/_delta_log/3." in message


def test_conform_resolves_fields_as_sparks_reader_does():
    stored = pa.StructArray.from_arrays(
        [
            pa.array(["p"]),
            pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 123456)], pa.timestamp("ns")),  # INT96 as read
            pa.array([[1, 2]], pa.list_(pa.int32())),
        ],
        names=["PATH", "ts", "ids"],
    )
    target = pa.struct(
        [
            ("path", pa.string()),  # by name, case-insensitively
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ids", pa.list_(pa.int64())),  # widened
            ("absent", pa.int64()),  # not in the file: null
        ]
    )
    out = conform(stored, target, "add").to_pylist()[0]
    assert out["path"] == "p" and out["absent"] is None and out["ids"] == [1, 2]
    assert out["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    with pytest.raises(TypeError, match=r"column add\.path is string, not a struct"):
        conform(pa.array(["x"]), pa.struct([("a", pa.int64())]), "add.path")

"""Reading V2 checkpoint sidecars in Spark tasks with pyarrow, so that a sidecar that does not
decode fails any query over it with deltaspark's message, naming the sidecar and its checkpoint.

Spark's parquet reader reads sidecars about as fast, but an error inside its scan reaches the user
as Spark's own `FAILED_READ_FILE`, which nothing outside the plan can rewrite - and a `files()`
DataFrame is collected by the user, long after deltaspark handed it over. Here Spark's
`binaryFile` source reads each sidecar's bytes (through the session's Hadoop file systems and
credentials, like every other log read) and a `mapInArrow` task decodes them with pyarrow,
conforming each action column to the action schema by name, as Spark's reader would. A sidecar
that does not decode, or whose columns cannot take the action schema's types, raises
`deltaspark: corrupt Delta log file <sidecar>: <reason> (a sidecar of checkpoint <file>)`, which
eager operations turn into `CorruptLogError` (and a snapshot load passes the checkpoint over).

Sidecars are small by design (Spark's Delta and deltaspark write at most 50,000 actions to one),
and `binaryFile` holds a file in one value; a sidecar over `MAX_SIDECAR_BYTES` is read by Spark's
parquet reader instead (its failures are still named, by Spark, with the sidecar's path).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from deltaspark.log.replay import CORRUPT_LINE, read_parquet_actions
from deltaspark.spark_compat import arrow_schema, check_python_workers, read_paths
from deltaspark.storage import STRICT_READ_OPTIONS

# Shipped by value to Spark's Python workers, which need only pyarrow (not deltaspark).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MAX_SIDECAR_BYTES = 512 * 1024 * 1024
_ROWS_PER_BATCH = 65_536


def _field_index(names: list[str], wanted: str) -> int | None:
    """The column a parquet file stores `wanted` in: by exact name, else case-insensitively (as
    Spark's reader resolves parquet columns unless the session is case-sensitive)."""
    if wanted in names:
        return names.index(wanted)
    lowered = [n.lower() for n in names]
    return lowered.index(wanted.lower()) if lowered.count(wanted.lower()) == 1 else None


def conform(array: Any, target: Any, where: str) -> Any:
    """`array` as read from the file, in the Arrow type `target` (struct fields by name, missing
    ones null); a value the target type cannot hold fails naming the column (`where`)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_struct(target):
        if not pa.types.is_struct(array.type):
            raise TypeError(f"column {where} is {array.type}, not a struct")
        names = [f.name for f in array.type]
        children = []
        for field in target:
            index = _field_index(names, field.name)
            if index is None:
                children.append(pa.nulls(len(array), field.type))
            else:
                children.append(conform(array.field(index), field.type, f"{where}.{field.name}"))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_map(target):
        if not pa.types.is_map(array.type):
            raise TypeError(f"column {where} is {array.type}, not a map")
        keys = conform(array.keys, target.key_type, f"{where}.key")
        items = conform(array.items, target.item_type, f"{where}.value")
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=array.is_null())
    if pa.types.is_list(target):
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            raise TypeError(f"column {where} is {array.type}, not an array")
        values = conform(array.values, target.value_type, f"{where}.element")
        offsets = array.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=array.is_null())
    if array.type == target:
        return array
    if pa.types.is_timestamp(array.type) and pa.types.is_timestamp(target):
        return array.cast(target, safe=False)  # INT96 (ns) to Spark's microseconds
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TypeError(f"column {where} is {array.type}, cannot be read as {target}: {exc}") from exc


def decode_sidecar(content: Any, out_schema: Any, version: int, path: str) -> Iterator[Any]:
    """The actions of one sidecar's bytes, as batches of `out_schema` (`version`, `file`, actions)."""
    parquet = pq.ParquetFile(pa.BufferReader(content))
    stored = parquet.schema_arrow.names
    actions = [f for f in out_schema if f.name not in ("version", "file")]
    columns = {f.name: _field_index(stored, f.name) for f in actions}
    read = sorted({stored[i] for i in columns.values() if i is not None})
    rows = 0
    for batch in parquet.iter_batches(batch_size=_ROWS_PER_BATCH, columns=read, use_threads=False):
        count = batch.num_rows
        rows += count
        arrays = [
            pa.array([version] * count, pa.int64()),
            pa.array([path] * count, out_schema.field("file").type),
        ]
        for field in actions:
            index = columns[field.name]
            if index is None:
                arrays.append(pa.nulls(count, field.type))
            else:
                column = batch.column(batch.schema.get_field_index(stored[index]))
                arrays.append(conform(column, field.type, field.name))
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)
    if rows != parquet.metadata.num_rows:
        raise ValueError(f"{rows} rows decoded where the footer records {parquet.metadata.num_rows}")


def decode_batches(
    out_schema: Any, version: int, checkpoint: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` body: input rows `path, content` (Spark's `binaryFile`), output the actions."""

    def decode(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            paths = batch.column(batch.schema.get_field_index("path"))
            contents = batch.column(batch.schema.get_field_index("content"))
            for i in range(batch.num_rows):
                path = paths[i].as_py()
                try:
                    yield from decode_sidecar(contents[i].as_buffer(), out_schema, version, path)
                except Exception as exc:
                    reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
                    raise RuntimeError(  # plain: executors need not import deltaspark
                        f"deltaspark: corrupt Delta log file {path}: {reason} "
                        f"(a sidecar of checkpoint {checkpoint})"
                    ) from None

    return decode


def read_sidecar_actions(
    spark: SparkSession,
    sidecars: Sequence[str],
    schema: StructType,
    version: int,
    checkpoint: str,
    sizes: Sequence[int | None] | None = None,
) -> DataFrame:
    """The actions of a V2 checkpoint's sidecars (full paths; `sizes` as their `sidecar` actions
    record them, to route big ones): columns `version`, `file`, then `schema`'s, like
    `replay.read_parquet_actions`."""
    out = StructType(
        [StructField("version", LongType(), False), StructField("file", StringType(), False), *schema.fields]
    )
    recorded = list(sizes) if sizes is not None else [None] * len(sidecars)
    small = [p for p, s in zip(sidecars, recorded, strict=True) if s is None or s <= MAX_SIDECAR_BYTES]
    big = [p for p, s in zip(sidecars, recorded, strict=True) if s is not None and s > MAX_SIDECAR_BYTES]
    frames = []
    if small:
        check_python_workers(spark)  # local mode: a worker Python without pyarrow, named up front
        contents = read_paths(spark, spark.read.options(**STRICT_READ_OPTIONS), "binaryFile", small)
        decode = decode_batches(arrow_schema(out), version, checkpoint)
        decoded = contents.select("path", "content").mapInArrow(decode, out)
        frames.append(decoded.withColumn(CORRUPT_LINE, F.lit(False)))
    if big:
        frames.append(read_parquet_actions(spark, big, schema, version))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])

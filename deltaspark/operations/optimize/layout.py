"""Where the rewritten rows go: one new file per compaction bin, or along a Z-curve.

Compaction: Spark's hash partitioning puts a row in task `pmod(hash(key), n)`; each bin is given a
key that hashes to its own number, so a repartition into as many tasks as bins gives each bin a
task (and a file) of its own, in one job, whatever the number of bins. A bin for which no such key
was found (vanishingly rare) keeps its number as key: its rows still land in one task, maybe
beside another bin's.

Z-order: each column's values are ranked into 2^bits quantile ranges, with boundaries taken from
a sample of the rows (so skewed and non-numeric columns spread as well as uniform integers; nulls
rank first); the ranks' bits are interleaved into one long, the curve's position. The rows are
range-partitioned on (partition columns, position) into as many files as the partitions' bytes
need at `maxFileSize`, and sorted along the curve inside each file. Numeric keys are ranked by an
equal-width bucket and a lookup table, other types by a balanced CASE over the boundaries.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    NumericType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.operations.optimize.bins import BIN
from deltaspark.spark_compat import collect_arrow, local_frame

KEY = "__deltaspark_task_key"
_KEYS = StructType([StructField(BIN, IntegerType()), StructField(KEY, LongType())])
CURVE = "__deltaspark_zorder"
SAMPLE_ROWS = 200_000  # rows sampled to place the quantile boundaries of the Z-order columns
WIDTH_BUCKETS = 1024  # equal-width buckets a numeric key is first placed in (then its rank looked up)


_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix(h1: int, k1: int) -> int:
    k1 = _rotl((k1 * 0xCC9E2D51) & _MASK, 15) * 0x1B873593 & _MASK
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of a bigint (Murmur3 x86_32, seed 42), as the hash partitioning computes it."""
    h1 = _mix(_mix(seed, value & _MASK), (value >> 32) & _MASK) ^ 8
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def bin_keys(bins: int) -> dict[int, int]:
    """For each bin, the smallest key below `bins * 32` that Spark's hash partitioning into `bins`
    tasks sends to task `bin` (found on the driver: no job)."""
    keys: dict[int, int] = {}
    for key in range(bins * 32):
        keys.setdefault(spark_hash_long(key) % bins, key)
        if len(keys) == bins:
            break
    return keys


def one_task_per_bin(rows: DataFrame, bins: int) -> DataFrame:
    """`rows` (with `BIN` in 0..bins-1) repartitioned into `bins` tasks, one bin in each."""
    keys = bin_keys(bins)
    spark = rows.sparkSession
    table = local_frame(spark, {BIN: list(keys), KEY: list(keys.values())}, _KEYS)
    keyed = rows.join(F.broadcast(table), BIN, "left").withColumn(
        KEY, F.coalesce(F.col(KEY), F.col(BIN).cast("long"))
    )
    return keyed.repartition(bins, KEY).drop(KEY)


def rank_bits(columns: int) -> int:
    """Bits of each column's rank, so that the interleaved curve fits in a long."""
    return max(1, min(8, 62 // max(columns, 1)))


def sort_key(value: Column, data_type: DataType) -> tuple[Column, bool]:
    """A column ordered as `value`, and whether it is a number: numbers (dates and timestamps as
    their distance from the epoch) are ranked by a table lookup, other types by a balanced CASE."""
    if isinstance(data_type, (NumericType, BooleanType)):
        return value.cast("double"), True
    if isinstance(data_type, DateType):
        return F.datediff(value, F.lit("1970-01-01").cast("date")).cast("double"), True
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        return value.cast("timestamp").cast("double"), True
    return value, False


def quantile_boundaries(rows: DataFrame, keys: list[Column], total_rows: int, bits: int) -> list[list[Any]]:
    """For each sort key, up to 2^bits - 1 increasing values cutting a sample of its non-null values
    into ranges of equal counts (one job: the sample)."""
    fraction = min(1.0, SAMPLE_ROWS / max(total_rows, 1))
    sample = rows.select(*[key.alias(f"k{i}") for i, key in enumerate(keys)])
    if fraction < 1.0:
        sample = sample.sample(fraction=fraction, seed=17)
    ranges = 2**bits
    table = collect_arrow(sample)  # columns, sorted by Arrow: no Python object per sampled value
    if table is not None:
        columns = [_arrow_sorted(table.column(i)) for i in range(len(keys))]
    else:
        values = sample.collect()
        columns = [
            sorted(v[i] for v in values if v[i] is not None and v[i] == v[i])  # no NaN
            for i in range(len(keys))
        ]
    result = []
    for ordered in columns:
        cuts = [ordered[(i * len(ordered)) // ranges] for i in range(1, ranges)] if len(ordered) else []
        result.append(sorted(set(cuts)))
    return result


def _arrow_sorted(column: Any) -> list[Any]:
    """A sampled key's values without nulls and NaN, in order (as Python's `sorted` orders them:
    numbers by value, strings by code point, which UTF-8 bytes order alike)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = column.drop_null()
    if pa.types.is_floating(values.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    return values.take(pc.sort_indices(values)).to_pylist()


def rank_of(key: Column, numeric: bool, cuts: list[Any]) -> Column:
    """The number of `cuts` <= key (nulls 0, NaN last). Numbers: the key's bucket among
    `WIDTH_BUCKETS` equal-width buckets spanning the cuts, looked up in a literal table of each
    bucket's rank (O(1) a row); other types, or few cuts: a balanced CASE over the cuts (a deep
    CASE is slow: 255 cuts cost about 0.5 s per million rows)."""
    if numeric and len(cuts) > 8 and cuts[-1] > cuts[0]:
        low, high = float(cuts[0]), float(cuts[-1])
        width = (high - low) / WIDTH_BUCKETS
        table = [0] + [bisect_right(cuts, low + (b - 0.5) * width) for b in range(1, WIDTH_BUCKETS + 1)]
        table.append(len(cuts))
        bucket = F.width_bucket(key, F.lit(low), F.lit(high), F.lit(WIDTH_BUCKETS)).cast("int")
        # one SQL literal, parsed once (a Column per element costs a py4j call each: seconds)
        lookup = F.expr("array(" + ",".join(str(r) for r in table) + ")")
        ranked = F.element_at(lookup, bucket + 1)
        ranked = F.when(F.isnan(key), F.lit(len(cuts))).otherwise(ranked)
    else:
        ranked = _rank(key, cuts, 0, len(cuts))
    return F.when(key.isNull(), F.lit(0)).otherwise(ranked)


def _rank(value: Column, cuts: list[Any], low: int, high: int) -> Column:
    """The number of `cuts` <= value, searched in `cuts[low:high]` by halving (a balanced CASE)."""
    if low >= high:
        return F.lit(low)
    middle = (low + high + 1) // 2
    below = value < F.lit(cuts[middle - 1])
    return F.when(below, _rank(value, cuts, low, middle - 1)).otherwise(_rank(value, cuts, middle, high))


def curve_position(ranks: list[Column], bits: int) -> Column:
    """The ranks' bits interleaved (most significant first, the first column leading)."""
    k = len(ranks)
    position: Column = F.lit(0).cast("long")
    for bit in range(bits):
        for j, rank in enumerate(ranks):
            digit = F.shiftright(rank, bit).bitwiseAND(1).cast("long")
            position = position + F.shiftleft(digit, bit * k + (k - 1 - j))
    return position


def along_curve(rows: DataFrame, groups: list[str], ranks: list[Column], files: int, bits: int) -> DataFrame:
    """`rows` range-partitioned on (`groups` columns, curve position of `ranks`) into `files`
    tasks, each sorted along the curve: every group (partition) is its own stretch of files."""
    placed = rows.withColumn(CURVE, curve_position(ranks, bits))
    order = [*[F.col(f"`{g}`") for g in groups], F.col(CURVE)]
    laid = placed.repartitionByRange(max(files, 1), *order).sortWithinPartitions(*order)
    return laid.drop(CURVE)


def files_for(size: int, max_file_size: int) -> int:
    """How many files of at most `max_file_size` bytes `size` bytes need (at least one)."""
    return max(1, -(-size // max_file_size))

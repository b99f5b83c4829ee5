"""What differs between Spark versions and between classic and Spark Connect sessions.

deltaspark runs on Spark 3.5 and 4.x, classic (py4j) or Connect (no JVM on the client). Every
place that depends on that difference goes through this module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyspark
from pyspark import StorageLevel
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session, where there is no py4j gateway to the JVM."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the connect extra
        return False
    return isinstance(spark, ConnectSession)


@lru_cache(maxsize=8)
def _major_minor(version: str) -> tuple[int, int]:
    major, minor, *_ = (int("".join(ch for ch in part if ch.isdigit()) or 0) for part in version.split("."))
    return major, minor


PYSPARK_VERSION = _major_minor(pyspark.__version__)  # the client library (Column API, functions)
_ANSI = "spark.sql.ansi.enabled"


def spark_version(spark: SparkSession) -> tuple[int, int]:
    return _major_minor(spark.version)


_call_site_lock = threading.Lock()
_call_site_state: list[Any] = [0, None]  # [depth of internal calls, PySpark's cached setting]


@contextlib.contextmanager
def internal_plan() -> Iterator[None]:
    """deltaspark's own plan building, without PySpark 4's call-site capture.

    PySpark 4 wraps every `functions` call and Column operator to record the user's call site for
    error messages (`spark.python.sql.dataFrameDebugging.enabled`): about eight JVM round trips
    each (the active session, its setting of the stack depth, a thread-local set and cleared).
    The plans deltaspark builds inside one of its calls make hundreds of such calls - 3,700 of a
    small merge's 8,800 - and the sites they would record are deltaspark's own lines, not the
    user's. Inside this block PySpark's cached setting reads off (a Python module flag: the
    session's setting is untouched), and is restored when the outermost block ends; nested and
    concurrent blocks share one depth count. Spark 3.5 captures nothing and is left as it is."""
    try:
        from pyspark.errors import utils as error_utils
    except ImportError:  # pragma: no cover - every supported PySpark has it
        yield
        return
    if not hasattr(error_utils, "_enable_debugging_cache"):
        yield
        return
    with _call_site_lock:
        if _call_site_state[0] == 0:
            _call_site_state[1] = error_utils._enable_debugging_cache
            error_utils._enable_debugging_cache = False
        _call_site_state[0] += 1
    try:
        yield
    finally:
        with _call_site_lock:
            _call_site_state[0] -= 1
            if _call_site_state[0] == 0:
                error_utils._enable_debugging_cache = _call_site_state[1]


def try_cast(column: Column, data_type: DataType) -> Column:
    """A cast that yields null instead of failing (Spark 4 runs in ANSI mode by default)."""
    if callable(getattr(type(column), "try_cast", None)):  # pyspark 4 (classic and Connect)
        return column.try_cast(data_type)
    # pyspark 3.5 has no Column.try_cast (and `hasattr(column, "try_cast")` is always true there:
    # Column.__getattr__ makes a field access). Its Cast fixes legacy or ANSI evaluation from
    # spark.sql.ansi.enabled when the expression is built, so it is built with ANSI off.
    spark = SparkSession.getActiveSession()
    if spark is None or is_connect(spark) or conf_get(spark, _ANSI, "false").lower() != "true":
        return column.cast(data_type)
    spark.conf.set(_ANSI, "false")
    try:
        return column.cast(data_type)
    finally:
        spark.conf.set(_ANSI, "true")


def sql_in(column: str, values: list[str]) -> Column:
    """`column IN (values)`, as one SQL expression when the values are plain (`Column.isin` costs a
    py4j round trip per value); with a quote or backslash in a value, as `Column.isin`."""
    if not values:
        return F.lit(False)
    if any("'" in v or "\\" in v for v in values):
        return F.col(f"`{column}`").isin(values)
    listed = ", ".join("'" + v + "'" for v in values)
    return F.expr(f"`{column}` IN ({listed})")


def conf_get(spark: SparkSession, key: str, default: str) -> str:
    """A session setting, or `default` (some Connect servers reject unknown keys with a default)."""
    try:
        value = spark.conf.get(key, default)
    except Exception:
        value = default
    return value if value is not None else default


_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_DRIVER_LISTED_LOCAL_FILES = 10_000


_READER_METHODS = ("parquet", "json", "text", "load")  # DataFrameReader methods taking many paths


def read_paths(spark: SparkSession, reader: Any, fmt: str, paths: list[str]) -> Any:
    """`reader.<fmt>(*paths)` (parquet, json, text, load; other formats by `format(fmt).load`), without
    a py4j round trip per path on classic sessions.

    PySpark converts a Python list to a JVM list one element at a time (tens of microseconds per
    path: half a minute for a million files); here the paths cross in one string and are split in
    the JVM. Spark then checks every path in a parallel job of up to 10,000 tasks; a few tasks per
    core do the same work without the per-task overhead.
    """
    if is_connect(spark) or len(paths) <= 32 or any("\0" in p for p in paths):
        if fmt == "parquet":
            return reader.parquet(*paths)
        if fmt in _READER_METHODS:
            return getattr(reader, fmt)(list(paths))
        return reader.format(fmt).load(list(paths))
    jvm = spark._jvm
    split = jvm.java.util.regex.Pattern.compile("\\x00").split("\0".join(paths))  # a String[]
    tasks = max(1, min(10_000, spark.sparkContext.defaultParallelism * 4))
    # Files on a local disk are listed on the driver: a few thousand `stat`s cost less than a job.
    local = len(paths) <= _DRIVER_LISTED_LOCAL_FILES and all(p.startswith(("file:", "/")) for p in paths)
    threshold = str(len(paths)) if local else None
    with (
        _unless_set(spark, _LISTING_THRESHOLD, threshold),
        _unless_set(spark, _LISTING_PARALLELISM, str(tasks)),
    ):
        if fmt in _READER_METHODS:
            return reader._df(getattr(reader._jreader, fmt)(split))  # the Java varargs overload
        return reader._df(reader._jreader.format(fmt).load(split))


# What deltaspark's executor code (deletion vectors, the distributed reader) imports in Spark's
# Python workers; pandas because PySpark's Arrow UDFs refuse to start without it.
WORKER_MODULES = ("pyarrow", "pyroaring", "pandas", "fastavro")
_checked_workers: dict[str, str | None] = {}


def _worker_problem(python: str) -> str | None:
    """Why `python` cannot run deltaspark's executor code, or None when it can."""
    if python in _checked_workers:
        return _checked_workers[python]
    resolved = shutil.which(python) or python
    problem: str | None = None
    if os.path.abspath(resolved) != os.path.abspath(sys.executable):
        probe = "import " + ", ".join(WORKER_MODULES)
        try:
            proc = subprocess.run([resolved, "-c", probe], capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                lines = (proc.stderr or proc.stdout).strip().splitlines()
                problem = lines[-1] if lines else f"exit code {proc.returncode}"
        except (OSError, subprocess.SubprocessError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
    _checked_workers[python] = problem
    return problem


def check_python_workers(spark: SparkSession) -> None:
    """Fail early, with what to set, when the Python that Spark starts for its workers cannot import
    what deltaspark's executor code needs.

    PySpark starts workers with `PYSPARK_PYTHON` (or `python3` from PATH) unless told otherwise, which
    in a script run from a virtual environment is often another Python than the driver's. That can
    only be checked from the driver in local mode, where workers run on this machine; on a cluster a
    missing module fails the query, and eager operations name it (`WorkerEnvironmentError`).
    """
    if is_connect(spark):
        return
    context = spark.sparkContext
    if not str(context.master).startswith("local"):
        return
    python = getattr(context, "pythonExec", None) or "python3"
    problem = _worker_problem(python)
    if problem:
        from deltaspark.errors import WorkerEnvironmentError

        raise WorkerEnvironmentError(
            f"Spark's Python workers run `{python}`, which cannot import what deltaspark's executor code "
            f"needs ({', '.join(WORKER_MODULES)}): {problem}. Set PYSPARK_PYTHON={sys.executable} before "
            "the Spark session starts (or spark.pyspark.python with spark-submit), or install deltaspark "
            f"into that Python"
        )


def struct_type(schema: Any) -> Any:
    """`schema` as a `StructType` (given as one, or as a DDL string: `"a long, b string"`)."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    return schema if isinstance(schema, StructType) else _parse_datatype_string(schema)


def arrow_schema(schema: Any) -> Any:
    """The Arrow schema `mapInArrow` must return for a Spark schema (a `StructType` or a DDL
    string), timestamps in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = struct_type(schema)
    try:
        return to_arrow_schema(schema, timezone="UTC")  # Spark 4: time zone for timestamp columns
    except TypeError:  # Spark 3.5's signature has no time zone
        return to_arrow_schema(schema)


def local_frame(spark: SparkSession, columns: dict[str, list[Any]], schema: Any) -> Any:
    """A DataFrame over rows held on the driver, as a `LocalRelation`: collecting it (and the
    projections and filters Spark folds into it) runs no Spark job. `schema`: flat columns only
    (the Arrow conversion of Spark 3.5 takes no nested types)."""
    import pyarrow as pa

    schema = struct_type(schema)
    table = pa.Table.from_pydict(columns, schema=arrow_schema(schema))
    if spark_version(spark) >= (4, 0) or is_connect(spark):
        return spark.createDataFrame(table, schema)
    # Spark 3.5 takes a pandas frame, through Arrow only when the session enables it; its Arrow
    # path is called directly, so that the user's setting stays as it is.
    timezone = conf_get(spark, "spark.sql.session.timeZone", "UTC")
    return spark._create_from_pandas_with_arrow(table.to_pandas(), schema, timezone)  # type: ignore[attr-defined]


def collect_arrow(frame: Any) -> Any | None:
    """`frame`'s rows as a pyarrow Table, with no Python object made per value (Spark 4's
    `toArrow`; Spark 3.5's Arrow collect on a classic session): OPTIMIZE's Z-order sample of
    200,000 rows cost the driver 1.7 s after its job as `Row`s, 0.75 s this way (sorted by Arrow
    too). None where neither is at hand (Spark 3.5 over Connect) or there are no rows: the caller
    collects them."""
    import pyarrow as pa

    if spark_version(frame.sparkSession) >= (4, 0):
        return frame.toArrow()
    if is_connect(frame.sparkSession):
        return None
    batches = frame._collect_as_arrow()  # noqa: SLF001 - what `toPandas` uses on Spark 3.5
    return pa.Table.from_batches(batches) if batches else None


def map_in_arrow(frame: Any, body: Any, schema: str) -> Any:
    """`frame.mapInArrow(body, schema)`. Where `frame`'s rows are held on the driver (`is_local`:
    a small table's), `body` runs there on them - the same function, without a Python worker or a
    job - and its rows are held too. `frame` and `schema` have flat columns only."""
    if not is_local(frame):
        check_python_workers(frame.sparkSession)
        return frame.mapInArrow(body, schema)
    import pyarrow as pa

    spark, given = frame.sparkSession, frame.schema
    rows = frame.collect()
    table = pa.Table.from_pydict(
        {f.name: [r[f.name] for r in rows] for f in given.fields}, schema=arrow_schema(given)
    )
    batches = [b for b in body(iter(table.to_batches())) if b.num_rows]
    wanted = struct_type(schema)
    produced = pa.Table.from_batches(batches) if batches else None
    columns = {f.name: produced.column(f.name).to_pylist() if produced else [] for f in wanted.fields}
    return local_frame(spark, columns, wanted)


def held_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: Any) -> Any:
    """A DataFrame of `rows` (tuples in `schema`'s field order; a DDL string or a StructType) held
    on the driver as a local relation: reading it runs no job and starts no Python worker, where
    `spark.createDataFrame(rows)` makes Python rows that a Python worker unpickles when they are
    first read (a second or more to start one in a new session). Nested columns need Spark 4's
    Arrow route; elsewhere (Spark 3.5, Connect) such rows go through `createDataFrame`."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    struct = struct_type(schema)
    if is_connect(spark):
        return spark.createDataFrame(list(rows), struct)
    nested = any(isinstance(f.dataType, (StructType, ArrayType, MapType)) for f in struct.fields)
    if not nested:
        return local_frame(spark, {f.name: [r[i] for r in rows] for i, f in enumerate(struct.fields)}, struct)
    if spark_version(spark) < (4, 0):
        return spark.createDataFrame(list(rows), struct)
    import pyarrow as pa

    values = [{f.name: _arrow_value(r[i], f.dataType) for i, f in enumerate(struct.fields)} for r in rows]
    return spark.createDataFrame(pa.Table.from_pylist(values, schema=arrow_schema(struct)), schema=struct)


def held_left_join(left: Any, right: Any, left_key: str, right_key: str) -> Any | None:
    """`left.join(right, left[left_key] == right[right_key], "left")` of two frames held on the
    driver (flat columns, distinct names), joined there and held: a join of two small local
    relations otherwise costs a broadcast job. None when either is not held (Spark joins them)."""
    if not (is_local(left) and is_local(right)):
        return None
    by_key: dict[Any, list[Any]] = {}
    for row in right.collect():
        if row[right_key] is not None:  # a null key matches nothing
            by_key.setdefault(row[right_key], []).append(row)
    missing = (None,) * len(right.columns)
    rows = [
        (*row, *match)
        for row in left.collect()
        for match in (by_key.get(row[left_key]) if row[left_key] is not None else None) or [missing]
    ]
    from pyspark.sql.types import StructField, StructType

    nullable = [StructField(f.name, f.dataType, True) for f in right.schema.fields]
    schema = StructType([*left.schema.fields, *nullable])  # a new schema (`add` changes `left`'s)
    return held_frame(left.sparkSession, rows, schema)


def _arrow_value(value: Any, data_type: Any) -> Any:
    """A Python value (tuples and Rows for structs) as pyarrow takes it for `data_type`."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if value is None:
        return None
    if isinstance(data_type, StructType):
        items = value.asDict() if hasattr(value, "asDict") else value
        if not isinstance(items, dict):
            items = dict(zip(data_type.fieldNames(), items, strict=True))
        return {f.name: _arrow_value(items.get(f.name), f.dataType) for f in data_type.fields}
    if isinstance(data_type, ArrayType):
        return [_arrow_value(v, data_type.elementType) for v in value]
    if isinstance(data_type, MapType):
        return [(k, _arrow_value(v, data_type.valueType)) for k, v in dict(value).items()]
    return value


_TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
_timestamp_lock = threading.Lock()
_timestamp_users: dict[int, tuple[int, str | None]] = {}  # id(spark) -> (writers, previous value)


@contextlib.contextmanager
def micros_timestamps(spark: SparkSession) -> Iterator[None]:
    """Parquet files written inside write timestamps as INT64 micros, not legacy INT96 (whose
    footers carry no statistics; checkpoints' stats_parsed, data files).

    The setting is session-wide, so concurrent checkpoint writers of one session share it: the first
    sets it, the last restores what was there before."""
    with _timestamp_lock:
        users, previous = _timestamp_users.get(id(spark), (0, None))
        if users == 0:
            previous = spark.conf.get(_TIMESTAMP_CONF, None)
            spark.conf.set(_TIMESTAMP_CONF, "TIMESTAMP_MICROS")
        _timestamp_users[id(spark)] = (users + 1, previous)
    try:
        yield
    finally:
        with _timestamp_lock:
            users, previous = _timestamp_users.pop(id(spark))
            if users > 1:
                _timestamp_users[id(spark)] = (users - 1, previous)
            elif previous is None:
                spark.conf.unset(_TIMESTAMP_CONF)
            else:
                spark.conf.set(_TIMESTAMP_CONF, previous)


@contextlib.contextmanager
def _unless_set(spark: SparkSession, key: str, value: str | None) -> Iterator[None]:
    """The session's `key` set to `value` inside (None: nothing to set), then unset; left alone when
    the user set it."""
    if value is None or spark.conf.get(key, None) is not None:
        yield
        return
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.unset(key)


_RANGE_SAMPLE_CONF = "spark.sql.execution.rangeExchange.sampleSizePerPartition"
_DEFAULT_RANGE_SAMPLE = 100


@contextlib.contextmanager
def range_sample(spark: SparkSession, rows: int, partitions: int) -> Iterator[None]:
    """Range partitionings planned inside place their boundaries from a sample of about `rows`
    rows, not Spark's 100 per output partition. Spark seeds that sample with the RDD's id, so a
    small sample gives boundaries (and, under OPTIMIZE's curve, files of uneven size and overlap)
    that change with what the session ran before; a sample as large as the data (up to `rows`) gives
    the same exact boundaries every time. Left alone when the user set it."""
    hint = -(-rows // max(partitions, 1))
    with _unless_set(spark, _RANGE_SAMPLE_CONF, str(hint) if hint > _DEFAULT_RANGE_SAMPLE else None):
        yield


_OPEN_COST_CONF = "spark.sql.files.openCostInBytes"
_DEFAULT_OPEN_COST = 4 * 1024 * 1024


@contextlib.contextmanager
def small_file_reads(spark: SparkSession, average_file_size: int) -> Iterator[None]:
    """Scans planned inside count each file as costing about its own size to open, not Spark's
    4 MiB: many small files are then packed into a few tasks (20,000 files of 5 KB: 625 tasks ->
    a handful, a third less time) instead of 32 files a task. A planning knob only: rows read are
    the same. Left alone when the user set it, or when the files are not small."""
    small = average_file_size < _DEFAULT_OPEN_COST and not is_connect(spark)
    with _unless_set(spark, _OPEN_COST_CONF, str(max(8192, average_file_size)) if small else None):
        yield


@dataclass(frozen=True)
class FileSplitting:
    """How a file scan's tasks are sized, from a session's settings as Spark sizes its own
    (`FilePartition.maxSplitBytes`): each file counted `open_cost` more than its size, at most
    `max_bytes` a task, the files spread over at least `parallelism` tasks where they are small
    enough."""

    max_bytes: int = 128 * 1024 * 1024  # spark.sql.files.maxPartitionBytes
    open_cost: int = _DEFAULT_OPEN_COST  # spark.sql.files.openCostInBytes
    parallelism: int = 1  # spark.sql.files.minPartitionNum, else the leaf nodes' default parallelism

    def split_bytes(self, sizes: Sequence[int]) -> int:
        """The most bytes one task takes for files of `sizes`, as Spark computes it."""
        total = sum(sizes) + self.open_cost * len(sizes)
        return min(self.max_bytes, max(self.open_cost, total // max(1, self.parallelism)))


# A Spark Connect client cannot ask the server how many cores it has: as many tasks as a
# `format("delta")` scan planned at least before it followed the session's parallelism.
_CONNECT_SCAN_PARALLELISM = 8


def _conf_option(spark: SparkSession, key: str) -> str:
    """A session setting, "" when unset: asked without a default, which a Connect server would
    check against the setting's type (and log an error for)."""
    try:
        return spark.conf.get(key, None) or ""
    except Exception:
        return ""


def file_splitting(spark: SparkSession) -> FileSplitting:
    """The session's `FileSplitting` (Spark's defaults where a setting cannot be read)."""
    parallelism = _conf_option(spark, "spark.sql.files.minPartitionNum") or _conf_option(
        spark, "spark.sql.leafNodeDefaultParallelism"
    )
    if not parallelism.strip() and is_connect(spark):
        parallelism = _conf_option(spark, "spark.default.parallelism") or str(_CONNECT_SCAN_PARALLELISM)
    return FileSplitting(
        max_bytes=parse_bytes(conf_get(spark, "spark.sql.files.maxPartitionBytes", "128MB")),
        open_cost=parse_bytes(conf_get(spark, _OPEN_COST_CONF, str(_DEFAULT_OPEN_COST))),
        parallelism=max(1, int(parallelism)) if parallelism.strip() else default_parallelism(spark),
    )


_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_ADVISORY_BYTES = "spark.sql.adaptive.advisoryPartitionSizeInBytes"
_MIN_PARTITION_BYTES = "spark.sql.adaptive.coalescePartitions.minPartitionSize"
_PARALLELISM_FIRST = "spark.sql.adaptive.coalescePartitions.parallelismFirst"
_BYTE_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_bytes(text: str) -> int:
    """A Spark byte-size setting (`64MB`, `67108864b`, `1m`, `1048576`) in bytes."""
    value = text.strip().lower().removesuffix("b") or "0"
    unit = _BYTE_UNITS.get(value[-1], 1) if value[-1].isalpha() else 1
    return int(float(value.rstrip("kmgtp") or 0) * unit)


def default_parallelism(spark: SparkSession) -> int:
    """The cores Spark plans for (the session's default parallelism; 1 where the client cannot ask)."""
    if is_connect(spark):
        return max(1, int(conf_get(spark, "spark.default.parallelism", "1") or 1))
    return max(1, int(spark.sparkContext.defaultParallelism))


def coalesced_partitions(spark: SparkSession, size_bytes: int) -> int:
    """The partitions adaptive execution would coalesce `size_bytes` of shuffled data into, with the
    session's own settings: its advisory partition size - or, parallelism first (the default), that
    data spread over the default parallelism, but no partition under the minimum partition size -
    and never more than `spark.sql.shuffle.partitions`."""
    most = max(1, int(conf_get(spark, _SHUFFLE_PARTITIONS, "200")))
    target = parse_bytes(conf_get(spark, _ADVISORY_BYTES, "64MB"))
    if conf_get(spark, _PARALLELISM_FIRST, "true").strip().lower() == "true":
        spread = size_bytes // default_parallelism(spark)
        target = max(parse_bytes(conf_get(spark, _MIN_PARTITION_BYTES, "1MB")), min(target, spread))
    return max(1, min(most, -(-max(size_bytes, 0) // max(target, 1))))


def plan_bytes(frame: Any) -> int | None:
    """Spark's own estimate of `frame`'s size (its optimized plan's statistics: exact for rows held
    on the driver, the files' size for a scan, an upper bound above them); None on Spark Connect,
    or where Spark has no useful estimate."""
    if is_connect(frame.sparkSession):
        return None
    try:
        size = int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - an estimate only
        return None
    return size if 0 <= size < 1 << 62 else None


def _reads_a_shuffle(frame: Any) -> bool:
    """Whether the last stage of `frame`'s plan reads a shuffle: its plan exchanges rows outside
    broadcasts and cached relations (whose stages are their own). False on Spark Connect (no plan
    to look at)."""
    if is_connect(frame.sparkSession):
        return False

    def exchanges(node: Any) -> bool:
        name = node.nodeName()
        if name in ("Exchange", "ReusedExchange"):
            return True
        if name in ("BroadcastExchange", "InMemoryTableScan"):
            return False
        if name == "AdaptiveSparkPlan":
            return exchanges(node.initialPlan())
        children = node.children()
        return any(exchanges(children.apply(i)) for i in range(children.size()))

    try:
        return exchanges(frame._jdf.queryExecution().executedPlan())
    except Exception:  # noqa: BLE001 - a plan of another shape: merge partitions as they are
        return False


def is_local(frame: Any) -> bool:
    """Whether `frame`'s rows are held on the driver: its optimized plan is a local relation (rows
    made there, and the projections and filters Spark folds into them). Reading it runs no job."""
    if is_connect(frame.sparkSession):
        return False
    try:
        execution = frame._jdf.queryExecution()
        # A plan that reads anything but rows made on the driver is answered from its leaves (the
        # analyzed plan is built already): optimizing it took ~8 ms, 14 times in a merge. Only a
        # plan Spark would fold into an empty relation (a filter that is always false, a join
        # with nothing) is then called distributed - every caller's other route, and correct.
        leaves = execution.analyzed().collectLeaves()
        for i in range(leaves.size()):
            if leaves.apply(i).nodeName() not in _HELD_LEAVES:
                return False
        return execution.optimizedPlan().nodeName() == "LocalRelation"
    except Exception:  # noqa: BLE001 - a plan that cannot be optimized now fails later, in Spark
        return False


# The leaves of a plan Spark can fold into a local relation: rows made on the driver.
_HELD_LEAVES = frozenset({"LocalRelation", "OneRowRelation"})


def rdd_rows(frame: Any) -> bool:
    """Whether `frame` reads only RDDs made into DataFrames (`createDataFrame` of Python rows or
    of a pandas frame without Arrow, `rdd.toDF`), whose size Spark does not estimate (its
    `plan_bytes` is None): the rows a notebook's small merge source often is. False on Connect."""
    if is_connect(frame.sparkSession):
        return False
    try:
        leaves = frame._jdf.queryExecution().analyzed().collectLeaves()
        names = [leaves.apply(i).nodeName() for i in range(leaves.size())]
    except Exception:  # noqa: BLE001 - a plan of another shape: not known to be such rows
        return False
    return bool(names) and all(name in ("LogicalRDD", "ExternalRDD") for name in names)


def persist_sized(frame: Any, size_bytes: int | None, level: Any = None) -> Any:
    """`frame` persisted in the partitions its data needs (`_sized`). A frame held on the driver
    (`is_local`) is returned as it is."""
    if is_local(frame):
        return frame  # held on the driver already: caching it would only add jobs
    frame = _sized(frame, size_bytes)
    return frame.persist() if level is None else frame.persist(level)


def _sized(frame: Any, size_bytes: int | None) -> Any:
    """`frame` in the partitions its data needs (`coalesced_partitions` of `size_bytes`, an
    estimate of its size; None: as Spark plans it), for keeping.

    Spark does not coalesce the last stage of a plan it caches, as adaptive execution does for a
    query (`spark.sql.optimizer.canChangeCachedPlanOutputPartitioning` is off by default): a cached
    join or aggregate keeps `spark.sql.shuffle.partitions` partitions - 200 in a default session -
    and every action over it runs that many tasks, about a second for a few kilobytes on two
    cores. Partitions are merged without a shuffle (a coalesce), except where the last stage reads
    a shuffle and the data is small (at most the advisory partition size): there a small shuffle
    of the result lets adaptive execution coalesce that stage too, which a coalesce cannot do - it
    would run the stage's work (a Python UDF's start-up above all) once per shuffle partition."""
    if size_bytes is None:
        return frame
    spark = frame.sparkSession
    partitions = coalesced_partitions(spark, size_bytes)
    small = size_bytes <= parse_bytes(conf_get(spark, _ADVISORY_BYTES, "64MB"))
    if small and _reads_a_shuffle(frame):
        return frame.repartition(partitions)
    return frame.coalesce(partitions)


# Spark's failure when a block of a local checkpoint is gone: 4.x's error class, 3.5's message.
_LOST_BLOCK = ("CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND", "Checkpoint block rdd_")


class KeptCopy:
    """`frame`'s rows computed once, by the first job that reads them, and kept by the executors
    that computed them (a local checkpoint, as delta-spark keeps a merge's source): every later read
    gets the same rows, even from a non-deterministic plan. A lost block (its executor gone, or
    evicted) fails the job that reads it (`lost_kept_rows`) where a cache would silently compute
    the rows again - other rows, from such a plan; the caller starts over with a new copy
    (`replicated`: each block kept on two executors, on Spark 4). Filling it costs less than a cache, which
    encodes the rows in columns (here, 1M rows of three columns: 0.25-0.4 s against 0.8-1.9 s,
    and reads as fast). On Spark Connect (no handle on the blocks) the frame is persisted instead;
    a frame held on the driver is kept as it is."""

    def __init__(self, frame: Any, size_bytes: int | None, replicated: bool = False) -> None:
        self._rdd: Any = None
        self._persisted = False
        if is_local(frame):
            self.frame = frame
            return
        frame = _sized(frame, size_bytes)
        if is_connect(frame.sparkSession):
            self.frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted = True
            return
        if replicated and PYSPARK_VERSION >= (4, 0):  # 3.5's localCheckpoint takes no level
            kept = frame.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK_2)
        else:
            kept = frame.localCheckpoint(eager=False)
        try:
            self._rdd = kept._jdf.queryExecution().logical().rdd()
        except Exception:  # noqa: BLE001 - a plan of another shape: its blocks go with the frame
            self._rdd = None
        self.frame = kept

    def kept_bytes(self) -> int | None:
        """The kept rows' size once the first job has filled the copy: the block managers' account
        of it (the JVM's estimate of the rows as objects, about twice their bytes), or a persisted
        frame's cache size; None where unknown."""
        if self._persisted:
            return plan_bytes(self.frame)
        if self._rdd is None:
            return None
        rdd_id = self._rdd.id()
        context = self.frame.sparkSession.sparkContext._jsc.sc()
        for info in context.getRDDStorageInfo():
            if info.id() == rdd_id:
                return int(info.memSize()) + int(info.diskSize())
        return None

    def unpersist(self) -> None:
        """The kept blocks released (as `DataFrame.unpersist`, so that it sits among cached frames)."""
        if self._persisted:
            self.frame.unpersist()
        elif self._rdd is not None:
            self._rdd.unpersist(False)


def lost_kept_rows(exc: BaseException) -> bool:
    """Whether `exc` is Spark's failure on a `KeptCopy` whose block is gone."""
    text = str(exc)
    return any(marker in text for marker in _LOST_BLOCK)

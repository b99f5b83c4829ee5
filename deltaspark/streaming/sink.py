"""The exactly-once streaming sink: each micro-batch of a streaming query is one Delta commit.

Spark runs a micro-batch, then records it in the query's checkpoint (`commits/<batchId>`). A query
that stops between the two (a crash, a killed driver) runs the same batch again, with the same
batch id and the same rows, when it restarts. The sink therefore commits each batch with a `txn`
action, as delta-spark's `DeltaSink` does: appId = the query's id (kept in its checkpoint, the same
across restarts), version = the batch id. A batch the table already holds commits nothing, so a
restart neither loses nor duplicates a row. The commit's operation is `STREAMING UPDATE` with
delta-spark's parameters (`outputMode`, `queryId`, `epochId`).

The batches reach the sink through `foreachBatch`, which calls back into the driver's Python process
where the commit path runs (put-if-absent, conflict checks). A Python data source's stream writer
(`df.writeStream.format("delta")` with a data source registered from Python) commits instead in a
Python worker that has neither the driver's JVM nor the query's id: it could not commit through the
one transaction path, nor know which batches a restarted query already wrote.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame

from deltaspark.catalog import looks_like_name
from deltaspark.errors import InvalidArgumentError, UnsupportedSessionError
from deltaspark.spark_compat import is_connect
from deltaspark.spark_errors import eager
from deltaspark.storage import join_path, storage_for
from deltaspark.table import write_table

OPERATION = "STREAMING UPDATE"
OUTPUT_MODES = {"append": "Append", "complete": "Complete"}


def writeStream(
    df: DataFrame,
    path: str | None = None,
    *,
    checkpointLocation: str,
    outputMode: str = "append",
    tableName: str | None = None,
    partitionBy: list[str] | None = None,
    mergeSchema: bool = False,
    userMetadata: str | None = None,
    queryName: str | None = None,
    trigger: dict[str, Any] | None = None,
) -> Any:
    """Start a streaming query that writes `df` into the Delta table at `path` (or named
    `tableName`; a `path` that looks like a name, `db.events`, is taken as one), exactly once.

    `outputMode` is append or complete (complete replaces every row of the table in each batch's
    commit); `checkpointLocation` is the query's checkpoint, as Spark's; `trigger` is given to
    `DataStreamWriter.trigger` (`{"availableNow": True}`, `{"processingTime": "10 seconds"}`).
    `partitionBy` and `mergeSchema` as for `deltaspark.write`. Returns the started
    `StreamingQuery`; each batch is one commit carrying `txn(appId=query id, version=batch id)`."""
    spark = df.sparkSession
    if not getattr(df, "isStreaming", False):
        raise InvalidArgumentError("writeStream needs a streaming DataFrame (spark.readStream...)")
    if is_connect(spark):
        raise UnsupportedSessionError(
            "writeStream commits from the driver's Python process through Hadoop's FileSystem, which a "
            "Spark Connect session does not expose: run the query from a classic session"
        )
    mode = OUTPUT_MODES.get(str(outputMode).lower())
    if mode is None:
        raise InvalidArgumentError(
            f"outputMode must be append or complete, got {outputMode!r} "
            "(as delta-spark, a Delta sink does not take update mode)"
        )
    if not checkpointLocation:
        raise InvalidArgumentError("writeStream needs a checkpointLocation (the query's own record)")
    if path is not None and tableName is None and looks_like_name(path):
        path, tableName = None, path
    if path is None and tableName is None:
        raise InvalidArgumentError("Give the table's path or tableName")
    checkpoint = storage_for(spark).qualify(checkpointLocation)
    sink = _BatchCommitter(path, tableName, checkpoint, mode, partitionBy, mergeSchema, userMetadata)
    writer = df.writeStream.outputMode(mode.lower()).option("checkpointLocation", checkpoint)
    if queryName is not None:
        writer = writer.queryName(queryName)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.foreachBatch(sink).start()


class _BatchCommitter:
    """The `foreachBatch` function: one idempotent commit per batch."""

    def __init__(
        self,
        path: str | None,
        table_name: str | None,
        checkpoint: str,
        mode: str,
        partition_by: list[str] | None,
        merge_schema: bool,
        user_metadata: str | None,
    ) -> None:
        self.path, self.table_name, self.checkpoint = path, table_name, checkpoint
        self.mode, self.partition_by, self.merge_schema = mode, partition_by, merge_schema
        self.user_metadata = user_metadata
        self.query_id: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        _commit_batch(self, batch, int(batch_id))

    def id_of_query(self, batch: DataFrame) -> str:
        """The query's id, as Spark keeps it in the checkpoint's `metadata` file (written when the
        query is first started, before its first batch; the same after every restart)."""
        if self.query_id is None:
            where = join_path(self.checkpoint, "metadata")
            text = storage_for(batch.sparkSession).read_text(where)
            if text is None:
                raise InvalidArgumentError(f"The streaming query's checkpoint has no {where}")
            self.query_id = str(json.loads(text.splitlines()[0])["id"])
        return self.query_id


@eager
def _commit_batch(sink: _BatchCommitter, batch: DataFrame, batch_id: int) -> None:
    query_id = sink.id_of_query(batch)
    parameters = {"outputMode": sink.mode, "queryId": query_id, "epochId": str(batch_id)}
    write_table(
        batch,
        sink.path,
        mode="overwrite" if sink.mode == "Complete" else "append",
        partitionBy=sink.partition_by,
        txnAppId=query_id,
        txnVersion=batch_id,
        userMetadata=sink.user_metadata,
        mergeSchema=sink.merge_schema,
        tableName=sink.table_name,
        operation=(OPERATION, parameters),
    )

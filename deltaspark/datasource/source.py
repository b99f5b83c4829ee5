"""The `delta` format: the Python data source `register` hands Spark (Spark 4.0+).

One class for every face: `schema` and `reader` for batch reads (`batch`: a version's rows;
`changes`: the change data feed with `readChangeFeed`), `streamReader` for streams (`stream`). Spark
creates it from the reader's options in a planning process without a JVM; `register` sets the
class attributes it needs from the session (its time zone, its S3A settings, how it sizes file
scan tasks).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from deltaspark.datasource.batch import DeltaBatchReader, PrunedBatchReader, batch_options
from deltaspark.datasource.changes import ChangeFeed, ChangeFeedReader, feed_schema
from deltaspark.datasource.file_order import RUN_FILES
from deltaspark.datasource.stream import DeltaStreamReader
from deltaspark.datasource.table_state import TableState, load, output_schema
from deltaspark.file_io import FileSystemSettings, install
from deltaspark.spark_compat import FileSplitting


class DeltaDataSource(DataSource):
    """The `delta` format. `register` sets the class attributes from the session."""

    short_name = "delta"
    time_zone = "UTC"  # the session's spark.sql.session.timeZone, for timestampAsOf
    settings: FileSystemSettings | None = None  # the session's S3A settings, for pyarrow
    pushdown = False  # Spark 4.1+ with spark.sql.python.filterPushdown.enabled: pruning, data skipping
    splitting = FileSplitting()  # the session's file scan task sizes and parallelism
    snapshot_run_files = RUN_FILES  # a stream's initial snapshot: files sorted in memory at a time

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def _table(self) -> TableState:
        """The table's protocol and metadata (its version resolved), without its files: what a
        schema and a stream need; a stream reads its files itself, a version at a time."""
        held = getattr(self, "_held", None)
        if held is None:
            install(self.settings)
            path, version, timestamp = batch_options(dict(self.options))
            held = load(path, version, timestamp, self.time_zone, files=False)
            self._held = held
        return held

    def _table_files(self) -> TableState:
        """The version `_table` resolved, with its live files (statistics too when filters may
        be pushed): what a batch read plans from."""
        state = self._table()
        install(self.settings)  # `_table` may have run in another process (Spark pickles the source)
        return load(state.table_root, state.version, None, self.time_zone, stats=self.pushdown)

    def _options(self) -> dict[str, str]:
        return {k.lower(): str(v) for k, v in self.options.items()}

    def _feed(self) -> ChangeFeed | None:
        """The change feed's range, when the change data feed is asked for."""
        if self._options().get("readchangefeed", "false").lower() != "true":
            return None
        held = getattr(self, "_held_feed", None)
        if held is None:
            install(self.settings)
            path, _, _ = batch_options(dict(self.options))
            held = ChangeFeed(path, self._options(), self.time_zone)
            self._held_feed = held
        return held

    def schema(self) -> StructType:
        options = self._options()
        if options.get("readchangefeed", "false").lower() == "true":
            # a batch read (or a stream given its start) reads with the range's ending version's schema
            start = (
                options.get("startingversion", "latest").lower() != "latest" or "startingtimestamp" in options
            )
            feed = self._feed() if start else None
            return feed_schema(feed.state if feed is not None else self._table())
        return output_schema(self._table())

    def reader(self, schema: StructType) -> DataSourceReader:
        feed = self._feed()
        if feed is not None:
            return ChangeFeedReader(feed, self.settings)
        if self.pushdown:
            return PrunedBatchReader(self._table_files(), self.settings, self.splitting)
        return DeltaBatchReader(self._table_files(), self.settings, self.splitting)

    def streamReader(self, schema: StructType) -> DeltaStreamReader:
        state = self._table()
        path = str(dict((k.lower(), v) for k, v in self.options.items())["path"])
        return DeltaStreamReader(
            path,
            state,
            dict(self.options),
            self.time_zone,
            self.settings,
            self.splitting,
            self.snapshot_run_files,
        )

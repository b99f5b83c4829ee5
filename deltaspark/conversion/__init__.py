"""Conversion between the two table formats, Delta and Iceberg, in place (no data file rewritten).

It has a package of its own because it sits on both sides: it reads Iceberg tables with the Iceberg
reader (`deltaspark.iceberg`) and writes Delta tables through Delta's write path
(`deltaspark.operations`, `deltaspark.transaction`), so it is above both.

- `to_iceberg`: `DeltaTable.toIceberg`, Iceberg metadata for a Delta table; `incremental` its step
  from the Delta version the last conversion recorded; `sync_job` the scheduled job that runs it
  over many tables.
- `from_iceberg`: `convertToDelta` of an Iceberg table, a Delta log over its data files;
  `file_describer` describes each Iceberg data file as a Delta `add`, on the executors.

(`operations.convert` is CONVERT TO DELTA of a directory of parquet files: no Iceberg, not here.)
"""

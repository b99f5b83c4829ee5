"""Iceberg tables (format v1-v3) read with the same distributed engine as Delta tables.

Layers, lowest first: `files` (driver file access), `relocation` (paths of tables copied from
elsewhere), `table_metadata` (the metadata JSON: schemas, specs, snapshots, refs), `types`
(Iceberg types and single values as Spark/Arrow ones), `avro_decode` / `manifests` (manifest lists
and manifests decoded on the executors into a DataFrame of entries), `data_reader` / `deletes` /
`scan` (rows, with position deletes, deletion vectors and equality deletes), `table` (the facade).
"""

from deltaspark.iceberg.table import IcebergSnapshot, IcebergTable

__all__ = ["IcebergSnapshot", "IcebergTable"]

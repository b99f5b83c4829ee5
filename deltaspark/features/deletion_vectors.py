"""Deletion vector descriptors ("Deletion Vectors"): the identity of a DV within a file key.

A logical file is `(path, deletionVector.uniqueId)`; `uniqueId` is `storageType + pathOrInlineDv`,
plus `@offset` when an offset is present. A file without a DV has the empty id here (the
protocol's NULL), so keys can be compared and joined with plain equality.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def dv_unique_id(deletion_vector: Column) -> Column:
    base = F.concat(deletion_vector.getField("storageType"), deletion_vector.getField("pathOrInlineDv"))
    offset = deletion_vector.getField("offset")
    with_offset = F.when(offset.isNull(), base).otherwise(F.concat(base, F.lit("@"), offset.cast("string")))
    return F.when(deletion_vector.isNull(), F.lit("")).otherwise(F.coalesce(with_offset, F.lit("")))


def dv_unique_id_of(deletion_vector: dict | None) -> str:
    """`dv_unique_id` of a descriptor held on the driver (a dict of the descriptor's fields)."""
    if deletion_vector is None:
        return ""
    storage_type, value = deletion_vector.get("storageType"), deletion_vector.get("pathOrInlineDv")
    if storage_type is None or value is None:
        return ""
    offset = deletion_vector.get("offset")
    return storage_type + value + ("" if offset is None else f"@{offset}")

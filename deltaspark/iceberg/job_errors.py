"""Failures of Iceberg reads inside Spark jobs, raised by eager operations as deltaspark's errors.

The executor code (`avro_decode`, `data_reader`) fails a task with a message of one shape,
`deltaspark: <what> <path>: <reason>`, which reaches the driver inside Spark's own exception
(`PythonException`). An eager Iceberg operation (`count()`, `toDF()`'s planning, a conversion) turns
it into the matching `DeltaSparkError`:

- a manifest list or manifest that is missing, not Avro, or names an undefined partition spec:
  `CorruptIcebergMetadataError` naming the file;
- a deletion vector that is missing or fails its checks: `DeletionVectorError`;
- a data file that is corrupt or whose row count differs from its manifest entry:
  `CorruptDataFileError`;
- anything else as `spark_errors.translate` names it (other `deltaspark:` messages, such as a
  missing data or delete file, become a `DeltaSparkError` with that message); failures deltaspark
  cannot name are re-raised as they are.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.errors import AnalysisException

from deltaspark import spark_errors
from deltaspark.errors import (
    CorruptDataFileError,
    CorruptIcebergMetadataError,
    DeletionVectorError,
    DeltaSparkError,
)

# Each message as the exception's own line shows it (`...Error: deltaspark: ...`), not the source
# line that raised it, which a Python worker's traceback quotes too.
_OWN = r"(?<=Error: )deltaspark: "
_METADATA = re.compile(_OWN + r"(missing|corrupt) Iceberg (?:metadata|Avro) file (.+?): ([^\n]*)")
_SPEC = re.compile(_OWN + r"Iceberg manifest (.+?) (uses partition spec [^\n]*)")
_VECTOR = re.compile(_OWN + r"((?:missing deletion vector file|data file .+?: deletion vector) [^\n]*)")
_CORRUPT_DATA = re.compile(_OWN + r"corrupt Iceberg data file (.+?): ([^\n]*)")
_ANY = re.compile(_OWN + r"[^\n]*")
_ROW_COUNT = re.compile(
    _OWN + r"Iceberg data file (.+?) ((?:has|holds) \d+ rows[;,] its manifest entry says [^\n]*)"
)


def _text(exc: BaseException) -> str:
    parts = [str(exc)]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        parts.append(str(cause))
    return "\n".join(parts)


def translate(exc: BaseException) -> DeltaSparkError | None:
    """The Iceberg error a failed Spark job stands for (None: not one the Iceberg reader raised)."""
    if isinstance(exc, DeltaSparkError):
        return exc
    if isinstance(exc, AnalysisException):  # raised before anything ran: no executor message
        return None
    text = _text(exc)
    if m := _METADATA.search(text):
        what, path, reason = m.groups()
        return CorruptIcebergMetadataError(
            path, "the table names it, but it does not exist" if what == "missing" else reason
        )
    if m := _SPEC.search(text):
        return CorruptIcebergMetadataError(m.group(1), m.group(2))
    if m := _VECTOR.search(text):
        return DeletionVectorError(m.group(1))
    if (m := _CORRUPT_DATA.search(text)) or (m := _ROW_COUNT.search(text)):
        return CorruptDataFileError(m.group(1), m.group(2))
    return None


def _translate(exc: BaseException, spark: Any) -> DeltaSparkError | None:
    translated = translate(exc) or spark_errors.translate(exc, spark)
    if type(translated) is DeltaSparkError and (m := _ANY.search(_text(exc))):
        translated = DeltaSparkError(m.group(0))  # the message, not the line that raised it
    return translated


# Mark an eager Iceberg operation: a failure of a job it runs that deltaspark can name is a
# `DeltaSparkError` (see the module docstring), never Spark's `PythonException`.
eager = spark_errors.eager_with(_translate)

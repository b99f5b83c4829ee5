"""Actions as they are written to a commit: one compact JSON object per line.

Small actions (protocol, metaData, txn, domainMetadata, commitInfo, a few removes) are built on the
driver as dicts; file actions of a data write stay a DataFrame and are rendered by Spark's `to_json`
on the executors (see `transaction`).
"""

from __future__ import annotations

import json
import platform
import uuid
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol

ENGINE_INFO = "deltaspark"


def engine_info() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("deltaspark")
    except PackageNotFoundError:  # running from a source tree
        ours = "dev"
    try:
        spark = version("pyspark")
    except PackageNotFoundError:
        spark = "unknown"
    return f"{ENGINE_INFO}/{ours} pyspark/{spark} python/{platform.python_version()}"


def line(action: dict[str, Any]) -> str:
    """One action as a commit line: compact JSON, no NaN (the protocol's JSON has none)."""
    return json.dumps(action, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def protocol_action(protocol: Protocol) -> dict[str, Any]:
    return {"protocol": protocol.asDict()}


def metadata_action(metadata: Metadata) -> dict[str, Any]:
    body = metadata.asDict()
    return {"metaData": {k: v for k, v in body.items() if v is not None}}


def txn_action(app_id: str, version: int, last_updated: int) -> dict[str, Any]:
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": last_updated}}


def domain_action(domain: str, configuration: str, removed: bool = False) -> dict[str, Any]:
    return {"domainMetadata": {"domain": domain, "configuration": configuration, "removed": removed}}


def row_tracking_domain(high_water_mark: int) -> dict[str, Any]:
    return domain_action("delta.rowTracking", json.dumps({"rowIdHighWaterMark": high_water_mark}))


def commit_info(
    operation: str,
    parameters: dict[str, Any],
    timestamp_ms: int,
    read_version: int | None,
    isolation_level: str,
    is_blind_append: bool,
    metrics: dict[str, Any],
    txn_id: str,
    user_metadata: str | None = None,
    in_commit_timestamp: int | None = None,
) -> dict[str, Any]:
    """The `commitInfo` action as delta-spark writes it: operation parameters and metrics are
    string-valued maps (parameters JSON-encoded unless already strings)."""
    info: dict[str, Any] = {}
    if in_commit_timestamp is not None:
        info["inCommitTimestamp"] = in_commit_timestamp
    info["timestamp"] = timestamp_ms
    info["operation"] = operation
    info["operationParameters"] = {
        k: v if isinstance(v, str) else json.dumps(v) for k, v in parameters.items() if v is not None
    }
    if read_version is not None and read_version >= 0:
        info["readVersion"] = read_version
    info["isolationLevel"] = isolation_level
    info["isBlindAppend"] = is_blind_append
    info["operationMetrics"] = {k: str(v) for k, v in metrics.items()}
    if user_metadata is not None:
        info["userMetadata"] = user_metadata
    info["engineInfo"] = engine_info()
    info["txnId"] = txn_id
    return {"commitInfo": info}


def new_txn_id() -> str:
    return str(uuid.uuid4())


def add_line(add: Column) -> Column:
    """An `add` struct rendered as its commit line (null fields left out, as writers do)."""
    return F.to_json(F.struct(add.alias("add")))


def remove_line(remove: Column) -> Column:
    return F.to_json(F.struct(remove.alias("remove")))

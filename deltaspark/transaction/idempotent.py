"""Idempotent writes: an application's numbered write is committed at most once.

The protocol's `txn` action records, per application id, the last version of that application's
work a table holds. A writer that gives `txnAppId` and `txnVersion` (delta-spark's names) commits
its `txn` action in the same commit as its data; when the table already holds that version or a
newer one for the application, nothing is written and nothing committed. A concurrent commit of the
same application id is a conflict (`Transaction.txnVersion` records the read), so two attempts of
the same work cannot both land.

As in delta-spark, DML (DELETE, UPDATE, MERGE) and writes without the keyword arguments take the
two from the session: `spark.databricks.delta.write.txnAppId` and
`spark.databricks.delta.write.txnVersion`; with `spark.databricks.delta.write.txnVersion.autoReset.enabled`
the version is unset after each write that used it, so a pipeline cannot apply it twice by mistake.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import SparkSession

from deltaspark.errors import InvalidArgumentError
from deltaspark.spark_compat import conf_get
from deltaspark.transaction.transaction import Transaction

log = logging.getLogger(__name__)

APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
VERSION_CONF = "spark.databricks.delta.write.txnVersion"
AUTO_RESET_CONF = "spark.databricks.delta.write.txnVersion.autoReset.enabled"


def app_transaction(spark: SparkSession, app_id: str | None, version: int | None) -> tuple[str, int] | None:
    """The (appId, version) a write carries: the arguments, else the session's settings; None when
    the write is not idempotent. Half of a pair is refused, not ignored."""
    from_session = app_id is None and version is None
    if from_session:
        app_id = conf_get(spark, APP_ID_CONF, "") or None
        text = conf_get(spark, VERSION_CONF, "") or None
        if app_id is None and text is None:
            return None
        try:
            version = int(text) if text is not None else None
        except ValueError:
            raise InvalidArgumentError(f"{VERSION_CONF} must be a whole number, got {text!r}") from None
        if (app_id is None) != (version is None):
            raise InvalidArgumentError(f"Set {APP_ID_CONF} and {VERSION_CONF} together")
        if conf_get(spark, AUTO_RESET_CONF, "false").lower() == "true":
            spark.conf.unset(VERSION_CONF)
    if (app_id is None) != (version is None):
        raise InvalidArgumentError("Give txnAppId and txnVersion together")
    assert app_id is not None and version is not None
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidArgumentError(f"txnVersion must be a whole number >= 0, got {version!r}")
    if not isinstance(app_id, str) or not app_id:
        raise InvalidArgumentError(f"txnAppId must be a non-empty string, got {app_id!r}")
    return app_id, version


def apply_once(txn: Transaction, app: tuple[str, int] | None, table_path: str) -> bool:
    """Add the application's `txn` action to `txn`; False (commit nothing) when the table already
    holds that version or a newer one of the application."""
    if app is None:
        return True
    app_id, version = app
    done = txn.txnVersion(app_id)
    if done is not None and done >= version:
        log.info(
            "Skipping the write to %s: it already holds version %d of application %s (asked: %d)",
            table_path,
            done,
            app_id,
            version,
        )
        return False
    txn.addAction({"txn": {"appId": app_id, "version": version, "lastUpdated": int(time.time() * 1000)}})
    return True

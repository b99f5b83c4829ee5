"""Running an audit: each check evaluated on its own (one failing check never hides the others), its
findings kept as a cached DataFrame, and a summary small enough to print, log or save as JSON."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltaspark.audit.context import AuditContext
from deltaspark.audit.findings import FINDINGS_SCHEMA, Finding, from_findings

log = logging.getLogger(__name__)

CheckResult = DataFrame | list[Finding]


@dataclass(frozen=True)
class Check:
    name: str
    category: str  # log, files, hygiene
    run: Callable[[AuditContext], CheckResult]
    full_only: bool = False  # needs every data file opened or listed


@dataclass
class AuditReport:
    """The outcome of `DeltaTable.audit()`: `findings` (a DataFrame: check, severity, version, path,
    detail, value), `summary` (counts per check and severity), `metrics` (the table's vital signs)
    and `passed` (no finding of severity `error`)."""

    table: str
    version: int | None
    level: str
    findings: DataFrame
    checks: list[dict[str, Any]]
    metrics: dict[str, Any] = field(default_factory=dict)
    frames: dict[str, DataFrame] = field(default_factory=dict)
    seconds: float = 0.0
    _persisted: list[DataFrame] = field(default_factory=list, repr=False)

    @property
    def passed(self) -> bool:
        return not any(c["errors"] for c in self.checks)

    @property
    def summary(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "level": self.level,
            "passed": self.passed,
            "errors": sum(c["errors"] for c in self.checks),
            "warnings": sum(c["warnings"] for c in self.checks),
            "infos": sum(c["infos"] for c in self.checks),
            "seconds": round(self.seconds, 1),
            "checks": self.checks,
            "metrics": self.metrics,
        }

    def unpersist(self) -> None:
        """Release what the audit cached (findings, file lists, the replay); `findings` and `frames`
        are recomputed if used afterwards."""
        for frame in self._persisted:
            frame.unpersist()

    def toJSON(self) -> str:
        return json.dumps(self.summary, indent=2, sort_keys=False, default=str)

    def errors(self) -> DataFrame:
        return self.findings.where(F.col("severity") == "error")

    def text(self, limit: int = 20) -> str:
        """A readable summary: the verdict, each check's counts, the first findings of each severity."""
        lines = [
            f"audit of {self.table} at version {self.version} ({self.level}): "
            + ("PASSED" if self.passed else "FAILED")
            + f" - {self.summary['errors']} error(s), {self.summary['warnings']} warning(s),"
            f" {self.summary['infos']} info(s) in {self.seconds:.1f} s"
        ]
        for c in self.checks:
            counts = f"{c['errors']} error(s), {c['warnings']} warning(s), {c['infos']} info(s)"
            lines.append(f"  {c['check']:<26} {c['status']:<8} {counts}")
        shown = (
            self.findings.where(F.col("severity") != "info")
            .orderBy(F.when(F.col("severity") == "error", 0).otherwise(1), "check", "version", "path")
            .limit(limit)
            .collect()
        )
        if shown:
            lines.append("findings:")
        for row in shown:
            where = " ".join(
                x
                for x in (f"v{row['version']}" if row["version"] is not None else "", row["path"] or "")
                if x
            )
            lines.append(
                f"  [{row['severity']}] {row['check']}: {row['detail']}" + (f" ({where})" if where else "")
            )
        if self.metrics:
            lines.append("metrics: " + ", ".join(f"{k}={v}" for k, v in self.metrics.items()))
        return "\n".join(lines)


def run_checks(ctx: AuditContext, checks: list[Check], level: str) -> tuple[DataFrame, list[dict[str, Any]]]:
    """Each check evaluated once (its findings persisted); a check that fails becomes an error
    finding of its own with the reason."""
    frames: list[DataFrame] = []
    outcomes: list[dict[str, Any]] = []
    for check in checks:
        if check.full_only and level != "full":
            continue
        started = time.time()
        try:
            result = check.run(ctx)
            if isinstance(result, list):  # made on the driver: counted there, no Spark job
                frame = from_findings(ctx.spark, result)
                counts = dict(Counter(f.severity for f in result))
            else:
                frame = ctx.keep(result)
                counts = {
                    r["severity"]: int(r["n"])
                    for r in frame.groupBy("severity").agg(F.count(F.lit(1)).alias("n")).collect()
                }
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is itself a finding
            log.warning("Audit check %s could not run: %s", check.name, exc)
            reason = str(exc).strip().splitlines()[0][:2000] if str(exc).strip() else type(exc).__name__
            frame = from_findings(
                ctx.spark, [Finding(check.name, "error", f"the check could not run: {reason}")]
            )
            counts = {"error": 1}
        frames.append(frame)
        status = "failed" if counts.get("error") else "warning" if counts.get("warning") else "ok"
        outcomes.append(
            {
                "check": check.name,
                "category": check.category,
                "status": status,
                "errors": counts.get("error", 0),
                "warnings": counts.get("warning", 0),
                "infos": counts.get("info", 0),
                "seconds": round(time.time() - started, 2),
            }
        )
        log.info("Audit check %s: %s (%s) in %.1f s", check.name, status, counts, time.time() - started)
    findings = frames[0] if frames else ctx.spark.createDataFrame([], FINDINGS_SCHEMA)
    for frame in frames[1:]:
        findings = findings.unionByName(frame)
    return findings, outcomes

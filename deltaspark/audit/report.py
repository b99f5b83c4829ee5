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
from deltaspark.audit.findings import FINDING_COLUMNS, FINDINGS_SCHEMA, Finding, from_findings
from deltaspark.spark_errors import translate

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

    def _repr_html_(self) -> str:
        """The verdict, counts per check and severity, metrics and (while what the audit cached is
        held, before `unpersist()`) the first errors and warnings, as HTML (notebooks)."""
        from deltaspark import display

        if "_html_shown" not in self.__dict__:
            shown: list[dict[str, Any]] = []
            try:
                held = bool(self._persisted) and all(f.is_cached for f in self._persisted)
                if held and (self.summary["errors"] or self.summary["warnings"]):
                    first = self.findings.where(F.col("severity") != "info").orderBy(
                        F.when(F.col("severity") == "error", 0).otherwise(1), "check", "version", "path"
                    )
                    shown = [r.asDict() for r in first.limit(10).collect()]
            except Exception:  # noqa: BLE001 - a rendering never fails; the counts still show
                shown = []
            self.__dict__["_html_shown"] = shown
        return display.audit_html(self, self.__dict__["_html_shown"])


@dataclass
class CheckOutcome:
    """What `run_checks` learned: the findings (persisted), each check's counts and, per finding
    `check` name, how many findings there are and the sum of their `value`s (for the metrics)."""

    findings: DataFrame
    checks: list[dict[str, Any]]
    totals: dict[str, tuple[int, float]]


def run_checks(ctx: AuditContext, checks: list[Check], level: str, timed: bool = False) -> CheckOutcome:
    """Each check's findings, counted; a check that fails becomes an error finding of its own with
    the reason, and the other checks still run.

    The checks' lazy findings are evaluated together, in one Spark job (on a small table most of
    an audit is job latency); if that job fails, or with `timed=True`, each is evaluated on its own
    (a job per check, each check's seconds measured)."""
    chosen = [c for c in checks if level == "full" or not c.full_only]
    results: list[CheckResult] = []
    seconds: list[float] = []
    for check in chosen:
        started = time.time()
        try:
            results.append(check.run(ctx))
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is itself a finding
            results.append([_could_not_run(ctx, check, exc)])
        seconds.append(time.time() - started)
    lazy = [i for i, result in enumerate(results) if not isinstance(result, list)]
    together, rows = (
        _evaluate_together(ctx, [(i, results[i]) for i in lazy]) if lazy and not timed else (None, [])
    )
    counted: dict[int, list[tuple[str, str, int, float]]] = {i: [] for i in lazy}
    for r in rows:
        counted[r[0]].append(r[1:])
    if together is None:
        for i in lazy:
            started = time.time()
            try:
                frame = ctx.keep(results[i])
                counted[i] = _counts(frame)
                results[i] = frame
            except Exception as exc:  # noqa: BLE001 - a check that cannot run is itself a finding
                results[i] = [_could_not_run(ctx, chosen[i], exc)]
            seconds[i] += time.time() - started
    frames: list[DataFrame] = [] if together is None else [together]
    outcomes: list[dict[str, Any]] = []
    totals: dict[str, tuple[int, float]] = {}
    for i, check in enumerate(chosen):
        result = results[i]
        if isinstance(result, list):  # made on the driver: counted there, no Spark job
            rows = [(f.check, f.severity, 1, f.value or 0.0) for f in result]
            if result:
                frames.append(from_findings(ctx.spark, result))
        else:
            rows = counted[i]
            if together is None:
                frames.append(result)
        severities: Counter[str] = Counter()
        for name, severity, n, value in rows:
            severities[severity] += n
            count, total = totals.get(name, (0, 0.0))
            totals[name] = (count + n, total + value)
        status = "failed" if severities["error"] else "warning" if severities["warning"] else "ok"
        outcomes.append(
            {
                "check": check.name,
                "category": check.category,
                "status": status,
                "errors": severities["error"],
                "warnings": severities["warning"],
                "infos": severities["info"],
                "seconds": round(seconds[i], 2),
            }
        )
        log.info("Audit check %s: %s (%s)", check.name, status, dict(severities))
    findings = frames[0] if frames else ctx.spark.createDataFrame([], FINDINGS_SCHEMA)
    for frame in frames[1:]:
        findings = findings.unionByName(frame)
    return CheckOutcome(findings, outcomes, totals)


def _evaluate_together(
    ctx: AuditContext, frames: list[tuple[int, DataFrame]]
) -> tuple[DataFrame | None, list[tuple[Any, ...]]]:
    """The lazy findings as one persisted DataFrame and their `_counts` per check index, from one
    job; `(None, [])` when that job fails (the caller then finds which check failed, one by one)."""
    tagged = [frame.select(F.lit(i).alias("_check_index"), *FINDING_COLUMNS) for i, frame in frames]
    union = tagged[0]
    for frame in tagged[1:]:
        union = union.unionByName(frame)
    kept = ctx.keep(union)
    try:
        rows = _counts(kept, "_check_index")
    except Exception as exc:  # noqa: BLE001 - evaluated one by one next
        log.warning("Audit checks evaluated together failed (%s); evaluating each on its own", exc)
        kept.unpersist()
        return None, []
    return kept.drop("_check_index"), rows


def _counts(frame: DataFrame, *keys: str) -> list[tuple[Any, ...]]:
    """(`*keys`, check, severity, number of findings, sum of their values) per group of `frame`."""
    return [
        (*(r[k] for k in keys), r["check"], r["severity"], int(r["n"]), float(r["v"] or 0.0))
        for r in frame.groupBy(*keys, "check", "severity")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("v"))
        .collect()
    ]


def _could_not_run(ctx: AuditContext, check: Check, exc: Exception) -> Finding:
    """The error finding of a check that failed, with deltaspark's reason when it has one (on Spark
    3.5 a task failure's own first line is only "An error occurred while calling ...")."""
    log.warning("Audit check %s could not run: %s", check.name, exc)
    named = translate(exc, ctx.spark)
    text = str(named if named is not None else exc).strip()
    reason = text.splitlines()[0][:2000] if text else type(exc).__name__
    return Finding(check.name, "error", f"the check could not run: {reason}")

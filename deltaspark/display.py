"""How deltaspark's objects look in a notebook: small HTML tables of the facts they already hold.

`DeltaTable`, `Snapshot`, `AuditReport` and `CommitResult` render through these functions
(`_repr_html_`). They take the objects as they are (no imports of them: this module sits at the
bottom of the package's layers), run no Spark job of their own, and escape every value.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_STYLE = (
    "<style>"
    ".deltaspark-facts{border-collapse:collapse;font-size:0.9em;margin:0.3em 0}"
    ".deltaspark-facts th,.deltaspark-facts td{text-align:left;vertical-align:top;"
    "padding:2px 10px 2px 0;border-bottom:1px solid #ddd}"
    ".deltaspark-facts th{font-weight:600;white-space:nowrap}"
    ".deltaspark-passed{color:#1a7f37;font-weight:600}.deltaspark-failed{color:#cf222e;font-weight:600}"
    "</style>"
)


def human_bytes(n: int | float | None) -> str:
    """1536 -> "1.5 KiB"."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def text(value: Any) -> str:
    """A value as escaped text: lists joined by commas, dicts as k=v, None as a dash."""
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, Mapping):
        return html.escape(", ".join(f"{k}={_plain(v)}" for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return html.escape(", ".join(_plain(v) for v in value))
    return html.escape(str(value))


def _plain(value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, default=str)
    return "null" if value is None else str(value)


def facts(title: str, rows: Iterable[tuple[str, Any]], raw: Sequence[str] = ()) -> str:
    """A two-column table under a bold title. Values are escaped, except the keys named in `raw`
    (already HTML, built from escaped parts)."""
    body = "".join(
        f"<tr><th>{html.escape(key)}</th><td>{value if key in raw else text(value)}</td></tr>"
        for key, value in rows
    )
    return f'{_STYLE}<div><b>{html.escape(title)}</b><table class="deltaspark-facts">{body}</table></div>'


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A table with a header row; every cell escaped."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{text(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="deltaspark-facts"><tr>{head}</tr>{body}</table>'


# ---- the objects --------------------------------------------------------------------------------


def snapshot_html(snapshot: Any, summary: Mapping[str, int] | None, title: str = "Delta table") -> str:
    """The key facts of a snapshot; `summary` (numFiles, sizeInBytes) when known."""
    protocol = snapshot.protocol
    files = (
        f"{summary['numFiles']:,} file(s), {human_bytes(summary['sizeInBytes'])}"
        if summary and "numFiles" in summary
        else None
    )
    try:
        committed = snapshot.timestamp.isoformat(timespec="seconds")
    except Exception:  # a log without the commit's timestamp still renders
        committed = None
    rows = [
        ("path", snapshot.tableRoot),
        ("version", snapshot.version),
        ("committed", committed),
        ("name", snapshot.metadata.name),
        ("protocol", f"reader {protocol.minReaderVersion}, writer {protocol.minWriterVersion}"),
        ("features", snapshot.tableFeatures),
        ("partition columns", snapshot.partitionColumns),
        ("files", files),
        ("schema", snapshot.schema.simpleString() if hasattr(snapshot.schema, "simpleString") else None),
        ("configuration", dict(sorted(snapshot.configuration.items()))),
    ]
    return facts(title, [(k, v) for k, v in rows if k != "name" or v])


def commit_html(result: Any) -> str:
    """A landed commit: version, operation, its parameters and metrics."""
    info = result.commitInfo or {}
    metrics = result.metrics or info.get("operationMetrics") or {}
    rows = [
        ("version", result.version),
        ("operation", info.get("operation")),
        ("parameters", info.get("operationParameters")),
        ("attempts", result.attempts),
    ]
    body = facts(f"Committed version {result.version}", rows)
    if metrics:
        body += table(["metric", "value"], sorted(metrics.items()))
    return body


def audit_html(report: Any, shown: Sequence[Mapping[str, Any]] = ()) -> str:
    """An audit's verdict, its counts per check and severity, its metrics, and `shown` findings."""
    summary = report.summary
    verdict = (
        '<span class="deltaspark-passed">PASSED</span>'
        if report.passed
        else '<span class="deltaspark-failed">FAILED</span>'
    )
    rows = [
        ("table", report.table),
        ("version", report.version),
        ("level", report.level),
        ("verdict", verdict),
        (
            "findings",
            f"{summary['errors']} error(s), {summary['warnings']} warning(s), {summary['infos']} info(s)",
        ),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    body = facts("Delta table audit", rows, raw=("verdict",))
    body += table(
        ["check", "status", "errors", "warnings", "infos"],
        [
            (c.get("check"), c.get("status"), c.get("errors"), c.get("warnings"), c.get("infos"))
            for c in report.checks
        ],
    )
    if shown:
        body += "<b>First findings</b>" + table(
            ["severity", "check", "version", "path", "detail"],
            [(f["severity"], f["check"], f["version"], f["path"], f["detail"]) for f in shown],
        )
    if report.metrics:
        body += "<b>Metrics</b>" + table(["metric", "value"], list(report.metrics.items()))
    return body

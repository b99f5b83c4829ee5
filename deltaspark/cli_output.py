"""Printing command results: aligned tables for people, JSON for programs; warnings and
deltaspark's own progress on stderr; Spark's console output kept out of both."""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from deltaspark.display import human_bytes as _human_bytes  # noqa: F401 - cli and cli_iceberg use it

QUIET = {"on": False}  # set by cli.main for the command it runs: --quiet prints nothing but errors


def warn(message: str) -> None:
    """A warning line on stderr (not with --quiet)."""
    if not QUIET["on"]:
        print(f"warning: {message}", file=sys.stderr)


def emit_document(document: Any) -> None:
    """One result as a JSON document."""
    print(json.dumps(document, default=str, indent=2))


def _print_rows(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any, nested: bool = False) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={cell(v, True)}" for k, v in value.items())
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ", timespec="seconds")
        if value is None:
            return "null" if nested else ""
        return _shorten(str(value))

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(t[i]) for t in table]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))


MAX_CELL = 72


def _shorten(text: str) -> str:
    """A long value (a path under deep partition folders) cut in the middle, to keep columns readable."""
    if len(text) <= MAX_CELL:
        return text
    keep = (MAX_CELL - 3) // 2
    return text[:keep] + "..." + text[-keep:]


def _emit_json(rows: Any) -> None:
    for row in rows:
        print(json.dumps(row, default=str))


def print_files(
    files: Any, json_lines: bool, order_by: str, limit: int, heading: str, columns: Sequence[str]
) -> None:
    """A file listing: every file as a JSON line, or the count and the first `limit` by path."""
    if json_lines:
        _emit_json(r.asDict(recursive=True) for r in files.toLocalIterator())
        return
    total = files.count()
    rows = [r.asDict(recursive=True) for r in files.orderBy(order_by).limit(limit).collect()]
    print(f"{total:,} file(s) {heading}" + (f"; first {len(rows)} by path" if total > len(rows) else ""))
    _print_rows(rows, columns)


# ---- Spark's own logging, when the command line starts the JVM ----------------------------------

# log4j2 configuration for a JVM the command line starts: Spark's log lines (the startup notices,
# WARN lines) off, errors on stderr; tasks that fail are reported by the error deltaspark raises,
# so the executor's and the scheduler's stack traces of them are off too. --verbose: WARN and up.
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# at the root's level, so that Spark does not announce a level of its own for a "shell"
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""
_QUIET_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.api.python.PythonRunner",
)


def log4j_java_option(verbose: bool) -> str:
    """`-Dlog4j2.configurationFile=...` for `spark.driver.extraJavaOptions`: a properties file
    (removed when the process ends) with Spark's logs at ERROR, or WARN with `verbose`."""
    text = _LOG4J2.format(level="warn" if verbose else "error")
    if not verbose:
        for i, name in enumerate(_QUIET_LOGGERS):
            text += f"logger.q{i}.name = {name}\nlogger.q{i}.level = off\n"
    fd, path = tempfile.mkstemp(prefix="deltaspark-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    atexit.register(lambda: os.path.exists(path) and os.remove(path))
    return f"-Dlog4j2.configurationFile=file:{path}"


# ---- progress ------------------------------------------------------------------------------------


class Progress:
    """deltaspark's own progress while a command runs, one line on stderr rewritten in place: the
    phase (deltaspark's INFO log messages: "Writing the checkpoint of version 12 as 4 part(s)"),
    the running Spark stages' task counts (classic sessions) and the time so far. Only when
    `stream` is a terminal and `enabled`; the line is cleared when the command ends."""

    def __init__(
        self, spark: Any, command: str, enabled: bool, stream: TextIO | None = None, interval: float = 0.5
    ) -> None:
        self._stream = stream or sys.stderr
        self.enabled = enabled and _is_terminal(self._stream)
        self._spark = spark
        self._command = command
        self._interval = interval
        self._phase = "starting"
        self._tasks = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handler: logging.Handler | None = None
        self._logger = logging.getLogger("deltaspark")
        self._level = self._logger.level
        self._started = time.monotonic()
        self._shown = False
        self._stdout: TextIO = sys.stdout

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        progress = self

        class _Phases(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                progress.phase(record.getMessage())

        self._handler = _Phases(logging.INFO)
        self._logger.addHandler(self._handler)
        if self._logger.getEffectiveLevel() > logging.INFO:
            self._logger.setLevel(logging.INFO)
            # deltaspark's INFO records feed the phase, not the log output (that is --verbose)
            for handler in logging.getLogger().handlers:
                if handler.level < logging.WARNING:
                    handler.addFilter(_below_warning_from_deltaspark)
        tracker = _status_tracker(self._spark)
        self._thread = threading.Thread(target=self._poll, args=(tracker,), daemon=True)
        self._thread.start()
        self._stdout = sys.stdout
        sys.stdout = _ResultsFirst(self, sys.stdout)  # type: ignore[assignment]
        self._render()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        self.clear()
        if isinstance(sys.stdout, _ResultsFirst):
            sys.stdout = self._stdout
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._handler is not None:
            self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._level)
        for handler in logging.getLogger().handlers:
            handler.removeFilter(_below_warning_from_deltaspark)

    def clear(self) -> None:
        """Stop and take the line away (before the results are printed: they may share a terminal)."""
        with self._lock:
            self._stop.set()
            if self._shown:
                self._stream.write("\r\x1b[K")
                self._stream.flush()
                self._shown = False

    def phase(self, text: str) -> None:
        self._phase = " ".join(text.split())
        self._render()

    def _poll(self, tracker: Any) -> None:
        while not self._stop.wait(self._interval):
            if tracker is not None:
                try:
                    self._tasks = _task_counts(tracker)
                except Exception:  # noqa: BLE001 - the session is stopping; progress is best effort
                    tracker = None
            self._render()

    def _render(self) -> None:
        seconds = time.monotonic() - self._started
        line = f"deltaspark {self._command}: {self._phase}"
        if self._tasks:
            line += f" [{self._tasks}]"
        line += f" {seconds:.0f}s"
        width = shutil.get_terminal_size((100, 20)).columns - 1
        if len(line) > width:
            line = line[: width - 3] + "..."
        with self._lock:
            if self._stop.is_set():
                return
            self._stream.write("\r\x1b[K" + line)
            self._stream.flush()
            self._shown = True


class _ResultsFirst:
    """stdout while the progress line shows: the first result printed takes the line away."""

    def __init__(self, progress: Progress, stream: TextIO) -> None:
        self._progress, self._stream = progress, stream

    def write(self, text: str) -> int:
        if text:
            self._progress.clear()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _below_warning_from_deltaspark(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or not record.name.startswith("deltaspark")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _status_tracker(spark: Any) -> Any:
    """Spark's status tracker on a classic session; None on Spark Connect."""
    try:
        from deltaspark.spark_compat import is_connect

        return None if is_connect(spark) else spark.sparkContext.statusTracker()
    except Exception:  # noqa: BLE001 - no tracker, no task counts
        return None


def _task_counts(tracker: Any) -> str:
    """The running stages: "stage 12: 45/200 tasks" (several stages: summed)."""
    stages = [s for s in (tracker.getStageInfo(i) for i in tracker.getActiveStageIds()) if s is not None]
    if not stages:
        return ""
    done = sum(s.numCompletedTasks for s in stages)
    total = sum(s.numTasks for s in stages)
    names = ",".join(str(s.stageId) for s in stages[:3]) + ("..." if len(stages) > 3 else "")
    return f"stage {names}: {done}/{total} tasks"

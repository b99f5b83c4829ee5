"""Helpers shared by the workers: timing, medians, and undoing a checkpoint between repetitions."""

from __future__ import annotations

import resource
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Timer:
    """Named phases of one repetition, in seconds."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):  # noqa: ANN201
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = round(time.perf_counter() - start, 4)

    @property
    def total(self) -> float:
        return round(sum(self.phases.values()), 4)


def repeat(run: Callable[[], tuple[Timer, dict[str, Any]]], times: int) -> dict[str, Any]:
    """The first (cold) run apart, then `times` warm runs: their phases and the median total."""
    cold_timer, facts = run()
    warm: list[dict[str, Any]] = []
    for _ in range(times):
        timer, facts = run()
        warm.append({**timer.phases, "total": timer.total})
    result: dict[str, Any] = {"cold": {**cold_timer.phases, "total": cold_timer.total}, "facts": facts}
    if warm:
        result["warm"] = warm
        result["median"] = round(statistics.median(w["total"] for w in warm), 4)
        result["median_phases"] = {
            k: round(statistics.median(w[k] for w in warm), 4) for k in warm[0] if k != "total"
        }
    return result


def own_peak_rss() -> int:
    """Peak RSS of this process in bytes: `VmHWM` (getrusage's ru_maxrss survives exec on Linux, so
    a child would report its parent's peak)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class LogState:
    """The `_delta_log` as it was: a checkpoint repetition writes files, and the next must start from
    the same log, so everything new is deleted and `_last_checkpoint` put back."""

    def __init__(self, table: str) -> None:
        self.log_dir = Path(table) / "_delta_log"
        self.names = {p.name for p in self.log_dir.iterdir()}
        sidecars = self.log_dir / "_sidecars"
        self.sidecars = {p.name for p in sidecars.iterdir()} if sidecars.is_dir() else None
        hint = self.log_dir / "_last_checkpoint"
        self.hint = hint.read_bytes() if hint.exists() else None

    def new_files(self) -> list[str]:
        return sorted(p.name for p in self.log_dir.iterdir() if p.name not in self.names)

    def restore(self) -> None:
        for path in self.log_dir.iterdir():
            if path.name not in self.names:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        sidecars = self.log_dir / "_sidecars"
        if self.sidecars is not None and sidecars.is_dir():
            for path in sidecars.iterdir():
                if path.name not in self.sidecars:
                    path.unlink()
        hint = self.log_dir / "_last_checkpoint"
        if self.hint is None:
            hint.unlink(missing_ok=True)
        else:
            hint.write_bytes(self.hint)


def measure_and_emit(result: dict[str, Any], measure: Callable[[], dict[str, Any]]) -> None:
    """Run a worker's measurement, record a failure instead of raising, and hand the result to the
    runner (the runner prints what failed and goes on)."""
    from benchmarks.procmon import emit

    try:
        result.update(measure())
        result["status"] = "ok"
    except Exception as exc:
        result["status"] = "error"
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    result["python_peak_rss"] = own_peak_rss()
    emit(result)


def failed_runs(results: dict[str, Any], answer_key: str) -> list[tuple[str, str, str]]:
    """(scale, engine, operation) of every run that failed or whose `answer_key` check is false; the
    runners print them and exit 1."""
    return [
        (s["scale"], r["engine"], r["op"])
        for s in results["scales"]
        for r in s["runs"]
        if r.get(answer_key) is False or r["status"] in ("error", "crashed")
    ]

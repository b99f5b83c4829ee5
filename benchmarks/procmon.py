"""Run one benchmark worker as a child process and watch its memory.

Each engine runs in a process of its own so that its peak memory is its own: the peak RSS of the
whole process tree (Python, and for deltaspark the Spark JVM and its Python workers) is sampled
every `poll` seconds. The machine is shared, so a worker that passes `mem_cap_bytes` or
`timeout` seconds is killed (whole tree) and reported as such instead of taking the machine down.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

RESULT_PREFIX = "BENCH-RESULT "


@dataclass
class Monitored:
    """Outcome of one worker process."""

    returncode: int | None
    seconds: float
    peak_tree_rss: int = 0  # bytes, sum over the tree at the worst sample
    peak_root_rss: int = 0  # the worker's own Python process
    peak_jvm_rss: int = 0  # java children (deltaspark's local Spark)
    killed: str | None = None  # "timeout" or "memory cap"
    results: list[dict[str, Any]] = field(default_factory=list)  # one per operation the worker ran
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _forked_jvm(p: psutil.Process) -> bool:
    """A JVM's child that still runs the JVM's binary is a fork that has not exec'd yet (Hadoop's
    local file system spawns `chmod`, `stat` and the like): it reports the RSS it shares with the
    JVM, and counting it would double the JVM. Such a child is named after the forking thread."""
    parent = p.parent()
    return parent is not None and parent.name() == "java" and p.exe() == parent.exe()


def _sample(proc: psutil.Process) -> tuple[int, int, int]:
    total = root = jvm = 0
    for p in _tree(proc):
        try:
            if p.pid != proc.pid and _forked_jvm(p):
                continue
            rss = p.memory_info().rss
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += rss
        if p.pid == proc.pid:
            root = rss
        elif name == "java":
            jvm += rss
    return total, root, jvm


def _kill_tree(proc: psutil.Process) -> None:
    for p in reversed(_tree(proc)):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)


def run_monitored(
    cmd: list[str],
    timeout: float,
    mem_cap_bytes: int,
    env: dict[str, str] | None = None,
    poll: float = 0.2,
    log_path: str | None = None,
) -> Monitored:
    """Run `cmd`; each stdout line starting with `RESULT_PREFIX` is parsed as one JSON result."""
    out = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed below, after the child is gone
    err = open(log_path, "w+") if log_path else tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **(env or {})})
    proc = psutil.Process(child.pid)
    outcome = Monitored(returncode=None, seconds=0.0)
    try:
        while child.poll() is None:
            total, root, jvm = _sample(proc)
            outcome.peak_tree_rss = max(outcome.peak_tree_rss, total)
            outcome.peak_root_rss = max(outcome.peak_root_rss, root)
            outcome.peak_jvm_rss = max(outcome.peak_jvm_rss, jvm)
            if total > mem_cap_bytes:
                outcome.killed = "memory cap"
            elif time.perf_counter() - start > timeout:
                outcome.killed = "timeout"
            if outcome.killed:
                _kill_tree(proc)
                break
            time.sleep(poll)
        outcome.returncode = child.wait()
    finally:
        if child.poll() is None:
            _kill_tree(proc)
            child.wait()
    outcome.seconds = time.perf_counter() - start
    out.seek(0)
    for line in out.read().splitlines():
        if line.startswith(RESULT_PREFIX):
            outcome.results.append(json.loads(line[len(RESULT_PREFIX) :]))
    err.seek(0)
    outcome.stderr_tail = "\n".join(err.read().splitlines()[-15:])
    out.close()
    err.close()
    return outcome


def emit(result: dict[str, Any]) -> None:
    """Called by a worker: print its result where `run_monitored` finds it."""
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)


def monitored_record(outcome: Monitored, **head: Any) -> dict[str, Any]:
    """One result row of a monitored worker: `head` (engine, case...), the process's seconds and
    peak memory, whether it was killed, then the worker's own result (or its stderr's tail)."""
    result = outcome.results[0] if outcome.results else {"stderr": outcome.stderr_tail}
    return {
        **head,
        "process_seconds": round(outcome.seconds, 2),
        "peak_tree_rss_gib": round(outcome.peak_tree_rss / 1024**3, 2),
        "killed": outcome.killed,
        **result,
    }

"""delta-rs (the `deltalake` package) in a plain Python process of its own.

- `replay`: `DeltaTable(path)` (delta-rs replays the log and materializes the active files while
  loading) and `get_add_actions()` (the file list as Arrow);
- `checkpoint`: `create_checkpoint()` at the latest version; the log is put back after each run.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.common import LogState, Timer, own_peak_rss, repeat
from benchmarks.procmon import emit


def replay_run(table: str) -> tuple[Timer, dict[str, Any]]:
    from deltalake import DeltaTable

    timer = Timer()
    with timer.phase("load"):
        dt = DeltaTable(table)
    with timer.phase("file_list"):
        files = dt.get_add_actions().num_rows
    return timer, {"version": dt.version(), "files": files}


def checkpoint_run(table: str, state: LogState) -> tuple[Timer, dict[str, Any]]:
    from deltalake import DeltaTable

    timer = Timer()
    try:
        with timer.phase("load"):
            dt = DeltaTable(table)
        with timer.phase("checkpoint"):
            dt.create_checkpoint()
        facts = {"written": state.new_files()}
    finally:
        state.restore()
    return timer, facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--op", choices=["replay", "checkpoint"], required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"engine": "delta-rs", "op": args.op}
    try:
        if args.op == "replay":
            result.update(repeat(lambda: replay_run(args.table), args.repeat))
        else:
            state = LogState(args.table)
            result.update(repeat(lambda: checkpoint_run(args.table, state), args.repeat))
        result["status"] = "ok"
    except Exception as exc:
        result["status"] = "error"
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    result["python_peak_rss"] = own_peak_rss()
    emit(result)


if __name__ == "__main__":
    main()

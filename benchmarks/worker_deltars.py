"""delta-rs (the `deltalake` package) in a plain Python process of its own.

- `replay`: `DeltaTable(path)` (delta-rs replays the log and materializes the active files while
  loading) and `get_add_actions()` (the file list as Arrow);
- `checkpoint`: `create_checkpoint()` at the latest version; the log is put back after each run.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.common import LogState, Timer, measure_and_emit, repeat


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

    def measure() -> dict[str, Any]:
        if args.op == "replay":
            return repeat(lambda: replay_run(args.table), args.repeat)
        state = LogState(args.table)
        return repeat(lambda: checkpoint_run(args.table, state), args.repeat)

    measure_and_emit(result, measure)


if __name__ == "__main__":
    main()

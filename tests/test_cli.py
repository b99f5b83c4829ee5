"""The `deltaspark` command line, in process (sharing the test session) and once end to end."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from deltaspark.cli import build_parser, main
from tests.log_builder import add, commit_info, metadata, protocol, remove


@pytest.fixture
def small_table(log):
    log.commit(
        0,
        protocol(),
        metadata(partition_columns=["part"]),
        add("part=x/a", size=10, partition_values={"part": "x"}, stats={"numRecords": 3}),
        commit_info(operation="CREATE TABLE"),
    )
    log.commit(1, add("part=y/b", size=20, partition_values={"part": "y"}), commit_info(operation="WRITE"))
    log.commit(2, remove("part=x/a", 1), commit_info(operation="DELETE"))
    return log


def test_describe_json(spark, small_table, capsys):
    assert main(["describe", small_table.path, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["version"] == 2 and facts["numFiles"] == 1 and facts["sizeInBytes"] == 20
    assert facts["partitionColumns"] == ["part"] and facts["minWriterVersion"] == 2
    assert [f["name"] for f in facts["schema"]["fields"]] == ["id", "part"]


def test_describe_at_version(spark, small_table, capsys):
    assert main(["describe", small_table.path, "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "Version            1" in out and "2 (30 B, 30 bytes)" in out and "Partition columns  part" in out


def test_files_json_and_table(spark, small_table, capsys):
    assert main(["files", small_table.path, "--version", "0", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["path"], r["size"], r["numRecords"]) for r in rows] == [("part=x/a", 10, 3)]
    assert main(["files", small_table.path]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 file(s) at version 2") and "part=y/b" in out and "part=x/a" not in out


def test_history(spark, small_table, capsys):
    assert main(["history", small_table.path, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["version"], r["operation"]) for r in rows] == [
        (2, "DELETE"),
        (1, "WRITE"),
        (0, "CREATE TABLE"),
    ]


def test_exit_code_1_a_failure_is_one_line_on_stderr(spark, tmp_path, capsys):
    """No table at the path: exit 1, nothing on stdout, one `deltaspark: ...` line, no traceback."""
    assert main(["describe", str(tmp_path / "nothing"), "--json"]) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.startswith("deltaspark: TableNotFoundError: Not a Delta table: ")
    assert printed.err.count("\n") == 1 and "Traceback" not in printed.err
    assert main(["--quiet", "history", str(tmp_path / "nothing")]) == 1  # --quiet: errors still shown
    assert capsys.readouterr().err.startswith("deltaspark: TableNotFoundError: ")


def test_exit_code_1_an_audit_with_findings_and_quiet_prints_nothing(spark, small_table, capsys):
    """A commit missing from the log: the audit fails (1); --quiet prints nothing, the code says it."""
    assert main(["-q", "history", small_table.path]) == 0  # exit code 0, and silence
    assert capsys.readouterr() == ("", "")
    os.remove(os.path.join(small_table.log, f"{1:020d}.json"))
    assert main(["audit", small_table.path, "--level", "quick", "--quiet"]) == 1
    assert capsys.readouterr() == ("", "")


def test_exit_code_2_bad_usage(spark, small_table, capsys):
    """argparse's errors (a missing argument, an unknown option) and options the command cannot use
    exit with 2; the latter as one `deltaspark: ...` line."""
    for argv in (["history"], ["history", small_table.path, "--no-such-option"], ["nothing"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
        assert "usage: deltaspark" in capsys.readouterr().err
    assert main(["optimize", small_table.path, "--purge", "--zorder-by", "id"]) == 2
    printed = capsys.readouterr()
    assert printed.err == "deltaspark: optimize: --purge and --zorder-by are separate runs\n"
    assert printed.out == ""


def test_every_command_takes_json_and_quiet():
    """--json, --quiet and --verbose after any command (and before it)."""
    parser = build_parser()
    leaves = {}
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # noqa: SLF001
        nested = sub._subparsers._group_actions[0].choices if sub._subparsers else {}  # noqa: SLF001
        leaves.update({f"{name} {child}": leaf for child, leaf in nested.items()} or {name: sub})
    assert len(leaves) > 20 and "iceberg export" in leaves and "demo" in leaves
    for name, leaf in leaves.items():
        assert {"--json", "--quiet", "-q", "--verbose"} <= set(leaf._option_string_actions), name  # noqa: SLF001
    given = parser.parse_args(["history", "p", "--json", "--quiet"])
    assert given.json and given.quiet and not given.verbose
    before = parser.parse_args(["--json", "-q", "history", "p"])
    assert before.json and before.quiet


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_and_never_in_the_output(spark, small_table, capsys, monkeypatch):
    """deltaspark's own progress (phase, then cleared) on stderr when it is a terminal; stdout holds
    only the result; --quiet shows no progress."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["checkpoint", small_table.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2
    shown = terminal.getvalue()
    assert "deltaspark checkpoint: " in shown and "Writing the checkpoint of version 2" in shown
    assert shown.endswith("\r\x1b[K")  # the line taken away before the result was printed
    terminal.seek(0)
    terminal.truncate()
    assert main(["cleanup", small_table.path, "--dry-run", "--quiet"]) == 0
    assert terminal.getvalue() == "" and capsys.readouterr().out == ""


def test_demo_in_process(spark, tmp_path, capsys):
    assert main(["demo", "--path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Built a sample Delta table" in out and "5 file(s) at version 3" in out
    assert "4 file(s) at version 1" in out and "Transactions: {'demo-stream': 7}" in out


# A JVM's own notice (Spark 4 loads the incubating vector module), not a log line of Spark's.
JVM_NOTICES = ("WARNING: Using incubator modules",)


@pytest.mark.one_suite("3.5")  # the entry point; the demo itself runs in process on both suites
def test_console_script_runs_the_demo_end_to_end(tmp_path):
    """The console script as a user runs it, in a JVM of its own: stdout is exactly the JSON asked
    for (no Spark WARN lines, no progress bars), stderr holds no Spark log line at all."""
    exe = shutil.which("deltaspark", path=os.path.dirname(sys.executable)) or shutil.which("deltaspark")
    assert exe, "the `deltaspark` console script is not installed"
    argv = [exe, "demo", "--path", str(tmp_path), "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert result["describe"]["version"] == 3 and len(result["files"]) == 5
    assert len(result["filesAtVersion1"]) == 4 and result["transactions"] == {"demo-stream": 7}
    assert [(h["version"], h["operation"]) for h in result["history"]] == [(v, "WRITE") for v in (3, 2, 1, 0)]
    assert "[Stage" not in proc.stdout + proc.stderr
    noise = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(JVM_NOTICES)]
    assert noise == [], proc.stderr[-3000:]  # no WARN/INFO lines, no "Setting default log level"


def test_version_and_help_name_everything(capsys):
    from deltaspark import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"deltaspark {__version__} (pyspark ")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    commands = ("describe", "files", "history", "checkpoint", "cleanup", "set-properties")
    more = ("unset-properties", "add-feature", "upgrade-protocol", "delete", "restore", "convert", "demo")
    for command in (*commands, *more):
        assert re.search(rf"\n    {command}\s", out), command
    assert "--version" in out


def test_files_of_a_column_mapped_table_show_logical_names(spark, conformance, capsys):
    """Physical names (`col-5f42...`) mean nothing to a reader: partition values by logical name,
    nulls as null, long paths cut to a readable width."""
    path = str(conformance / "data-reader-partition-values-column-mapping-name")
    assert main(["files", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3 file(s) at version 0" and lines[1].split()[:3] == [
        "path",
        "size",
        "partitionValues",
    ]
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines[3:]]
    assert all(len(row[0]) <= 72 for row in cells)  # physical-name paths cut to a readable width
    partitions = [row[2] for row in cells]
    assert any("as_int=0" in p for p in partitions) and any(
        "as_int=null, as_long=null" in p for p in partitions
    )
    assert not any("col-" in p for p in partitions)  # logical names, not physical ones
    assert main(["files", path, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["partitionValues"]["as_int"] for r in rows} == {"0", "1", None}


def test_checkpoint_rerun_says_it_was_already_there(spark, small_table, capsys):
    assert main(["checkpoint", small_table.path]) == 0
    first = capsys.readouterr().out
    assert first.startswith("Wrote a classic checkpoint of version 2")
    assert main(["checkpoint", small_table.path]) == 0
    again = capsys.readouterr().out
    assert "Wrote" not in again and "already there" in again
    assert "00000000000000000002.checkpoint.parquet  (already there, kept)" in again


def test_table_changes_from_the_command_line(spark, small_table, capsys):
    path = small_table.path
    assert main(["set-properties", path, "delta.enableChangeDataFeed=true", "delta.appendOnly=false"]) == 0
    assert "Committed version 3 (SET TBLPROPERTIES)" in capsys.readouterr().out
    assert main(["unset-properties", path, "delta.appendOnly"]) == 0
    assert "Committed version 4 (UNSET TBLPROPERTIES)" in capsys.readouterr().out
    assert main(["unset-properties", path, "delta.nothing", "--if-exists"]) == 0
    assert "nothing committed" in capsys.readouterr().out
    assert main(["add-feature", path, "v2Checkpoint"]) == 0
    assert "Committed version 5 (UPGRADE PROTOCOL)" in capsys.readouterr().out
    assert main(["add-feature", path, "v2Checkpoint"]) == 0
    assert "already supports" in capsys.readouterr().out
    assert main(["set-properties", path, "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["upgrade-protocol", path, "1", "2"]) == 2
    assert "downgrade" in capsys.readouterr().err
    assert main(["set-properties", path, "delta.appendOnly=false", "--json"]) == 0
    commit = json.loads(capsys.readouterr().out)
    assert (commit["committed"], commit["version"], commit["operation"]) == (True, 6, "SET TBLPROPERTIES")
    assert main(["add-feature", path, "v2Checkpoint", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["committed"] is False
    assert main(["repair", path, "--json"]) == 0  # the log builder's files are not there
    assert json.loads(capsys.readouterr().out)["references"] == 1
    assert main(["describe", path, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["version"] == 6 and "changeDataFeed" in facts["tableFeatures"]


def test_delete_and_restore_from_the_command_line(spark, tmp_path, capsys):
    from deltaspark.table import write

    path = str(tmp_path / "t")
    write(spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string").coalesce(1), path)
    assert main(["delete", path, "id = 1"]) == 0
    assert (
        "Committed version 1 (DELETE): 1 row(s) deleted, 1 file(s) removed, 1 rewritten"
        in capsys.readouterr().out
    )
    assert main(["delete", path, "id = 99"]) == 0
    assert "nothing committed" in capsys.readouterr().out
    assert main(["restore", path, "--version", "0"]) == 0
    assert "Committed version 2 (RESTORE): table_size_after_restore=" in capsys.readouterr().out
    assert main(["restore", path]) == 2
    assert "--version or --timestamp" in capsys.readouterr().err
    assert main(["delete", path, "id = 2", "--json"]) == 0
    commit = json.loads(capsys.readouterr().out)
    assert (commit["version"], commit["operation"], commit["metrics"]["numDeletedRows"]) == (3, "DELETE", 1)
    assert main(["restore", path, "--version", "2", "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert restored["version"] == 4 and restored["metrics"]["num_restored_files"] == 1
    assert main(["optimize", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["committed"] is False  # one file: nothing to compact
    plain = tmp_path / "plain"
    spark.createDataFrame([(1, "a")], "id long, p string").write.partitionBy("p").parquet(str(plain))
    assert main(["convert", str(plain), "--partition-schema", "p STRING"]) == 0
    assert "is a Delta table at version 0: 1 file(s)" in capsys.readouterr().out
    assert main(["iceberg", "export", str(plain), "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert (exported["deltaVersion"], exported["dataFiles"], exported["written"]) == (0, 1, True)
    assert main(["iceberg", "export", str(plain)]) == 0
    assert "already describes version 0; nothing written" in capsys.readouterr().out


def test_a_driver_the_cli_starts_gets_a_larger_code_cache_unless_the_user_sets_one():
    from deltaspark.cli import driver_java_options

    assert driver_java_options("-Dlog", None) == "-Dlog -XX:ReservedCodeCacheSize=512m"
    assert driver_java_options("-Dlog", "-Dx=1") == "-Dlog -XX:ReservedCodeCacheSize=512m -Dx=1"
    mine = "-XX:ReservedCodeCacheSize=1g"
    assert driver_java_options("-Dlog", mine) == f"-Dlog {mine}"

"""notebooks/quickstart.ipynb runs top to bottom on the demo table and on other tables, and is
committed with the outputs of a run."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import CONNECT, REPO

NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"
AUDIT_NOTEBOOK = REPO / "notebooks" / "audit.ipynb"
ICEBERG_NOTEBOOK = REPO / "notebooks" / "iceberg.ipynb"
pytestmark = pytest.mark.skipif(CONNECT, reason="each run starts a kernel with its own classic session")


def run(
    tmp_path: Path, table: str | None, path: Path = NOTEBOOK, extra: dict[str, str] | None = None
) -> tuple[str, list]:
    notebook = nbformat.read(path, as_version=4)
    env = dict(os.environ) | (extra or {})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    if table:
        env["DELTASPARK_TABLE"] = table
    else:
        env.pop("DELTASPARK_TABLE", None)
    previous = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(
            notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(previous)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert errors == []
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    return text, outputs


def images(outputs: list) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.one_suite("3.5")  # the 4.x suite is the longer one
def test_quickstart_on_the_demo_table(tmp_path):
    text, outputs = run(tmp_path, None)
    assert "version 3" in text and "148 rows" in text
    assert "files scanned for the filter: 2 of 5" in text  # the busiest region, apac
    assert "rows at version 2: 138 - at version 3: 148" in text
    assert "as of" in text and ": version 2" in text  # a version's own timestamp finds that version
    assert images(outputs) == 1  # rendered inline, saved with the notebook


@pytest.mark.one_suite("3.5")  # every notebook runs there: the 4.x suite is the longer one
@pytest.mark.parametrize(
    ("name", "facts"),
    [("data-reader-partition-values-column-mapping-name", ["column mapping name", "files scanned"])],
)
def test_quickstart_on_other_tables(tmp_path, conformance, name, facts):
    """No column of the demo table is assumed: the filter, plots and time travel come from the table."""
    text, outputs = run(tmp_path, str(conformance / name))
    for fact in facts:
        assert fact in text
    assert images(outputs) == 1


def test_quickstart_is_committed_with_its_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code), "run the notebook and save it with its outputs"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert images([o for c in code for o in c.outputs]) == 1


@pytest.mark.one_suite("3.5")  # the 4.x suite is the longer one
def test_audit_notebook_finds_the_damage_it_makes(tmp_path):
    text, outputs = run(tmp_path, None, AUDIT_NOTEBOOK)
    assert "FAILED" in text and "files.exist" in text and "data file does not exist" in text
    assert "numFiles is 1" in text  # the checksum it edited
    assert "stray.parquet" in text  # the orphan, in the findings table
    assert "dataFileMissing" in text  # the repair dry run
    assert images(outputs) == 1


def test_audit_notebook_is_committed_with_its_outputs():
    notebook = nbformat.read(AUDIT_NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code if "unpersist" not in c.source), "run the notebook and save it"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert images([o for c in code for o in c.outputs]) == 1


# The Iceberg notebook runs in the 3.5 suite (version-independent, like the others; the 4.x suite
# is the longer one). Its table: equality deletes over five snapshots, an identity partition.
@pytest.mark.one_suite("3.5")
def test_iceberg_notebook_reads_snapshots_deletes_and_prunes(tmp_path):
    from tests.iceberg_conformance import root

    table = root() / "duckdb-equality_deletes_partitioned"
    text, _ = run(tmp_path, None, ICEBERG_NOTEBOOK, {"DELTASPARK_ICEBERG_TABLE": str(table)})
    assert "format v2, 5 snapshots" in text and "\n3 rows" in text
    counts = [int(n) for n in re.findall(r"\): (\d+) rows", text)]
    assert counts == [4, 3, 2, 4, 3]  # the source project's figures, oldest snapshot first
    assert "data files scanned 1 of 6" in text  # identity partition 'a': one file of six
    assert "equalityDeleteFiles  3" in text  # the CLI's describe


def test_iceberg_notebook_is_committed_with_its_outputs():
    notebook = nbformat.read(ICEBERG_NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code), "run the notebook and save it with its outputs"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]

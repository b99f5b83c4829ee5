"""notebooks/quickstart.ipynb runs top to bottom (on the demo table)."""

from __future__ import annotations

import os
import sys

import nbformat
from nbclient import NotebookClient

from tests.conftest import REPO


def test_quickstart_notebook_runs_top_to_bottom(tmp_path):
    notebook = nbformat.read(REPO / "notebooks" / "quickstart.ipynb", as_version=4)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert errors == []
    text = "".join(
        o.get("text", "")
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream"
    )
    assert "version 3" in text and "148 rows" in text and "rows at version 1: 150" in text
    assert "files scanned for the filter: 2 of 5" in text

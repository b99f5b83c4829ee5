"""The package's layers: lower layers never import higher ones, and no module imports itself back.

Every import counts, including the lazy ones inside functions and those under `TYPE_CHECKING`:
a lazy import is still a dependency, and hiding a circle inside a function is how circles start.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "deltaspark"

# Lowest first. A module may import modules of its own layer or of lower ones.
LAYERS = [
    ("errors",),
    ("display",),  # notebook HTML of the objects: imports none of them
    ("spark_compat",),
    ("spark_errors",),
    ("storage", "file_io"),  # file_io: pyarrow.fs from the session's Hadoop settings
    ("catalog",),  # names -> locations in Spark's session catalog
    ("features",),
    ("log",),
    ("read",),
    ("iceberg",),  # the Iceberg reader: below the Delta snapshot, so conversions can use both
    ("snapshot",),
    ("transaction",),
    ("maintenance",),
    ("operations",),
    ("conversion",),  # Delta <-> Iceberg: the Iceberg reader and Delta's write path, above both
    ("audit",),
    ("table",),
    # Spark's own faces: the streaming sink commits through `table`; the `delta` data source
    ("streaming", "datasource"),
    ("demo",),
    ("cli_output", "cli_iceberg", "cli"),
    ("__init__",),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _rank(module: str) -> int:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for rank, names in enumerate(LAYERS):
        if head in names:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The deltaspark modules `module` imports, resolved to modules (not names in them)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != "deltaspark":
                continue
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != module:
                found.add(target)
    return found


@functools.cache  # parsed once per run, not once per parametrized module
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # Importing a submodule runs its packages' __init__ first; a package's __init__ that imports
    # its own submodules is not a circle (`deltaspark/__init__.py` re-exporting the facade).
    return {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}


def test_every_module_is_in_a_layer() -> None:
    for module in _modules():
        _rank(module)


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_import_of_a_higher_layer(module: str) -> None:
    graph = _graph()
    upward = sorted(t for t in graph[module] if _rank(t) > _rank(module))
    assert not upward, f"{module} (layer {LAYERS[_rank(module)]}) imports higher layers: {upward}"


def test_no_import_circles() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: a lazy, relative import of a higher layer is caught."""
    sample = PACKAGE / "log" / "replay.py"
    tree = _imports("deltaspark.log.replay", sample, set(_modules()))
    assert "deltaspark.log.action_schemas" in tree
    fake = tmp_path / "mod.py"
    fake.write_text("def f():\n    from ..table import DeltaTable\n")
    found = _imports("deltaspark.log.mod", fake, {"deltaspark.table", "deltaspark.log.mod"})
    assert found == {"deltaspark.table"}

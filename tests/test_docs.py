"""The README and the documentation site (docs/, mkdocs.yml) hold together: examples that parse and
name what the package has, links that resolve, every page in the navigation, the plots shown.

No Spark session: these read files and import the package only. CI also builds the site with
`mkdocs build --strict` (.ci/run), which checks the anchors and the API reference.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
# Another page of the site that may not exist yet; once it does, it must be in the navigation.
OPTIONAL_PAGES = {"catalogs.md"}


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text (every one must be a whole, parseable program)."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def without_code(text: str) -> str:
    """The text outside fenced blocks and inline code, where a Markdown link is a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def relative_links(text: str) -> list[str]:
    """Targets of [text](target) and ![alt](target) that point into the repository."""
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", without_code(text))
    return [t for t in targets if not re.match(r"^(?:[a-z][a-z0-9+.-]*:|#)", t)]


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav lists (`- Title: page.md`), read without a YAML library (the 3.5
    suite's venv has none)."""
    config = (REPO / "mkdocs.yml").read_text()
    nav = config.split("\nnav:\n", 1)[1]
    nav = re.split(r"\n(?=\S)", nav, maxsplit=1)[0]  # up to the next top-level key
    return re.findall(r"^\s*-\s*(?:[^\n]*?:\s*)?([\w./-]+\.md)\s*$", nav, flags=re.M)


def test_every_python_block_parses():
    blocks = 0
    for path in markdown_files():
        for i, block in enumerate(python_blocks(path.read_text())):
            blocks += 1
            try:
                ast.parse(block)
            except SyntaxError as exc:
                pytest.fail(f"{path.relative_to(REPO)}, python block {i + 1}: {exc}")
    assert blocks >= 10  # the pages do hold examples: a broken fence would hide them all


def test_the_examples_name_what_the_package_has():
    """`DeltaTable.<name>`, `deltaspark.<name>`, `from deltaspark... import <name>` and methods
    called on a table opened with `DeltaTable.forPath` exist (importing deltaspark starts no Spark)."""
    import deltaspark
    from deltaspark import DeltaTable

    missing, seen = [], 0
    for path in markdown_files():
        for block in python_blocks(path.read_text()):
            tree = ast.parse(block)
            tables = {  # names bound to a DeltaTable: dt = DeltaTable.forPath(...)
                target.id
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id == "DeltaTable"
                and node.value.func.attr in ("forPath", "convertToDelta")
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    owner = {"DeltaTable": DeltaTable, "deltaspark": deltaspark}.get(node.value.id)
                    if owner is None and node.value.id in tables:
                        owner = DeltaTable
                    if owner is not None:
                        seen += 1
                        if not hasattr(owner, node.attr):
                            missing.append(f"{path.name}: {node.value.id}.{node.attr}")
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "deltaspark":
                    module = importlib.import_module(node.module)
                    for alias in node.names:
                        seen += 1
                        if not hasattr(module, alias.name):
                            missing.append(f"{path.name}: from {node.module} import {alias.name}")
    assert seen >= 30
    assert not missing, missing


def test_every_relative_link_resolves_to_a_file():
    broken, seen = [], 0
    for path in markdown_files():
        for target in relative_links(path.read_text()):
            seen += 1
            file = target.split("#", 1)[0]
            if not (path.parent / file).resolve().is_file():
                broken.append(f"{path.relative_to(REPO)} -> {target}")
    assert seen >= 50
    assert not broken, broken


def test_every_page_is_in_the_navigation():
    nav = nav_pages()
    assert len(nav) == len(set(nav)), "a page listed twice"
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not on_disk - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - set(nav))}"
    listed_missing = set(nav) - on_disk - OPTIONAL_PAGES
    assert not listed_missing, f"mkdocs.yml's nav lists pages that do not exist: {sorted(listed_missing)}"
    assert nav[0] == "index.md"


def test_the_plots_shown_exist_and_are_rendered_by_the_script():
    script = (DOCS / "render_plots.py").read_text()
    rendered = set(re.findall(r'OUT / "([\w-]+\.png)"', script))
    shown = {
        target.split("/")[-1]
        for path in markdown_files()
        for target in relative_links(path.read_text())
        if target.startswith("img/") and target.endswith(".png")
    }
    assert shown, "the benchmarks page shows no plot"
    assert shown <= rendered, f"plots no script renders: {sorted(shown - rendered)}"
    for name in sorted(rendered):
        png = DOCS / "img" / name
        assert png.is_file(), f"docs/img/{name} is not committed: run docs/render_plots.py"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert name in shown, f"docs/img/{name} is rendered but no page shows it"


def error_hierarchy() -> str:
    """The exception tree of deltaspark.errors as docs/errors.md lists it (under "The hierarchy").
    After adding an error class, paste this into the page:

        .venv/bin/python -c 'from tests.test_docs import error_hierarchy; print(error_hierarchy())'
    """
    import inspect

    import deltaspark
    from deltaspark import errors

    classes = [
        c
        for c in vars(errors).values()
        if inspect.isclass(c) and issubclass(c, errors.DeltaSparkError) and c.__module__ == errors.__name__
    ]
    children: dict[type | None, list[type]] = {}
    for c in classes:
        parents = [b for b in c.__bases__ if issubclass(b, errors.DeltaSparkError)]
        children.setdefault(parents[0] if parents else None, []).append(c)
    lines: list[str] = []

    def add(c: type, depth: int) -> None:
        also = [
            b.__name__
            for b in c.__bases__
            if b is not Exception and not issubclass(b, errors.DeltaSparkError)
        ]
        notes = ([f"also a `{also[0]}`"] if also else []) + (
            [] if c.__name__ in deltaspark.__all__ else ["only from `deltaspark.errors`"]
        )
        lines.append("    " * depth + f"- `{c.__name__}`" + (f" ({'; '.join(notes)})" if notes else ""))
        for child in children.get(c, []):
            add(child, depth + 1)

    for root in children[None]:
        add(root, 0)
    return "\n".join(lines)


def test_the_errors_page_lists_every_error_class_under_its_parent():
    page = (DOCS / "errors.md").read_text()
    listed = page.split("### The hierarchy\n", 1)[1].split("\n#", 1)[0]
    listed = "\n".join(line for line in listed.splitlines() if line.startswith(("-", " ")))
    assert listed == error_hierarchy(), "docs/errors.md's hierarchy is stale: see error_hierarchy()"


def test_the_api_reference_documents_every_export():
    """Each name `deltaspark` exports has a `::: deltaspark.<name>` entry in docs/api.md, or is an
    error documented with the whole `deltaspark.errors` module."""
    import deltaspark

    entries = set(re.findall(r"^::: ([\w.]+)\s*$", (DOCS / "api.md").read_text(), flags=re.M))
    assert "deltaspark.DeltaTable" in entries
    missing = [
        name
        for name in deltaspark.__all__
        if name != "__version__"
        and f"deltaspark.{name}" not in entries
        and getattr(getattr(deltaspark, name), "__module__", None) not in entries
    ]
    assert not missing, f"exports without an entry in docs/api.md: {missing}"

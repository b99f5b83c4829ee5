"""The README's set-up commands are the ones CI runs."""

from __future__ import annotations

import re

from tests.conftest import REPO

TEST_COMMAND = ".venv/bin/python -m pytest -q -p no:cacheprovider"


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", setup, flags=re.S)
    assert len(commands) == 2
    demo, tests = commands
    assert demo.endswith("deltaspark demo") and "pip install -e ." in demo
    assert tests.endswith(TEST_COMMAND) and "pip install -e '.[test]'" in tests
    assert TEST_COMMAND in (REPO / ".ci" / "run").read_text()


def test_ci_runs_the_suite_on_pyspark_4_and_3_5():
    ci = (REPO / ".ci" / "run").read_text()
    assert ".venv35/bin/python -m pytest -q -p no:cacheprovider" in ci
    assert "'pyspark[connect]>=3.5,<3.6'" in ci
    # The two suites run side by side; the run fails when either does.
    assert ci.index(".venv35/bin/python -m pytest") < ci.index("\nwait\n") and TEST_COMMAND in ci
    assert '[ "$rc4" = 0 ] && [ "$(cat "$logs/35.rc")" = 0 ]' in ci.strip().splitlines()[-1]


def test_readme_never_tells_users_to_pip_install_from_pypi():
    """The package is not on PyPI: every install command shown must be one that works."""
    install = re.compile(r"pip install (?:-\S+ )*deltaspark(?:\s|$)")
    pages = [REPO / "README.md", REPO / "notebooks" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert len(pages) > 3  # the documentation site's pages are checked too
    for path in pages:
        blocks = re.findall(r"```.*?```", path.read_text(), flags=re.S)
        assert not [b for b in blocks if install.search(b)], path.name
        assert "PyPI `deltaspark`" not in path.read_text()
    for path in REPO.glob("notebooks/*.ipynb"):
        assert not install.search(path.read_text()), path.name

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

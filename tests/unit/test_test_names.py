"""pytest imports test modules by their file's name (rootdir import mode, no __init__.py): two test
files of one name in tests/ and tests/unit/ break any run that collects both (`pytest -m lab`,
`-m docker`), though `make unit`'s two runs, each of one folder, pass (CI of 488b247)."""

from __future__ import annotations

import collections
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_name_is_unique_under_tests() -> None:
    names = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        names[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}

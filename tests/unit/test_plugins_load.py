"""Each filter plugin loads as Ansible loads it: by its path, alone, in a fresh interpreter whose
sys.path does not hold filter_plugins/ (the unit tests' conftest puts it there, which once hid a
plugin that imported a sibling without adding its folder: Ansible skipped it with a warning, and
every canary filter was gone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PLUGINS = sorted((Path(__file__).resolve().parents[2] / "filter_plugins").glob("*.py"))
LOAD = """
import importlib.util, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("ansible_plugin_under_test", path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module  # as Ansible's loader does (dataclasses look their module up there)
spec.loader.exec_module(module)
assert callable(module.FilterModule().filters)
"""


@pytest.mark.parametrize("plugin", PLUGINS, ids=[p.stem for p in PLUGINS])
def test_a_filter_plugin_loads_by_its_path_alone(plugin, tmp_path):
    done = subprocess.run([sys.executable, "-c", LOAD, str(plugin)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""}, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]

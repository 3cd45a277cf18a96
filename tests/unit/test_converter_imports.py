"""ftnative.converter_deps: each import line tried, what fails installed from its requirements (a
local project here, no index), tried again, and the folder complete only with its manifest.
tests/test_converter_deps.py runs it in an image through the role, with bfloat16 from the index."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ftdomain.ft.commands import ft_converter_imports

ROOT = Path(__file__).resolve().parents[2]
# The module records the CFLAGS its build was given.
SETUP = """\
import os
from setuptools import setup
with open("ftfleet_probe_pkg.py", "w") as module:
    module.write("CFLAGS = %r\\n" % os.environ.get("CFLAGS", ""))
setup(name="ftfleet_probe_pkg", version="1.0", py_modules=["ftfleet_probe_pkg"])
"""


def run(target: Path, imports: list[dict]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftnative.converter_deps", "--target", str(target), "--imports", json.dumps(imports)],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A local project providing module ftfleet_probe_pkg, whose value says what CFLAGS it was given."""
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "setup.py").write_text(SETUP)
    return src


def test_installs_what_fails_and_says_what_was_there(tmp_path: Path, project: Path) -> None:
    target = tmp_path / "deps"
    probe = {"statement": "import ftfleet_probe_pkg", "requirements": [str(project)], "cflags": "-include memory"}
    imports = [{"statement": "import json"}, probe]
    done = run(target, imports)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["installed"], report["present"]) == (["ftfleet_probe_pkg==1.0"], ["import json"])
    manifest = json.loads((target / "ftfleet-converter-deps.json").read_text())
    assert manifest["imports"] == imports
    # built with the family's flags
    assert "CFLAGS = '-include memory'" in (target / "ftfleet_probe_pkg.py").read_text()
    assert not (tmp_path / "deps.partial").exists()


def test_an_import_no_requirement_provides_fails_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "deps"
    done = run(target, [{"statement": "from ftfleet_no_such_module import thing"}])
    assert done.returncode == 2
    assert "`from ftfleet_no_such_module import thing` fails (ModuleNotFoundError" in done.stderr, done.stderr
    assert not target.exists()
    assert not (tmp_path / "deps.partial").exists()


def test_a_requirement_that_does_not_provide_its_import_fails(tmp_path: Path, project: Path) -> None:
    done = run(tmp_path / "deps", [{"statement": "import ftfleet_other_module", "requirements": [str(project)]}])
    assert done.returncode == 1
    assert f"pip installed ftfleet_probe_pkg==1.0 for {project}, yet `import ftfleet_other_module` fails" in done.stderr
    assert not (tmp_path / "deps").exists()


def test_markers_that_choose_nothing_fail_naming_the_requirements(tmp_path: Path, project: Path) -> None:
    never = f'{project}; python_version < "3"'
    done = run(tmp_path / "deps", [{"statement": "import ftfleet_probe_pkg", "requirements": [never]}])
    assert done.returncode == 1
    assert f"pip installed nothing for {never}, yet `import ftfleet_probe_pkg` fails" in done.stderr, done.stderr


def test_a_failing_pip_says_so(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-project")
    done = run(tmp_path / "deps", [{"statement": "import ftfleet_x", "requirements": [missing]}])
    assert done.returncode == 1
    assert "pip could not install" in done.stderr, done.stderr


def test_llama_declares_void_mains_converter_imports() -> None:
    imports = ft_converter_imports("llama")
    bf16 = next(i for i in imports if i["statement"] == "from bfloat16 import bfloat16")
    # 1.1 from source on the 22.04 image's Python 3.8, 1.2.0's wheels from 3.9
    assert bf16["requirements"] == ['bfloat16==1.1; python_version < "3.9"', 'bfloat16==1.2.0; python_version >= "3.9"']
    assert bf16["cflags"] == "-include memory"
    assert {"statement": "from transformers import LlamaForCausalLM", "requirements": [], "cflags": ""} in imports
    assert all(ft_converter_imports(family) == [] for family in ("gpt", "gptj", "gptneox", "bloom"))

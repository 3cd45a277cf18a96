"""Shared helpers: run ansible-playbook from the project root with its ansible.cfg."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Ansible's module_utils replace sys.intern when first imported (the fleet_inputs filter uses
# Ansible's ArgumentSpecValidator in this process), and torch._dynamo refuses to load after that
# ("substitute_in_graph expects a function but got SysInternPatch"): load it first, in every
# pytest worker, wherever torch is installed.
with contextlib.suppress(ImportError):
    import torch._dynamo  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.update(extra)
    return env


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}  # fmt: skip


def git(*args: str, cwd: Path) -> str:
    """git ARGS in `cwd` (a test's repository, its HOME there: no user configuration); stdout."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**GIT_ENV, "HOME": str(cwd)}, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def run_playbook(*args: str | os.PathLike, **env: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook ARGS from the project root; output captured as text."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *map(str, args)],
        cwd=ROOT,
        env=ansible_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def failed_tasks(out: str, tail: int = 2000) -> str:
    """A failed run's output, for an assertion message: each failing task's heading and its
    error (fatal:/failed: lines and what follows, up to the next task), then the output's tail.
    With many hosts, the tail alone can miss the one host whose task failed early."""
    lines, picked, heading, keep = out.splitlines(), [], "", 0
    for line in lines:
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            heading, keep = line, 0
        elif line.startswith(("fatal: [", "failed: [")) or "[ERROR]: Task failed" in line:
            picked += ["", heading, line]
            keep = 40
        elif keep:
            picked.append(line)
            keep -= 1
    return "\n".join(picked) + "\n...\n" + out[-tail:]


@pytest.fixture
def playbook(tmp_path):
    """Write a playbook into tmp_path and return its path: playbook(yaml_text)."""

    def write(text: str, name: str = "play.yml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


# The inventory's model for a role entry point that needs one (its files are the test's own).
TINY_MODEL = {"name": "tiny", "family": "gpt", "data_type": "fp16", "source": {"url": "file:///x", "revision": "main"}}

ENTRY_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars: {play_vars}
  tasks:
    - ansible.builtin.import_role:
        name: {role}
        tasks_from: {entry}
    - ansible.builtin.copy:
        content: "{{{{ ({published}) | to_json }}}}"
        dest: "{{{{ entry_out }}}}"
        mode: "0644"
"""


def role_entry_result(tmp_path: Path, role: str, entry: str, published: str, play_vars: dict, **extra) -> Any:
    """Run one entry point of a role on localhost (with `play_vars` in the play and `extra` as
    extra vars) and return `published`, a Jinja expression of what it published, as JSON reads it."""
    play = tmp_path / f"{role}-{entry}.yml"
    play.write_text(ENTRY_PLAY.format(play_vars=json.dumps(play_vars), role=role, entry=entry, published=published))
    out, extra_file = tmp_path / f"{role}-{entry}.json", tmp_path / f"{role}-{entry}-extra.json"
    out.unlink(missing_ok=True)
    extra_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, "entry_out": str(out), **extra}))
    done = run_playbook(play, "-i", "localhost,", "-e", f"@{extra_file}")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


# The longest files of `make unit` first (their seconds in the run of c0b18e5 on this project's
# machines): pytest-xdist's --dist loadfile hands each worker a file at a time in the order
# collected, so a long file collected last (test_triton_model_repo.py, alphabetically) ran alone
# on one worker at the end while the other had nothing left.
LONGEST_FIRST = ("test_triton_model_repo.py",  # 272
                 "test_preflight.py",  # 204
                 "test_ft_convert.py",  # 122
                 "test_continuation.py",  # 115
                 "test_gateway.py")  # 94  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST before the others, each file's tests in their own order."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the others keep pytest's order

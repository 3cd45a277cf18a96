"""The lab's model ships in the repository (lab/models/tiny-gpt2), so that `make lab` needs
neither torch nor transformers: scripts/make-tiny-model publishes it as it is (--from), and
makes it again from the arguments it records (--regenerate). Here: the regenerated model writes
the same completion as the shipped one (transformers' greedy generate(), the prompt `make lab`
prints), the shipped one writes words, and publishing works where torch and transformers cannot
be imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from tritonlocal import greedy_completion

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SHIPPED = ROOT / "lab" / "models" / "tiny-gpt2"
SCRIPT = ROOT / "scripts" / "make-tiny-model"
PROMPT, TOKENS = "Every role", 16  # scripts/lab's prompt and length


def completion(checkpoint: Path) -> str:
    return greedy_completion(checkpoint, PROMPT, TOKENS)


def test_the_regenerated_lab_model_writes_the_same_completion(tmp_path):
    made = subprocess.run([sys.executable, str(SCRIPT), "--regenerate", str(SHIPPED), "--export", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads((tmp_path / "made-by.json").read_text()) == json.loads((SHIPPED / "made-by.json").read_text())
    shipped, again = completion(SHIPPED), completion(tmp_path)
    print(f"shipped: {shipped!r}; regenerated: {again!r}")
    same = [p.name for p in sorted(SHIPPED.iterdir()) if (tmp_path / p.name).read_bytes() == p.read_bytes()]
    print(f"byte-identical files: {same}")
    assert again == shipped
    # words of the text it learned from, not noise
    vocabulary = set(re.findall(r"[A-Za-z]+", (ROOT / "lab" / "corpus.md").read_text()))
    words = re.findall(r"[A-Za-z]+", shipped)
    assert len(words) >= 6
    assert sum(w in vocabulary for w in words) >= 0.8 * len(words), shipped


def test_publishing_the_shipped_model_needs_neither_torch_nor_transformers(tmp_path):
    blocked = tmp_path / "blocked"
    for name in ("torch", "transformers", "tokenizers"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocked)}
    command = [sys.executable, str(SCRIPT), "--from", str(SHIPPED), "--name", "tiny-gpt2", "--dest", str(tmp_path)]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    commit = first.stdout.strip()
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert again.stdout.strip() == commit  # the same files: nothing to do
    clone = tmp_path / "clone"
    git_env = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run(["git", "clone", "-q", f"file://{tmp_path}/tiny-gpt2.git", str(clone)], env=git_env, check=True)
    for shipped in SHIPPED.iterdir():
        assert (clone / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name  # LFS objects fetched
    lfs = subprocess.run(["git", "lfs", "ls-files", "-n"], cwd=clone, capture_output=True, text=True, check=True)
    assert lfs.stdout.split() == ["model.safetensors"]
    wrong = subprocess.run([sys.executable, str(SCRIPT), "--from", str(tmp_path / "nothing"), "--name", "x",
                            "--dest", str(tmp_path)], capture_output=True, text=True, check=False)  # fmt: skip
    assert wrong.returncode == 2
    assert "not a checkpoint (no config.json)" in wrong.stderr

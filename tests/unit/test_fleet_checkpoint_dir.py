"""A checkpoint in a directory on the controller: read as preflight reads a git source, and
identified by its files' names, sizes and times."""

from __future__ import annotations

import json
import os

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.checkpoint_dir import (
    fleet_checkpoint_dir,
    fleet_checkpoint_dir_files,
    fleet_checkpoint_dir_id,
    fleet_checkpoint_dir_problems,
)


@pytest.fixture
def checkpoint(tmp_path):
    root = tmp_path / "llama"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2}))
    (root / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    (root / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 1, "content": "<s>"},
                                                                      {"id": 2, "content": "</s>"}]}))  # fmt: skip
    (root / "model.safetensors").write_bytes(b"\0" * 1000)
    (root / "sub" / "notes.txt").write_text("x")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def test_the_listing_is_what_preflight_reads_from_git(checkpoint):
    listing = fleet_checkpoint_dir(str(checkpoint))
    assert listing["config"]["model_type"] == "llama"
    assert {"name": "model.safetensors", "bytes": 1000, "lfs": False} in listing["files"]
    assert [f["name"] for f in listing["files"]] == sorted(f["name"] for f in listing["files"])
    assert "sub/notes.txt" not in [f["name"] for f in listing["files"]]  # top level, as git ls-tree
    assert listing["tokenizer"] == {"bos": ["<s>", 1], "eos": ["</s>", 2]}
    assert listing["commit"] == fleet_checkpoint_dir_id(str(checkpoint))
    assert len(listing["commit"]) == 40
    assert fleet_checkpoint_dir_problems(str(checkpoint)) == []


def test_every_file_is_listed_but_git_is_not(checkpoint):
    files = fleet_checkpoint_dir_files(str(checkpoint))
    assert files == sorted(files)
    assert "sub/notes.txt 1" in files
    assert "model.safetensors 1000" in files
    assert not [f for f in files if f.startswith(".git")]


def test_the_identity_changes_with_a_file_and_not_with_git(checkpoint):
    before = fleet_checkpoint_dir_id(str(checkpoint))
    (checkpoint / ".git" / "HEAD").write_text("ref: refs/heads/other\n")
    assert fleet_checkpoint_dir_id(str(checkpoint)) == before
    weights = checkpoint / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # rewritten, same size
    assert fleet_checkpoint_dir_id(str(checkpoint)) != before
    changed = fleet_checkpoint_dir_id(str(checkpoint))
    (checkpoint / "extra.json").write_text("{}")
    assert fleet_checkpoint_dir_id(str(checkpoint)) != changed


def test_meta_llama_weights_are_refused_with_the_converter_named(tmp_path):
    (tmp_path / "params.json").write_text("{}")
    (tmp_path / "consolidated.00.pth").write_bytes(b"\0")
    (problem,) = fleet_checkpoint_dir_problems(str(tmp_path))
    assert "Meta's original LLaMA weights" in problem
    assert "convert_llama_weights_to_hf.py" in problem


@pytest.mark.parametrize(
    ("path", "words"),
    [("relative/dir", "must be an absolute path"), ("/no/such/dir", "no such directory on the controller")],
)
def test_a_path_that_is_no_directory_is_named(path, words):
    (problem,) = fleet_checkpoint_dir_problems(path)
    assert words in problem
    with pytest.raises(AnsibleFilterError, match=words):
        fleet_checkpoint_dir(path)
    with pytest.raises(AnsibleFilterError, match=words):
        fleet_checkpoint_dir_id(path)


def test_no_config_or_a_broken_one_is_named(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    assert "no config.json in it" in fleet_checkpoint_dir_problems(str(tmp_path))[0]
    (tmp_path / "config.json").write_text("[1, 2")
    assert "config.json is not a JSON object" in fleet_checkpoint_dir_problems(str(tmp_path))[0]

"""Role triton_model_repo's keep and restore entry points (role canary's way to a canary's
previous model repository files): the small files kept in an archive, and put back over what a
later run wrote; the shards and anything else left alone."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY_MODEL, role_entry_result


def entry(tmp_path: Path, name: str, repo: Path, kept: Path) -> None:
    role_entry_result(tmp_path, "triton_model_repo", name, "triton_model_repo_kept", {"fleet_model": TINY_MODEL},
                      triton_model_repo_dir=str(repo), triton_model_repo_kept=str(kept))  # fmt: skip


def test_kept_files_come_back_over_a_later_write_and_nothing_else_moves(tmp_path):
    repo, kept = tmp_path / "models" / "tiny", tmp_path / "canary" / "tiny.tar"
    for model in ("fastertransformer", "ensemble", "preprocessing", "postprocessing"):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "config.pbtxt").write_text(f"name: {model!r}\nmax_batch_size: 128\n")
    (repo / "preprocessing" / "1" / "model.py").write_text("# the old tokenizing model\n")
    (repo / "fastertransformer" / "1" / "1-gpu").mkdir()
    (repo / "fastertransformer" / "1" / "1-gpu" / "shard.bin").write_bytes(b"weights")
    (repo / "preprocessing" / "1" / "__pycache__").mkdir()
    (repo / "preprocessing" / "1" / "__pycache__" / "model.pyc").write_bytes(b"cache")
    entry(tmp_path, "keep", repo, kept)
    assert kept.is_file()
    assert not Path(f"{kept}.new").exists()
    # a later run writes other files
    (repo / "fastertransformer" / "config.pbtxt").write_text("name: 'fastertransformer'\nmax_batch_size: 64\n")
    (repo / "preprocessing" / "1" / "model.py").write_text("# the new tokenizing model\n")
    (repo / "fastertransformer" / "1" / "1-gpu" / "shard.bin").write_bytes(b"other weights")
    entry(tmp_path, "restore", repo, kept)
    assert "max_batch_size: 128" in (repo / "fastertransformer" / "config.pbtxt").read_text()
    assert (repo / "preprocessing" / "1" / "model.py").read_text() == "# the old tokenizing model\n"
    # the shards are ft_convert's (its restore entry point), never in the archive
    assert (repo / "fastertransformer" / "1" / "1-gpu" / "shard.bin").read_bytes() == b"other weights"

"""model_checkpoint with fleet_model.source.archive: the GPT-J guide's slim checkpoint archive
(a tiny one made here in its format, .tar.zstd as the real step_383500 one) is fetched, checked
against its sha256, unpacked, given its config.json and tokenizer, and converts natively to the
same shards as the Hugging Face checkpoint of the same weights."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_playbook
from unit.slimgptj import CONFIG, hf_state, save_hf, slim_arrays, write_slim

from ftdomain.fleet.archive import fleet_archive_config, fleet_archive_id
from ftnative.convert import convert


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def lab(tmp_path):
    state, wte_bias = hf_state(CONFIG, seed=11)
    save_hf(state, CONFIG, tmp_path / "hf")
    write_slim(slim_arrays(state, wte_bias, CONFIG, 8), tmp_path / "build" / "step_383500")
    archive = tmp_path / "step_383500_slim.tar.zstd"
    subprocess.run(["tar", "--zstd", "-cf", str(archive), "-C", str(tmp_path / "build"), "step_383500"], check=True)
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 1, "content": "<|endoftext|>"}]}))
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    shape = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    source = {"archive": f"file://{archive}", "sha256": sha256(archive), "config": shape, "tokenizer": str(tokenizer)}
    return {"tmp": tmp_path, "archive": archive, "source": source,
            "checkpoint": tmp_path / "data" / "checkpoints" / "gptj-slim"}  # fmt: skip


def fetch(lab, playbook, *, check: bool = False, **source_overrides) -> tuple[int, str]:
    source = {**lab["source"], **source_overrides}
    extra = lab["tmp"] / "extra.json"
    extra.write_text(json.dumps({"fleet_model": {"name": "gptj-slim", "family": "gptj", "source": source},
                                 "fleet_data_root": str(lab["tmp"] / "data")}))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [model_checkpoint]\n")
    args = ["-i", "localhost,", "-e", f"@{extra}", "-e", f"ansible_python_interpreter={sys.executable}"]
    result = run_playbook(play, *args, *(["--check"] if check else []))
    return result.returncode, result.stdout + result.stderr


def ft_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".bin", ".ini")}


def test_an_archive_is_checked_unpacked_once_and_converts_as_the_hugging_face_checkpoint(lab, playbook):
    checkpoint = lab["checkpoint"]
    rc, out = fetch(lab, playbook, check=True)
    assert rc == 0, out
    assert "would be fetched, checked against its sha256 and unpacked" in out
    assert not checkpoint.exists()  # check mode changed nothing

    rc, out = fetch(lab, playbook)
    assert rc == 0, out
    assert sorted(p.name for p in checkpoint.glob("shard_*")) == [f"shard_{i}" for i in range(8)]
    assert json.loads((checkpoint / "config.json").read_text()) == fleet_archive_config(lab["source"])
    assert (checkpoint / "tokenizer.json").exists()
    assert (checkpoint / ".ftfleet-archive").read_text().splitlines()[0] == lab["source"]["sha256"]
    assert (checkpoint / ".ftfleet-source").read_text().strip() == fleet_archive_id(lab["source"])
    assert list((lab["tmp"] / "data" / "downloads").iterdir()) == []  # the archive goes once unpacked

    from_hf = convert(lab["tmp"] / "hf", lab["tmp"] / "ft-hf", "gptj", 2, "fp32", log=lambda _m: None)
    from_archive = convert(checkpoint, lab["tmp"] / "ft-archive", "gptj", 2, "fp32", log=lambda _m: None)
    assert ft_files(from_archive) == ft_files(from_hf)

    lab["archive"].rename(lab["tmp"] / "away.tar.zstd")  # unpacked: the source is not asked again
    rc, out = fetch(lab, playbook)
    assert rc == 0, out
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0", out), out

    (lab["tmp"] / "away.tar.zstd").rename(lab["archive"])
    lost = checkpoint / "shard_3" / "1.npz"
    kept = lost.read_bytes()
    lost.unlink()  # a shard file lost since: the archive is fetched and unpacked again
    rc, out = fetch(lab, playbook)
    assert rc == 0, out
    assert "(a shard file is missing or of another size since it was unpacked): unpacking it again" in " ".join(
        out.split()
    ), out
    assert lost.read_bytes() == kept


def test_an_archive_of_another_sha256_is_refused_and_nothing_changes(lab, playbook):
    checkpoint = lab["checkpoint"]
    assert fetch(lab, playbook)[0] == 0
    before = sorted(p.name for p in checkpoint.iterdir())
    other = "0" * 64
    rc, out = fetch(lab, playbook, sha256=other)
    assert rc != 0
    assert "checksum" in out.lower(), out
    assert other in out, out
    assert sorted(p.name for p in checkpoint.iterdir()) == before
    assert (checkpoint / ".ftfleet-archive").read_text().splitlines()[0] == lab["source"]["sha256"]

    # From the controller (a path): the copy's sha256 is checked here.
    rc, out = fetch(lab, playbook, archive=str(lab["archive"]), sha256=other)
    assert rc != 0
    assert f"has sha256 {lab['source']['sha256']}, fleet_model.source.sha256 says {other}" in out, out
    assert (checkpoint / ".ftfleet-archive").read_text().splitlines()[0] == lab["source"]["sha256"]


def test_an_archive_from_the_controller_replaces_what_was_there(lab, playbook):
    checkpoint = lab["checkpoint"]
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"an earlier checkout")
    rc, out = fetch(lab, playbook, archive=str(lab["archive"]))
    assert rc == 0, out
    assert not (checkpoint / "model.safetensors").exists()
    assert (checkpoint / "shard_7" / "0.npz").exists()
    assert not Path(f"{checkpoint}.unpack").exists()
    assert not Path(f"{checkpoint}.old").exists()


def test_an_archive_without_a_slim_checkpoint_fails_clearly(lab, playbook):
    other = lab["tmp"] / "other.tar.zstd"
    (lab["tmp"] / "notslim").mkdir()
    (lab["tmp"] / "notslim" / "model.safetensors").write_bytes(b"x")
    subprocess.run(["tar", "--zstd", "-cf", str(other), "-C", str(lab["tmp"]), "notslim"], check=True)
    rc, out = fetch(lab, playbook, archive=f"file://{other}", sha256=sha256(other))
    assert rc != 0
    assert "no single directory with shard_0/0.npz in the archive" in out, out
    assert not lab["checkpoint"].exists()
    assert not Path(f"{lab['checkpoint']}.unpack").exists()


def test_the_models_roles_convert_an_archive_as_its_hugging_face_checkpoint(lab, playbook):
    """model_checkpoint then ft_convert (native engine), as the models stage runs them: the shards
    equal the Hugging Face checkpoint's, recorded as made from the archive's identity."""
    extra = lab["tmp"] / "extra-convert.json"
    extra.write_text(json.dumps({
        "fleet_model": {"name": "gptj-slim", "family": "gptj", "source": lab["source"]},
        "fleet_data_root": str(lab["tmp"] / "data"), "fleet_tensor_para_size": 2,
        "ft_convert_python": sys.executable, "ansible_python_interpreter": sys.executable,
    }))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  roles: [model_checkpoint, ft_convert]\n")
    result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra}")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    shards = lab["tmp"] / "data" / "models" / "gptj-slim" / "fastertransformer" / "1" / "2-gpu"
    from_hf = convert(lab["tmp"] / "hf", lab["tmp"] / "ft-hf", "gptj", 2, "fp32", log=lambda _m: None)
    assert ft_files(shards) == ft_files(from_hf)
    inputs = json.loads((shards / "conversion.json").read_text())["inputs"]
    assert inputs["checkpoint"] == fleet_archive_id(lab["source"])
    assert inputs["engine"] == "native"

"""ft_convert (native engine) on this machine: converts once per set of inputs, converts again
for a new tp, verifies the published shards on every run and names what is wrong."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from conftest import git, run_playbook

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ftnative.decode import load  # noqa: E402


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("ftconvert")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                     initializer_range=0.3, bos_token_id=0, eos_token_id=1)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(root / "data" / "checkpoints" / "tiny")
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([[3, 9, 27]]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    return {"root": root, "expected": out[0, 3:].tolist()}


def converge(lab, playbook, tp: int) -> tuple[int, str]:
    extra = lab["root"] / "extra.json"
    extra.write_text(json.dumps({
        "fleet_data_root": str(lab["root"] / "data"),
        "fleet_model": {"name": "tiny", "family": "gpt", "weight_dtype": "fp32",
                        "source": {"url": "file:///nowhere", "revision": "main"}},
        "fleet_tensor_para_size": tp,
        "ft_convert_python": sys.executable,
        "ansible_python_interpreter": sys.executable,
    }))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  roles: [ft_convert]\n")
    result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra}")
    return result.returncode, result.stdout + result.stderr


def shards(lab, tp: int) -> Path:
    return lab["root"] / "data" / "models" / "tiny" / "fastertransformer" / "1" / f"{tp}-gpu"


def test_convert_once_then_nothing_then_a_new_tp(lab, playbook):
    rc, out = converge(lab, playbook, 1)
    assert rc == 0, out
    assert load(shards(lab, 1)).generate([3, 9, 27], 16) == lab["expected"]
    manifest = json.loads((shards(lab, 1) / "conversion.json").read_text())
    assert manifest["inputs"]["tp"] == 1
    assert manifest["inputs"]["engine"] == "native"

    rc, out = converge(lab, playbook, 1)
    assert rc == 0, out
    assert "convert | Convert with the engine native" in out
    assert "changed=0" in out  # same inputs: nothing converted

    rc, out = converge(lab, playbook, 2)
    assert rc == 0, out
    assert load(shards(lab, 2)).generate([3, 9, 27], 16) == lab["expected"]
    assert shards(lab, 1).exists()


DAMAGE = {
    "short": "model.layers.1.mlp.dense_4h_to_h.bias.bin has 252 bytes, expected 256",
    "missing": "missing model.layers.1.mlp.dense_4h_to_h.bias.bin",
    "ini": "config.ini lacks vocab_size",
}


def test_verification_failures_name_the_file(lab, playbook):
    rc, out = converge(lab, playbook, 1)
    assert rc == 0, out
    target = shards(lab, 1)
    victim = target / "model.layers.1.mlp.dense_4h_to_h.bias.bin"
    original = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    for damage, message in DAMAGE.items():
        if damage == "short":
            victim.write_bytes(victim.read_bytes()[:-4])
        elif damage == "missing":
            victim.unlink()
        else:
            ini = target / "config.ini"
            ini.write_text(
                "\n".join(line for line in ini.read_text().splitlines() if not line.startswith("vocab_size"))
            )
        rc, out = converge(lab, playbook, 1)
        assert rc != 0, out
        assert f"ft_convert: {target}" in out, damage
        assert message in out, damage
        for name, data in original.items():
            (target / name).write_bytes(data)


def test_a_checkpoint_directory_on_the_controller_is_copied_and_its_identity_keys_the_shards(lab, playbook):
    """fleet_model.source.path through model_checkpoint then ft_convert: the copy converts to the
    same tokens; its identity (names, sizes, times) is the conversion's checkpoint input, so a
    second run converts nothing and a rewritten file converts again."""
    root = lab["root"] / "from-dir"
    upload = root / "upload"
    upload.parent.mkdir()  # the saved checkpoint, as a user's directory outside the data root
    shutil.copytree(lab["root"] / "data" / "checkpoints" / "tiny", upload)
    extra = root / "extra.json"
    extra.write_text(json.dumps({
        "fleet_data_root": str(root / "data"),
        "fleet_model": {"name": "tiny", "family": "gpt", "weight_dtype": "fp32", "source": {"path": str(upload)}},
        "fleet_tensor_para_size": 1,
        "ft_convert_python": sys.executable,
        "ansible_python_interpreter": sys.executable,
    }))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  roles: [model_checkpoint, ft_convert]\n")
    target = root / "data" / "models" / "tiny" / "fastertransformer" / "1" / "1-gpu"

    def run() -> str:
        result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra}")
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    run()
    assert load(target).generate([3, 9, 27], 16) == lab["expected"]
    first = json.loads((target / "conversion.json").read_text())["inputs"]["checkpoint"]
    assert first == (root / "data" / "checkpoints" / "tiny" / ".ftfleet-source").read_text().strip()
    assert "changed=0" in run()
    (upload / "config.json").write_text((upload / "config.json").read_text() + "\n")  # rewritten
    run()
    assert json.loads((target / "conversion.json").read_text())["inputs"]["checkpoint"] != first
    assert load(target).generate([3, 9, 27], 16) == lab["expected"]


def test_going_back_a_revision_restores_the_kept_shards_without_the_source_or_a_conversion(lab, playbook):
    """Two revisions side by side (issue 36): model_checkpoint and ft_convert at commit A, then at
    B (other weights: other tokens), then back at A with the source gone. The way back fetches
    nothing (the source is unreachable), converts nothing (<tp>-gpu points at A's very build
    again) and serves A's tokens; B's build stays as the previous one; a rerun changes nothing."""
    root = lab["root"] / "rollback"
    work, bare = root / "work", root / "model.git"
    shutil.copytree(lab["root"] / "data" / "checkpoints" / "tiny", work)
    git("init", "-q", "-b", "main", cwd=work)
    git("lfs", "install", "--local", cwd=work)
    git("lfs", "track", "*.safetensors", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "A", cwd=work)
    commits = {"A": git("rev-parse", "HEAD", cwd=work)}
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(work)).eval()
    model.save_pretrained(work)
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([[3, 9, 27]]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    expected = {"A": lab["expected"], "B": out[0, 3:].tolist()}
    assert expected["A"] != expected["B"]
    git("commit", "-qam", "B: other weights", cwd=work)
    commits["B"] = git("rev-parse", "HEAD", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    git("lfs", "push", "--all", f"file://{bare}", cwd=work)

    play = playbook("- hosts: localhost\n  connection: local\n  roles: [model_checkpoint, ft_convert]\n")
    target = root / "data" / "models" / "tiny" / "fastertransformer" / "1" / "1-gpu"
    previous = target.with_name(".1-gpu.previous")

    def at(revision: str, *check: str) -> str:
        extra = root / "extra.json"
        extra.write_text(json.dumps({
            "fleet_data_root": str(root / "data"),
            "fleet_model": {"name": "tiny", "family": "gpt", "weight_dtype": "fp32",
                            "source": {"url": f"file://{bare}", "revision": "main", "commit": commits[revision]}},
            "fleet_tensor_para_size": 1,
            "ft_convert_python": sys.executable,
            "ansible_python_interpreter": sys.executable,
        }))  # fmt: skip
        result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra}", *check)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr
        if check:
            return result.stdout
        assert json.loads((target / "conversion.json").read_text())["inputs"]["checkpoint"] == commits[revision]
        assert load(target).generate([3, 9, 27], 16) == expected[revision]
        return result.stdout

    at("A")
    build_a = target.resolve()
    at("B")
    build_b = target.resolve()
    assert build_b != build_a
    assert previous.resolve() == build_a
    bare.rename(root / "away.git")  # the source is gone: nothing can be fetched from here on
    preview = " ".join(at("A", "--check").split())
    assert "would point at the shards of the previous revision again" in preview, preview[-3000:]
    assert (target.resolve(), previous.resolve()) == (build_b, build_a)  # check mode changed nothing
    started = time.monotonic()
    out = at("A")
    print(f"back to the previous revision in {time.monotonic() - started:.1f} s (model_checkpoint and ft_convert)")
    assert (target.resolve(), previous.resolve()) == (build_a, build_b)  # A's own build: nothing converted
    assert "ft_convert : restore | Publish the previous revision's shards again" in out
    assert "engine-native | Convert" not in out
    assert "changed=0" in at("A")

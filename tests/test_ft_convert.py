"""ft_convert (native engine) on this machine: converts once per set of inputs, converts again
for a new tp, verifies the published shards on every run and names what is wrong."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_playbook

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(ROOT))

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

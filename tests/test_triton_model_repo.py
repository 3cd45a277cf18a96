"""triton_model_repo: every config.pbtxt it writes parses with Triton's own schema, for every
family, and a whole repository loads in a real tritonserver (the one in the nvidia-pytriton
wheel) and answers through the ensemble, with the CPU stand-in (ftnative/triton_model.py) in
place of the FT backend library, which cannot be built here."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, run_playbook
from tritonlocal import tiny_model, tritonserver

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytriton = pytest.importorskip("pytriton")
model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
from google.protobuf import text_format  # noqa: E402

sys.path.insert(0, str(ROOT))
from ftnative.convert import convert  # noqa: E402

FAMILIES = {"gptj": "GPT-J", "gpt": "GPT", "gptneox": "GPT-NeoX", "llama": "Llama", "bloom": "GPT"}
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: triton_model_repo
      vars:
        fleet_model:
          {{name: "{{{{ family }}}}", family: "{{{{ family }}}}", source: {{url: "file:///x", revision: main}}{model}}}
        triton_model_repo_dir: "{root}/{{{{ family }}}}"
        triton_model_repo_container_dir: "{container}"
        triton_model_repo_container_tokenizer_dir: "{tokenizer}"
      loop: {families}
      loop_control:
        loop_var: family
"""


def render(playbook, root: Path, families, *, container="/models", tokenizer="/tokenizer", model="", **extra):
    """Run the role for each family into root/<family>; `model` adds keys to fleet_model."""
    play = playbook(
        PLAY.format(root=root, container=container, tokenizer=tokenizer, families=json.dumps(families), model=model)
    )
    extra_file = root.parent / f"{root.name}-extra.json"
    extra_file.write_text(json.dumps({"fleet_tensor_para_size": 2, "ansible_python_interpreter": sys.executable,
                                      **extra}))  # fmt: skip
    result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra_file}")
    return result.returncode, result.stdout + result.stderr


def parse(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_every_config_parses_with_tritons_schema_for_every_family(playbook, tmp_path):
    rc, out = render(playbook, tmp_path / "repos", list(FAMILIES))
    assert rc == 0, out
    for family, model_type in FAMILIES.items():
        repo = tmp_path / "repos" / family
        configs = {name: parse(repo / name / "config.pbtxt")
                   for name in ("fastertransformer", "ensemble", "preprocessing", "postprocessing")}  # fmt: skip
        ft = configs["fastertransformer"]
        params = {k: v.string_value for k, v in ft.parameters.items()}
        assert ft.backend == "fastertransformer"
        assert [g.kind for g in ft.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]
        assert params["model_type"] == model_type
        assert params["tensor_para_size"] == "2"
        assert params["model_checkpoint_path"] == "/models/fastertransformer/1/2-gpu"
        assert ("int8_mode" in params) == (family in ("gpt", "llama", "bloom"))
        assert [s.model_name for s in configs["ensemble"].ensemble_scheduling.step] == [
            "preprocessing", "fastertransformer", "postprocessing"]  # fmt: skip
        assert configs["preprocessing"].parameters["tokenizer_dir"].string_value == "/tokenizer"


@pytest.mark.parametrize(
    ("extra", "message"),
    [({"triton_model_repo_dynamic_batching": True, "triton_model_repo_sequence_batching": True},
      "both true: Triton takes one or the other"),
     ({"triton_model_repo_sequence_batching": True}, "sequence_batching needs triton_model_repo_max_batch_size 1"),
     ({"triton_model_repo_int8_mode": 1}, "the gptj backend has no int8 mode"),
     ({"triton_model_repo_int8_mode": 3}, "valid 0, 1 (weight-only), 2")],
)  # fmt: skip
def test_invalid_combinations_are_refused(playbook, tmp_path, extra, message):
    rc, out = render(playbook, tmp_path / "repos", ["gptj"], **extra)
    assert rc != 0
    assert message in out
    assert not (tmp_path / "repos" / "gptj").exists()  # refused before writing anything


def test_int8_with_fp32_is_refused(playbook, tmp_path):
    rc, out = render(playbook, tmp_path / "repos", ["gpt"], model=", data_type: fp32", triton_model_repo_int8_mode=1)
    assert rc != 0
    assert "with fleet_model.data_type=fp32: int8 needs fp16 or bf16" in out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_repository_loads_in_tritonserver_and_answers_through_the_ensemble(playbook, tmp_path, family):
    """The repository as the role writes it, config.pbtxt unchanged but for one parameter
    telling the stand-in where ftnative is: `backend: "fastertransformer"` is served by a
    Python-based backend of that name (backends/fastertransformer/model.py, the CPU stand-in),
    as in the lab's serving image, so Triton validates the real configuration and ensemble."""
    checkpoint = tmp_path / "checkpoint"
    tokenizer, model = tiny_model(family, checkpoint)
    repo = tmp_path / "repos" / family
    site = Path(transformers.__file__).parents[1]
    rc, out = render(playbook, tmp_path / "repos", [family], container=str(repo), tokenizer=str(checkpoint),
                     fleet_tensor_para_size=2, triton_model_repo_python_path=f"{ROOT}:{site}")  # fmt: skip
    assert rc == 0, out
    convert(checkpoint, repo / "fastertransformer" / "1", family, 2, "fp32", log=lambda _m: None)
    ft_config = repo / "fastertransformer" / "config.pbtxt"
    ft_config.write_text(
        ft_config.read_text() + f'parameters {{ key: "python_path" value: {{ string_value: "{ROOT}:{site}" }} }}\n'
    )

    with tritonserver(repo, tmp_path) as server:
        prompt = "Ansible automation that takes bare GPU hosts"
        body = {"inputs": [
            {"name": "INPUT_0", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]},
            {"name": "INPUT_1", "shape": [1, 1], "datatype": "UINT32", "data": [12]},
            {"name": "INPUT_2", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
            {"name": "INPUT_3", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
        ]}  # fmt: skip
        request = urllib.request.Request(f"http://127.0.0.1:{server.http}/v2/models/ensemble/infer",
                                         data=json.dumps(body).encode(), method="POST")  # fmt: skip
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    text = answer["outputs"][0]["data"][0]
    ids = tokenizer.encode(prompt)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with torch.no_grad():
        reference = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                   pad_token_id=tokenizer.eos_token_id)[0].tolist()  # fmt: skip
    assert text == tokenizer.decode(reference)
    assert text.startswith(prompt)

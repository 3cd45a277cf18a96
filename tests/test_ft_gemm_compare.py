"""Role ft_gemm_tune's compare entry (role canary's election): whether this run would give
tritonserver another gemm_config.in than the one it reads, worked out on the host from the
checkout that serves now, the GPU and gpt_gemm's arguments, changing nothing."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import role_entry_result

PLAY_VARS = {
    "fleet_model": {
        "name": "tiny",
        "family": "gpt",
        "data_type": "fp16",
        "source": {"url": "file:///x", "revision": "main"},
    },
    "ansible_local": {"gpus": {"devices": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB"}]}},
}
PUBLISHED = "{'changes': ft_gemm_tune_changes, 'slot': __ft_gemm_tune_slot | default('')}"

CONFIG = {
    "model_type": "gpt2",
    "n_head": 2,
    "n_embd": 64,
    "n_layer": 2,
    "vocab_size": 400,
    "n_positions": 128,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


def compare(tmp_path: Path, **extra) -> dict:
    return role_entry_result(tmp_path, "ft_gemm_tune", "compare", PUBLISHED, PLAY_VARS,
                             fleet_data_root=str(tmp_path / "srv"), fleet_tensor_para_size=1, **extra)  # fmt: skip


def test_another_gemm_config_is_a_change_and_the_same_one_is_none(tmp_path):
    srv = tmp_path / "srv"
    # a first deployment: no checkout, no gemm_config.in
    assert compare(tmp_path)["changes"] is False
    (srv / "checkpoints" / "tiny").mkdir(parents=True)
    (srv / "checkpoints" / "tiny" / "config.json").write_text(json.dumps(CONFIG))
    serving = srv / "serving" / "tiny"
    serving.mkdir(parents=True)
    # a checkout but nothing tuned yet that tritonserver reads
    first = compare(tmp_path)
    assert first["changes"] is False
    slot = Path(first["slot"])
    assert slot.parent.name == "NVIDIA-A100-SXM4-80GB", slot
    # tritonserver reads the file tuned for these arguments: no change
    slot.mkdir(parents=True)
    (slot / "gemm_config.in").write_text("tuned for these arguments\n")
    (serving / "gemm_config.in").write_text("tuned for these arguments\n")
    assert compare(tmp_path)["changes"] is False
    # it reads another one (a file tuned before an ftfleet with other arguments): a change
    (serving / "gemm_config.in").write_text("tuned for other arguments\n")
    assert compare(tmp_path)["changes"] is True
    # other arguments (a larger batch) whose file is not tuned yet: a change, in another slot
    (serving / "gemm_config.in").write_text("tuned for these arguments\n")
    bigger = compare(tmp_path, ft_gemm_tune_batch_size=16)
    assert bigger["changes"] is True
    assert bigger["slot"] != first["slot"]
    # a host without GPUs tunes nothing: no change to judge
    assert compare(tmp_path, fleet_require_gpus=False)["changes"] is False

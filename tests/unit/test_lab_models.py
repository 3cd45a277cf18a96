"""The lab's shipped models (lab/models) are shapes FasterTransformer serves, at the lab's fp32: a
head size its decoder attention has kernels for (and, for GPT-NeoX's rotary embedding at fp32, not
32), and heads and hidden sizes that split over the tensor-parallel sizes the lab serves them at
(tiny-gpt2 at tp 1 and 2, tiny-neox at tp 1), as preflight checks them on GPU hosts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftdomain.ft.model import ft_kernel_problems, ft_model_params, ft_parallelism_problems

LAB = Path(__file__).resolve().parents[2] / "lab" / "models"
FAMILY = {"GPT2LMHeadModel": "gpt", "GPTNeoXForCausalLM": "gptneox"}
HEAD_SIZE = {"tiny-gpt2": 32, "tiny-neox": 64}
TP = [("tiny-gpt2", 1), ("tiny-gpt2", 2), ("tiny-neox", 1)]  # lab-node2 serves tiny-gpt2 on 2 GPUs
MODELS = sorted(p for p in LAB.iterdir() if (p / "config.json").is_file())


def params(model: Path) -> dict:
    config = json.loads((model / "config.json").read_text())
    return ft_model_params(config, FAMILY[config["architectures"][0]])


def test_the_lab_ships_its_two_models():
    assert [m.name for m in MODELS] == ["tiny-gpt2", "tiny-neox"]


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_a_lab_model_has_a_head_size_fts_kernels_take(model):
    p = params(model)
    assert ft_kernel_problems(p, "fp32") == [], p
    assert p["size_per_head"] == HEAD_SIZE[model.name]


@pytest.mark.parametrize(("name", "tp"), TP)
def test_a_lab_model_splits_over_the_labs_tensor_parallel_sizes(name, tp):
    assert ft_parallelism_problems(params(LAB / name), tp, 1, tp) == []


def test_the_old_lab_shapes_are_refused():
    """4 heads of 16 (the lab's models before): no kernel; tiny-neox's 2 heads of 32 at fp32 (tried
    on an H200: its log probabilities drifted): a wrong rotation. Each with the reason and FT's source."""
    config = json.loads((LAB / "tiny-gpt2" / "config.json").read_text())
    problems = ft_kernel_problems(ft_model_params({**config, "n_head": 4}, "gpt"))
    assert len(problems) == 1
    assert problems[0].startswith("head size 16 (64 hidden / 4 heads) has no kernel in FT's decoder attention")
    assert "decoder_masked_multihead_attention.cu" in problems[0]
    neox = json.loads((LAB / "tiny-neox" / "config.json").read_text())
    problems = ft_kernel_problems(ft_model_params({**neox, "num_attention_heads": 2}, "gptneox"), "fp32")
    assert len(problems) == 1
    assert problems[0].startswith("head size 32 at data_type fp32 with GPT-NeoX's rotary embedding (8 dimensions)")

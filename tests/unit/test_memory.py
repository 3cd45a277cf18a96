"""The GPU memory plan (ftdomain.ft.memory, ftdomain.fleet.memory): FT's peak per GPU for the seeds,
what fits a capacity, and a host's plan against its GPUs."""

from __future__ import annotations

import re

import pytest
from configs import SEEDS

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.memory import fleet_memory_plan
from ftdomain.ft.layout import ft_weight_bytes_per_gpu
from ftdomain.ft.memory import MIB, ft_memory_fit, ft_memory_plan
from ftdomain.ft.model import ft_model_params

GIB = 1 << 30


def params(seed: str) -> dict:
    family, config = SEEDS[seed]
    return ft_model_params(config, family)


def plan(seed: str, **options) -> dict:
    settings = {"data_type": "fp16", "max_batch_size": 64, "context": 2048, **options}
    return ft_memory_plan(SEEDS[seed][0], params(seed), settings)


def test_the_key_value_cache_is_two_halves_of_layers_batch_session_and_hidden():
    # GPT-J-6B: 2 x 28 layers x 64 x 2048 tokens x 4096 x 2 bytes = 56 GiB on one GPU
    assert plan("gptj-6b")["bytes"]["kv_cache"] == 56 * GIB
    # LLaMA-7B at tp 2 (the LLaMA guide's two GPUs): 2 x 32 x 64 x 2048 x 4096/2 x 2 = 32 GiB a card
    assert plan("llama-7b", tp=2)["bytes"]["kv_cache"] == 32 * GIB
    # pipeline parallelism splits the layers, beams multiply the rows (and add the indirection)
    assert plan("gptj-6b", pp=2)["bytes"]["kv_cache"] == 28 * GIB
    beams = plan("gptj-6b", max_batch_size=16, beam_width=4)["bytes"]["kv_cache"]
    assert beams == 56 * GIB + 2 * 64 * 2048 * 4


def test_the_weights_are_the_ranks_files_at_the_data_type_and_int8_halves_the_matrices():
    p = params("gpt2")
    assert plan("gpt2")["bytes"]["weights"] == ft_weight_bytes_per_gpu("gpt", p, 1, "fp16")
    whole, int8 = plan("gpt2")["bytes"]["weights"], plan("gpt2", int8_mode=1)["bytes"]["weights"]
    # GPT-2's 12 layers of 7.1M matrix elements go from 2 bytes to 1 (plus fp16 scales per column);
    # the embeddings (38.6M wte, 0.8M wpe) and the norms stay fp16
    matrices = 12 * (768 * 3 * 768 + 768 * 768 + 2 * 768 * 3072)
    scales = 12 * 2 * (3 * 768 + 768 + 3072 + 768)
    assert whole - int8 == matrices - scales


def test_the_context_phase_holds_the_attention_scores_twice_over_the_prompt():
    one = plan("gptj-6b", max_batch_size=1)["bytes"]["context"]
    two = plan("gptj-6b", max_batch_size=2)["bytes"]["context"]
    # linear in the batch at pp 1; the scores alone: 16 heads x 2047^2 x (2 + 4 bytes) per request
    assert two == 2 * one
    assert one > 16 * 2047 * 2047 * 6
    # ParallelGpt (GPT-2, BLOOM) masks prompt x prompt, GptJ session x session
    gpt_short = plan("gpt2", max_batch_size=1, context=1024)["bytes"]["context"]
    assert gpt_short < plan("gpt2", max_batch_size=1, context=2048)["bytes"]["context"] / 3


def test_the_total_is_the_sum_of_the_parts_and_the_runtime_is_counted_as_given():
    found = plan("h2ogpt-6.9b", overhead_mib=1500)
    assert found["bytes"]["overhead"] == 1500 * MIB
    assert found["total_bytes"] == sum(found["bytes"].values())
    assert found["total_mib"] == -(-found["total_bytes"] // MIB)
    assert (found["longest_prompt"], found["context"]) == (2047, 2048)


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_what_fits_is_the_largest_batch_and_context_within_the_capacity(seed):
    capacity = 40 * 1024
    fit = ft_memory_fit(SEEDS[seed][0], params(seed), {"data_type": "fp16", "max_batch_size": 64, "context": 2048,
                                                        "overhead_mib": 1024}, capacity)  # fmt: skip
    batch = fit["max_batch_size"]
    assert 1 <= batch <= 1024
    assert plan(seed, max_batch_size=batch, overhead_mib=1024)["total_mib"] <= capacity
    if batch < 1024:
        assert plan(seed, max_batch_size=batch + 1, overhead_mib=1024)["total_mib"] > capacity
    context = fit["context"]
    assert plan(seed, context=context, overhead_mib=1024)["total_mib"] <= capacity
    if context < 2048:
        assert plan(seed, context=context + 1, overhead_mib=1024)["total_mib"] > capacity


def test_nothing_fits_when_the_weights_alone_do_not():
    fit = ft_memory_fit("gptj", params("gptj-6b"), {"data_type": "fp32", "max_batch_size": 1, "context": 2048}, 16000)
    assert (fit["max_batch_size"], fit["context"]) == (0, 0)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"data_type": "int8"}, "data_type 'int8' is not one FT serves"),
        ({"max_batch_size": 0}, "max_batch_size must be a positive integer, got 0"),
        ({"context": 1}, "context (the longest prompt + answer) must be a whole number >= 2, got 1"),
        ({"tp": 3}, "tensor_para_size 3 does not divide head_num 16"),
        ({"pp": 3}, "pipeline_para_size 3 does not divide num_layer 28"),
        ({"int8_mode": 3}, "int8_mode must be 0, 1 or 2, got 3"),
        ({"beam_width": True}, "beam_width must be a positive integer, got True"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_setting(options, words):
    with pytest.raises(AnsibleFilterError, match=re.escape("ft_memory_plan: " + words)):
        plan("gptj-6b", **options)


LLAMA_GUIDE_GPUS = {"devices": [{"index": 0, "memory_mib": 24576}, {"index": 1, "memory_mib": 24576}]}


def test_the_llama_guides_two_rtx_3090s_are_refused_with_what_would_fit():
    """LLaMA-7B at tp 2 with the prod llama7b group's max_batch_size 64 and 2,048 tokens: 32 GiB of
    cache a card beside 6.5 GiB of weights, on 24 GiB cards."""
    provided = {"fleet_tensor_para_size": 2, "fleet_pipeline_para_size": 1, "fleet_gpu_devices": [0, 1],
                "triton_model_repo_max_batch_size": 64, "preflight_gpu_overhead_mib": 1024}  # fmt: skip
    model = {"name": "llama-7b", "family": "llama", "data_type": "fp16"}
    found = fleet_memory_plan(provided, model, SEEDS["llama-7b"][1], LLAMA_GUIDE_GPUS)
    assert found["plan"]["bytes"]["kv_cache"] == 32 * GIB
    assert (found["gpu_mib"], found["capacity_mib"]) == (24576, int(24576 * 0.9))
    batch = found["fit"]["max_batch_size"]
    assert 1 <= batch < 64
    problem = found["problem"]
    assert problem.startswith("fleet_model llama-7b: FT needs ")
    for words in ("key/value cache 32,768", "max_batch_size 64 x beam 1 at 2,048 tokens", "fp16, tp 2 x pp 1",
                  "more than 90% of the smallest assigned GPU (24,576 MiB: 22,118)", "CUDA out of memory",
                  f"fix: triton_model_repo_max_batch_size: {batch} fits; or gateway_context_length: ",
                  "; or triton_model_repo_int8_mode: 1 (weight-only int8)"):  # fmt: skip
        assert words in problem, (words, problem)
    # the fix it names fits
    fixed = fleet_memory_plan({**provided, "triton_model_repo_max_batch_size": batch}, model,
                              SEEDS["llama-7b"][1], LLAMA_GUIDE_GPUS)  # fmt: skip
    assert fixed["problem"] == ""
    assert fixed["plan"]["total_mib"] <= fixed["capacity_mib"]


def test_int8_is_named_as_a_fix_only_on_gpus_with_ft_int8_kernels():
    """FT df4a753 has weight-only int8 kernels for SM 70 to 89: on Hopper the refusal names the
    other fixes, not int8 (tritonserver would abort loading the weights)."""
    provided = {"fleet_tensor_para_size": 2, "fleet_gpu_devices": [0, 1], "triton_model_repo_max_batch_size": 64,
                "preflight_gpu_overhead_mib": 1024}  # fmt: skip
    model = {"name": "llama-7b", "family": "llama", "data_type": "fp16"}

    def problem(cc: str) -> str:
        gpus = {"devices": [{**d, "compute_capability": cc} for d in LLAMA_GUIDE_GPUS["devices"]]}
        return fleet_memory_plan(provided, model, SEEDS["llama-7b"][1], gpus)["problem"]

    assert "triton_model_repo_int8_mode: 1" in problem("8.6")
    hopper = problem("9.0")
    assert "triton_model_repo_max_batch_size: " in hopper
    assert "int8_mode" not in hopper


def test_max_batch_size_0_plans_the_largest_batch_that_fits():
    model = {"name": "llama-7b", "family": "llama", "data_type": "fp16"}
    provided = {"fleet_tensor_para_size": 2, "fleet_gpu_devices": [0, 1], "triton_model_repo_max_batch_size": 0,
                "preflight_gpu_overhead_mib": 1024}  # fmt: skip
    found = fleet_memory_plan(provided, model, SEEDS["llama-7b"][1], LLAMA_GUIDE_GPUS)
    assert found["problem"] == ""
    assert found["plan"]["max_batch_size"] == found["fit"]["max_batch_size"] == 13
    assert found["plan"]["total_mib"] <= found["capacity_mib"]
    assert found["summary"].endswith("(max_batch_size 0: the largest that fits)")
    # nothing to plan against: said, not guessed
    bare = fleet_memory_plan(provided, model, SEEDS["llama-7b"][1], {"devices": []})
    assert bare["problem"].startswith("triton_model_repo_max_batch_size=0 asks for the largest batch")


def test_a_hosts_plan_takes_the_gateways_context_and_the_roles_defaults():
    model = {"name": "gpt2", "family": "gpt", "data_type": "fp16"}
    provided = {"fleet_gpu_devices": [0]}
    # GPT-2's config.json says 1024 positions; the role defaults: max_batch_size 128, beam 1
    found = fleet_memory_plan(provided, model, SEEDS["gpt2"][1], {"devices": [{"index": 0, "memory_mib": 81559}]})
    assert (found["plan"]["context"], found["plan"]["max_batch_size"], found["plan"]["beam_width"]) == (1024, 128, 1)
    assert found["problem"] == ""
    set_context = fleet_memory_plan({**provided, "gateway_context_length": 512}, model, SEEDS["gpt2"][1], {})
    assert set_context["plan"]["context"] == 512
    # no GPU facts (a host without GPUs): the plan, and nothing to compare it with
    assert (set_context["capacity_mib"], set_context["problem"]) == (0, "")


def test_the_beams_the_gateway_lets_in_multiply_the_cache_and_a_refusal_names_them():
    """FT runs a batch at its first request's beam width: the plan counts gateway_max_best_of beams
    for every request, and a plan that no longer fits names it among the fixes."""
    model = {"name": "kogpt", "family": "gptj", "data_type": "fp16"}
    gpus = {"devices": [{"index": 0, "memory_mib": 81920}]}
    provided = {"fleet_gpu_devices": [0], "triton_model_repo_max_batch_size": 32, "gateway_context_length": 2048}
    one = fleet_memory_plan(provided, model, SEEDS["gptj-6b"][1], gpus)
    four = fleet_memory_plan({**provided, "gateway_max_best_of": 4}, model, SEEDS["gptj-6b"][1], gpus)
    assert (one["plan"]["beam_width"], four["plan"]["beam_width"]) == (1, 4)
    assert four["plan"]["bytes"]["kv_cache"] > 4 * one["plan"]["bytes"]["kv_cache"]  # and the beams' indirection
    assert one["problem"] == ""
    assert "max_batch_size 32 x beam 4 at 2,048 tokens" in four["problem"]
    assert "a smaller gateway_max_best_of (the plan counts 4 beams per request)" in four["problem"]

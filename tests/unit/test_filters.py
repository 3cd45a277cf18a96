"""Tables of good and bad cases for every filter, with the seeds' exact numbers."""

from __future__ import annotations

import configparser

import pytest
from configs import GPT2, GPTJ_6B, H2OGPT_6_9B, KOGPT_6B, LLAMA_7B, SEEDS

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.commands import ft_converter_argv, ft_gemm_argv
from ftdomain.ft.cuda import cuda_sm, ft_int8_problem, triton_driver_ok, triton_min_driver
from ftdomain.ft.families import FAMILIES, ft_family
from ftdomain.ft.layout import (
    ft_config_ini,
    ft_expected_files,
    ft_parameter_count,
    ft_shard_dir,
    ft_weight_bytes_per_gpu,
)
from ftdomain.ft.model import ft_check_parallelism, ft_kernel_problems, ft_model_params, ft_parallelism_problems


def params(seed: str) -> dict:
    family, config = SEEDS[seed]
    return ft_model_params(config, family)


# ---------------------------------------------------------------- ft_model_params
@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        ("gptj-6b", {"head_num": 16, "size_per_head": 256, "inter_size": 16384, "num_layer": 28,
                     "vocab_size": 50400, "rotary_embedding": 64, "start_id": 50256, "end_id": 50256,
                     "model_type": "GPT-J", "model_name": "gpt-j-6B"}),
        ("kogpt-6b", {"head_num": 16, "size_per_head": 256, "vocab_size": 64512, "start_id": 0, "end_id": 1}),
        ("gpt2", {"head_num": 12, "size_per_head": 64, "inter_size": 3072, "num_layer": 12,
                  "vocab_size": 50257, "max_pos_seq_len": 1024, "model_type": "GPT", "layernorm_eps": 1e-05}),
        ("h2ogpt-6.9b", {"head_num": 32, "size_per_head": 128, "inter_size": 16384, "num_layer": 32,
                         "vocab_size": 50432, "rotary_embedding": 32, "use_gptj_residual": True,
                         "start_id": 0, "end_id": 0, "model_type": "GPT-NeoX"}),
        ("llama-7b", {"head_num": 32, "size_per_head": 128, "inter_size": 11008, "num_layer": 32,
                      "vocab_size": 32000, "rotary_embedding": 128, "layernorm_eps": 1e-06,
                      "start_id": 1, "end_id": 2, "model_type": "Llama"}),
        ("bloom-560m", {"head_num": 16, "size_per_head": 64, "inter_size": 4096, "num_layer": 24,
                        "vocab_size": 250880, "model_type": "GPT", "has_positional_encoding": False,
                        "use_attention_linear_bias": True, "has_pre_decoder_layernorm": True}),
    ],
)  # fmt: skip
def test_model_params_of_the_seeds(seed, expected):
    got = params(seed)
    assert {k: got[k] for k in expected} == expected


def test_model_params_n_inner_set_and_rotary_dim_null():
    got = ft_model_params({**GPTJ_6B, "n_inner": 8192, "rotary_dim": None}, "gptj")
    assert got["inter_size"] == 8192
    assert got["rotary_embedding"] == 256  # null rotary_dim: rotary over the whole head


def test_model_params_rope_parameters_of_transformers_5():
    config = {k: v for k, v in H2OGPT_6_9B.items() if k not in ("rotary_pct", "rotary_emb_base")}
    config["rope_parameters"] = {"rope_theta": 10000.0, "partial_rotary_factor": 0.5, "rope_type": "default"}
    assert ft_model_params(config, "gptneox")["rotary_embedding"] == 64
    # Neither spelling: transformers' own default for GPT-NeoX, a quarter of the head.
    del config["rope_parameters"]
    assert ft_model_params(config, "gptneox")["rotary_embedding"] == 32


@pytest.mark.parametrize(
    ("family", "config", "message"),
    [("llama", {**LLAMA_7B, "rope_theta": 500000.0}, "rotary base 500000.0"),
     ("llama", {**LLAMA_7B, "rope_scaling": {"type": "linear", "factor": 2.0}}, "scaling"),
     ("gptneox", {**H2OGPT_6_9B, "rotary_emb_base": 20000}, "rotary base 20000")],
)  # fmt: skip
def test_model_params_refuses_rope_ft_cannot_run(family, config, message):
    with pytest.raises(AnsibleFilterError, match=r"^ft_model_params: ") as err:
        ft_model_params(config, family)
    assert message in str(err.value)
    assert "base 10000 without scaling" in str(err.value)


def test_model_params_neox_sequential_residual():
    assert ft_model_params({**H2OGPT_6_9B, "use_parallel_residual": False}, "gptneox")["use_gptj_residual"] is False


@pytest.mark.parametrize(
    ("config", "family", "message"),
    [
        (GPTJ_6B, "gpt3", "unknown model family 'gpt3' (valid: bloom, gpt, gptj, gptneox, llama)"),
        ([1, 2], "gptj", "expected the parsed config.json (a dict), got list"),
        ({k: v for k, v in GPTJ_6B.items() if k != "n_embd"}, "gptj", "none of the keys n_embd, hidden_size"),
        ({**GPTJ_6B, "n_head": 0}, "gptj", "must be a positive integer, got 0"),
        ({**GPTJ_6B, "n_head": "sixteen"}, "gptj", "must be a positive integer, got 'sixteen'"),
        ({**GPTJ_6B, "n_layer": 2.5}, "gptj", "must be a positive integer, got 2.5"),
        ({**GPTJ_6B, "n_head": 15}, "gptj", "hidden size 4096 is not a multiple of the head count 15"),
        ({**GPTJ_6B, "n_inner": -1}, "gptj", "config.json n_inner must be a positive integer, got -1"),
        ({k: v for k, v in GPTJ_6B.items() if k != "eos_token_id"}, "gptj", "eos_token_id None"),
        ({**LLAMA_7B, "num_key_value_heads": 8}, "llama", "grouped-query attention"),
        ({k: v for k, v in GPT2.items() if k not in ("n_positions", "n_ctx")}, "gpt", "n_positions, n_ctx"),
        ({k: v for k, v in H2OGPT_6_9B.items() if k != "intermediate_size"}, "gptneox", "intermediate_size"),
    ],
)
def test_model_params_rejects_bad_input(config, family, message):
    with pytest.raises(AnsibleFilterError, match=r"^ft_model_params: ") as err:
        ft_model_params(config, family)
    assert message in str(err.value)


# ---------------------------------------------------------------- ft_check_parallelism
@pytest.mark.parametrize(
    ("seed", "tp", "pp", "gpus"),
    [("kogpt-6b", 1, 1, 1), ("kogpt-6b", 8, 1, 8), ("gptj-6b", 4, 1, 4), ("gpt2", 1, 1, 1),
     ("h2ogpt-6.9b", 1, 1, 1), ("llama-7b", 2, 1, 2), ("llama-7b", 2, 2, 4), ("bloom-560m", 16, 1, None)],
)  # fmt: skip
def test_check_parallelism_accepts_the_seeds(seed, tp, pp, gpus):
    p = params(seed)
    assert ft_check_parallelism(p, tp, pp, gpus) is p


@pytest.mark.parametrize(
    ("tp", "pp", "gpus", "messages"),
    [
        (3, 1, 3, ["tensor_para_size 3 does not divide head_num 16 (valid: 1, 2, 4, 8, 16)"]),
        (1, 3, 3, ["pipeline_para_size 3 does not divide num_layer 28 (valid: 1, 2, 4, 7, 14, 28)"]),
        (2, 1, 4, ["tensor_para_size 2 x pipeline_para_size 1 = 2 GPUs, but 4 are assigned"]),
        (0, 1, 1, ["tensor_para_size must be a positive integer, got 0"]),
        ("two", "x", 1, ["tensor_para_size must be a positive integer, got 'two'",
                         "pipeline_para_size must be a positive integer, got 'x'"]),
        (3, 5, 4, ["does not divide head_num 16", "does not divide inter_size 16384",
                   "pipeline_para_size 5 does not divide num_layer 28", "= 15 GPUs, but 4 are assigned"]),
        (1, 1, 0, ["gpu_count must be a positive integer, got 0"]),
    ],
)  # fmt: skip
def test_check_parallelism_names_every_violated_rule(tp, pp, gpus, messages):
    with pytest.raises(AnsibleFilterError, match=r"^ft_check_parallelism: ") as err:
        ft_check_parallelism(params("gptj-6b"), tp, pp, gpus)
    for message in messages:
        assert message in str(err.value)


@pytest.mark.parametrize("bad", [None, "params", {"head_num": 16}])
def test_check_parallelism_rejects_non_params(bad):
    with pytest.raises(AnsibleFilterError, match="ft_check_parallelism: params"):
        ft_check_parallelism(bad, 1)


# ---------------------------------------------------------------- ft_shard_dir
@pytest.mark.parametrize(
    ("model_dir", "tp", "expected"),
    [("/srv/models/kogpt", 1, "/srv/models/kogpt/fastertransformer/1/1-gpu"),
     ("/srv/models/kogpt/", "8", "/srv/models/kogpt/fastertransformer/1/8-gpu")],
)  # fmt: skip
def test_shard_dir(model_dir, tp, expected):
    assert ft_shard_dir(model_dir, tp) == expected


@pytest.mark.parametrize(("model_dir", "tp"), [("", 1), ("/", 1), (None, 1), ("/m", 0), ("/m", "x"), ("/m", True)])
def test_shard_dir_rejects_bad_input(model_dir, tp):
    with pytest.raises(AnsibleFilterError, match=r"^ft_shard_dir: "):
        ft_shard_dir(model_dir, tp)


# ---------------------------------------------------------------- ft_converter_argv
def test_converter_argv_gptj_seed():
    assert ft_converter_argv("gptj", "/ckpt", "/out", 1, "fp32") == [
        "examples/pytorch/gptj/utils/huggingface_gptj_ckpt_convert.py",
        "--ckpt-dir", "/ckpt", "--output-dir", "/out", "--n-inference-gpus", "1",
    ]  # fmt: skip


def test_converter_argv_gpt2_seed():
    assert ft_converter_argv("gpt", "/ckpt", "/out", 1, "fp32") == [
        "examples/pytorch/gpt/utils/huggingface_gpt_convert.py", "-i", "/ckpt", "-o", "/out", "-i_g", "1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "kwargs", "tail"),
    [
        (("gptj", "/c", "/o", 8, "fp32"), {"num_layer": 28}, ["--n-inference-gpus", "8"]),
        (("gptj", "/c", "/o", 2, "fp32"), {"num_layer": 4}, ["--n-inference-gpus", "2", "--n-layers", "4"]),
        (("gpt", "/c", "/o", 2, "fp16"), {"processes": 4}, ["-i_g", "2", "-p", "4", "-weight_data_type", "fp16"]),
        (("gptneox", "/m/h2ogpt", "/o", 1, "fp16"), {}, ["-m_n", "h2ogpt", "-weight_data_type", "fp16"]),
        (("llama", "/c/llama-7b/", "/o", 2, "bf16"), {}, ["-m_n", "llama-7b", "-weight_data_type", "bf16"]),
        (("bloom", "/c", "/o", 4, "fp16"), {}, ["-o", "/o", "-tp", "4", "-dt", "fp16"]),
        (("bloom", "/c", "/o", 1, "fp32"), {}, ["-o", "/o", "-tp", "1"]),
    ],
)  # fmt: skip
def test_converter_argv_per_family(args, kwargs, tail):
    argv = ft_converter_argv(*args, **kwargs)
    assert argv[0] == FAMILIES[args[0]].converter
    assert argv[-len(tail) :] == tail


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("gptj", "/c", "/o", 1, "fp16"), {}, "weight dtype 'fp16' is not written by the gptj converter (valid: fp32)"),
        (("gpt", "/c", "/o", 1, "bf16"), {}, "(valid: fp32, fp16)"),
        (("gpt", "", "/o", 1, "fp32"), {}, "ckpt_dir must be a non-empty path"),
        (("gpt", "/c", None, 1, "fp32"), {}, "out_dir must be a non-empty path"),
        (("gpt", "/c", "/o", -2, "fp32"), {}, "tensor_para_size must be a positive integer, got -2"),
        (("falcon", "/c", "/o", 1, "fp32"), {}, "unknown model family 'falcon'"),
        (("llama", "/c", "/o", 1, "fp32"), {"processes": 2}, "the llama converter takes no process count"),
        (("gptj", "/c", "/o", 1, "fp32"), {"num_layer": 0}, "num_layer must be a positive integer"),
    ],
)  # fmt: skip
def test_converter_argv_rejects_bad_input(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=r"^ft_converter_argv: ") as err:
        ft_converter_argv(*args, **kwargs)
    assert message in str(err.value)


# ---------------------------------------------------------------- ft_gemm_argv
def test_gemm_argv_gptj_seed():
    assert ft_gemm_argv(params("gptj-6b"), 8, 1, 32, "fp16", 1) == [
        "gpt_gemm",
        "8",
        "1",
        "32",
        "16",
        "256",
        "16384",
        "50400",
        "1",
        "1",
    ]


@pytest.mark.parametrize(
    ("seed", "args", "expected"),
    [
        ("kogpt-6b", (8, 1, 32, 1, 8), "gpt_gemm 8 1 32 16 256 16384 64512 1 8"),
        ("llama-7b", (4, 2, 128, "bf16", 2), "gpt_gemm 4 2 128 32 128 11008 32000 2 2"),
        ("gpt2", (1, 1, 16, "fp32", 1), "gpt_gemm 1 1 16 12 64 3072 50257 0 1"),
    ],
)
def test_gemm_argv_passes_full_sizes(seed, args, expected):
    assert ft_gemm_argv(params(seed), *args) == expected.split()


def test_gemm_argv_binary_path():
    argv = ft_gemm_argv(params("gpt2"), 1, 1, 16, 0, 1, binary="/workspace/bin/gpt_gemm")
    assert argv[0] == "/workspace/bin/gpt_gemm"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (8, 1, 32, "int4", 1),
            "data_type 'int4' is not known to gpt_gemm (valid: fp32 (0), fp16 (1), bf16 (2))",
        ),
        ((8, 1, 32, True, 1), "data_type True"),
        ((8, 1, 32, "fp16", 3), "tensor_para_size 3 does not divide head_num 16"),
        ((0, 1, 32, "fp16", 1), "batch_size must be a positive integer, got 0"),
        ((8, "one", 32, "fp16", 1), "beam_width must be a positive integer, got 'one'"),
        ((8, 1, None, "fp16", 1), "max_input_len must be a positive integer, got None"),
    ],
)
def test_gemm_argv_rejects_bad_input(args, message):
    with pytest.raises(AnsibleFilterError, match=r"^ft_gemm_argv: ") as err:
        ft_gemm_argv(params("gptj-6b"), *args)
    assert message in str(err.value)


def test_gemm_argv_rejects_params_without_sizes():
    with pytest.raises(AnsibleFilterError, match="params lack size_per_head, inter_size, vocab_size"):
        ft_gemm_argv({"head_num": 16}, 8, 1, 32, "fp16", 1)


# ---------------------------------------------------------------- ft_expected_files
# Published parameter counts of the seed models (lm_head tied to the embedding for GPT-2 and
# BLOOM). FT stores Pythia's two output biases as one sum when the residual is parallel.
PUBLISHED_PARAMS = {
    "gpt2": 124_439_808,
    "h2ogpt-6.9b": 6_857_302_016 - 32 * 4096,
    "llama-7b": 6_738_415_616,
    "bloom-560m": 559_214_592,
}


@pytest.mark.parametrize("seed", sorted(PUBLISHED_PARAMS))
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_expected_files_hold_the_published_parameter_count(seed, tp):
    family = SEEDS[seed][0]
    files = ft_expected_files(family, params(seed), tp, "fp32")
    assert sum(f["bytes"] for f in files) == 4 * PUBLISHED_PARAMS[seed]


def test_expected_files_gptj_6b_tp1():
    files = {f["name"]: f["bytes"] for f in ft_expected_files("gptj", params("gptj-6b"), 1, "fp32")}
    assert len(files) == 5 + 28 * 8
    assert files["model.wte.bin"] == 50400 * 4096 * 4
    assert files["model.lm_head.bias.bin"] == 50400 * 4
    assert files["model.layers.27.attention.query_key_value.weight.0.bin"] == 4096 * 3 * 4096 * 4
    assert files["model.layers.0.mlp.dense_4h_to_h.bias.bin"] == 4096 * 4
    assert "model.layers.0.attention.query_key_value.bias.0.bin" not in files  # GPT-J has no QKV bias


def test_expected_files_kogpt_tp8_split_and_replicated():
    files = {f["name"]: f["bytes"] for f in ft_expected_files("gptj", params("kogpt-6b"), 8, "fp32")}
    for rank in range(8):
        assert files[f"model.layers.0.mlp.dense_h_to_4h.weight.{rank}.bin"] == 4096 * 16384 // 8 * 4
        assert files[f"model.layers.0.attention.dense.weight.{rank}.bin"] == 4096 // 8 * 4096 * 4
    assert "model.layers.0.mlp.dense_h_to_4h.weight.8.bin" not in files
    assert files["model.layers.0.input_layernorm.weight.bin"] == 4096 * 4
    assert files["model.wte.bin"] == 64512 * 4096 * 4


@pytest.mark.parametrize(
    ("seed", "present", "absent"),
    [
        ("llama-7b", ["model.wte.weight.bin", "model.layers.0.mlp.gate_proj.weight.1.bin",
                      "model.layers.0.mlp.up_proj.weight.1.bin", "model.layers.31.mlp.down_proj.weight.0.bin"],
         ["model.wte.bin", "model.final_layernorm.bias.bin", "model.layers.0.input_layernorm.bias.bin"]),
        ("gpt2", ["model.wpe.bin", "model.layers.0.attention.query_key_value.bias.1.bin"],
         ["model.lm_head.weight.bin"]),
        ("bloom-560m", ["model.pre_decoder_layernorm.weight.bin", "model.pre_decoder_layernorm.bias.bin"],
         ["model.wpe.bin"]),
        ("h2ogpt-6.9b", ["model.layers.0.mlp.attention.bias.sum.bin", "model.lm_head.weight.bin"],
         ["model.layers.0.attention.dense.bias.bin", "model.layers.0.mlp.dense_4h_to_h.bias.bin"]),
    ],
)  # fmt: skip
def test_expected_files_family_specific_names(seed, present, absent):
    names = {f["name"] for f in ft_expected_files(SEEDS[seed][0], params(seed), 2, "fp32")}
    assert set(present) <= names
    assert not set(absent) & names


def test_expected_files_neox_sequential_residual_has_both_biases():
    p = ft_model_params({**H2OGPT_6_9B, "use_parallel_residual": False}, "gptneox")
    names = {f["name"] for f in ft_expected_files("gptneox", p, 1, "fp16")}
    assert {"model.layers.0.attention.dense.bias.bin", "model.layers.0.mlp.dense_4h_to_h.bias.bin"} <= names
    assert "model.layers.0.mlp.attention.bias.sum.bin" not in names


def test_expected_files_fp16_is_half_of_fp32():
    fp32 = ft_expected_files("gpt", params("gpt2"), 2, "fp32")
    fp16 = ft_expected_files("gpt", params("gpt2"), 2, "fp16")
    assert [f["name"] for f in fp32] == [f["name"] for f in fp16]
    assert all(a["bytes"] == 2 * b["bytes"] for a, b in zip(fp32, fp16, strict=True))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("gptj", "gptj-6b", 3, "fp32"), "tensor_para_size 3 does not divide head_num 16"),
        (("gptj", "gptj-6b", 1, "fp16"), "weight dtype 'fp16' is not written by the gptj converter"),
        (("mpt", "gptj-6b", 1, "fp32"), "unknown model family 'mpt'"),
        (("gptj", "gptj-6b", 0, "fp32"), "tensor_para_size must be a positive integer, got 0"),
    ],
)
def test_expected_files_rejects_bad_input(args, message):
    family, seed, tp, dtype = args
    with pytest.raises(AnsibleFilterError, match=r"^ft_expected_files: ") as err:
        ft_expected_files(family, params(seed), tp, dtype)
    assert message in str(err.value)


def test_expected_files_needs_max_pos_for_wpe():
    p = {k: v for k, v in params("gpt2").items() if k != "max_pos_seq_len"}
    with pytest.raises(AnsibleFilterError, match="lack max_pos_seq_len"):
        ft_expected_files("gpt", p, 1, "fp32")


def test_expected_files_rejects_missing_num_layer():
    p = {k: v for k, v in params("gpt2").items() if k != "num_layer"}
    with pytest.raises(AnsibleFilterError, match=r"params\.num_layer must be a positive integer, got None"):
        ft_expected_files("gpt", p, 1, "fp32")


# ---------------------------------------------------------------- ft_config_ini
@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_config_ini_has_every_required_key(seed):
    family = SEEDS[seed][0]
    dtype = FAMILIES[family].weight_dtypes[-1]
    text = ft_config_ini(params(seed), family, dtype, 1)
    ini = configparser.ConfigParser()
    ini.read_string(text)
    section = ini[FAMILIES[family].ini_section]
    for key in FAMILIES[family].ini_required_keys:
        assert section.get(key), f"{seed}: {key} missing from config.ini"
    assert section["weight_data_type"] == dtype
    assert section["tensor_para_size"] == "1"


def test_config_ini_gptj_seed_values():
    ini = configparser.ConfigParser()
    ini.read_string(ft_config_ini(params("gptj-6b"), "gptj", "fp32", 1))
    assert dict(ini["gptj"]) == {
        "model_name": "gpt-j-6B", "head_num": "16", "size_per_head": "256", "inter_size": "16384",
        "num_layer": "28", "vocab_size": "50400", "rotary_embedding": "64", "start_id": "50256",
        "end_id": "50256", "weight_data_type": "fp32", "tensor_para_size": "1",
    }  # fmt: skip


def test_config_ini_flags_are_integers_the_backend_parses():
    ini = configparser.ConfigParser()
    ini.read_string(ft_config_ini(params("h2ogpt-6.9b"), "gptneox", "fp16", 1))
    assert ini["gptneox"]["use_gptj_residual"] == "1"
    ini.read_string(ft_config_ini(params("bloom-560m"), "bloom", "fp16", 1))
    assert ini["gpt"]["has_positional_encoding"] == "0"
    assert ini["gpt"]["use_attention_linear_bias"] == "1"
    assert ini["gpt"]["model_variant"] == "bloom-pre"  # FT's createGptModel reads only bloom-pre / bloom-post


@pytest.mark.parametrize(
    ("p", "family", "dtype", "tp", "message"),
    [
        ({"head_num": 16, "inter_size": 64}, "gptj", "fp32", 1, "params lack model_name, size_per_head"),
        (None, "gptj", "fp32", 1, "params must be the dict ft_model_params returns"),
        (KOGPT_6B, "llama", "fp16", 1, "params lack"),
    ],
)
def test_config_ini_rejects_bad_input(p, family, dtype, tp, message):
    with pytest.raises(AnsibleFilterError, match=r"^ft_config_ini: ") as err:
        ft_config_ini(p, family, dtype, tp)
    assert message in str(err.value)


# ---------------------------------------------------------------- ft_family
def test_family_flavours_follow_the_family():
    assert ft_family("llama")["flavour"] == "void-main"
    assert ft_family("llama")["ft_repo"] == "https://github.com/void-main/FasterTransformer.git"
    for name in ("gptj", "gpt", "gptneox", "bloom"):
        assert ft_family(name)["flavour"] == "nvidia"
    assert ft_family("bloom")["model_type"] == "GPT"
    assert ft_family("bloom")["ini_section"] == "gpt"


def test_family_rejects_unknown():
    with pytest.raises(AnsibleFilterError, match=r"^ft_family: unknown model family 'opt' \(valid: "):
        ft_family("opt")


# ---------------------------------------------------------------- cuda_sm
@pytest.mark.parametrize(
    ("cc", "sm"),
    [("8.0", "80"), (8.0, "80"), ("9.0", "90"), (7.5, "75"), ("sm_86", "86"), ("89", "89"),
     (["8.0", "8.0"], "80"), (["9.0", "8.0", "8.6"], "80,86,90")],
)  # fmt: skip
def test_cuda_sm(cc, sm):
    assert cuda_sm(cc) == sm


@pytest.mark.parametrize(
    ("cc", "message"),
    [("5.2", "(SM 52) is not one FT builds kernels for (valid SM: 60, 61, 70, 75, 80, 86, 89, 90)"),
     ("ampere", "is not of the form MAJOR.MINOR"), (None, "is not of the form"), (True, "is not of the form"),
     ([], "empty list"), (["8.0", "x"], "'x' is not of the form")],
)  # fmt: skip
def test_cuda_sm_rejects_bad_input(cc, message):
    with pytest.raises(AnsibleFilterError, match=r"^cuda_sm: ") as err:
        cuda_sm(cc)
    assert message in str(err.value)


# ---------------------------------------------------------------- ft_int8_problem
@pytest.mark.parametrize(
    ("mode", "ccs", "outside"),
    [(0, ["9.0"], ""), (1, ["8.0", "8.6", "8.9", "7.0", "7.5"], ""), (1, ["9.0"], "9.0"), (1, ["8.0", "9.0"], "9.0"),
     (1, ["6.1"], "6.1"), (2, ["8.0", "8.9"], ""), (2, ["7.5", "9.0"], "7.5, 9.0"), (1, [], ""), ("1", ["9.0"], "9.0")],
)  # fmt: skip
def test_ft_int8_problem_names_the_gpus_without_int8_kernels(mode, ccs, outside):
    problem = ft_int8_problem(mode, ccs)
    if not outside:
        assert problem == ""
        return
    assert problem.startswith(f"triton_model_repo_int8_mode={int(mode)} on compute capability {outside}: ")
    assert "; fix: int8_mode 0" in problem


# ---------------------------------------------------------------- triton_min_driver / triton_driver_ok
@pytest.mark.parametrize(
    ("container", "cuda", "branch", "datacenter"),
    [("22.04", "11.6", 510, ["418.40", "440.33", "450.51", "460.27", "470.57"]),
     ("22.05", "11.7", 515, ["450.51", "470.57", "510.47"]),
     ("22.12", "11.8", 520, ["450.51", "470.57", "510.47", "515.65"]),
     ("23.04", "12.1", 530, ["450.51", "470.57", "510.47", "515.65", "525.85"]),
     ("23.08", "12.2", 535, ["450.51", "470.57", "510.47", "525.85"]),
     ("24.04-py3", "12.4", 545, ["470.57", "525.85", "535.86"]),
     ("24.10", "12.6", 560, ["470.57", "525.85", "535.86", "545.23"])],
)  # fmt: skip
def test_triton_min_driver(container, cuda, branch, datacenter):
    got = triton_min_driver(container)
    assert (got["cuda"], got["min_driver"], got["datacenter_drivers"]) == (cuda, branch, datacenter)


@pytest.mark.parametrize("bad", [22.04, 22.1, None])
def test_triton_min_driver_rejects_unquoted_versions(bad):
    with pytest.raises(AnsibleFilterError, match=r"must be a string like '22.04' \(quote it in YAML"):
        triton_min_driver(bad)


@pytest.mark.parametrize("bad", ["21.01", "22.4", "latest", ""])
def test_triton_min_driver_rejects_unknown(bad):
    with pytest.raises(
        AnsibleFilterError, match=r"^triton_min_driver: unknown Triton container version .*\(known: 22.03"
    ):
        triton_min_driver(bad)


@pytest.mark.parametrize(
    ("driver", "container", "datacenter", "ok"),
    [("580.65.06", "22.04", False, True), ("510.47.03", "22.04", False, True),
     ("470.82.01", "22.04", False, False), ("470.82.01", "22.04", True, True),
     ("470.42.01", "22.04", True, False),  # R470 older than 470.57
     ("535.104.05", "24.10", True, True), ("535.104.05", "24.10", False, False),
     ("520.61.05", "23.04", True, False)],  # R520 is not a compatibility branch
)  # fmt: skip
def test_triton_driver_ok(driver, container, datacenter, ok):
    result = triton_driver_ok(driver, container, datacenter)
    assert result["ok"] is ok, result["reason"]
    if not ok:
        assert f"needs R{triton_min_driver(container)['min_driver']} or later" in result["reason"]


def test_triton_driver_ok_rejects_garbage_version():
    with pytest.raises(AnsibleFilterError, match="driver_version 'none' is not a driver version"):
        triton_driver_ok("none", "22.04")


# ---------------------------------------------------------------- sizes for preflight
def test_parallelism_problems_lists_without_raising():
    assert ft_parallelism_problems(params("gptj-6b"), 1, 1, 1) == []
    assert ft_parallelism_problems(params("gptj-6b"), 2, 1, 1) == [
        "tensor_para_size 2 x pipeline_para_size 1 = 2 GPUs, but 1 are assigned "
        "(one serving instance needs exactly tp x pp GPUs)"
    ]


def test_parameter_count_and_bytes_per_gpu():
    assert ft_parameter_count("llama", params("llama-7b")) == 6_738_415_616
    whole = ft_weight_bytes_per_gpu("llama", params("llama-7b"), 1, "fp16")
    half = ft_weight_bytes_per_gpu("llama", params("llama-7b"), 2, "fp16")
    assert whole == 2 * 6_738_415_616
    # Two GPUs each hold half the split weights and all the replicated ones: embedding,
    # lm_head and the norm weights.
    replicated = 2 * 32000 * 4096 + 4096 + 32 * 2 * 4096
    assert half == 2 * ((6_738_415_616 - replicated) // 2 + replicated)
    with pytest.raises(AnsibleFilterError, match="data_type 'int8' is not one FT serves"):
        ft_weight_bytes_per_gpu("llama", params("llama-7b"), 1, "int8")


def test_docs_models_examples_match_the_filters():
    """Every gpt_gemm command and converter command line in docs/models.md is what the filters
    compute for the seed models (the examples cannot drift from the code)."""
    import re  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    cases = [("kogpt-6b", 1, "fp32", "kogpt"), ("kogpt-6b", 8, "fp32", "kogpt"), ("gptj-6b", 4, "fp32", "gpt-j-6b"),
             ("gptj-6b", 1, "fp32", "gpt-j-6b"), ("gpt2", 1, "fp16", "gpt2"), ("h2ogpt-6.9b", 1, "fp16", "h2ogpt"),
             ("llama-7b", 2, "fp16", "llama-7b")]  # fmt: skip
    gemms, converters = set(), set()
    for seed, tp, weight_dtype, name in cases:
        family, config = SEEDS[seed]
        p = ft_model_params(config, family)
        gemms.add(" ".join(ft_gemm_argv(p, 8, 1, 32, "fp16", tp)))
        argv = ft_converter_argv(family, "CKPT", "OUT", tp, weight_dtype, num_layer=p["num_layer"], model_name=name)
        converters.add(" ".join(argv))
    documented = set(re.findall(r"gpt_gemm(?: \d+){9}", doc))
    assert documented, "no gpt_gemm example in docs/models.md"
    assert documented <= gemms, documented - gemms
    flat = " ".join(doc.split())
    for line in converters:
        assert line.split(" ", 1)[0] in flat  # every seed's converter script is named
    documented_lines = re.findall(r"`((?:\.\.\. )?[\w/]*convert\.py [^`]+)`", flat)
    assert len(documented_lines) >= 5, documented_lines
    for documented_line in documented_lines:
        tail = documented_line.removeprefix("... ")
        assert any(c.endswith(tail) for c in converters), documented_line


def test_a_post_layernorm_bloom_is_refused_not_served_as_pre():
    """FT's converter calls it bloom-post (layernorm_type post_layernorm); the project converts and
    decodes only the pre-layernorm BLOOM every published checkpoint is."""
    from configs import BLOOM_560M  # noqa: PLC0415

    with pytest.raises(AnsibleFilterError, match="apply_residual_connection_post_layernorm"):
        ft_model_params({**BLOOM_560M, "apply_residual_connection_post_layernorm": True}, "bloom")
    assert ft_model_params({**BLOOM_560M, "apply_residual_connection_post_layernorm": False}, "bloom")["head_num"] == 16


GPT2_TOKENIZER = {"added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
                  "model": {"vocab": {"hello": 31373}}}  # fmt: skip


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # GPT-2: the special token in tokenizer.json, named by tokenizer_config.json
        ({"tokenizer.json": GPT2_TOKENIZER, "tokenizer_config.json": {"bos_token": "<|endoftext|>",
          "eos_token": "<|endoftext|>"}}, {"bos": ["<|endoftext|>", 50256], "eos": ["<|endoftext|>", 50256]}),
        # transformers' newer form: the tokens as dicts, ids in added_tokens_decoder
        ({"tokenizer_config.json": {"bos_token": {"content": "<s>"}, "eos_token": {"content": "</s>"},
          "added_tokens_decoder": {"1": {"content": "<s>"}, "2": {"content": "</s>"}}}},
         {"bos": ["<s>", 1], "eos": ["</s>", 2]}),
        # the names only in special_tokens_map.json, an id only in the vocabulary
        ({"special_tokens_map.json": {"eos_token": "hello"}, "tokenizer.json": GPT2_TOKENIZER},
         {"eos": ["hello", 31373]}),
        # decapoda's LLaMA: LLaMATokenizer, empty special tokens, tokenizer.model only
        ({"tokenizer_config.json": {"tokenizer_class": "LLaMATokenizer", "bos_token": "", "eos_token": ""}},
         {"bos": ["<s>", 1], "eos": ["</s>", 2]}),
        ({}, {}),  # no tokenizer files: nothing to compare
    ],
)  # fmt: skip
def test_the_tokenizers_bos_and_eos_ids_come_from_its_files(files, expected):
    from ftdomain.ft.model import tokenizer_special_ids  # noqa: PLC0415

    assert tokenizer_special_ids(files.get) == expected


def test_a_config_json_that_disagrees_with_its_tokenizer_is_refused_with_the_fix():
    """decapoda-research/llama-7b-hf: config.json says bos 0 and eos 1, its tokenizer.model <s> 1
    and </s> 2; FT would never stop at the tokenizer's end of text."""
    from ftdomain.ft.model import ft_token_id_problems, tokenizer_special_ids  # noqa: PLC0415

    decapoda = tokenizer_special_ids({"tokenizer_config.json": {"tokenizer_class": "LLaMATokenizer"}}.get)
    problems = ft_token_id_problems({**LLAMA_7B, "bos_token_id": 0, "eos_token_id": 1}, decapoda)
    assert len(problems) == 2, problems
    assert problems[1].startswith("config.json's eos_token_id is 1 but the tokenizer's eos token '</s>' is id 2")
    assert "never end" in problems[1]
    assert "fix: " in problems[1]
    assert "huggyllama/llama-7b" in problems[1]
    assert ft_token_id_problems({**LLAMA_7B, "bos_token_id": 1, "eos_token_id": 2}, decapoda) == []
    assert ft_token_id_problems(LLAMA_7B, None) == []  # an older cache without the tokenizer's ids


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_every_seed_models_head_size_has_an_ft_kernel(name):
    family, config = SEEDS[name]
    assert ft_kernel_problems(ft_model_params(config, family)) == []


@pytest.mark.parametrize(
    ("family", "config", "words"),
    [
        ("gpt", {**GPT2, "n_head": 48},
         "head size 16 (768 hidden / 48 heads) has no kernel in FT's decoder attention (sizes 32, 48, 64, 80, 96, "
         "112, 128, 144, 160, 192, 224, 256; NVIDIA/FasterTransformer's decoder_masked_multihead_attention.cu)"),
        ("gptj", {**GPTJ_6B, "n_head": 128}, None),  # 32
        ("gptneox", {**H2OGPT_6_9B, "hidden_size": 3584, "num_attention_heads": 32}, None),  # 112
        ("llama", {**LLAMA_7B, "hidden_size": 3584, "num_attention_heads": 32},
         "head size 112 (3584 hidden / 32 heads) has no kernel in FT's decoder attention (sizes 32, 48, 64, 80, 96, "
         "128, 144, 160, 192, 224, 256; void-main/FasterTransformer's"),
    ],
)  # fmt: skip
def test_head_sizes_without_an_ft_kernel_are_named(family, config, words):
    problems = ft_kernel_problems(ft_model_params(config, family))
    if words is None:
        assert problems == []
    else:
        assert len(problems) == 1
        assert words in problems[0]


def test_kernel_problems_need_the_models_sizes():
    with pytest.raises(AnsibleFilterError, match="ft_kernel_problems"):
        ft_kernel_problems({"family": "gpt"})


@pytest.mark.parametrize(
    ("family", "config", "data_type", "refused"),
    [
        ("gptneox", {**H2OGPT_6_9B, "hidden_size": 1024, "num_attention_heads": 32}, "fp32", True),  # 32 per head
        ("gptneox", {**H2OGPT_6_9B, "hidden_size": 1024, "num_attention_heads": 32}, "fp16", False),
        ("gptneox", {**H2OGPT_6_9B, "hidden_size": 1024, "num_attention_heads": 32}, None, False),  # not asked
        ("gptneox", {**H2OGPT_6_9B, "hidden_size": 2048, "num_attention_heads": 32}, "fp32", False),  # 64
        ("llama", {**LLAMA_7B, "hidden_size": 1024, "num_attention_heads": 32}, "fp32", True),
        ("llama", {**LLAMA_7B, "hidden_size": 1024, "num_attention_heads": 32}, "bf16", False),
        ("gptj", {**GPTJ_6B, "n_head": 128}, "fp32", False),  # GPT-J's rotary is interleaved, not GPT-NeoX's
    ],
)  # fmt: skip
def test_gpt_neox_style_rotary_at_fp32_with_heads_of_32_is_refused(family, config, data_type, refused):
    """FT's decoder attention applies GPT-NeoX-style rotary through a shared-memory transpose that is
    empty for one float (fp32, head size 32): refused at that data type only, with the source named."""
    problems = ft_kernel_problems(ft_model_params(config, family), data_type)
    assert bool(problems) is refused, problems
    if refused:
        assert problems[0].startswith("head size 32 at data_type fp32 with ")
        assert "decoder_masked_multihead_attention_utils.h" in problems[0]

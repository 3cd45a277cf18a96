"""The model-family registry: everything the project knows about a FasterTransformer model family.

Every other filter (and the native converter) reads its facts from here; no family fact is
written in YAML or templates. Facts are from the upstream sources (NVIDIA/FasterTransformer,
triton-inference-server/fastertransformer_backend and void-main's forks for LLaMA): the weight
files are the ones the backend's loaders open, with the shapes they read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.tensors import (
    GPT_LAYER,
    MLP_UP,
    QKV,
    Tensor,
    hidden,
    hidden_by_hidden,
    hidden_by_inter,
    inter_by_hidden,
    layernorm,
    positions_by_hidden,
    qkv_weight,
    vocab,
    vocab_by_hidden,
)

# Bytes per element of each weight dtype FT reads.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
# gpt_gemm's data_type argument.
GEMM_DATA_TYPES = {"fp32": 0, "fp16": 1, "bf16": 2}

# Where the upstream sources live; the image roles take these as defaults.
FLAVOURS = {
    "nvidia": {
        "ft_repo": "https://github.com/NVIDIA/FasterTransformer.git",
        "backend_repo": "https://github.com/triton-inference-server/fastertransformer_backend.git",
    },
    "void-main": {
        "ft_repo": "https://github.com/void-main/FasterTransformer.git",
        "backend_repo": "https://github.com/void-main/fastertransformer_backend.git",
    },
}


@dataclass(frozen=True)
class ConverterImport:
    """One import of the family's upstream converter: the line as the converter writes it, and the
    pip requirements that provide it when the FT image lacks it (none: the image must bring it),
    with environment markers where the release depends on the image's Python."""

    statement: str
    requirements: tuple[str, ...] = ()
    # CFLAGS for building a requirement from source (no wheel for the image's Python).
    cflags: str = ""


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str  # the backend's model_type parameter
    ini_section: str
    ini_required_keys: tuple[str, ...]
    converter: str  # path of the upstream HF converter in the FT (or VFT) tree
    weight_dtypes: tuple[str, ...]  # what that converter can write
    int8: bool  # int8_mode supported by the backend for this family
    flavour: str  # which FT/FTB sources build images that serve it
    # HF config.json keys for each size, first present wins.
    hf_keys: Mapping[str, tuple[str, ...]]
    global_tensors: Callable[[Mapping[str, Any]], list[Tensor]]
    layer_tensors: Callable[[Mapping[str, Any]], list[Tensor]]
    extra_params: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] = field(default=lambda hf, p: {})
    # The layer norms' epsilon where FT's model fixes it and ignores config.ini's layernorm_eps
    # (GptJ.h, GptNeoX.h at df4a753; seen on an H200: docs/gpu-tier.md).
    fixed_layernorm_eps: float | None = None
    # Rotary embedding in GPT-NeoX's style (the dimension's two halves rotated together, not
    # neighbouring pairs): FT's decoder attention takes neox_rotary_style for GptNeoX and void-main's
    # LLaMA, and applies it through a transpose in shared memory (ft_kernel_problems).
    neox_rotary: bool = False
    # What the upstream converter imports beyond FT's image (docker/Dockerfile.torch: the NGC
    # pytorch image, NeMo[nlp] and with it transformers): ft_convert's upstream engine installs it.
    converter_imports: tuple[ConverterImport, ...] = ()


_BASE_KEYS = ("model_name", "head_num", "size_per_head", "inter_size", "num_layer", "vocab_size")
_IDS = ("start_id", "end_id")

_GPT2_KEYS = {
    "hidden": ("n_embd", "hidden_size"),
    "heads": ("n_head", "num_attention_heads"),
    "layers": ("n_layer", "num_hidden_layers"),
    "vocab": ("vocab_size",),
}


def _gptj_extra(hf: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
    rotary = hf.get("rotary_dim")
    return {"rotary_embedding": p["size_per_head"] if rotary is None else rotary}


def _gpt_extra(hf: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "max_pos_seq_len": first_key(hf, ("n_positions", "n_ctx", "max_position_embeddings"), "gpt"),
        "layernorm_eps": hf.get("layer_norm_epsilon", 1e-5),
    }


def _bloom_extra(hf: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
    # ALiBi instead of learnt positions, a layernorm right after the embedding. FT's converter
    # writes model_variant bloom-post for a post-layernorm residual (which FT reads as
    # layernorm_type post_layernorm); every BLOOM checkpoint is pre-layernorm, and the project's
    # converter and reference decoder model only that.
    if hf.get("apply_residual_connection_post_layernorm"):
        raise AnsibleFilterError(
            "ft_model_params: the bloom config.json sets apply_residual_connection_post_layernorm "
            "(FT's bloom-post variant), which this project does not convert: only pre-layernorm BLOOM"
        )
    return {
        "layernorm_eps": hf.get("layer_norm_epsilon", 1e-5),
        "has_positional_encoding": False,
        "has_pre_decoder_layernorm": True,
        "has_post_decoder_layernorm": True,
        "use_attention_linear_bias": True,
    }


def _rope(hf: Mapping[str, Any], family: str) -> tuple[float, float]:
    """(partial rotary factor, base) from either config.json spelling: the older top-level keys
    (rotary_pct, rotary_emb_base, rope_theta) or transformers 5's rope_parameters."""
    rope = hf.get("rope_parameters") or {}
    pct = hf.get("rotary_pct", rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 0.25)))
    base = hf.get("rotary_emb_base", hf.get("rope_theta", rope.get("rope_theta", 10000.0)))
    scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    if float(base) != 10000.0 or scaling:
        raise AnsibleFilterError(
            f"ft_model_params: the {family} config.json asks for rotary base {base}"
            f"{' and scaling ' + str(scaling) if scaling else ''}; FasterTransformer's kernels use base 10000 "
            "without scaling (valid: rope_theta/rotary_emb_base 10000, no rope_scaling)"
        )
    return float(pct), float(base)


def _gptneox_extra(hf: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
    pct, _base = _rope(hf, "gptneox")
    return {
        "rotary_embedding": int(p["size_per_head"] * pct),
        "use_gptj_residual": bool(hf.get("use_parallel_residual", True)),
        "max_pos_seq_len": hf.get("max_position_embeddings", 2048),
        "layernorm_eps": hf.get("layer_norm_eps", 1e-5),
    }


def _llama_extra(hf: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
    kv_heads = hf.get("num_key_value_heads")
    if kv_heads is not None and kv_heads != p["head_num"]:
        raise AnsibleFilterError(
            f"ft_model_params: llama config.json has num_key_value_heads {kv_heads} != "
            f"num_attention_heads {p['head_num']}: grouped-query attention (e.g. LLaMA-2-70B) "
            "is not supported by the FasterTransformer LLaMA converter (valid: equal head counts)"
        )
    _rope(hf, "llama")
    return {
        "rotary_embedding": p["size_per_head"],
        "layernorm_eps": hf.get("rms_norm_eps", 1e-6),
        "max_pos_seq_len": hf.get("max_position_embeddings", 2048),
    }


def first_key(hf: Mapping[str, Any], keys: tuple[str, ...], family: str) -> Any:
    for key in keys:
        if hf.get(key) is not None:
            return hf[key]
    raise AnsibleFilterError(
        f"ft_model_params: config.json of the {family} checkpoint has none of the keys "
        f"{', '.join(keys)} (expected one of them with a positive integer)"
    )


def _gptneox_layer(p: Mapping[str, Any]) -> list[Tensor]:
    # Parallel residual: the backend reads one bias, the sum of the attention-out and
    # MLP-down biases, instead of the two.
    biases = (
        [Tensor("model.layers.{L}.mlp.attention.bias.sum", hidden)]
        if p["use_gptj_residual"]
        else [
            Tensor("model.layers.{L}.attention.dense.bias", hidden),
            Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", hidden),
        ]
    )
    return [
        *layernorm("model.layers.{L}.input_layernorm"),
        *QKV,
        Tensor("model.layers.{L}.attention.dense.weight", hidden_by_hidden, 0),
        *layernorm("model.layers.{L}.post_attention_layernorm"),
        *MLP_UP,
        *biases,
    ]


FAMILIES: dict[str, Family] = {
    "gptj": Family(
        name="gptj",
        model_type="GPT-J",
        ini_section="gptj",
        ini_required_keys=(*_BASE_KEYS, "rotary_embedding", *_IDS),
        converter="examples/pytorch/gptj/utils/huggingface_gptj_ckpt_convert.py",
        weight_dtypes=("fp32",),
        int8=False,
        flavour="nvidia",
        hf_keys=_GPT2_KEYS,
        global_tensors=lambda p: [
            Tensor("model.wte", vocab_by_hidden),
            *layernorm("model.final_layernorm"),
            Tensor("model.lm_head.weight", vocab_by_hidden),
            Tensor("model.lm_head.bias", vocab),
        ],
        layer_tensors=lambda p: [
            *layernorm("model.layers.{L}.input_layernorm"),
            Tensor("model.layers.{L}.attention.query_key_value.weight", qkv_weight, -1),
            Tensor("model.layers.{L}.attention.dense.weight", hidden_by_hidden, 0),
            *MLP_UP,
            Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", hidden),
        ],
        extra_params=_gptj_extra,
        fixed_layernorm_eps=1e-6,
    ),
    "gpt": Family(
        name="gpt",
        model_type="GPT",
        ini_section="gpt",
        ini_required_keys=(*_BASE_KEYS, "max_pos_seq_len", *_IDS),
        converter="examples/pytorch/gpt/utils/huggingface_gpt_convert.py",
        weight_dtypes=("fp32", "fp16"),
        int8=True,
        flavour="nvidia",
        hf_keys=_GPT2_KEYS,
        # GPT-2 ties lm_head to wte: the backend reuses model.wte.bin when no lm_head file exists.
        global_tensors=lambda p: [
            Tensor("model.wte", vocab_by_hidden),
            Tensor("model.wpe", positions_by_hidden),
            *layernorm("model.final_layernorm"),
        ],
        layer_tensors=lambda p: list(GPT_LAYER),
        extra_params=_gpt_extra,
    ),
    "gptneox": Family(
        name="gptneox",
        model_type="GPT-NeoX",
        ini_section="gptneox",
        ini_required_keys=(*_BASE_KEYS, "rotary_embedding", *_IDS, "use_gptj_residual"),
        converter="examples/pytorch/gptneox/utils/huggingface_gptneox_convert.py",
        weight_dtypes=("fp32", "fp16"),
        int8=False,
        flavour="nvidia",
        hf_keys={
            "hidden": ("hidden_size",),
            "heads": ("num_attention_heads",),
            "layers": ("num_hidden_layers",),
            "vocab": ("vocab_size",),
            "inter": ("intermediate_size",),
        },
        global_tensors=lambda p: [
            Tensor("model.wte", vocab_by_hidden),
            *layernorm("model.final_layernorm"),
            Tensor("model.lm_head.weight", vocab_by_hidden),
        ],
        layer_tensors=_gptneox_layer,
        extra_params=_gptneox_extra,
        fixed_layernorm_eps=1e-5,
        neox_rotary=True,
    ),
    "llama": Family(
        name="llama",
        model_type="Llama",
        ini_section="llama",
        ini_required_keys=(*_BASE_KEYS, "rotary_embedding", *_IDS, "layernorm_eps"),
        converter="examples/cpp/llama/huggingface_llama_convert.py",
        weight_dtypes=("fp32", "fp16", "bf16"),
        int8=True,
        flavour="void-main",
        neox_rotary=True,
        # void-main's huggingface_llama_convert.py: `from bfloat16 import bfloat16` (GreenWaves'
        # numpy extension, its bf16 dtype), which no image installs. 1.2.0 has wheels for CPython
        # 3.9 to 3.12 only; on 3.8 (the default 22.04 image's) 1.1 builds from its source archive,
        # whose C++ needs <memory> that GCC 11 and later no longer bring through <array> (1.1 does
        # not build on 3.11: it assigns to Py_TYPE()).
        converter_imports=(
            ConverterImport("from transformers import LlamaForCausalLM"),
            ConverterImport(
                "from bfloat16 import bfloat16",
                ('bfloat16==1.1; python_version < "3.9"', 'bfloat16==1.2.0; python_version >= "3.9"'),
                "-include memory",
            ),
        ),
        hf_keys={
            "hidden": ("hidden_size",),
            "heads": ("num_attention_heads",),
            "layers": ("num_hidden_layers",),
            "vocab": ("vocab_size",),
            "inter": ("intermediate_size",),
        },
        global_tensors=lambda p: [
            Tensor("model.wte.weight", vocab_by_hidden),
            Tensor("model.final_layernorm.weight", hidden),
            Tensor("model.lm_head.weight", vocab_by_hidden),
        ],
        layer_tensors=lambda p: [
            Tensor("model.layers.{L}.input_layernorm.weight", hidden),
            Tensor("model.layers.{L}.attention.query_key_value.weight", qkv_weight, -1),
            Tensor("model.layers.{L}.attention.dense.weight", hidden_by_hidden, 0),
            Tensor("model.layers.{L}.post_attention_layernorm.weight", hidden),
            Tensor("model.layers.{L}.mlp.gate_proj.weight", hidden_by_inter, -1),
            Tensor("model.layers.{L}.mlp.up_proj.weight", hidden_by_inter, -1),
            Tensor("model.layers.{L}.mlp.down_proj.weight", inter_by_hidden, 0),
        ],
        extra_params=_llama_extra,
    ),
    "bloom": Family(
        name="bloom",
        model_type="GPT",
        ini_section="gpt",
        ini_required_keys=(*_BASE_KEYS, *_IDS),
        converter="examples/pytorch/gpt/utils/huggingface_bloom_convert.py",
        weight_dtypes=("fp32", "fp16"),
        int8=True,
        flavour="nvidia",
        hf_keys={
            "hidden": ("hidden_size", "n_embed"),
            "heads": ("n_head", "num_attention_heads"),
            "layers": ("n_layer", "num_hidden_layers"),
            "vocab": ("vocab_size",),
        },
        global_tensors=lambda p: [
            Tensor("model.wte", vocab_by_hidden),
            *layernorm("model.pre_decoder_layernorm"),
            *layernorm("model.final_layernorm"),
        ],
        layer_tensors=lambda p: list(GPT_LAYER),
        extra_params=_bloom_extra,
    ),
}


def get_family(name: Any, filter_name: str = "ft_family") -> Family:
    """The Family called `name`, or an error naming the filter, the value and the valid names."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise AnsibleFilterError(f"{filter_name}: unknown model family {name!r} (valid: {', '.join(sorted(FAMILIES))})")
    return FAMILIES[name]


def check_dtype(family: Family, weight_dtype: Any, filter_name: str) -> str:
    if weight_dtype not in family.weight_dtypes:
        raise AnsibleFilterError(
            f"{filter_name}: weight dtype {weight_dtype!r} is not written by the {family.name} "
            f"converter (valid: {', '.join(family.weight_dtypes)})"
        )
    return weight_dtype


def ft_family(name: Any) -> dict[str, Any]:
    family = get_family(name)
    return {
        "name": family.name,
        "model_type": family.model_type,
        "ini_section": family.ini_section,
        "ini_required_keys": list(family.ini_required_keys),
        "converter": family.converter,
        "weight_dtypes": list(family.weight_dtypes),
        "int8": family.int8,
        "flavour": family.flavour,
        **FLAVOURS[family.flavour],
    }

"""The model-family registry: everything the project knows about a FasterTransformer model family.

Every other filter (and the native converter) reads its facts from here; no family fact is
written in YAML or templates. Facts are from the upstream sources (NVIDIA/FasterTransformer,
triton-inference-server/fastertransformer_backend and void-main's forks for LLaMA): the weight
files are the ones the backend's loaders open, with the shapes they read.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_family
short_description: The registry facts of a FasterTransformer model family
description:
  - Returns what the project knows about a family - the backend model_type, the config.ini
    section and its required keys, the upstream converter script, the weight dtypes the
    converter can write, whether int8_mode is supported, and which FT/FTB source flavour
    (C(nvidia) or C(void-main)) builds the images for it.
options:
  _input:
    description: Family name - one of gptj, gpt, gptneox, llama, bloom.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Pick the image flavour for the model this host serves
  ansible.builtin.set_fact:
    ft_image_flavour: "{{ (fleet_model_family | ft_family).flavour }}"
"""

RETURN = r"""
_value:
  description: The family's facts.
  type: dict
  sample:
    name: gptj
    model_type: GPT-J
    ini_section: gptj
    ini_required_keys: [model_name, head_num, size_per_head, inter_size, num_layer, vocab_size,
                        rotary_embedding, start_id, end_id]
    converter: examples/pytorch/gptj/utils/huggingface_gptj_ckpt_convert.py
    weight_dtypes: [fp32]
    int8: false
    flavour: nvidia
"""

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

if "ansible" in sys.modules:  # loaded by Ansible: its error class, shown to the user as is
    from ansible.errors import AnsibleFilterError
else:  # the native converter and decoder, or unit tests: importing Ansible would patch the interpreter

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """The filter errors' class outside Ansible."""


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
class Dims:
    """The sizes weight shapes are made of."""

    hidden: int
    inter: int
    vocab: int
    max_pos: int


@dataclass(frozen=True)
class Tensor:
    """One weight file of the FT layout.

    name: file stem; `{L}` is the layer index. Split tensors get `.<rank>` before `.bin`.
    shape: the full (unsplit) shape, from the model's sizes.
    split_axis: the axis divided across tensor-parallel ranks, or None when replicated.
    """

    name: str
    shape: Callable[[Dims], tuple[int, ...]]
    split_axis: int | None = None


def _h(d: Dims) -> tuple[int, ...]:
    return (d.hidden,)


def _hh(d: Dims) -> tuple[int, ...]:
    return (d.hidden, d.hidden)


def _qkv_w(d: Dims) -> tuple[int, ...]:
    return (d.hidden, 3, d.hidden)


def _qkv_b(d: Dims) -> tuple[int, ...]:
    return (3, d.hidden)


def _hi(d: Dims) -> tuple[int, ...]:
    return (d.hidden, d.inter)


def _i(d: Dims) -> tuple[int, ...]:
    return (d.inter,)


def _ih(d: Dims) -> tuple[int, ...]:
    return (d.inter, d.hidden)


def _vh(d: Dims) -> tuple[int, ...]:
    return (d.vocab, d.hidden)


def _v(d: Dims) -> tuple[int, ...]:
    return (d.vocab,)


def _ph(d: Dims) -> tuple[int, ...]:
    return (d.max_pos, d.hidden)


def _layernorm(prefix: str, bias: bool = True) -> list[Tensor]:
    return [Tensor(f"{prefix}.weight", _h)] + ([Tensor(f"{prefix}.bias", _h)] if bias else [])


# Layer tensors shared by the GPT-style families (gpt, bloom, gptneox): QKV with bias, a
# dense output, a two-matrix MLP with biases. Split: QKV and MLP-up on their output axis
# (-1), attention-out and MLP-down on their input axis (0).
_QKV = [
    Tensor("model.layers.{L}.attention.query_key_value.weight", _qkv_w, -1),
    Tensor("model.layers.{L}.attention.query_key_value.bias", _qkv_b, -1),
]
_MLP_UP = [
    Tensor("model.layers.{L}.mlp.dense_h_to_4h.weight", _hi, -1),
    Tensor("model.layers.{L}.mlp.dense_h_to_4h.bias", _i, -1),
    Tensor("model.layers.{L}.mlp.dense_4h_to_h.weight", _ih, 0),
]
_GPT_LAYER = [
    *_layernorm("model.layers.{L}.input_layernorm"),
    *_QKV,
    Tensor("model.layers.{L}.attention.dense.weight", _hh, 0),
    Tensor("model.layers.{L}.attention.dense.bias", _h),
    *_layernorm("model.layers.{L}.post_attention_layernorm"),
    *_MLP_UP,
    Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", _h),
]


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
    # (GptJ.h, GptNeoX.h at df4a753; seen on an H200: docs/testing.md, "The GPU tier").
    fixed_layernorm_eps: float | None = None


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
        [Tensor("model.layers.{L}.mlp.attention.bias.sum", _h)]
        if p["use_gptj_residual"]
        else [
            Tensor("model.layers.{L}.attention.dense.bias", _h),
            Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", _h),
        ]
    )
    return [
        *_layernorm("model.layers.{L}.input_layernorm"),
        *_QKV,
        Tensor("model.layers.{L}.attention.dense.weight", _hh, 0),
        *_layernorm("model.layers.{L}.post_attention_layernorm"),
        *_MLP_UP,
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
            Tensor("model.wte", _vh),
            *_layernorm("model.final_layernorm"),
            Tensor("model.lm_head.weight", _vh),
            Tensor("model.lm_head.bias", _v),
        ],
        layer_tensors=lambda p: [
            *_layernorm("model.layers.{L}.input_layernorm"),
            Tensor("model.layers.{L}.attention.query_key_value.weight", _qkv_w, -1),
            Tensor("model.layers.{L}.attention.dense.weight", _hh, 0),
            *_MLP_UP,
            Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", _h),
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
            Tensor("model.wte", _vh),
            Tensor("model.wpe", _ph),
            *_layernorm("model.final_layernorm"),
        ],
        layer_tensors=lambda p: list(_GPT_LAYER),
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
            Tensor("model.wte", _vh),
            *_layernorm("model.final_layernorm"),
            Tensor("model.lm_head.weight", _vh),
        ],
        layer_tensors=_gptneox_layer,
        extra_params=_gptneox_extra,
        fixed_layernorm_eps=1e-5,
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
        hf_keys={
            "hidden": ("hidden_size",),
            "heads": ("num_attention_heads",),
            "layers": ("num_hidden_layers",),
            "vocab": ("vocab_size",),
            "inter": ("intermediate_size",),
        },
        global_tensors=lambda p: [
            Tensor("model.wte.weight", _vh),
            Tensor("model.final_layernorm.weight", _h),
            Tensor("model.lm_head.weight", _vh),
        ],
        layer_tensors=lambda p: [
            Tensor("model.layers.{L}.input_layernorm.weight", _h),
            Tensor("model.layers.{L}.attention.query_key_value.weight", _qkv_w, -1),
            Tensor("model.layers.{L}.attention.dense.weight", _hh, 0),
            Tensor("model.layers.{L}.post_attention_layernorm.weight", _h),
            Tensor("model.layers.{L}.mlp.gate_proj.weight", _hi, -1),
            Tensor("model.layers.{L}.mlp.up_proj.weight", _hi, -1),
            Tensor("model.layers.{L}.mlp.down_proj.weight", _ih, 0),
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
            Tensor("model.wte", _vh),
            *_layernorm("model.pre_decoder_layernorm"),
            *_layernorm("model.final_layernorm"),
        ],
        layer_tensors=lambda p: list(_GPT_LAYER),
        extra_params=_bloom_extra,
    ),
}


def get_family(name: Any, filter_name: str = "ft_family") -> Family:
    """The Family called `name`, or an error naming the filter, the value and the valid names."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise AnsibleFilterError(f"{filter_name}: unknown model family {name!r} (valid: {', '.join(sorted(FAMILIES))})")
    return FAMILIES[name]


def positive_int(value: Any, what: str, filter_name: str) -> int:
    """`value` as a positive int (ints and integer strings), or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise AnsibleFilterError(f"{filter_name}: {what} must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise AnsibleFilterError(f"{filter_name}: {what} must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise AnsibleFilterError(f"{filter_name}: {what} must be a positive integer, got {value!r}")
    return number


def check_dtype(family: Family, weight_dtype: Any, filter_name: str) -> str:
    if weight_dtype not in family.weight_dtypes:
        raise AnsibleFilterError(
            f"{filter_name}: weight dtype {weight_dtype!r} is not written by the {family.name} "
            f"converter (valid: {', '.join(family.weight_dtypes)})"
        )
    return weight_dtype


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def require_params(params: Any, keys: tuple[str, ...], filter_name: str) -> dict[str, int]:
    """Positive-int sizes `keys` from an ft_model_params result, or an error naming what is missing."""
    if not isinstance(params, Mapping):
        raise AnsibleFilterError(
            f"{filter_name}: params must be the dict ft_model_params returns, got {type(params).__name__}"
        )
    missing = [k for k in keys if k not in params]
    if missing:
        raise AnsibleFilterError(
            f"{filter_name}: params lack {', '.join(missing)} (pass the result of ft_model_params)"
        )
    return {k: positive_int(params[k], f"params.{k}", filter_name) for k in keys}


def split_tp(params: Any, tp: Any, filter_name: str) -> int:
    """`tp` as a positive int that divides head_num and inter_size, or an error naming the filter."""
    tp_n = positive_int(tp, "tensor_para_size", filter_name)
    sizes = require_params(params, ("head_num", "inter_size"), filter_name)
    for key in ("head_num", "inter_size"):
        if sizes[key] % tp_n:
            raise AnsibleFilterError(
                f"{filter_name}: tensor_para_size {tp_n} does not divide {key} {sizes[key]} "
                "(check it with ft_check_parallelism first)"
            )
    return tp_n


def dims(params: Mapping[str, Any], filter_name: str) -> Dims:
    sizes = require_params(params, ("head_num", "size_per_head", "inter_size", "vocab_size"), filter_name)
    return Dims(
        hidden=sizes["head_num"] * sizes["size_per_head"],
        inter=sizes["inter_size"],
        vocab=sizes["vocab_size"],
        max_pos=int(params.get("max_pos_seq_len") or 0),
    )


def weight_files(family: Family, params: Mapping[str, Any], tp: int) -> list[tuple[str, Tensor, int | None]]:
    """Every (file name, tensor, rank) of a `<tp>-gpu` directory; rank None when replicated."""
    num_layer = positive_int(params.get("num_layer"), "params.num_layer", "ft_expected_files")
    files: list[tuple[str, Tensor, int | None]] = []
    for tensor in family.global_tensors(params):
        files.append((f"{tensor.name}.bin", tensor, None))
    for layer in range(num_layer):
        for tensor in family.layer_tensors(params):
            stem = tensor.name.replace("{L}", str(layer))
            if tensor.split_axis is None:
                files.append((f"{stem}.bin", tensor, None))
            else:
                files.extend((f"{stem}.{rank}.bin", tensor, rank) for rank in range(tp))
    return files


def shard_shape(tensor: Tensor, d: Dims, tp: int) -> tuple[int, ...]:
    """The shape of one rank's part of `tensor` (the whole shape when replicated)."""
    shape = list(tensor.shape(d))
    if tensor.split_axis is not None:
        axis = tensor.split_axis % len(shape)
        shape[axis] //= tp
    return tuple(shape)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"ft_family": ft_family}

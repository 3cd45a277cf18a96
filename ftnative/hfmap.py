"""How each FT weight file is made from a Hugging Face checkpoint, per family.

Every function returns the FULL (unsplit) tensor in FT's layout, the shape the registry gives;
convert.py splits it across tensor-parallel ranks along the registry's split axis. FT stores
matrices as [in, out] (x @ W), so Hugging Face Linear weights ([out, in]) are transposed and
GPT-2's Conv1D weights ([in, out]) are not. QKV is [hidden, 3, hidden]: for each of q, k, v the
heads in order, so a split of the last axis gives each rank whole heads.
"""

from __future__ import annotations

import re
from typing import Callable, Optional  # evaluated below at import: typing's, for 3.8

import numpy as np

from .checkpoint import Checkpoint

Getter = Callable[[Checkpoint, Optional[int]], np.ndarray]  # evaluated at import: no "|" on 3.9


def _names(*bases: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + base for base in bases for prefix in prefixes)


def _stack_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Three Linear weights [out, in] -> [in, 3, out]."""
    return np.stack([q, k, v]).transpose(2, 0, 1)


def _per_head_qkv_weight(w: np.ndarray, heads: int) -> np.ndarray:
    """GPT-NeoX/BLOOM fused QKV Linear weight [heads*3*hs, in], grouped per head -> [in, 3, heads*hs]."""
    out3, hidden = w.shape
    hs = out3 // 3 // heads
    return w.reshape(heads, 3, hs, hidden).transpose(3, 1, 0, 2).reshape(hidden, 3, heads * hs)


def _per_head_qkv_bias(b: np.ndarray, heads: int) -> np.ndarray:
    hs = b.shape[0] // 3 // heads
    return b.reshape(heads, 3, hs).transpose(1, 0, 2).reshape(3, heads * hs)


def mapping(
    family: str, config: dict, tp: int = 1, dtype: str = "fp32"
) -> Callable[[str, Checkpoint, int | None], np.ndarray]:
    """A function (FT tensor name template, checkpoint, layer) -> full FT tensor, for `tp` ranks
    whose files hold `dtype` (a replicated tensor that FT adds on every rank depends on both)."""
    table = _TABLES[family](config, tp, dtype)

    def make(template: str, ckpt: Checkpoint, layer: int | None) -> np.ndarray:
        key = re.sub(r"^model\.(layers\.\{L\}\.)?", "", template)
        if key not in table:
            raise KeyError(f"no Hugging Face source known for {template} ({family})")
        return table[key](ckpt, layer)

    return make


def _gptj(config: dict, _tp: int, _dtype: str) -> dict[str, Getter]:
    p = ("transformer.", "")

    def h(name: str) -> Callable[[int | None], tuple[str, ...]]:
        return lambda layer: _names(f"h.{layer}.{name}", prefixes=p)

    return {
        "wte": lambda c, _: c.get(*_names("wte.weight", prefixes=p)),
        "final_layernorm.weight": lambda c, _: c.get(*_names("ln_f.weight", prefixes=p)),
        "final_layernorm.bias": lambda c, _: c.get(*_names("ln_f.bias", prefixes=p)),
        "lm_head.weight": lambda c, _: c.get("lm_head.weight"),
        "lm_head.bias": lambda c, _: c.get("lm_head.bias"),
        "input_layernorm.weight": lambda c, i: c.get(*h("ln_1.weight")(i)),
        "input_layernorm.bias": lambda c, i: c.get(*h("ln_1.bias")(i)),
        "attention.query_key_value.weight": lambda c, i: _stack_qkv(
            c.get(*h("attn.q_proj.weight")(i)), c.get(*h("attn.k_proj.weight")(i)), c.get(*h("attn.v_proj.weight")(i))
        ),
        "attention.dense.weight": lambda c, i: c.get(*h("attn.out_proj.weight")(i)).T,
        "mlp.dense_h_to_4h.weight": lambda c, i: c.get(*h("mlp.fc_in.weight")(i)).T,
        "mlp.dense_h_to_4h.bias": lambda c, i: c.get(*h("mlp.fc_in.bias")(i)),
        "mlp.dense_4h_to_h.weight": lambda c, i: c.get(*h("mlp.fc_out.weight")(i)).T,
        "mlp.dense_4h_to_h.bias": lambda c, i: c.get(*h("mlp.fc_out.bias")(i)),
    }


def _gpt2(config: dict, _tp: int, _dtype: str) -> dict[str, Getter]:
    p = ("transformer.", "")

    def g(name: str) -> Getter:
        return lambda c, i: c.get(*_names(f"h.{i}.{name}", prefixes=p))

    def qkv_w(c: Checkpoint, i: int | None) -> np.ndarray:
        w = c.get(*_names(f"h.{i}.attn.c_attn.weight", prefixes=p))  # Conv1D [in, 3*out]
        return w.reshape(w.shape[0], 3, -1)

    return {
        "wte": lambda c, _: c.get(*_names("wte.weight", prefixes=p)),
        "wpe": lambda c, _: c.get(*_names("wpe.weight", prefixes=p)),
        "final_layernorm.weight": lambda c, _: c.get(*_names("ln_f.weight", prefixes=p)),
        "final_layernorm.bias": lambda c, _: c.get(*_names("ln_f.bias", prefixes=p)),
        "input_layernorm.weight": g("ln_1.weight"),
        "input_layernorm.bias": g("ln_1.bias"),
        "attention.query_key_value.weight": qkv_w,
        "attention.query_key_value.bias": lambda c, i: g("attn.c_attn.bias")(c, i).reshape(3, -1),
        "attention.dense.weight": g("attn.c_proj.weight"),
        "attention.dense.bias": g("attn.c_proj.bias"),
        "post_attention_layernorm.weight": g("ln_2.weight"),
        "post_attention_layernorm.bias": g("ln_2.bias"),
        "mlp.dense_h_to_4h.weight": g("mlp.c_fc.weight"),
        "mlp.dense_h_to_4h.bias": g("mlp.c_fc.bias"),
        "mlp.dense_4h_to_h.weight": g("mlp.c_proj.weight"),
        "mlp.dense_4h_to_h.bias": g("mlp.c_proj.bias"),
    }


def _fused_per_head(prefixes: tuple[str, ...], layers: str, attn: str, heads: int) -> dict[str, Getter]:
    """Layer tensors shared by GPT-NeoX and BLOOM: fused per-head QKV, Linear weights, biases."""

    def g(name: str) -> Getter:
        return lambda c, i: c.get(*_names(f"{layers}.{i}.{name}", prefixes=prefixes))

    def t(name: str) -> Getter:
        return lambda c, i: g(name)(c, i).T

    return {
        "input_layernorm.weight": g("input_layernorm.weight"),
        "input_layernorm.bias": g("input_layernorm.bias"),
        "post_attention_layernorm.weight": g("post_attention_layernorm.weight"),
        "post_attention_layernorm.bias": g("post_attention_layernorm.bias"),
        "attention.query_key_value.weight": lambda c, i: _per_head_qkv_weight(
            g(f"{attn}.query_key_value.weight")(c, i), heads
        ),
        "attention.query_key_value.bias": lambda c, i: _per_head_qkv_bias(
            g(f"{attn}.query_key_value.bias")(c, i), heads
        ),
        "attention.dense.weight": t(f"{attn}.dense.weight"),
        "attention.dense.bias": g(f"{attn}.dense.bias"),
        "mlp.dense_h_to_4h.weight": t("mlp.dense_h_to_4h.weight"),
        "mlp.dense_h_to_4h.bias": g("mlp.dense_h_to_4h.bias"),
        "mlp.dense_4h_to_h.weight": t("mlp.dense_4h_to_h.weight"),
        "mlp.dense_4h_to_h.bias": g("mlp.dense_4h_to_h.bias"),
    }


def _neox_bias_sum(a: np.ndarray, m: np.ndarray, tp: int, dtype: str) -> np.ndarray:
    """mlp.attention.bias.sum for parallel residual: FT adds it on EVERY rank before the
    all-reduce (GptNeoXDecoder.cc: invokeAddBiasAttentionFfnResidual, then ftNcclAllReduceSum),
    so each rank's copy holds 1/tp of the attention-out and MLP-down biases' sum. Computed as
    FT's converter does (each bias in the file's dtype divided by tp, then added in that dtype),
    so the bytes equal huggingface_gptneox_convert.py's."""
    kind = np.float16 if dtype == "fp16" else np.float32
    a, m = a.astype(kind), m.astype(kind)
    if tp > 1:
        a, m = a / kind(tp), m / kind(tp)
    return (a + m).astype(kind).astype(np.float32)


def _gptneox(config: dict, tp: int, dtype: str) -> dict[str, Getter]:
    p = ("gpt_neox.", "")
    table = _fused_per_head(p, "layers", "attention", config["num_attention_heads"])
    # Without parallel residual FT reads attention.dense.bias and mlp.dense_4h_to_h.bias instead
    # and adds each ONCE, after its block's all-reduce: those stay whole (FT's converter divides
    # them by tp there too, which is wrong at tp > 1; docs/models.md).
    attn_bias, mlp_bias = table["attention.dense.bias"], table["mlp.dense_4h_to_h.bias"]
    table["mlp.attention.bias.sum"] = lambda c, i: _neox_bias_sum(attn_bias(c, i), mlp_bias(c, i), tp, dtype)
    table.update({
        "wte": lambda c, _: c.get(*_names("embed_in.weight", prefixes=p)),
        "final_layernorm.weight": lambda c, _: c.get(*_names("final_layer_norm.weight", prefixes=p)),
        "final_layernorm.bias": lambda c, _: c.get(*_names("final_layer_norm.bias", prefixes=p)),
        "lm_head.weight": lambda c, _: c.get("embed_out.weight"),
    })  # fmt: skip
    return table


def _bloom(config: dict, _tp: int, _dtype: str) -> dict[str, Getter]:
    p = ("transformer.", "")
    heads = config.get("n_head") or config["num_attention_heads"]
    table = _fused_per_head(p, "h", "self_attention", heads)
    table.update({
        "wte": lambda c, _: c.get(*_names("word_embeddings.weight", prefixes=p)),
        "pre_decoder_layernorm.weight": lambda c, _: c.get(*_names("word_embeddings_layernorm.weight", prefixes=p)),
        "pre_decoder_layernorm.bias": lambda c, _: c.get(*_names("word_embeddings_layernorm.bias", prefixes=p)),
        "final_layernorm.weight": lambda c, _: c.get(*_names("ln_f.weight", prefixes=p)),
        "final_layernorm.bias": lambda c, _: c.get(*_names("ln_f.bias", prefixes=p)),
    })  # fmt: skip
    return table


def _llama(config: dict, _tp: int, _dtype: str) -> dict[str, Getter]:
    p = ("model.", "")

    def g(name: str) -> Getter:
        return lambda c, i: c.get(*_names(f"layers.{i}.{name}", prefixes=p))

    def t(name: str) -> Getter:
        return lambda c, i: g(name)(c, i).T

    return {
        "wte.weight": lambda c, _: c.get(*_names("embed_tokens.weight", prefixes=p)),
        "final_layernorm.weight": lambda c, _: c.get(*_names("norm.weight", prefixes=p)),
        # Tied embeddings: no lm_head in the checkpoint, the embedding serves.
        "lm_head.weight": lambda c, _: c.get("lm_head.weight", *_names("embed_tokens.weight", prefixes=p)),
        "input_layernorm.weight": g("input_layernorm.weight"),
        "post_attention_layernorm.weight": g("post_attention_layernorm.weight"),
        "attention.query_key_value.weight": lambda c, i: _stack_qkv(
            g("self_attn.q_proj.weight")(c, i), g("self_attn.k_proj.weight")(c, i), g("self_attn.v_proj.weight")(c, i)
        ),
        "attention.dense.weight": t("self_attn.o_proj.weight"),
        "mlp.gate_proj.weight": t("mlp.gate_proj.weight"),
        "mlp.up_proj.weight": t("mlp.up_proj.weight"),
        "mlp.down_proj.weight": t("mlp.down_proj.weight"),
    }


_TABLES: dict[str, Callable[[dict, int, str], dict[str, Getter]]] = {
    "gptj": _gptj,
    "gpt": _gpt2,
    "gptneox": _gptneox,
    "bloom": _bloom,
    "llama": _llama,
}

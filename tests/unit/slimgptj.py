"""Tiny GPT-J weights written twice: as a Hugging Face checkpoint and as a mesh-transformer-jax
slim checkpoint (what the GPT-J guide's step_383500 archive holds), made here from the same values.

The slim side is the inverse of what FT's gptj_ckpt_convert.py reads (ftnative/jaxslim.py says
how): every shard holds its slice of the split tensors ([in, out] weights), the layer norms live in
the first shard (the others at their initial 0 and 1), the feed-forward's output bias and the
embedding's bias are stored divided by the number of shards, bfloat16 as two-byte void, in npz
parts in haiku's order (layers sorted as strings). Values are k/64 with |k| <= 128: exact in
bfloat16 and float16, and so are their eighths and the embedding's sum, so both checkpoints hold
the same numbers and their conversions must be equal byte for byte.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ftnative.checkpoint import f32_to_bf16

CONFIG = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "vocab_size": 128, "n_positions": 64,
          "n_embd": 64, "n_layer": 12, "n_head": 4, "rotary_dim": 8, "n_inner": None, "bos_token_id": 0,
          "eos_token_id": 1, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
          "tie_word_embeddings": False}  # fmt: skip


def _values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.integers(-128, 129, size=shape) / 64).astype(np.float32)


def hf_state(config: dict, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The Hugging Face GPT-J tensors (Linear weights [out, in]) and the embedding bias the slim
    checkpoint adds (the HF embedding is the slim one plus it)."""
    rng = np.random.default_rng(seed)
    d, vocab = config["n_embd"], config["vocab_size"]
    inter = config.get("n_inner") or 4 * d
    state = {"transformer.wte.weight": _values(rng, vocab, d)}
    for i in range(config["n_layer"]):
        h = f"transformer.h.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            state[h + f"attn.{name}.weight"] = _values(rng, d, d)
        state[h + "mlp.fc_in.weight"], state[h + "mlp.fc_in.bias"] = _values(rng, inter, d), _values(rng, inter)
        state[h + "mlp.fc_out.weight"], state[h + "mlp.fc_out.bias"] = _values(rng, d, inter), _values(rng, d)
        state[h + "ln_1.weight"], state[h + "ln_1.bias"] = _values(rng, d), _values(rng, d)
    state["transformer.ln_f.weight"], state["transformer.ln_f.bias"] = _values(rng, d), _values(rng, d)
    state["lm_head.weight"], state["lm_head.bias"] = _values(rng, vocab, d), _values(rng, vocab)
    # Small enough that embedding - bias stays within k/64, |k| <= 256 (still exact in bfloat16).
    return state, (rng.integers(-64, 65, size=d) / 64).astype(np.float32)


def save_hf(state: dict[str, np.ndarray], config: dict, directory: Path) -> Path:
    """config.json and model.safetensors (float32), written here without the safetensors package."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    header, offset, blobs = {}, 0, []
    for name, array in state.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return directory


def slim_arrays(state: dict[str, np.ndarray], wte_bias: np.ndarray, config: dict, shards: int,
                layer_order: list[int] | None = None) -> list[list[np.ndarray]]:  # fmt: skip
    """Per tensor in the slim checkpoint's order, its shards' arrays (float32)."""
    n = shards

    def columns(w_out_in):  # a Linear [out, in] stored [in, out], split along out
        return np.split(w_out_in.T, n, axis=1)

    def rows(w_out_in):  # stored [in, out], split along in
        return np.split(w_out_in.T, n, axis=0)

    def copies(value, init):  # the first shard's value, the others at their initial value
        return [value] + [np.full_like(value, init) for _ in range(n - 1)]

    def each(value):  # every shard adds its copy
        return [value / n for _ in range(n)]

    out = [each(wte_bias), np.split(state["transformer.wte.weight"] - wte_bias, n, axis=0)]
    order = layer_order if layer_order is not None else sorted(range(config["n_layer"]), key=str)
    for i in order:
        h = f"transformer.h.{i}."
        out += [columns(state[h + "attn.q_proj.weight"]), columns(state[h + "attn.v_proj.weight"]),
                columns(state[h + "attn.k_proj.weight"]), rows(state[h + "attn.out_proj.weight"]),
                np.split(state[h + "mlp.fc_in.bias"], n), columns(state[h + "mlp.fc_in.weight"]),
                each(state[h + "mlp.fc_out.bias"]), rows(state[h + "mlp.fc_out.weight"]),
                copies(state[h + "ln_1.bias"], 0), copies(state[h + "ln_1.weight"], 1)]  # fmt: skip
    out += [np.split(state["lm_head.bias"], n), columns(state["lm_head.weight"]),
            copies(state["transformer.ln_f.bias"], 0), copies(state["transformer.ln_f.weight"], 1)]  # fmt: skip
    return out


def write_slim(arrays: list[list[np.ndarray]], directory: Path, part_size: int = 7) -> Path:
    """shard_<i>/<part>.npz, part_size arrays a part (a layer's tensors span parts), bfloat16 as V2."""
    n = len(arrays[0])
    for i in range(n):
        shard = directory / f"shard_{i}"
        shard.mkdir(parents=True, exist_ok=True)
        for part, start in enumerate(range(0, len(arrays), part_size)):
            chunk = [f32_to_bf16(tensor[i]).view(np.dtype("V2")) for tensor in arrays[start : start + part_size]]
            np.savez(shard / f"{part}.npz", *chunk)
    return directory

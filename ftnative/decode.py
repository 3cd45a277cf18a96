"""A CPU reference decoder for FasterTransformer shard directories.

    python3 -m ftnative.decode DIR --ids 1,2,3 --max-new-tokens 32 [--top-k 50 --top-p 0.9 --seed 1]

Loads a `<tp>-gpu` directory (config.ini and the weight files, each tensor-parallel rank's files
apart), runs each family's forward pass in numpy (float32) rank by rank as FT's kernels do, and
generates tokens greedily or by top-k/top-p sampling with a seed. It reads only the FT files, so
it checks a conversion independently of the code that made it, and it is the engine of the lab's
CPU stand-in for the FT backend.
"""

from __future__ import annotations

import argparse
import configparser
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ftdomain.ft.families import FAMILIES
from ftdomain.ft.tensors import dims, shard_shape, weight_files

from .checkpoint import bf16_to_f32
from .decoding import Decoding

_SECTION_FAMILY = {"gptj": "gptj", "gptneox": "gptneox", "llama": "llama", "gpt": "gpt"}
_FILE_DTYPES = {"fp32": "<f4", "fp16": "<f2", "bf16": "<u2"}
_INT_KEYS = ("head_num", "size_per_head", "inter_size", "num_layer", "vocab_size", "start_id", "end_id",
             "rotary_embedding", "max_pos_seq_len", "tensor_para_size")  # fmt: skip


class ModelError(Exception):
    """A shard directory the decoder cannot load."""


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rotary(x: np.ndarray, dim: int, interleaved: bool, base: float = 10000.0) -> np.ndarray:
    """Rotary position embedding on the first `dim` channels of x [T, heads, head_size]."""
    positions = np.arange(x.shape[0], dtype=np.float32)[:, None]
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    angles = positions * inv_freq  # [T, dim/2]
    rot, rest = x[..., :dim], x[..., dim:]
    if interleaved:  # GPT-J: pairs (0,1), (2,3), ...
        sin = np.repeat(np.sin(angles), 2, axis=-1)[:, None, :]
        cos = np.repeat(np.cos(angles), 2, axis=-1)[:, None, :]
        swapped = np.stack([-rot[..., 1::2], rot[..., 0::2]], axis=-1).reshape(rot.shape)
    else:  # GPT-NeoX, LLaMA: halves
        sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :]
        cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :]
        half = dim // 2
        swapped = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    return np.concatenate([rot * cos + swapped * sin, rest], axis=-1)


def alibi_slopes(heads: int) -> np.ndarray:
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (i + 1) for i in range(0, 2 * (heads - closest), 2)]
    return np.array(slopes, dtype=np.float32)


@dataclass
class Model(Decoding):
    """A `<tp>-gpu` directory as FT holds it: the replicated files (every rank reads the same)
    and, per tensor-parallel rank, that rank's part of the split tensors. A layer runs rank by
    rank from those parts and sums them where FT's NCCL all-reduce does; each bias is added
    where FT's kernels add it, once after the all-reduce or on every rank before it (per family,
    from FT's decoder sources, cited below). Nothing is merged: a shard set that FT would
    misread decodes wrongly here too."""

    family: str
    params: dict
    shared: dict[str, np.ndarray]
    ranks: list[dict[str, np.ndarray]]

    @property
    def tp(self) -> int:
        return len(self.ranks)

    def w(self, name: str, layer: int | None = None) -> np.ndarray:
        """A replicated tensor."""
        return self.shared[name if layer is None else name.replace("{L}", str(layer))]

    def part(self, rank: int, name: str, layer: int) -> np.ndarray:
        """Rank `rank`'s part of a split tensor."""
        return self.ranks[rank][name.replace("{L}", str(layer))]

    def allreduce(self, per_rank) -> np.ndarray:
        """ftNcclAllReduceSum: the sum of what each rank computed, rank 0 first."""
        total = per_rank(0)
        for rank in range(1, self.tp):
            total = total + per_rank(rank)
        return total

    @property
    def eps(self) -> float:
        """The layer norms' epsilon as FT uses it: the family's own where FT's model fixes it
        (GPT-J, GPT-NeoX: the registry's fixed_layernorm_eps), else config.ini's layernorm_eps."""
        fixed = FAMILIES[self.family].fixed_layernorm_eps  # a registry family: read_config names it
        if fixed is not None:
            return fixed
        return float(self.params.get("layernorm_eps", 1e-6 if self.family == "llama" else 1e-5))

    def _attention(self, h: np.ndarray, layer: int, rank: int) -> np.ndarray:
        """One rank's attention before the all-reduce: its heads (its columns of QKV, with its
        part of the QKV bias), then its rows of the output projection, no output bias."""
        p = self.params
        heads, hs = p["head_num"] // self.tp, p["size_per_head"]
        qkv = h @ self.part(rank, "model.layers.{L}.attention.query_key_value.weight", layer).reshape(h.shape[1], -1)
        bias = self.ranks[rank].get(f"model.layers.{layer}.attention.query_key_value.bias")
        if bias is not None:
            qkv = qkv + bias.reshape(-1)
        q, k, v = (part.reshape(-1, heads, hs) for part in np.split(qkv, 3, axis=-1))
        if self.family in ("gptj", "gptneox", "llama"):
            interleaved = self.family == "gptj"
            q = _rotary(q, p["rotary_embedding"], interleaved)
            k = _rotary(k, p["rotary_embedding"], interleaved)
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(hs)
        length = h.shape[0]
        if self.family == "bloom":  # ParallelGpt.cc: this rank's slopes, linear_bias_slopes + local_head_num * rank
            slopes = alibi_slopes(p["head_num"])[rank * heads : (rank + 1) * heads]
            scores = scores + slopes[:, None, None] * np.arange(length, dtype=np.float32)[None, None, :]
        scores = np.where(np.tril(np.ones((length, length), dtype=bool))[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        context = np.einsum("hts,shd->thd", probs, v).reshape(length, heads * hs)
        return context @ self.part(rank, "model.layers.{L}.attention.dense.weight", layer)

    def _ffn(self, h: np.ndarray, layer: int, rank: int, act) -> np.ndarray:
        """One rank's FFN before the all-reduce: its columns of the up projection (with its part of
        that bias), the activation, its rows of the down projection, no output bias."""
        if self.family == "llama":  # SiLU-gated: gate and up split alike
            gate = h @ self.part(rank, "model.layers.{L}.mlp.gate_proj.weight", layer)
            up = h @ self.part(rank, "model.layers.{L}.mlp.up_proj.weight", layer)
            return (gate / (1.0 + np.exp(-gate)) * up) @ self.part(rank, "model.layers.{L}.mlp.down_proj.weight", layer)
        up = h @ self.part(rank, "model.layers.{L}.mlp.dense_h_to_4h.weight", layer) + self.part(
            rank, "model.layers.{L}.mlp.dense_h_to_4h.bias", layer
        )
        return act(up) @ self.part(rank, "model.layers.{L}.mlp.dense_4h_to_h.weight", layer)

    def _ln(self, name: str, x: np.ndarray, layer: int) -> np.ndarray:
        return layernorm(x, self.w(f"{name}.weight", layer), self.w(f"{name}.bias", layer), self.eps)

    def _layer(self, x: np.ndarray, i: int) -> np.ndarray:
        """One decoder layer of the family on hidden states x [T, hidden], as FT computes it.
        FT's FFN activation is GELU in its tanh form for every family but LLaMA
        (activation_kernels.cu, GeluActivation), whatever hidden_act the checkpoint names."""
        f, w, reduce = self.family, self.w, self.allreduce
        if f == "gptj":
            # GptJDecoder.cc: attention and FFN each end in their own all-reduce; then
            # invokeAddBiasAttentionFfnResidual adds both, the input and the FFN's output bias, once.
            h = self._ln("model.layers.{L}.input_layernorm", x, i)
            attn = reduce(lambda r: self._attention(h, i, r))
            ffn = reduce(lambda r: self._ffn(h, i, r, gelu_tanh))
            return ffn + attn + w("model.layers.{L}.mlp.dense_4h_to_h.bias", i) + x
        if f == "gptneox" and self.params.get("use_gptj_residual"):
            # GptNeoXDecoder.cc, use_gptj_residual: attention and FFN skip their all-reduce; every
            # rank adds its FFN output, its attention output, mlp.attention.bias.sum and
            # layer_input / tp (invokeAddBiasAttentionFfnResidual), then ftNcclAllReduceSum. The
            # bias file is added tp times: it must hold the sum divided by tp.
            h_attn = self._ln("model.layers.{L}.input_layernorm", x, i)
            h_ffn = self._ln("model.layers.{L}.post_attention_layernorm", x, i)
            bias = w("model.layers.{L}.mlp.attention.bias.sum", i)
            return reduce(
                lambda r: self._ffn(h_ffn, i, r, gelu_tanh) + self._attention(h_attn, i, r) + bias + x / self.tp
            )
        if f in ("gpt", "bloom", "gptneox"):
            # ParallelGptDecoder.cc and GptNeoXDecoder.cc without parallel residual: the attention's
            # all-reduce, then invokeGeneralAddBiasResidualPreLayerNorm adds attention.dense.bias once;
            # the FFN's all-reduce, then invokeAddBiasResidual adds mlp.dense_4h_to_h.bias once.
            h = self._ln("model.layers.{L}.input_layernorm", x, i)
            x = reduce(lambda r: self._attention(h, i, r)) + w("model.layers.{L}.attention.dense.bias", i) + x
            h = self._ln("model.layers.{L}.post_attention_layernorm", x, i)
            return reduce(lambda r: self._ffn(h, i, r, gelu_tanh)) + w("model.layers.{L}.mlp.dense_4h_to_h.bias", i) + x
        # llama (void-main's LlamaDecoder.cc): RMSNorm, no biases, each block all-reduced then added.
        h = rmsnorm(x, w("model.layers.{L}.input_layernorm.weight", i), self.eps)
        x = x + reduce(lambda r: self._attention(h, i, r))
        h = rmsnorm(x, w("model.layers.{L}.post_attention_layernorm.weight", i), self.eps)
        return x + reduce(lambda r: self._ffn(h, i, r, None))

    def hidden(self, ids: list[int]) -> np.ndarray:
        """The last layer's output for every position of `ids` [T, hidden], before the final norm."""
        f, eps, w = self.family, self.eps, self.w
        x = w("model.wte.weight" if f == "llama" else "model.wte")[ids]
        if f == "gpt":
            x = x + w("model.wpe")[: len(ids)]
        if f == "bloom":
            x = layernorm(x, w("model.pre_decoder_layernorm.weight"), w("model.pre_decoder_layernorm.bias"), eps)
        for i in range(self.params["num_layer"]):
            x = self._layer(x, i)
        return x

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits of the last position for the token sequence `ids`."""
        f, eps, w = self.family, self.eps, self.w
        last = self.hidden(ids)[-1]
        if f == "llama":
            return rmsnorm(last, w("model.final_layernorm.weight"), eps) @ w("model.lm_head.weight").T
        last = layernorm(last, w("model.final_layernorm.weight"), w("model.final_layernorm.bias"), eps)
        if f == "gptj":
            return last @ w("model.lm_head.weight").T + w("model.lm_head.bias")
        if f == "gptneox":
            return last @ w("model.lm_head.weight").T
        return last @ w("model.wte").T  # gpt, bloom: tied embedding


def read_config(directory: Path) -> tuple[str, dict, str]:
    ini = configparser.ConfigParser()
    if not ini.read(directory / "config.ini"):
        raise ModelError(f"{directory}: no config.ini")
    section = next((s for s in ini.sections() if s in _SECTION_FAMILY), None)
    if section is None:
        raise ModelError(f"{directory}/config.ini: no [gptj], [gpt], [gptneox] or [llama] section")
    raw = ini[section]
    family = "bloom" if raw.get("model_variant") == "bloom-pre" else _SECTION_FAMILY[section]
    params: dict = {key: int(raw[key]) for key in _INT_KEYS if key in raw}
    for key in ("has_positional_encoding", "has_pre_decoder_layernorm", "has_post_decoder_layernorm",
                "use_attention_linear_bias", "use_gptj_residual"):  # fmt: skip
        if key in raw:
            params[key] = raw[key].strip().lower() in ("1", "true", "yes", "on")
    if "layernorm_eps" in raw:
        params["layernorm_eps"] = float(raw["layernorm_eps"])
    return family, params, raw.get("weight_data_type", "fp32")


def shard_tp(directory: Path, params: dict) -> int:
    """The tensor-parallel size of a shard directory: config.ini's tensor_para_size, else (the
    upstream converters do not all write it) the directory's name, `<tp>-gpu`, or that of the
    build it links to, `.<tp>-gpu.<stamp>`."""
    if params.get("tensor_para_size"):
        return params["tensor_para_size"]
    named = re.match(r"\.?(\d+)-gpu", directory.name) or re.match(r"\.?(\d+)-gpu", directory.resolve().name)
    if not named:
        raise ModelError(f"{directory}: config.ini lacks tensor_para_size and the directory is not named <tp>-gpu")
    return int(named.group(1))


def load(directory: str | Path) -> Model:
    """Load a `<tp>-gpu` directory: the replicated files once, each rank's files apart."""
    directory = Path(directory)
    family, params, dtype = read_config(directory)
    tp = shard_tp(directory, params)
    d = dims(params, "ftnative.decode")
    fam = FAMILIES[family]
    shared: dict[str, np.ndarray] = {}
    ranks: list[dict[str, np.ndarray]] = [{} for _ in range(tp)]
    for name, tensor, rank in weight_files(fam, params, tp):
        path = directory / name
        shape = shard_shape(tensor, d, tp)
        expected = math.prod(shape) * np.dtype(_FILE_DTYPES[dtype]).itemsize
        if not path.exists() or path.stat().st_size != expected:
            got = path.stat().st_size if path.exists() else "missing"
            raise ModelError(f"{path}: {got} bytes, expected {expected} ({dtype} {shape})")
        data = np.fromfile(path, dtype=_FILE_DTYPES[dtype])
        data = (bf16_to_f32(data) if dtype == "bf16" else data.astype(np.float32)).reshape(shape)
        stem = name[: -len(".bin")]
        if rank is None:
            shared[stem] = data
        else:
            ranks[rank][stem.rsplit(".", 1)[0]] = data
    return Model(family, params, shared, ranks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ftnative.decode",
        description="Generate tokens on the CPU from a FasterTransformer <tp>-gpu directory.",
    )
    parser.add_argument("directory", help="the <tp>-gpu directory (config.ini + weight files)")
    parser.add_argument("--ids", required=True, help="prompt token ids, comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=1, help="1 (and --top-p 0): greedy")
    parser.add_argument("--top-p", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        model = load(args.directory)
        ids = [int(t) for t in args.ids.split(",") if t.strip()]
    except (ModelError, ValueError) as err:
        print(f"ftnative.decode: error: {err}", file=sys.stderr)
        return 2
    tokens = model.generate(
        ids,
        args.max_new_tokens,
        top_k=args.top_k,
        top_p=args.top_p,
        temperature=args.temperature,
        seed=args.seed,
        end_id=model.params.get("end_id"),
    )
    print(json.dumps({"output_ids": tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

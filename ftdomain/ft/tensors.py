"""The weight tensors FT's loaders open: their names, their shapes from a model's sizes, and the
axis tensor parallelism splits them on; one rank's files and shapes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ftdomain.ft.sizes import positive_int, require_params


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


# The shapes of the tensors, from the model's sizes (the families' registry names them).
def hidden(d: Dims) -> tuple[int, ...]:
    return (d.hidden,)


def hidden_by_hidden(d: Dims) -> tuple[int, ...]:
    return (d.hidden, d.hidden)


def qkv_weight(d: Dims) -> tuple[int, ...]:
    return (d.hidden, 3, d.hidden)


def qkv_bias(d: Dims) -> tuple[int, ...]:
    return (3, d.hidden)


def hidden_by_inter(d: Dims) -> tuple[int, ...]:
    return (d.hidden, d.inter)


def inter(d: Dims) -> tuple[int, ...]:
    return (d.inter,)


def inter_by_hidden(d: Dims) -> tuple[int, ...]:
    return (d.inter, d.hidden)


def vocab_by_hidden(d: Dims) -> tuple[int, ...]:
    return (d.vocab, d.hidden)


def vocab(d: Dims) -> tuple[int, ...]:
    return (d.vocab,)


def positions_by_hidden(d: Dims) -> tuple[int, ...]:
    return (d.max_pos, d.hidden)


def layernorm(prefix: str, bias: bool = True) -> list[Tensor]:
    return [Tensor(f"{prefix}.weight", hidden)] + ([Tensor(f"{prefix}.bias", hidden)] if bias else [])


# Layer tensors shared by the GPT-style families (gpt, bloom, gptneox): QKV with bias, a
# dense output, a two-matrix MLP with biases. Split: QKV and MLP-up on their output axis
# (-1), attention-out and MLP-down on their input axis (0).
QKV = [
    Tensor("model.layers.{L}.attention.query_key_value.weight", qkv_weight, -1),
    Tensor("model.layers.{L}.attention.query_key_value.bias", qkv_bias, -1),
]
MLP_UP = [
    Tensor("model.layers.{L}.mlp.dense_h_to_4h.weight", hidden_by_inter, -1),
    Tensor("model.layers.{L}.mlp.dense_h_to_4h.bias", inter, -1),
    Tensor("model.layers.{L}.mlp.dense_4h_to_h.weight", inter_by_hidden, 0),
]
GPT_LAYER = [
    *layernorm("model.layers.{L}.input_layernorm"),
    *QKV,
    Tensor("model.layers.{L}.attention.dense.weight", hidden_by_hidden, 0),
    Tensor("model.layers.{L}.attention.dense.bias", hidden),
    *layernorm("model.layers.{L}.post_attention_layernorm"),
    *MLP_UP,
    Tensor("model.layers.{L}.mlp.dense_4h_to_h.bias", hidden),
]


def dims(params: Mapping[str, Any], filter_name: str) -> Dims:
    sizes = require_params(params, ("head_num", "size_per_head", "inter_size", "vocab_size"), filter_name)
    return Dims(
        hidden=sizes["head_num"] * sizes["size_per_head"],
        inter=sizes["inter_size"],
        vocab=sizes["vocab_size"],
        max_pos=int(params.get("max_pos_seq_len") or 0),
    )


class HasTensors(Protocol):
    """What weight_files reads of a family (ftdomain.ft.families.Family): its tensors from its
    parameters."""

    global_tensors: Callable[[Mapping[str, Any]], list[Tensor]]
    layer_tensors: Callable[[Mapping[str, Any]], list[Tensor]]


def weight_files(family: HasTensors, params: Mapping[str, Any], tp: int) -> list[tuple[str, Tensor, int | None]]:
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

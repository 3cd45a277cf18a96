"""What one GPU holds while FT serves a model: the memory plan.

FT allocates its key/value cache and its buffers per forward, for the batch and the lengths the
requests bring (a full batch at the longest lengths is the peak), beside the weights it loaded at
start. The plan counts, per GPU, what FasterTransformer df4a753 allocates for that peak
(void-main's LLaMA follows GptNeoX):

- weights: the rank's split tensors and the replicated ones at data_type; with int8_mode the
  layers' GEMM matrices as int8 plus one scale per output column (ParallelGptDecoderLayerWeight);
- key/value cache: 2 x layers/pp x batch x beam x session x hidden/tp x dtype (GptJ.cc, GptNeoX.cc,
  ParallelGpt.cc: key_cache_ holds both halves), and the beams' cache indirection;
- the context phase, one layer at a time: the attention's Q/K/V buffers, its scores twice (the
  dtype's and fp32's: is_context_qk_buf_float_ is on unless CONTEXT_ATTENTION_BMM1_HALF_ACCUM=ON)
  over prompt x prompt per head, the FFN's intermediate, the decoder's four activations and the
  model's input and output; the attention mask (session x session for GptJ and GptNeoX, prompt x
  prompt for ParallelGpt);
- decoding: the logits twice in fp32 over the padded vocabulary, a padded copy of the embedding
  where the vocabulary is padded, the ids, parents and log probabilities per step;
- the runtime's own (the CUDA context and its kernels, cuBLAS's workspace, Triton's CUDA pool,
  NCCL), which no formula gives: an input, measured on a GPU (docs/models.md, "GPU memory").

The longest request is what the gateway lets in: prompt + max_tokens up to its context length, so
a batch's padded prompt is at most context - 1 tokens and its session (prompt + answer) at most the
context (Triton batches only requests of one prompt length, and a request's own prompts share one
max_tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import DTYPE_BYTES, Family, get_family
from ftdomain.ft.sizes import positive_int, require_params, split_tp, whole_number
from ftdomain.ft.tensors import dims, numel, shard_shape, weight_files

MIB = 1 << 20
# The largest max_batch_size the plan searches (the backend's upstream samples: 1024).
BATCH_LIMIT = 1024
_FP32 = 4  # logits, log probabilities and the fp32 attention scores
_INT = 4  # ids, lengths, parents, cache indirection


def _weights(fam: Family, params: Mapping[str, Any], tp: int, pp: int, dtype_bytes: int, int8_mode: int) -> int:
    """One GPU's weights: its rank's tensors (every layer's split over pp) at the data type; with
    int8 the layers' split matrices as int8 plus a scale per output column."""
    d = dims(params, "ft_memory_plan")
    total = 0
    for _name, tensor, rank in weight_files(fam, params, tp):
        if rank not in (None, 0):
            continue
        shape = shard_shape(tensor, d, tp)
        elements = numel(shape)
        if int8_mode and tensor.split_axis is not None and tensor.name.endswith(".weight") and len(shape) >= 2:
            total += elements + (elements // shape[0]) * dtype_bytes
        else:
            total += elements * dtype_bytes
    return math.ceil(total / pp)


def _padded_vocab(vocab: int, tp: int, data_type: str) -> int:
    """FT's vocab_size_padded_: each rank's share rounded up, to a multiple of 8 in half precision."""
    local = math.ceil(vocab / tp)
    if data_type in ("fp16", "bf16"):
        local = math.ceil(local / 8) * 8
    return local * tp


def _context_batch(batch: int, prompt: int, pp: int) -> int:
    """getLocalBatchSize (nccl_utils.cc): the context phase's micro-batch; the whole batch at pp 1."""
    if pp == 1:
        return batch
    local = batch // pp if batch % pp == 0 else batch
    while local * prompt > 1024 and local % 2 == 0:
        local //= 2
    return local


def _parts(fam: Family, sizes: Mapping[str, int], s: Mapping[str, Any]) -> dict[str, int]:
    """Bytes per GPU of each part but the weights and the runtime's, for one plan's settings."""
    tp, pp, t = s["tp"], s["pp"], s["dtype_bytes"]
    rows = s["batch"] * s["beam"]  # FT's batchxbeam
    session, prompt = s["context"], s["context"] - 1
    hidden = sizes["head_num"] * sizes["size_per_head"]
    local_hidden, local_heads = hidden // tp, sizes["head_num"] // tp
    local_inter = sizes["inter_size"] // tp
    gated = any("gate" in tensor.name for tensor in fam.layer_tensors(s["params"]))
    vocab = sizes["vocab_size"]
    padded = _padded_vocab(vocab, tp, s["data_type"])

    kv_cache = 2 * (sizes["num_layer"] // pp) * rows * session * local_hidden * t
    indirection = 2 * rows * session * _INT if s["beam"] > 1 else 0
    ctx = _context_batch(rows, prompt, pp)
    mask_side = prompt if fam.model_type == "GPT" else session
    context = (
        rows * mask_side * mask_side * t  # the attention mask
        + 2 * rows * prompt * hidden * t  # the context decoder's input and output
        + 4 * ctx * prompt * hidden * t  # a layer's normed input, attention and FFN outputs, output
        + 8 * ctx * prompt * local_hidden * t  # qkv, q/k/v, and the attention's two outputs
        + ctx * local_heads * prompt * prompt * (t + _FP32)  # the scores, in the dtype and in fp32
        + (2 if gated else 1) * ctx * prompt * local_inter * t  # the FFN's intermediate (and gate)
    )
    decoding = (
        2 * rows * padded * _FP32  # logits, and their all-gathered copy
        + (hidden * padded * t + padded * t if padded != vocab else 0)  # the padded embedding
        + 4 * rows * session * _INT  # output ids, their transpose, parents, log probabilities
        + rows * session  # masked tokens (bool)
        + 4 * rows * hidden * t  # a step's activations
    )
    return {"kv_cache": kv_cache + indirection, "context": context, "decoding": decoding}


def _settings(
    family: Any, params: Any, options: Any, filter_name: str
) -> tuple[Family, dict[str, int], dict[str, Any]]:
    fam = get_family(family, filter_name)
    if not isinstance(options, Mapping):
        raise AnsibleFilterError(f"{filter_name}: options must be a dict, got {type(options).__name__}")
    sizes = require_params(params, ("head_num", "size_per_head", "inter_size", "num_layer", "vocab_size"), filter_name)
    data_type = options.get("data_type")
    if data_type not in DTYPE_BYTES:
        raise AnsibleFilterError(
            f"{filter_name}: data_type {data_type!r} is not one FT serves (valid: {', '.join(DTYPE_BYTES)})"
        )
    int8_mode = whole_number(options.get("int8_mode", 0), "int8_mode", filter_name)
    if int8_mode not in (0, 1, 2):
        raise AnsibleFilterError(f"{filter_name}: int8_mode must be 0, 1 or 2, got {int8_mode!r}")
    pp = positive_int(options.get("pp", 1), "pipeline_para_size", filter_name)
    if sizes["num_layer"] % pp:
        raise AnsibleFilterError(
            f"{filter_name}: pipeline_para_size {pp} does not divide num_layer {sizes['num_layer']}"
        )
    context = whole_number(options.get("context"), "context (the longest prompt + answer)", filter_name, 2)
    return (
        fam,
        sizes,
        {
            "params": params,
            "data_type": data_type,
            "dtype_bytes": DTYPE_BYTES[data_type],
            "int8_mode": int8_mode,
            "tp": split_tp(params, options.get("tp", 1), filter_name),
            "pp": pp,
            "batch": positive_int(options.get("max_batch_size"), "max_batch_size", filter_name),
            "beam": positive_int(options.get("beam_width", 1), "beam_width", filter_name),
            "context": context,
            "overhead": whole_number(options.get("overhead_mib", 0), "overhead_mib", filter_name) * MIB,
        },
    )


def _total(fam: Family, sizes: Mapping[str, int], s: Mapping[str, Any], weights: int) -> tuple[dict[str, int], int]:
    parts = {"weights": weights, **_parts(fam, sizes, s), "overhead": s["overhead"]}
    return parts, sum(parts.values())


def ft_memory_plan(family: Any, params: Any, options: Any) -> dict[str, Any]:
    """One GPU's memory at FT's peak: {bytes: {weights, kv_cache, context, decoding, overhead},
    total_bytes, total_mib, and the settings it was made for}.

    options: data_type, int8_mode (0), tp (1), pp (1), max_batch_size, beam_width (1), context
    (the longest prompt + answer), overhead_mib (0: the runtime's own, per GPU)."""
    fam, sizes, s = _settings(family, params, options, "ft_memory_plan")
    weights = _weights(fam, s["params"], s["tp"], s["pp"], s["dtype_bytes"], s["int8_mode"])
    parts, total = _total(fam, sizes, s, weights)
    return {
        "bytes": parts,
        "total_bytes": total,
        "total_mib": math.ceil(total / MIB),
        "max_batch_size": s["batch"],
        "beam_width": s["beam"],
        "context": s["context"],
        "longest_prompt": s["context"] - 1,
        "tp": s["tp"],
        "pp": s["pp"],
        "data_type": s["data_type"],
        "int8_mode": s["int8_mode"],
    }


def ft_memory_fit(family: Any, params: Any, options: Any, capacity_mib: Any) -> dict[str, Any]:
    """What fits in capacity_mib per GPU with ft_memory_plan's options: the largest max_batch_size
    (at most 1024; 0 when the weights and the runtime alone do not fit) at the options' context, and
    the longest context up to the options' (at least 2; 0 when none) at the options' max_batch_size."""
    fam, sizes, s = _settings(family, params, options, "ft_memory_fit")
    capacity = positive_int(capacity_mib, "capacity_mib", "ft_memory_fit") * MIB
    weights = _weights(fam, s["params"], s["tp"], s["pp"], s["dtype_bytes"], s["int8_mode"])

    def fits(**change: int) -> bool:
        return _total(fam, sizes, {**s, **change}, weights)[1] <= capacity

    def largest(key: str, low: int, high: int) -> int:
        """The largest value of `key` in [low, high] that fits (the total grows with each), else 0."""
        if not fits(**{key: low}):
            return 0
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(**{key: middle}) else (low, middle - 1)
        return low

    return {
        "max_batch_size": largest("batch", 1, BATCH_LIMIT),
        "context": largest("context", 2, s["context"]),
        "capacity_mib": capacity // MIB,
    }

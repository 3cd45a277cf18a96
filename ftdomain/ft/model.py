"""A model's FT parameters from its config.json, and the parallelism rules they impose."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import first_key, get_family
from ftdomain.ft.sizes import divisors, positive_int, require_params


def ft_model_params(hf_config: Any, family: Any) -> dict[str, Any]:
    fam = get_family(family, "ft_model_params")
    if not isinstance(hf_config, Mapping):
        raise AnsibleFilterError(
            f"ft_model_params: expected the parsed config.json (a dict), got {type(hf_config).__name__}"
        )

    def size(key: str) -> int:
        value = first_key(hf_config, fam.hf_keys[key], family)
        return positive_int(value, f"config.json {'/'.join(fam.hf_keys[key])}", "ft_model_params")

    hidden = size("hidden")
    heads = size("heads")
    if hidden % heads:
        raise AnsibleFilterError(
            f"ft_model_params: hidden size {hidden} is not a multiple of the head count {heads} "
            f"in the {family} config.json (valid head counts: {', '.join(map(str, divisors(hidden)))})"
        )
    if "inter" in fam.hf_keys:
        inter = size("inter")
    else:  # n_inner may be absent or null: 4 x hidden then
        n_inner = hf_config.get("n_inner")
        inter = 4 * hidden if n_inner is None else positive_int(n_inner, "config.json n_inner", "ft_model_params")

    ids = {}
    for ft_key, hf_key in (("start_id", "bos_token_id"), ("end_id", "eos_token_id")):
        value = hf_config.get(hf_key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise AnsibleFilterError(
                f"ft_model_params: config.json of the {family} checkpoint has {hf_key} {value!r} "
                f"(expected a token id >= 0, used as {ft_key})"
            )
        ids[ft_key] = value

    params: dict[str, Any] = {
        "family": fam.name,
        "model_type": fam.model_type,
        "model_name": str(hf_config.get("_name_or_path") or fam.name).rstrip("/").split("/")[-1] or fam.name,
        "head_num": heads,
        "size_per_head": hidden // heads,
        "hidden_size": hidden,
        "inter_size": inter,
        "num_layer": size("layers"),
        "vocab_size": size("vocab"),
        **ids,
    }
    params.update(fam.extra_params(hf_config, params))
    return params


# The early LLaMA conversions' tokenizer (tokenizer_class LLaMATokenizer: tokenizer.model only,
# special tokens left empty): SentencePiece's ids in LLaMA's tokenizer.model.
EARLY_LLAMA_IDS = {"bos": ("<s>", 1), "eos": ("</s>", 2)}


def tokenizer_special_ids(read: Callable[[str], Any]) -> dict[str, Any]:
    """The bos and eos tokens of a checkpoint's tokenizer and their ids, from its files:
    read(name) gives tokenizer_config.json, special_tokens_map.json or tokenizer.json parsed (or
    None). {"bos": [token, id], "eos": [token, id]}, a kind absent where the files do not say."""
    config = read("tokenizer_config.json") or {}
    if config.get("tokenizer_class") == "LLaMATokenizer":
        return {kind: list(pair) for kind, pair in EARLY_LLAMA_IDS.items()}
    special = read("special_tokens_map.json") or {}
    tokenizer = read("tokenizer.json") or {}
    ids = {str(t.get("content")): t.get("id") for t in tokenizer.get("added_tokens") or [] if isinstance(t, Mapping)}
    decoder = config.get("added_tokens_decoder") or {}
    ids.update({str(t.get("content")): int(i) for i, t in decoder.items() if isinstance(t, Mapping)})
    vocab = (tokenizer.get("model") or {}).get("vocab")
    out: dict[str, Any] = {}
    for kind in ("bos", "eos"):
        token = config.get(f"{kind}_token") or special.get(f"{kind}_token")
        token = token.get("content") if isinstance(token, Mapping) else token
        if not isinstance(token, str) or not token:
            continue
        found = ids.get(token, vocab.get(token) if isinstance(vocab, Mapping) else None)
        if isinstance(found, int) and not isinstance(found, bool):
            out[kind] = [token, found]
    return out


EFFECT = {"bos": "prompts would start with another token", "eos": "answers would never end at the end of text"}


def ft_token_id_problems(hf_config: Any, tokenizer: Any) -> list[str]:
    """Where config.json's bos/eos ids (FT's start_id/end_id) are not the tokenizer's: FT stops
    at end_id, so a wrong one never ends an answer (it runs to max_tokens)."""
    if not isinstance(hf_config, Mapping) or not isinstance(tokenizer, Mapping):
        return []
    problems = []
    for kind, ft_key in (("bos", "start_id"), ("eos", "end_id")):
        pair, value = tokenizer.get(kind), hf_config.get(f"{kind}_token_id")
        if pair and isinstance(value, int) and not isinstance(value, bool) and value != pair[1]:
            problems.append(
                f"config.json's {kind}_token_id is {value} but the tokenizer's {kind} token {pair[0]!r} is id "
                f"{pair[1]} (FT's {ft_key}: {EFFECT[kind]}); "
                "fix: serve a checkpoint whose config.json agrees with its tokenizer (for "
                "decapoda-research/llama-7b-hf: huggyllama/llama-7b, the same weights), or one with config.json "
                "corrected (a fork, or a local mirror)"
            )
    return problems


PARALLELISM = "ft_check_parallelism: "  # the prefix of positive_int's messages for it


def _count(value: Any, what: str, problems: list[str]) -> int | None:
    """`value` as a positive int, or None with the problem appended."""
    try:
        return positive_int(value, what, "ft_check_parallelism")
    except AnsibleFilterError as err:
        message = str(err)  # no str.removeprefix: ftnative imports this on Python 3.8
        problems.append(message[len(PARALLELISM) :] if message.startswith(PARALLELISM) else message)
        return None


def ft_parallelism_problems(params: Any, tp: Any, pp: Any = 1, gpu_count: Any = None) -> list[str]:
    """Every violated parallelism rule, as sentences (empty when valid): for reports that
    collect all problems before failing. ft_check_parallelism raises them instead."""
    sizes = require_params(params, ("head_num", "inter_size", "num_layer"), "ft_check_parallelism")
    problems: list[str] = []
    tp_n = _count(tp, "tensor_para_size", problems)
    pp_n = _count(pp, "pipeline_para_size", problems)
    gpus = None if gpu_count is None else _count(gpu_count, "gpu_count", problems)
    if tp_n is not None:
        valid_tp = ", ".join(str(d) for d in divisors(sizes["head_num"]) if sizes["inter_size"] % d == 0)
        problems += [
            f"tensor_para_size {tp_n} does not divide {key} {sizes[key]} (valid: {valid_tp})"
            for key in ("head_num", "inter_size")
            if sizes[key] % tp_n
        ]
    if pp_n is not None and sizes["num_layer"] % pp_n:
        valid_pp = ", ".join(map(str, divisors(sizes["num_layer"])))
        problems.append(f"pipeline_para_size {pp_n} does not divide num_layer {sizes['num_layer']} (valid: {valid_pp})")
    if None not in (tp_n, pp_n, gpus) and tp_n * pp_n != gpus:
        problems.append(
            f"tensor_para_size {tp_n} x pipeline_para_size {pp_n} = {tp_n * pp_n} GPUs, "
            f"but {gpus} are assigned (one serving instance needs exactly tp x pp GPUs)"
        )
    return problems


# The head sizes FT's decoder attention has kernels for: the dispatch on hidden_size_per_head in
# src/fastertransformer/kernels/decoder_masked_multihead_attention.cu (NVIDIA/FasterTransformer
# df4a753; void-main's fork e770ddf, which serves LLaMA, has no 112). Any other size falls to
# `default: assert(false)`, which a release build compiles out: the model loads and answers
# garbage. The lab's stand-in decodes any size; FT does not.
FT_HEAD_SIZES = (32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256)
VOID_MAIN_HEAD_SIZES = tuple(size for size in FT_HEAD_SIZES if size != 112)
_KERNELS = "decoder_masked_multihead_attention.cu"


# GPT-NeoX-style rotary embedding (Family.neox_rotary) goes through a transpose in shared memory in
# FT's decoder attention; for fp32 with head size 32 a thread's vector is one float, whose
# vec_from_smem_transpose and write_smem_transpose are empty (decoder_masked_multihead_attention_utils.h,
# NVIDIA/FasterTransformer df4a753 and void-main's fork alike): every token after the first is
# generated with a wrong rotation. Seen on an H200: a GPT-NeoX of 2 heads of 32 at fp32 gave
# transformers' greedy tokens but other log probabilities (cum -0.121 against -0.023) and another
# second beam (docs/gpu-tier.md).
_UTILS = "decoder_masked_multihead_attention_utils.h"


def ft_kernel_problems(params: Any, data_type: Any = None) -> list[str]:
    """What FT's kernels cannot run for the model (empty when it can), as sentences; with
    `data_type` (fp32, fp16, bf16) also what they run wrongly at that data type."""
    sizes = require_params(params, ("head_num", "size_per_head"), "ft_kernel_problems")
    family = get_family(params.get("family"), "ft_kernel_problems")
    void_main = family.flavour == "void-main"
    valid = VOID_MAIN_HEAD_SIZES if void_main else FT_HEAD_SIZES
    fork = f"{'void-main/' if void_main else 'NVIDIA/'}FasterTransformer's"
    if sizes["size_per_head"] not in valid:
        return [
            f"head size {sizes['size_per_head']} ({params.get('hidden_size', '?')} hidden / {sizes['head_num']} heads) "
            f"has no kernel in FT's decoder attention (sizes {', '.join(map(str, valid))}; {fork} {_KERNELS}): FT "
            "would load the model and answer garbage"
        ]
    rotary = int(params.get("rotary_embedding") or 0)
    if family.neox_rotary and rotary > 0 and sizes["size_per_head"] == 32 and data_type == "fp32":
        return [
            f"head size 32 at data_type fp32 with {family.model_type}'s rotary embedding ({rotary} dimensions): FT's "
            "decoder attention leaves that rotation out of every generated token after the first (its shared-memory "
            f"transpose does nothing for a single float; {fork} {_UTILS}): the answers drift from the model's; "
            "fix: data_type fp16 or bf16"
        ]
    return []


def ft_check_parallelism(params: Any, tp: Any, pp: Any = 1, gpu_count: Any = None) -> Any:
    problems = ft_parallelism_problems(params, tp, pp, gpu_count)
    if problems:
        raise AnsibleFilterError("ft_check_parallelism: " + "; ".join(problems))
    return params

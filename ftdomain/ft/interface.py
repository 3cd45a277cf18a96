"""The inputs, outputs and parameters of the four Triton models of a family's repository."""

from __future__ import annotations

from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import FAMILIES


def _tensor(name: str, data_type: str, dims: list[int], optional: bool = False, reshape: bool = False) -> dict:
    """reshape: a [1] input that the FT backend reads as a scalar (reshape: { shape: [ ] })."""
    return {"name": name, "data_type": data_type, "dims": dims, "optional": optional, "reshape": reshape}


# The sampling and beam-search inputs FT reads per request, each one value per request.
_SAMPLING = [
    ("runtime_top_k", "UINT32"), ("runtime_top_p", "FP32"), ("beam_search_diversity_rate", "FP32"),
    ("temperature", "FP32"), ("len_penalty", "FP32"), ("repetition_penalty", "FP32"), ("random_seed", "UINT64"),
    ("is_return_log_probs", "BOOL"), ("beam_width", "UINT32"), ("start_id", "UINT32"), ("end_id", "UINT32"),
    ("prompt_learning_task_name_ids", "UINT32"), ("top_p_decay", "FP32"), ("top_p_min", "FP32"),
    ("top_p_reset_ids", "UINT32"),
    # Not in upstream's configs, read by FT's sampling layers all the same (BaseSamplingLayer's
    # runtime argument, an int: the end id is masked while fewer tokens are generated): the
    # gateway's min_tokens and ignore_eos (vLLM's extras); presence_penalty, FT's additive
    # repetition penalty (the one of the two a request may send: OpenAI's presence_penalty).
    ("min_length", "INT32"), ("presence_penalty", "FP32"),
]  # fmt: skip
# GPT and BLOOM (ParallelGpt): p-tuning prompts per request, and the context's embeddings.
_PROMPT_TUNING = [
    _tensor("request_prompt_embedding", "FP16", [-1, -1], optional=True),
    _tensor("request_prompt_lengths", "UINT32", [1], optional=True, reshape=True),
    _tensor("request_prompt_type", "UINT32", [1], optional=True, reshape=True),
]
_PROMPT_TUNING_FAMILIES = ("gpt", "bloom")
# The type of the sequence_length tensor FT answers. Upstream's configs declare UINT32 for every
# family, but FT's GPT (ParallelGptTritonModelInstance.cc, also BLOOM's) and GPT-J
# (GptJTritonModelInstance.cc) make it TYPE_INT32; GPT-NeoX's and void-main's LLaMA's make it
# TYPE_UINT32. Upstream's GPT, GPT-J and BLOOM postprocessing never read it, so its ensembles never
# met the difference; ours decodes each beam up to its length, and Triton refused the ensemble
# with the real backend ("inference input 'sequence_length' data-type is 'INT32', but model
# 'postprocessing' expects 'UINT32'": the GPU tier, docs/gpu/). Declared as FT makes it.
SEQUENCE_LENGTH_TYPE = {"gpt": "INT32", "bloom": "INT32", "gptj": "INT32"}


def sequence_length_type(family: str) -> str:
    return SEQUENCE_LENGTH_TYPE.get(family, "UINT32")


def _scalars(reshape: bool) -> list[dict]:
    return [_tensor(name, kind, [1], optional=True, reshape=reshape) for name, kind in _SAMPLING]


def _fastertransformer(family: str) -> dict[str, Any]:
    inputs = [
        _tensor("input_ids", "UINT32", [-1]),
        _tensor("input_lengths", "UINT32", [1], reshape=True),
        _tensor("request_output_len", "UINT32", [-1]),
        *_scalars(reshape=True),
        _tensor("bad_words_list", "INT32", [2, -1], optional=True),
        _tensor("stop_words_list", "INT32", [2, -1], optional=True),
    ]
    outputs = [
        _tensor("output_ids", "UINT32", [-1, -1]),
        _tensor("sequence_length", sequence_length_type(family), [-1]),
        _tensor("cum_log_probs", "FP32", [-1]),
        _tensor("output_log_probs", "FP32", [-1, -1]),
    ]
    if family in _PROMPT_TUNING_FAMILIES:
        inputs += [_tensor("is_return_context_embeddings", "BOOL", [1], optional=True, reshape=True), *_PROMPT_TUNING]
        outputs += [_tensor("response_input_lengths", "INT32", [-1]), _tensor("context_embeddings", "FP32", [-1, -1])]
    parameters = ["tensor_para_size", "pipeline_para_size", "data_type", "model_type", "model_checkpoint_path",
                  "enable_custom_all_reduce"] + (["int8_mode"] if FAMILIES[family].int8 else [])  # fmt: skip
    return {"inputs": inputs, "outputs": outputs, "parameters": parameters}


# Upstream's GPT-NeoX and LLaMA tokenizing models take bad and stop words as optional, and name
# their tokenizer with tokenizer_path/tokenizer_type; ours reads tokenizer_dir (both are written).
_OPTIONAL_WORDS = ("gptneox", "llama")
_TOKENIZER_PARAMETERS = {"gptneox": ["tokenizer_path", "tokenizer_type"]}


def _preprocessing(family: str) -> dict[str, Any]:
    words = family in _OPTIONAL_WORDS
    return {
        "inputs": [
            _tensor("QUERY", "STRING", [-1]),
            _tensor("BAD_WORDS_DICT", "STRING", [-1], optional=words),
            _tensor("STOP_WORDS_DICT", "STRING", [-1], optional=words),
            _tensor("REQUEST_OUTPUT_LEN", "UINT32", [-1]),
        ],
        "outputs": [
            _tensor("INPUT_ID", "UINT32", [-1]),
            _tensor("REQUEST_INPUT_LEN", "UINT32", [1]),
            _tensor("BAD_WORDS_IDS", "INT32", [2, -1]),
            _tensor("STOP_WORDS_IDS", "INT32", [2, -1]),
            _tensor("REQUEST_OUTPUT_LEN", "UINT32", [-1]),
            _tensor("PROMPT_LEARNING_TASK_NAME_IDS", "UINT32", [1]),
        ],
        "parameters": ["tokenizer_dir", *_TOKENIZER_PARAMETERS.get(family, [])],
    }


def _postprocessing(family: str) -> dict[str, Any]:
    # What upstream's postprocessing takes besides the tokens: GPT-NeoX and LLaMA each beam's
    # length, GPT and BLOOM the prompt lengths (declared, unused), GPT-J nothing. Ours decodes each
    # beam up to its length: where upstream has no sequence_length, it is ours and optional.
    inputs = [_tensor("TOKENS_BATCH", "UINT32", [-1, -1])]
    if family in _PROMPT_TUNING_FAMILIES:
        inputs.append(_tensor("RESPONSE_INPUT_LENGTHS", "INT32", [-1]))
    inputs.append(
        _tensor("sequence_length", sequence_length_type(family), [-1], optional=family not in _OPTIONAL_WORDS)
    )
    return {
        "inputs": inputs,
        "outputs": [_tensor("OUTPUT", "STRING", [-1, -1])],
        "parameters": ["tokenizer_dir", *_TOKENIZER_PARAMETERS.get(family, [])],
    }


def _ensemble(family: str) -> dict[str, Any]:
    inputs = [
        _tensor("INPUT_0", "STRING", [-1]),
        _tensor("INPUT_1", "UINT32", [-1]),
        _tensor("INPUT_2", "STRING", [-1]),
        _tensor("INPUT_3", "STRING", [-1]),
        *_scalars(reshape=False),
    ]
    if family in _PROMPT_TUNING_FAMILIES:
        inputs += [{**t, "reshape": False} for t in _PROMPT_TUNING]
    return {
        "inputs": inputs,
        "outputs": [
            _tensor("OUTPUT_0", "STRING", [-1, -1]),
            _tensor("sequence_length", sequence_length_type(family), [-1]),
            _tensor("cum_log_probs", "FP32", [-1]),
            _tensor("output_log_probs", "FP32", [-1, -1]),
        ],
        "parameters": [],
    }


def ft_triton_interface(family: Any) -> dict[str, dict[str, Any]]:
    if family not in FAMILIES:
        raise AnsibleFilterError(
            f"ft_triton_interface: unknown model family {family!r} (valid: {', '.join(sorted(FAMILIES))})"
        )
    return {
        "preprocessing": _preprocessing(family),
        "fastertransformer": _fastertransformer(family),
        "postprocessing": _postprocessing(family),
        "ensemble": _ensemble(family),
    }

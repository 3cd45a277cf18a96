"""The gateway's protocol: OpenAI's completions request (and the tutorial's /generate), the
parameters refused with the reason, the shapes of answers and stream events, and a validation
error as OpenAI's 400. No state and no I/O: serving.py and the routes (app.py) use these."""

import json
from typing import Annotated, Any, Optional, Union

from fastapi.exceptions import RequestValidationError
from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr

from . import chat
from .errors import ApiError
from .generation import Result
from .sampling import BEAMS_MOST, Number, SamplingFields

# A completions request's prompts at most: each is its own generation, all at once (FT batches
# them: Triton's dynamic batcher gathers what arrives together), numbered as OpenAI numbers them.
PROMPTS_MOST = 16
BUFFERED = ("buffered: the fastertransformer model is not decoupled (triton_model_repo_decoupled: false), "
            "so the whole answer comes in one chunk")  # fmt: skip


class GenerateRequest(SamplingFields):
    """The tutorial's simple form: a prompt and the sampling parameters, text back (those FT takes
    as they are, repetition_penalty and presence_penalty, from sampling.DIRECT)."""

    model_config = ConfigDict(extra="forbid")
    prompt: StrictStr
    max_tokens: StrictInt = Field(16, ge=1)
    temperature: Number = Field(0, ge=0, le=2)
    top_k: StrictInt = Field(0, ge=0)
    top_p: Number = Field(1.0, ge=0, le=1)
    stop: Union[StrictStr, list[StrictStr], None] = None
    seed: Optional[StrictInt] = Field(None, ge=0)
    # vLLM's extra: text never generated (FT's bad_words_list); OpenAI's logit_bias bans a token id
    # with -100 (the one bias FT can apply: generation.banned_ids).
    bad_words: Union[StrictStr, list[StrictStr], None] = None
    logit_bias: Optional[dict[str, Number]] = None
    # vLLM's extras, which benchmarks (GuideLLM) send to get answers of exactly max_tokens: the
    # end of text is never generated before min_tokens tokens, or at all with ignore_eos (FT's
    # min_length: generation.min_length).
    min_tokens: StrictInt = Field(0, ge=0)
    ignore_eos: StrictBool = False


class CompletionRequest(GenerateRequest):
    """OpenAI's completions request. Every parameter is either honoured or refused with a 400."""

    model: StrictStr
    prompt: Union[StrictStr, Annotated[list[StrictStr], Field(min_length=1, max_length=PROMPTS_MOST)]]
    temperature: Number = Field(1.0, ge=0, le=2)
    stream: StrictBool = False
    stream_options: Optional[dict[str, StrictBool]] = None
    n: StrictInt = 1
    best_of: Optional[StrictInt] = None
    # vLLM's name for FT's len_penalty: beam search ranks beams by cumulative log probability over
    # length ** length_penalty (None: the guides' 1.0; FT's own default, 0, ranks without length).
    length_penalty: Optional[Number] = Field(None, ge=-10, le=10)
    logprobs: Optional[StrictInt] = None
    echo: StrictBool = False
    suffix: Optional[StrictStr] = None
    frequency_penalty: Number = 0
    user: Optional[StrictStr] = None  # the caller's end user: logged nowhere, accepted as OpenAI does


AnyRequest = Union[CompletionRequest, chat.ChatRequest]

# n and best_of above 1 are served by FT's beam search (the n best of best_of beams), which is
# deterministic: with sampling they would mean independent samples, which FT does not make.
REFUSED = [  # (parameter, is it set to something the model cannot do?, why)
    ("n", lambda r: r.n < 1 or r.n > (r.best_of or r.n), "n must be at least 1 and at most best_of"),
    ("best_of", lambda r: (r.best_of or r.n) > 1 and (r.temperature != 0 or r.stream),
     "n or best_of above 1 is served by FT's beam search: it needs temperature 0 and no streaming"),
    ("best_of", lambda r: (r.best_of or r.n) > BEAMS_MOST,
     f"best_of must be at most {BEAMS_MOST} (FT's online beam search)"),
    ("length_penalty", lambda r: r.length_penalty is not None and (r.best_of or r.n) <= 1,
     "length_penalty ranks beam search's beams: it needs best_of (or n) above 1"),
    ("logprobs", lambda r: r.logprobs is not None and not 0 <= r.logprobs <= 5, "logprobs must be between 0 and 5"),
    ("logprobs", lambda r: (r.logprobs or 0) > 1 or (r.logprobs == 1 and (r.temperature or (r.best_of or r.n) > 1)),
     "FT returns each chosen token's log probability, not the most likely others: logprobs 0, or 1 with greedy "
     "decoding (temperature 0, no best_of), where the chosen token is the most likely one"),
    ("logprobs", lambda r: r.logprobs is not None and r.stream, "logprobs come with whole answers: stream false"),
    ("logprobs", lambda r: r.logprobs is not None and r.echo, "FT does not score the prompt's tokens: logprobs "
     "cannot be combined with echo"),
    *chat.STREAM_OPTIONS_REFUSED,
    ("suffix", lambda r: r.suffix is not None, "suffix (insertion) is not supported by decoder-only FT models"),
    ("frequency_penalty", lambda r: r.frequency_penalty != 0, "frequency_penalty is not supported by the FT model"),
]  # fmt: skip


def sse_event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def usage(*results: Result) -> dict[str, int]:
    """OpenAI's usage of one answer or of several (a list of prompts: their sums)."""
    return usage_of(sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results))


def usage_of(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI's usage object of these token counts."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_chunk(ident: str, created: int, model: str, text: str, finish: Optional[str], *,
                     logprobs: Optional[dict[str, list]] = None, index: int = 0, **extra: Any):  # fmt: skip
    choice = {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}
    return {"id": ident, "object": "text_completion", "created": created, "model": model, "choices": [choice], **extra}


def validation_error(err: RequestValidationError) -> ApiError:
    errors = list(err.errors())
    first = errors[0] if errors else {}
    param = next((str(p) for p in first.get("loc", ()) if p != "body"), None)
    if first.get("type") == "json_invalid":
        return ApiError(400, "the body is not valid JSON")
    if first.get("type") == "extra_forbidden":
        return ApiError(400, f"unknown parameter {param!r}", param=param, code="unknown_parameter")
    # A union (prompt: a string or a list of one string) fails once per branch: say what is wrong
    # with the value (too long) rather than that it is not the other branch's type.
    same = [e for e in errors if param in [str(p) for p in e.get("loc", ())]]
    chosen = next((e for e in same if not str(e.get("type", "")).endswith("_type")), first)
    return ApiError(400, f"{param or 'body'}: {chosen.get('msg', 'invalid')}", param=param)

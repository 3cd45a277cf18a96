"""OpenAI's chat completions: the request, the conversation rendered into the model's prompt with
its chat template, and the answer's shapes (whole and streamed). Generation itself is the
completions' (app.Gateway.run): a chat request becomes a prompt and the same parameters.

The template is the model's own where its tokenizer_config.json has one (`chat_template`, Jinja,
as transformers renders it: `messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
`raise_exception`), else the one the inventory names (gateway_chat_template); the gateway role
writes it into the settings."""

from typing import Any, Literal, Optional, Union

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from .sampling import Number, SamplingFields

ROLES = ("system", "user", "assistant")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: StrictStr
    content: Union[StrictStr, list[TextPart]]
    name: Optional[StrictStr] = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatRequest(SamplingFields):
    """OpenAI's chat completions request: every parameter honoured or refused with a 400 (REFUSED);
    those FT takes as they are from sampling.DIRECT."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr
    messages: list[Message]
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)  # OpenAI's newer name for max_tokens
    temperature: Number = Field(1.0, ge=0, le=2)
    top_p: Number = Field(1.0, ge=0, le=1)
    top_k: StrictInt = Field(0, ge=0)  # not OpenAI's; FT's, as vLLM and TGI accept it
    stop: Union[StrictStr, list[StrictStr], None] = None
    seed: Optional[StrictInt] = Field(None, ge=0)
    stream: StrictBool = False
    stream_options: Optional[dict[str, StrictBool]] = None
    n: StrictInt = 1
    logprobs: StrictBool = False
    top_logprobs: Optional[StrictInt] = None
    frequency_penalty: Number = 0
    logit_bias: Optional[dict[str, Number]] = None  # -100 bans a token (FT's bad words); other values refused
    bad_words: Union[StrictStr, list[StrictStr], None] = None  # vLLM's extra: FT's bad_words_list
    min_tokens: StrictInt = Field(0, ge=0)  # vLLM's extras: FT's min_length (protocol.GenerateRequest)
    ignore_eos: StrictBool = False
    user: Optional[StrictStr] = None


# OpenAI's include_usage, and vLLM's continuous_usage_stats (with it: the usage so far in every
# chunk): refused alike by chat and completions (protocol.REFUSED).
STREAM_OPTIONS = {"include_usage", "continuous_usage_stats"}
STREAM_OPTIONS_REFUSED = [
    ("stream_options", lambda r: r.stream_options is not None and not r.stream,
     "stream_options is only allowed with stream true"),
    ("stream_options", lambda r: bool(set(r.stream_options or {}) - STREAM_OPTIONS),
     "stream_options takes only include_usage and continuous_usage_stats (vLLM's: the usage so far in every chunk)"),
]  # fmt: skip

REFUSED = [  # (parameter, is it set to something the model cannot do?, why)
    ("messages", lambda r: not r.messages, "messages is empty: send at least one message"),
    ("max_tokens", lambda r: r.max_tokens is not None and r.max_completion_tokens is not None
     and r.max_tokens != r.max_completion_tokens, "max_tokens and max_completion_tokens differ: send one"),
    ("n", lambda r: r.n != 1, "n must be 1 for chat (FT's beam search is served by /v1/completions' best_of)"),
    ("logprobs", lambda r: r.logprobs or r.top_logprobs is not None,
     "logprobs are served by /v1/completions (FT's output_log_probs), not yet in chat's shape"),
    *STREAM_OPTIONS_REFUSED,
    ("frequency_penalty", lambda r: r.frequency_penalty != 0, "frequency_penalty is not supported by the FT model"),
]  # fmt: skip


class ChatError(ValueError):
    """A conversation the template cannot render, or no template: a 400 naming the parameter."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _raise(message: str) -> None:
    raise TemplateError(message)


class Template:
    """The model's chat template, compiled once in a sandbox (a template is data from the model's
    files or the inventory, not code the gateway trusts)."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source, self.tokens = source, {"bos_token": bos_token, "eos_token": eos_token}
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise
        try:
            self._template = environment.from_string(source) if source else None
        except TemplateError as err:
            raise ValueError(f"the chat template does not compile: {err}") from err

    def render(self, messages: list[Message]) -> str:
        """The prompt for a conversation, ending where the assistant's answer starts."""
        if self._template is None:
            raise ChatError("messages", "this model has no chat template: its tokenizer_config.json has none and "
                            "the inventory names none (gateway_chat_template); use /v1/completions")  # fmt: skip
        for i, message in enumerate(messages):
            if message.role not in ROLES:
                raise ChatError(f"messages[{i}].role", f"unknown role {message.role!r}; valid: {', '.join(ROLES)}")
            if not message.text():
                raise ChatError(f"messages[{i}].content", "the message is empty")
        conversation = [{"role": m.role, "content": m.text()} for m in messages]
        try:
            return self._template.render(messages=conversation, add_generation_prompt=True, **self.tokens)
        except TemplateError as err:  # the template's own refusal (raise_exception), e.g. roles not alternating
            raise ChatError("messages", f"the model's chat template refuses this conversation: {err}") from err


def max_tokens(request: ChatRequest) -> int:
    """OpenAI's max_completion_tokens or max_tokens; 16 when neither, as completions."""
    return request.max_completion_tokens or request.max_tokens or 16


def answer(ident: str, created: int, model: str, text: str, *, finish: str, usage: dict[str, int],
           fingerprint: Optional[str] = None) -> dict[str, Any]:  # fmt: skip
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish}
    return {"id": ident, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": fingerprint, "choices": [choice], "usage": usage}  # fmt: skip


def chunk(ident: str, created: int, model: str, delta: dict[str, str], finish: Optional[str], *, index: int = 0,
          **extra: Any):  # fmt: skip
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [choice], **extra}  # fmt: skip

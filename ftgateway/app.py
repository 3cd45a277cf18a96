"""The HTTP API: OpenAI's /v1/completions and /v1/models, a simpler /generate, /healthz, /metrics."""

import asyncio
import json
import secrets
import time
import uuid
from collections import defaultdict, deque
from contextlib import asynccontextmanager
from typing import Annotated, Any, Optional, Union

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from tritonclient.utils import InferenceServerException

from . import chat
from .config import ConfigError, Key, Keys, Settings
from .errors import ApiError, triton_error
from .generation import Generation, Job, Result, stop_list
from .tokens import special_ids
from .triton import SamplingError, Triton, sampling

Number = Union[StrictInt, StrictFloat]
BUFFERED = ("buffered: the fastertransformer model is not decoupled (triton_model_repo_decoupled: false), "
            "so the whole answer comes in one chunk")  # fmt: skip


class GenerateRequest(BaseModel):
    """The tutorial's simple form: a prompt and the sampling parameters, text back."""

    model_config = ConfigDict(extra="forbid")
    prompt: StrictStr
    max_tokens: StrictInt = Field(16, ge=1)
    temperature: Number = Field(0, ge=0, le=2)
    top_k: StrictInt = Field(0, ge=0)
    top_p: Number = Field(1.0, ge=0, le=1)
    stop: Union[StrictStr, list[StrictStr], None] = None
    seed: Optional[StrictInt] = Field(None, ge=0)
    # Not OpenAI's, but FT's, and accepted by other OpenAI-compatible servers (vLLM, TGI) as an extra.
    repetition_penalty: Number = 1.0


class CompletionRequest(GenerateRequest):
    """OpenAI's completions request. Every parameter is either honoured or refused with a 400."""

    model: StrictStr
    prompt: Union[StrictStr, Annotated[list[StrictStr], Field(min_length=1, max_length=1)]]
    temperature: Number = Field(1.0, ge=0, le=2)
    stream: StrictBool = False
    stream_options: Optional[dict[str, StrictBool]] = None
    n: StrictInt = 1
    best_of: Optional[StrictInt] = None
    logprobs: Optional[StrictInt] = None
    echo: StrictBool = False
    suffix: Optional[StrictStr] = None
    presence_penalty: Number = 0
    frequency_penalty: Number = 0
    logit_bias: Optional[dict[str, Number]] = None
    user: Optional[StrictStr] = None  # the caller's end user: logged nowhere, accepted as OpenAI does


AnyRequest = Union[CompletionRequest, chat.ChatRequest]

# n and best_of above 1 are served by FT's beam search (the n best of best_of beams), which is
# deterministic: with sampling they would mean independent samples, which FT does not make.
REFUSED = [  # (parameter, is it set to something the model cannot do?, why)
    ("n", lambda r: r.n < 1 or r.n > (r.best_of or r.n), "n must be at least 1 and at most best_of"),
    ("best_of", lambda r: (r.best_of or r.n) > 1 and (r.temperature != 0 or r.stream),
     "n or best_of above 1 is served by FT's beam search: it needs temperature 0 and no streaming"),
    ("best_of", lambda r: (r.best_of or r.n) > 16, "best_of must be at most 16 (FT's online beam search)"),
    ("logprobs", lambda r: r.logprobs is not None and not 0 <= r.logprobs <= 5, "logprobs must be between 0 and 5"),
    ("logprobs", lambda r: (r.logprobs or 0) > 1 or (r.logprobs == 1 and (r.temperature or (r.best_of or r.n) > 1)),
     "FT returns each chosen token's log probability, not the most likely others: logprobs 0, or 1 with greedy "
     "decoding (temperature 0, no best_of), where the chosen token is the most likely one"),
    ("logprobs", lambda r: r.logprobs is not None and r.stream, "logprobs come with whole answers: stream false"),
    ("logprobs", lambda r: r.logprobs is not None and r.echo, "FT does not score the prompt's tokens: logprobs "
     "cannot be combined with echo"),
    ("stream_options", lambda r: r.stream_options is not None and not r.stream,
     "stream_options is only allowed with stream true"),
    ("stream_options", lambda r: bool(set(r.stream_options or {}) - {"include_usage"}),
     "stream_options takes only include_usage"),
    ("suffix", lambda r: r.suffix is not None, "suffix (insertion) is not supported by decoder-only FT models"),
    ("presence_penalty", lambda r: r.presence_penalty != 0, "presence_penalty is not supported by the FT model"),
    ("frequency_penalty", lambda r: r.frequency_penalty != 0, "frequency_penalty is not supported by the FT model"),
    ("logit_bias", lambda r: bool(r.logit_bias), "logit_bias is not supported by the FT model"),
]  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ftgateway_requests", "Requests answered, by route and HTTP status",
                                ["route", "status"], registry=self.registry)  # fmt: skip
        self.latency = Histogram("ftgateway_request_seconds", "Time to the last byte of the answer, by route",
                                 ["route"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))  # fmt: skip
        self.first_token = Histogram("ftgateway_time_to_first_token_seconds", "Time to the first streamed text",
                                     registry=self.registry,
                                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))  # fmt: skip
        self.tokens = Counter("ftgateway_tokens", "Tokens in prompts (in) and completions (out)", ["direction"],
                              registry=self.registry)  # fmt: skip
        # Both series exist at 0 from the start: a counter born at its first request with all of a short
        # burst already in it has no increase for rate() to see, and that host's tokens per second read 0.
        for direction in ("in", "out"):
            self.tokens.labels(direction=direction)
        self.errors = Counter("ftgateway_errors", "Error answers, by HTTP status and error type",
                              ["status", "type"], registry=self.registry)  # fmt: skip
        self.disconnects = Counter("ftgateway_client_disconnects", "Streams the client closed before their end "
                                   "(the gateway stopped them; counted as status 499 in requests)",
                                   registry=self.registry)  # fmt: skip
        self.local_tokenizer = Gauge("ftgateway_local_tokenizer", "1 when the gateway tokenizes and decodes "
                                     "itself (its tokenizer equals the models'), 0 when it calls them",
                                     registry=self.registry)  # fmt: skip


class RateLimiter:
    """At most `rate` requests per key in any 60 seconds (per gateway process)."""

    def __init__(self) -> None:
        self.seen: dict[str, deque[float]] = defaultdict(deque)

    def check(self, key: Key) -> None:
        now, window = time.monotonic(), self.seen[key.sha256]
        while window and now - window[0] >= 60:
            window.popleft()
        if len(window) >= key.rate_per_minute:
            retry = max(1, int(60 - (now - window[0])) + 1)
            raise ApiError(429, f"rate limit of {key.rate_per_minute} requests per minute reached for key "
                           f"{key.name!r}", kind="rate_limit_error", code="rate_limit_exceeded",
                           headers={"Retry-After": str(retry)})  # fmt: skip
        window.append(now)


class Gateway:
    """The state behind the routes: settings, keys, rate limits, metrics and the Triton client."""

    def __init__(self, settings: Settings, backend: Triton) -> None:
        self.settings, self.backend = settings, backend
        self.keys = Keys(settings.keys_file, settings.default_rate_per_minute) if settings.keys_file else None
        self.metrics, self.limiter, self.started = Metrics(), RateLimiter(), int(time.time())
        hidden = special_ids(settings.checkpoint_dir) if settings.checkpoint_dir else frozenset()
        self.generation = Generation(backend, settings.context_length, self.metrics.tokens, hidden)
        try:
            self.chat_template = chat.Template(settings.chat_template, settings.chat_bos_token,
                                               settings.chat_eos_token)  # fmt: skip
        except ValueError as err:
            raise ConfigError(f"setting 'chat_template': {err}") from err

    def fail(self, err: ApiError, route: str) -> JSONResponse:
        self.metrics.errors.labels(str(err.status), err.kind).inc()
        self.metrics.requests.labels(route, str(err.status)).inc()
        return err.response()

    async def caller(self, request: Request) -> Optional[Key]:
        if self.keys is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "no API key: send 'Authorization: Bearer <key>'", kind="authentication_error",
                           code="missing_api_key")  # fmt: skip
        key = self.keys.find(token.strip())
        if key is None:
            raise ApiError(401, "the API key is not valid", kind="authentication_error", code="invalid_api_key")
        refused = key.refusal(self.settings.model, time.time())
        if refused:
            status, code, message = refused
            raise ApiError(status, message, kind="authentication_error" if status == 401 else "permission_error",
                           code=code)  # fmt: skip
        self.limiter.check(key)
        return key

    def job(self, body: GenerateRequest) -> Job:
        """What a request asks to generate, or the 400 that says what is wrong."""
        if isinstance(body, CompletionRequest):
            if body.model != self.settings.model:
                raise ApiError(404, f"the model {body.model!r} does not exist here; this gateway serves "
                               f"{self.settings.model!r} (GET /v1/models)", param="model",
                               code="model_not_found")  # fmt: skip
            for param, is_set, why in REFUSED:
                if is_set(body):
                    raise ApiError(400, why, param=param, code="unsupported_parameter")
        if body.max_tokens > self.settings.max_tokens_limit:
            raise ApiError(400, f"max_tokens {body.max_tokens} is over this gateway's limit of "
                           f"{self.settings.max_tokens_limit}", param="max_tokens")  # fmt: skip
        try:
            params = sampling(float(body.temperature), body.top_k, float(body.top_p), body.seed,
                              fallback_seed=secrets.randbits(63), repetition_penalty=float(body.repetition_penalty),
                              log_probs=getattr(body, "logprobs", None) is not None)  # fmt: skip
        except SamplingError as err:
            raise ApiError(400, str(err), param=err.param) from err
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        if not prompt:
            raise ApiError(400, "the prompt is empty", param="prompt")
        n, best_of = getattr(body, "n", 1), getattr(body, "best_of", None)
        return Job(prompt=prompt, max_tokens=body.max_tokens, params=params, stops=stop_list(body.stop),
                   echo=getattr(body, "echo", False), logprobs=getattr(body, "logprobs", None), n=n,
                   best_of=best_of or n)  # fmt: skip

    def chat_prompt(self, body: chat.ChatRequest) -> GenerateRequest:
        """A chat request as the completion it is: the conversation rendered with the model's chat
        template, and the same sampling parameters (checked as a completion's by job())."""
        for param, refused, why in chat.REFUSED:
            if refused(body):
                raise ApiError(400, why, param=param)
        try:
            prompt = self.chat_template.render(body.messages)
        except chat.ChatError as err:
            raise ApiError(400, str(err), param=err.param) from err
        return GenerateRequest(prompt=prompt, max_tokens=chat.max_tokens(body), temperature=body.temperature,
                               top_k=body.top_k, top_p=body.top_p, stop=body.stop, seed=body.seed,
                               repetition_penalty=body.repetition_penalty)  # fmt: skip

    def stream(self, body: AnyRequest, first: tuple[str, Optional[Result]], rest,
               decoupled: bool, began: float):  # fmt: skip
        """Server-sent events in OpenAI's chunk shape (completions' or chat's), then [DONE]. With
        stream_options.include_usage, as OpenAI specifies it: every chunk carries "usage": null,
        and one more chunk before [DONE] has no choices and the usage."""
        chatting = isinstance(body, chat.ChatRequest)
        route = "/v1/chat/completions" if chatting else "/v1/completions"
        ident, created = f"{'chatcmpl' if chatting else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        extra = ({} if decoupled else {"ftfleet_streaming": BUFFERED}) | ({"usage": None} if include_usage else {})

        def piece(text: str, finish: Optional[str], **more: Any) -> dict[str, Any]:
            if chatting:
                return chat.chunk(ident, created, self.settings.model, {"content": text} if text else {}, finish,
                                  **more)  # fmt: skip
            return completion_chunk(ident, created, self.settings.model, text, finish, **more)

        async def events():
            status, item, seen_text, held = "200", first, False, ""
            if chatting:  # OpenAI's first chat chunk names the role
                yield _event(chat.chunk(ident, created, self.settings.model, {"role": "assistant", "content": ""},
                                        None, **extra))  # fmt: skip
            try:
                while True:
                    delta, result = item
                    if not decoupled:  # buffered: all the text in one chunk (run() may yield a trailing
                        held += delta  # partial character apart), then the chunk with the usage
                        delta = held if result is not None else ""
                    if delta:
                        if not seen_text:
                            self.metrics.first_token.observe(time.monotonic() - began)
                            seen_text = True
                        yield _event(piece(delta, None, **extra))
                    if result is not None:
                        yield _event(piece("", result.finish_reason, **extra))
                        if include_usage:
                            yield _event({**piece("", None), "choices": [], "usage": usage(result)})
                        break
                    item = await rest.__anext__()
            except ApiError as err:  # after the first chunk: an error event in OpenAI's shape
                status = str(err.status)
                self.metrics.errors.labels(status, err.kind).inc()
                yield _event({"error": {"message": err.message, "type": err.kind, "code": err.code}})
            except asyncio.CancelledError:
                # The client went away: Starlette cancels this stream at once (it listens for the
                # disconnect), the cancellation closes run() and with it the gRPC stream to
                # tritonserver, and nothing more is decoded or sent. (FT's backend never asks whether
                # a request was cancelled: tritonserver finishes the generation on its own.)
                self.metrics.disconnects.inc()
                self.metrics.requests.labels(route, "499").inc()
                raise
            yield "data: [DONE]\n\n"
            self.metrics.requests.labels(route, status).inc()
            self.metrics.latency.labels(route).observe(time.monotonic() - began)

        headers = {"Cache-Control": "no-cache", "X-FTFleet-Streaming": "tokens" if decoupled else "buffered"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def usage(result: Result) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}  # fmt: skip


def completion_chunk(ident: str, created: int, model: str, text: str, finish: Optional[str], *,
                     logprobs: Optional[dict[str, list]] = None, **extra: Any):  # fmt: skip
    choice = {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}
    return {"id": ident, "object": "text_completion", "created": created, "model": model, "choices": [choice], **extra}


def _validation_error(err: RequestValidationError) -> ApiError:
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


class BodyLimitAndCounts:
    """Refuses a POST body over max_request_bytes (413) before any route reads it, and counts the
    answers that are not streams (a stream counts itself when it ends: Gateway.stream).

    A plain ASGI middleware: Starlette's BaseHTTPMiddleware (@app.middleware) runs each response
    through a memory stream and a task of its own, a cost paid at every chunk of a stream."""

    def __init__(self, app, gateway: Gateway) -> None:
        self.app, self.gw, self.limit = app, gateway, gateway.settings.max_request_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, began = scope["path"], time.monotonic()
        if scope["method"] == "POST":
            declared = dict(scope["headers"]).get(b"content-length")
            if declared is None:  # chunked: read it here, within the limit, then give it to the route
                receive = await self._buffered(receive)
            elif not declared.isdigit() or int(declared) > self.limit:
                receive = None  # the server holds the body to Content-Length: no need to read it
            if receive is None:
                too_large = ApiError(413, f"the request body is over {self.limit} bytes", code="request_too_large")
                await self.gw.fail(too_large, route)(scope, _no_body, send)
                return
        if route in ("/metrics", "/healthz"):
            await self.app(scope, receive, send)
            return
        status = "500"

        async def counting(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                kinds = dict(message.get("headers", ())).get(b"content-type", b"")
                status = "" if kinds.startswith(b"text/event-stream") else str(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") and status:
                self.gw.metrics.requests.labels(route, status).inc()
                self.gw.metrics.latency.labels(route).observe(time.monotonic() - began)

        await self.app(scope, receive, counting)

    async def _buffered(self, receive):
        """The body's messages read ahead (None when they pass the limit), replayed in order."""
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.limit:
                return None
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        return replay


async def _no_body():
    return {"type": "http.request", "body": b"", "more_body": False}


def create_app(settings: Settings, triton: Optional[Triton] = None) -> FastAPI:
    gw = Gateway(settings, triton or Triton(settings.triton_grpc, settings.request_timeout_s, settings.tokenizer_dir))
    Caller = Annotated[Optional[Key], Depends(gw.caller)]

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await gw.backend.close()

    app = FastAPI(title="ftgateway", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw

    app.add_middleware(BodyLimitAndCounts, gateway=gw)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError):
        gw.metrics.errors.labels(str(err.status), err.kind).inc()
        return err.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, err: RequestValidationError):
        return await api_error(_request, _validation_error(err))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, _key: Caller):
        if (body.best_of or body.n) > 1:
            results, billed = await gw.generation.search(gw.job(body))
            ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
            choices = [{**completion_chunk(ident, created, settings.model, r.text, r.finish_reason,
                                           logprobs=r.logprobs)["choices"][0], "index": i}
                       for i, r in enumerate(results)]  # fmt: skip
            return {"id": ident, "object": "text_completion", "created": created, "model": settings.model,
                    "choices": choices, "usage": billed}  # fmt: skip
        if not body.stream:
            result = await gw.generation.result(gw.job(body))
            ident = f"cmpl-{uuid.uuid4().hex}"
            chunk = completion_chunk(ident, int(time.time()), settings.model, result.text, result.finish_reason,
                                     logprobs=result.logprobs)  # fmt: skip
            return {**chunk, "usage": usage(result)}
        return await streamed(body, body)

    async def streamed(body: AnyRequest, generate: GenerateRequest) -> StreamingResponse:
        began = time.monotonic()
        rest = gw.generation.run(gw.job(generate))
        first = await rest.__anext__()  # an error before the first text is still a plain HTTP error
        try:
            decoupled = await gw.backend.decoupled()
        except InferenceServerException as err:
            raise triton_error(err) from err
        return gw.stream(body, first, rest, decoupled, began)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: chat.ChatRequest, _key: Caller):
        generate = gw.chat_prompt(body)
        if body.stream:
            return await streamed(body, generate)
        result = await gw.generation.result(gw.job(generate))
        return chat.answer(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), settings.model, result.text,
                           finish=result.finish_reason, usage=usage(result))  # fmt: skip

    @app.post("/generate")
    async def generate(body: GenerateRequest, _key: Caller):
        result = await gw.generation.result(gw.job(body))
        return {"model": settings.model, "prompt": body.prompt, "text": result.text,
                "finish_reason": result.finish_reason, "usage": usage(result)}  # fmt: skip

    @app.get("/v1/models")
    async def models(_key: Caller):
        model = {"id": settings.model, "object": "model", "created": gw.started, "owned_by": "ftfleet"}
        return {"object": "list", "data": [model]}

    @app.get("/healthz")
    async def healthz():
        ok, detail = await gw.backend.ready()
        body = {"status": "ready" if ok else "not ready", "detail": detail}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus():
        gw.metrics.local_tokenizer.set(1 if getattr(gw.backend, "tokenizing_locally", False) else 0)
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

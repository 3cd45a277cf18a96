"""The HTTP API: OpenAI's /v1/completions, /v1/chat/completions and /v1/models, a simpler
/generate, /healthz (and /health) and /metrics: the routes and their wiring. What a request may ask is
protocol.py's, how it is served serving.py's, what stands around every route middleware.py's."""

import time
import uuid
from contextlib import asynccontextmanager
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tritonclient.utils import InferenceServerException

from . import chat, internal
from .config import Key, Settings
from .errors import ApiError, triton_error
from .middleware import BodyLimitAndCounts, Metrics
from .protocol import AnyRequest, CompletionRequest, GenerateRequest, completion_chunk, usage, validation_error
from .serving import Gateway, all_of, merged
from .tokenizing import Tokenizing
from .triton import Triton

__all__ = ["Gateway", "Metrics", "create_app"]  # Gateway and Metrics: where callers found them before the split


def create_app(settings: Settings, triton: Optional[Triton] = None) -> FastAPI:
    transport = triton or Triton(settings.triton_grpc, settings.request_timeout_s)
    gw = Gateway(settings, Tokenizing(transport, settings.tokenizer_dir))
    Caller = Annotated[Optional[Key], Depends(gw.auth)]

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await gw.continuing.close()
        await gw.backend.close()

    app = FastAPI(title="ftgateway", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw

    app.add_middleware(BodyLimitAndCounts, metrics=gw.metrics, limit=settings.max_request_bytes)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError):
        gw.metrics.errors.labels(str(err.status), err.kind).inc()
        return err.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, err: RequestValidationError):
        return await api_error(_request, validation_error(err))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, _key: Caller):
        jobs = gw.jobs(body)  # one per prompt; choices numbered as OpenAI numbers them (prompt, then n)
        ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if (body.best_of or body.n) > 1:
            searched = await all_of([gw.generation.search(job) for job in jobs])
            results = [r for found, _billed in searched for r in found]
            billed = {key: sum(b[key] for _, b in searched) for key in searched[0][1]}
        elif not body.stream:
            results = await all_of([gw.generation.result(job) for job in jobs])
            billed = usage(*results)
        else:
            return await streamed(body, jobs)
        choices = [completion_chunk(ident, created, settings.model, r.text, r.finish_reason, logprobs=r.logprobs,
                                    index=i)["choices"][0] for i, r in enumerate(results)]  # fmt: skip
        return {"id": ident, "object": "text_completion", "created": created, "model": settings.model,
                "system_fingerprint": gw.fingerprint(), "choices": choices, "usage": billed}  # fmt: skip

    async def streamed(body: AnyRequest, jobs: list) -> StreamingResponse:
        began = time.monotonic()
        items = await merged([gw.generation.run(job) for job in jobs])
        try:
            decoupled = await gw.backend.decoupled()
        except InferenceServerException as err:
            decoupled = gw.backend.transport.was_decoupled  # gone since: the generation went on elsewhere
            if decoupled is None or not gw.continuing.enabled:
                await items.aclose()
                raise triton_error(err) from err
        return gw.stream(body, items, len(jobs), decoupled, began)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: chat.ChatRequest, _key: Caller):
        generate = gw.chat_prompt(body)
        if body.stream:
            return await streamed(body, [gw.job(generate)])
        result = await gw.generation.result(gw.job(generate))
        return chat.answer(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), settings.model, result.text,
                           finish=result.finish_reason, usage=usage(result), fingerprint=gw.fingerprint())  # fmt: skip

    @app.post("/generate")
    async def generate(body: GenerateRequest, _key: Caller):
        result = await gw.generation.result(gw.job(body))
        return {"model": settings.model, "prompt": body.prompt, "text": result.text,
                "finish_reason": result.finish_reason, "usage": usage(result)}  # fmt: skip

    internal.add_routes(app, gw)

    @app.get("/v1/models")
    async def models(_key: Caller):
        model = {"id": settings.model, "object": "model", "created": gw.started, "owned_by": "ftfleet"}
        return {"object": "list", "data": [model]}

    # /health too: the name vLLM, TGI and Triton's own OpenAI frontend answer on, which standard
    # benchmarks (GuideLLM) ask before they start.
    @app.get("/healthz")
    @app.get("/health")
    async def healthz():
        gw.follow_checkpoint()
        ok, detail = await gw.backend.ready()
        body = {"status": "ready" if ok else "not ready", "detail": detail}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus():
        gw.metrics.local_tokenizer.set(1 if gw.backend.tokenizing_locally else 0)
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

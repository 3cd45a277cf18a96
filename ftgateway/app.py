"""The HTTP API: OpenAI's /v1/completions, /v1/chat/completions and /v1/models, a simpler
/generate, /healthz (and /health) and /metrics: the routes and their wiring. What a request may ask is
protocol.py's, how it is served serving.py's, what stands around every route middleware.py's."""

from contextlib import asynccontextmanager
from typing import Annotated, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import chat, internal
from .config import Key, Settings
from .errors import BUSY_STATUS_HEADER, REFUSED_HEADER, ApiError
from .middleware import BodyLimitAndCounts, Metrics
from .protocol import CompletionRequest, GenerateRequest, validation_error
from .rounds import Abandoned
from .serving import Gateway
from .tokenizing import Tokenizing
from .triton import Triton

__all__ = ["Gateway", "Metrics", "create_app"]  # Gateway and Metrics: where callers found them before the split


def create_app(settings: Settings, triton: Optional[Triton] = None) -> FastAPI:
    transport = triton or Triton(settings.triton_grpc, settings.request_timeout_s, settings.triton_final_response)
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
    async def api_error(request: Request, err: ApiError):
        if err.status == 503 and REFUSED_HEADER in err.headers and request.headers.get(BUSY_STATUS_HEADER) == "429":
            err.status = 429  # a busy refusal, for a load balancer that tells busy from broken by it
        gw.metrics.errors.labels(str(err.status), err.kind).inc()
        return err.response()

    @app.exception_handler(Abandoned)
    async def abandoned(request: Request, err: Abandoned):
        return gw.abandoned(request.url.path, err.generations)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, err: RequestValidationError):
        return await api_error(_request, validation_error(err))

    # FastAPI's and Starlette's own refusals (a body that is not UTF-8 or nests too deep to parse,
    # an unknown route or method) in OpenAI's shape too, not as {"detail": ...}.
    @app.exception_handler(StarletteHTTPException)
    async def refused(_request: Request, err: StarletteHTTPException):
        parsing = err.status_code == 400 and "parsing the body" in str(err.detail)
        message = "the body is not valid JSON (not UTF-8, or nested too deep)" if parsing else str(err.detail)
        kind = "invalid_request_error" if err.status_code < 500 else "server_error"
        return await api_error(_request, ApiError(err.status_code, message, kind=kind, headers=dict(err.headers or {})))

    def caller(key: Optional[Key]) -> str:
        return key.name if key is not None else ""

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, asker: Caller, request: Request):
        return await gw.completion(body, caller(asker), request.is_disconnected)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: chat.ChatRequest, asker: Caller, request: Request):
        return await gw.chat(body, caller(asker), request.is_disconnected)

    @app.post("/generate")
    async def generate(body: GenerateRequest, asker: Caller, request: Request):
        return await gw.generate(body, caller(asker), request.is_disconnected)

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
        gw.metrics.in_flight.set(gw.admission.taken)
        gw.metrics.waiting.set(gw.admission.waiters)
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

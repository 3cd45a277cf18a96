"""What stands around every route: the metrics, API keys and their rate limits, and the body
limit that also counts the answers. serving.py holds one of each; app.py wires them in."""

import time
from collections import defaultdict, deque
from typing import Optional

from fastapi import Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .admission import REASONS
from .config import Key, Keys
from .errors import ApiError, bearer_token


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ftgateway_requests", "Requests answered, by route and HTTP status",
                                ["route", "status"], registry=self.registry)  # fmt: skip
        self.latency = Histogram("ftgateway_request_seconds", "Time to the last byte of the answer, by route",
                                 ["route"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))  # fmt: skip
        self.good = Counter("ftgateway_good", "Answers that met the fleet's objectives: the first text within "
                            "slo_ttft_ms of the request's arrival (a whole answer: all of it), and a mean time "
                            "between its tokens within slo_itl_ms (goodput)", registry=self.registry)  # fmt: skip
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
        # A generation whose tritonserver failed during it: continued on another host, or failed
        # (no host could); the time a continuation added (from the failure to the first step from
        # the other host); and the generations this gateway continued for another host.
        self.continuations = Counter("ftgateway_continuations", "Generations whose tritonserver failed during "
                                     "them, continued on another host or failed", ["outcome"],
                                     registry=self.registry)  # fmt: skip
        for outcome in ("continued", "failed"):
            self.continuations.labels(outcome=outcome)
        self.continuation_seconds = Histogram("ftgateway_continuation_seconds", "Time a continuation added: from "
                                              "the local failure to the first step from another host",
                                              registry=self.registry,
                                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))  # fmt: skip
        self.continued_here = Counter("ftgateway_continued_for_peers", "Generations this gateway continued for "
                                      "another host's", registry=self.registry)  # fmt: skip
        # Admission (admission.py): requests refused before they reached tritonserver, by reason;
        # the generations running and waiting for a slot now (set at each scrape).
        self.refused = Counter("ftgateway_refused", "Requests refused for want of capacity, by reason",
                               ["reason"], registry=self.registry)  # fmt: skip
        for reason in REASONS:
            self.refused.labels(reason=reason)
        self.in_flight = Gauge("ftgateway_in_flight", "Generations this gateway lets run on its tritonserver now",
                               registry=self.registry)  # fmt: skip
        self.waiting = Gauge("ftgateway_waiting", "Requests waiting for a generation slot now", registry=self.registry)
        # Rounds (rounds.py): each round's slices and time; the generations whose client left
        # (stopped at a slice boundary, or a stream cancelled at once), by how they were answered;
        # the slots lent to a lighter key at a slice boundary.
        self.round_slices = Histogram("ftgateway_round_slices", "Slices in each round (one FT batch when Triton "
                                      "forms one of them)", registry=self.registry,
                                      buckets=(1, 2, 4, 8, 16, 32, 64, 128))  # fmt: skip
        self.round_seconds = Histogram("ftgateway_round_seconds", "Time of each round of slices, from its start to "
                                       "its last slice's last step", registry=self.registry,
                                       buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))  # fmt: skip
        self.abandoned = Counter("ftgateway_abandoned_generations", "Generations stopped because their client left, "
                                 "by answer (stream, whole)", ["answer"], registry=self.registry)  # fmt: skip
        for answer in ("stream", "whole"):
            self.abandoned.labels(answer=answer)
        self.lent = Counter("ftgateway_slots_lent", "Generation slots lent to a lighter key at a slice boundary",
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


def answer_error(metrics: Metrics, err: ApiError, route: str) -> JSONResponse:
    """An error's answer, counted."""
    metrics.errors.labels(str(err.status), err.kind).inc()
    metrics.requests.labels(route, str(err.status)).inc()
    return err.response()


class Auth:
    """Who calls: the bearer key, refused when missing, unknown, expired, scoped to other models or
    over its rate (none at all when the gateway serves without keys)."""

    def __init__(self, keys: Optional[Keys], model: str, limiter: RateLimiter) -> None:
        self.keys, self.model, self.limiter = keys, model, limiter

    async def __call__(self, request: Request) -> Optional[Key]:
        if self.keys is None:
            return None
        token = bearer_token(request.headers.get("authorization", ""))
        if not token:
            raise ApiError(401, "no API key: send 'Authorization: Bearer <key>'", kind="authentication_error",
                           code="missing_api_key")  # fmt: skip
        key = self.keys.find(token)
        if key is None:
            raise ApiError(401, "the API key is not valid", kind="authentication_error", code="invalid_api_key")
        refused = key.refusal(self.model, time.time())
        if refused:
            status, code, message = refused
            raise ApiError(status, message, kind="authentication_error" if status == 401 else "permission_error",
                           code=code)  # fmt: skip
        self.limiter.check(key)
        return key


class BodyLimitAndCounts:
    """Refuses a POST body over max_request_bytes (413) before any route reads it, and counts the
    answers that are not streams (a stream counts itself when it ends: serving.Gateway.stream).

    A plain ASGI middleware: Starlette's BaseHTTPMiddleware (@app.middleware) runs each response
    through a memory stream and a task of its own, a cost paid at every chunk of a stream."""

    def __init__(self, app, metrics: Metrics, limit: int) -> None:
        self.app, self.metrics, self.limit = app, metrics, limit

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
                await answer_error(self.metrics, too_large, route)(scope, _no_body, send)
                return
        # Not clients' requests: the probes, and another gateway continuing a generation here
        # (its client's request is counted where it came in; ftgateway_continued_for_peers here).
        if route in ("/metrics", "/healthz", "/health") or route.startswith("/internal/"):
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
                self.metrics.requests.labels(route, status).inc()
                self.metrics.latency.labels(route).observe(time.monotonic() - began)

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

"""The gateway's errors in OpenAI's shape, and tritonserver's failures as such errors."""

from __future__ import annotations

from contextlib import contextmanager

from fastapi.responses import JSONResponse
from tritonclient.utils import InferenceServerException


class ApiError(Exception):
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


# gRPC statuses of a tritonserver that is gone or restarting (refused connection, model not loaded
# yet): nothing was generated, so the request may go to another host. HAProxy retries a 503.
UNAVAILABLE = ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND")
# What a tritonserver that is stopping answers with another status while it unloads the models
# (the ensemble finds its step gone; seen on the lab: one 502 while a host's server stopped under
# load): nothing was generated either.
UNLOADING = ("has no available versions",)
RETRY_AFTER_S = 1
# What tritonserver answers when its dynamic batcher's queue policy refuses a request (the queue
# full, or the request's time in it over the policy's timeout): the host is busy, not broken.
QUEUE_REFUSED = ("Exceeds maximum queue size", "Request timeout expired")
# Busy refusals (admission.py, and tritonserver's queue policy) name their reason in this header. A
# load balancer that asks with BUSY_STATUS_HEADER: 429 gets them as 429s: HAProxy's layer-7
# observation takes a gateway out at its first 5xx, which must stay the sign of a broken host, not
# a busy one; HAProxy gives the client its 503 back (roles/load_balancer).
REFUSED_HEADER = "X-Ftfleet-Refused"
BUSY_STATUS_HEADER = "X-Ftfleet-Busy-Status"
# The tokens an answer counts against its key's tokens per minute, which the load balancers keep
# (prompt + completion of a whole answer; a stream's prompt and max_tokens as it starts).
TOKENS_HEADER = "X-Ftfleet-Tokens"


def bearer_token(header: str) -> str:
    """The token of an `Authorization: Bearer <token>` header ("" for any other header)."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def upstream_down(message: str) -> ApiError:
    return ApiError(503, message, kind="server_error", code="upstream_down",
                    headers={"Retry-After": str(RETRY_AFTER_S)})  # fmt: skip


class PeerFailed(Exception):
    """A generation that another host was to continue (continuing.py) and did not: `broken` when
    the peer went away mid-way (another peer may go on from there), not when none took it or the
    request cannot go on anywhere."""

    def __init__(self, message: str, *, broken: bool) -> None:
        super().__init__(message)
        self.broken = broken


def continuation_failed(message: str) -> ApiError:
    """A generation whose tritonserver failed and which no other host continued (the client may
    retry it whole)."""
    return ApiError(503, message, kind="server_error", code="continuation_failed",
                    headers={"Retry-After": str(RETRY_AFTER_S)})  # fmt: skip


def busy(reason: str, message: str, status: int = 503, kind: str = "server_error") -> ApiError:
    """A refusal for want of capacity (`reason`: overloaded, wait_timeout; over_share as a 429
    rate_limit_error): Retry-After, and the reason as the code and in REFUSED_HEADER."""
    headers = {"Retry-After": str(RETRY_AFTER_S), REFUSED_HEADER: reason}
    return ApiError(status, message, kind=kind, code=reason, headers=headers)


def triton_error(err: InferenceServerException) -> ApiError:
    """A busy refusal when tritonserver's queue policy refused the request; 503 with Retry-After
    when tritonserver is unavailable (retryable elsewhere); else 502."""
    if any(words in (err.message() or "") for words in QUEUE_REFUSED):
        return busy("overloaded", f"tritonserver's queue refused the request: {err.message()}")
    if str(err.status()) in UNAVAILABLE or any(words in (err.message() or "") for words in UNLOADING):
        return upstream_down(f"tritonserver unavailable: {err.message()}")
    return ApiError(502, f"tritonserver: {err.message()}", kind="server_error", code="upstream_error")


def failure_cause(err: BaseException) -> str:
    """What failed, in words: the gateway's reading of a tritonserver error, else the error."""
    return triton_error(err).message if isinstance(err, InferenceServerException) else str(err)


@contextmanager
def upstream():
    """tritonserver's failures as the gateway's answers: 502 when it answered an error, 503 with
    Retry-After when it could not be reached or has not loaded the models, or when it failed
    during a generation that no other host continued."""
    try:
        yield
    except InferenceServerException as err:
        raise triton_error(err) from err
    except (TimeoutError, OSError) as err:
        raise upstream_down(f"tritonserver unreachable: {err}") from err
    except PeerFailed as err:
        raise continuation_failed(str(err)) from err

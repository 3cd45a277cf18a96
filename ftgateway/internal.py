"""The internal routes, which another host's gateway calls to continue a generation here whose
own tritonserver failed (continuing.py has the other side and the protocol): the fleet's key
only, never a client's."""

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, Optional

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from tritonclient.utils import InferenceServerException

from .continuing import CONTINUE, DETOKENIZE
from .errors import ApiError, upstream
from .rounds import Clients
from .sampling import Sampling
from .triton import Step, Tokens

if TYPE_CHECKING:
    from .serving import Gateway


class ContinueRequest(BaseModel):
    """A continuation: the sequence so far (prompt and generated tokens), the tokens still owed,
    FT's sampling inputs and word lists as the origin computed them."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr
    ids: list[Annotated[StrictInt, Field(ge=0)]] = Field(min_length=1)
    max_tokens: StrictInt = Field(ge=1)
    sampling: dict[str, Any]
    stop_ids: Optional[list[list[StrictInt]]] = None
    bad_ids: Optional[list[list[StrictInt]]] = None
    # The revision that began the generation (the origin's ftfleet_revision); None: unknown there.
    revision: Optional[StrictStr] = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: StrictStr
    ids: list[Annotated[StrictInt, Field(ge=0)]] = Field(min_length=1)
    lengths: list[Annotated[StrictInt, Field(ge=0)]] = Field(min_length=1, max_length=4096)


def _words(rows: Optional[list[list[int]]], name: str) -> Optional[np.ndarray]:
    if rows is None:
        return None
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ApiError(400, f"{name} must be FT's word list: two rows of one length", param=name)
    return np.array([rows], dtype=np.int32)


def continuation_of(body: ContinueRequest, model: str, context_length: int) -> tuple[Tokens, Sampling]:
    """A continuation's inputs for this host's model, or the 400 that says why it cannot go on here
    (another model; the sequence and the tokens owed over the context, which FT's session length
    would refuse)."""
    if body.model != model:
        raise ApiError(404, f"this gateway serves {model!r}, not {body.model!r}", param="model",
                       code="model_not_found")  # fmt: skip
    if len(body.ids) + body.max_tokens > context_length:
        raise ApiError(400, f"the continuation's {len(body.ids)} tokens and {body.max_tokens} more are over the "
                       f"model's context of {context_length} tokens on this host", param="ids",
                       code="context_length_exceeded")  # fmt: skip
    try:
        params = Sampling(**body.sampling)
    except TypeError as err:
        raise ApiError(400, f"sampling: {err}", param="sampling") from err
    tokens = Tokens(ids=np.array([body.ids], dtype=np.uint32), count=len(body.ids),
                    stop_ids=_words(body.stop_ids, "stop_ids"), bad_ids=_words(body.bad_ids, "bad_ids"))  # fmt: skip
    return tokens, params


def same_revision(origin: Optional[str], here: Optional[str]) -> None:
    """The 409 that sends a continuation to another peer when this host serves another revision
    than the one that began it (a rollout half-way): its tokens would go on with other weights.
    Either side unknown (a repository written before ftfleet_revision): no refusal."""
    if origin and here and origin != here:
        raise ApiError(409, f"this host serves revision {here[:12]}, not {origin[:12]} that began the generation",
                       param="revision", code="revision_differs")  # fmt: skip


async def continued(steps: AsyncIterator[Step], count: int) -> AsyncIterator[str]:
    """The answer's lines: the first step already awaited by the caller is the first of `steps`
    (see first_step); each line holds the new tokens so far; a failure mid-way is a last line
    {"error": ...} (the origin may go on elsewhere from what it has)."""
    try:
        async for step in steps:
            ids = step.output_ids.reshape(-1)[count : step.sequence_length]
            item: dict[str, Any] = {"ids": ids.tolist()}
            if step.log_probs is not None:
                item["log_probs"] = np.asarray(step.log_probs).reshape(-1)[: len(ids)].tolist()
            yield json.dumps(item) + "\n"
    except (InferenceServerException, OSError) as err:
        yield json.dumps({"error": {"message": f"tritonserver failed: {err}"}}) + "\n"


async def first_step(steps: AsyncIterator[Step]) -> AsyncIterator[Step]:
    """`steps` with its first step awaited now (a failure before it is a plain HTTP error, on
    which the origin tries another peer), then the others as they come."""
    try:
        first = await steps.__anext__()
    except StopAsyncIteration:
        first = None

    async def rest() -> AsyncIterator[Step]:
        if first is not None:
            yield first
            async for step in steps:
                yield step

    return rest()


def add_routes(app: FastAPI, gw: "Gateway") -> None:
    """POST /internal/v1/continue and /internal/v1/detokenize, for the fleet's key only."""
    settings = gw.settings

    async def fleet(request: Request) -> None:
        if not gw.continuing.authorized(request.headers.get("authorization", "")):
            raise ApiError(401, "the internal routes take the fleet's key (fleet_key_file), not a client's",
                           kind="authentication_error", code="invalid_fleet_key")  # fmt: skip

    @app.post(CONTINUE, dependencies=[Depends(fleet)])
    async def continue_here(body: ContinueRequest):
        gw.follow_checkpoint()
        tokens, params = continuation_of(body, settings.model, settings.context_length)
        with upstream():
            same_revision(body.revision, await gw.backend.transport.loaded_revision())
            # The continuation takes this host's next round, as its own requests do (rounds.py);
            # its admission slot is the origin's.
            steps = await first_step(gw.generation.steps(tokens, body.max_tokens, params, Clients()))
        gw.metrics.continued_here.inc()
        return StreamingResponse(continued(steps, tokens.count), media_type="application/x-ndjson")

    @app.post(DETOKENIZE, dependencies=[Depends(fleet)])
    async def detokenize_here(body: DetokenizeRequest):
        if body.model != settings.model:
            raise ApiError(404, f"this gateway serves {settings.model!r}, not {body.model!r}", param="model",
                           code="model_not_found")  # fmt: skip
        if max(body.lengths) > len(body.ids):
            raise ApiError(400, f"a length of {max(body.lengths)} is past the {len(body.ids)} ids", param="lengths")
        gw.follow_checkpoint()
        with upstream():
            sequence = np.array(body.ids, dtype=np.uint32).reshape(1, 1, -1)
            return {"texts": await gw.backend.detokenize_prefixes(sequence, body.lengths)}

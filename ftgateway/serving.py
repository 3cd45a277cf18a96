"""Serving: a request becomes a Job (checked, or refused with the reason), and a generation's
text becomes OpenAI's answer or its stream of server-sent events. The Gateway holds the state
behind the routes (settings, keys, limits, metrics, the generation loop and the chat template)."""

import asyncio
import dataclasses
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Optional, TypeVar

from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from tritonclient.utils import InferenceServerException

from . import chat
from .admission import Admission, Held
from .config import ConfigError, Keys, Settings
from .continuing import Continuing
from .errors import TOKENS_HEADER, ApiError, triton_error
from .generation import Count, Generation, Job, Moved, Result, bad_words, banned_ids, min_length, stop_list
from .middleware import Auth, Metrics, RateLimiter, answer_error
from .protocol import (
    BUFFERED,
    REFUSED,
    AnyRequest,
    CompletionRequest,
    GenerateRequest,
    completion_chunk,
    sse_event,
    usage,
    usage_of,
)
from .rounds import Abandoned, Clients, Rounds
from .sampling import SamplingError, of_request, sampling
from .tokenizing import Tokenizing
from .tokens import end_id, files_fingerprint, special_ids, vocabulary_size

log = logging.getLogger("uvicorn.error")  # uvicorn's own log: the unit's journal
# A chat request's fields that its completion takes as they are: every one of the same name but
# the prompt (the rendered conversation) and max_tokens (chat's two names for it).
CHAT_AS_GENERATE = tuple(sorted(set(GenerateRequest.model_fields) & set(chat.ChatRequest.model_fields)
                                - {"prompt", "max_tokens"}))  # fmt: skip


class Gateway:
    """The state behind the routes: settings, keys, rate limits, metrics and the backend
    (tokenizing.py over the Triton client)."""

    def __init__(self, settings: Settings, backend: Tokenizing) -> None:
        self.settings, self.backend = settings, backend
        self.keys = Keys(settings.keys_file, settings.default_rate_per_minute) if settings.keys_file else None
        self.metrics, self.limiter, self.started = Metrics(), RateLimiter(), int(time.time())
        self.auth = Auth(self.keys, settings.model, self.limiter)
        self.admission = Admission(settings.max_in_flight, settings.admission_wait_ms / 1000, settings.admission_queue,
                                   refused=lambda reason: self.metrics.refused.labels(reason=reason).inc())  # fmt: skip
        hidden = special_ids(settings.checkpoint_dir) if settings.checkpoint_dir else frozenset()
        # The token ids a request may name (logit_bias) are below it; None: not known, not checked.
        self.vocabulary = vocabulary_size(settings.checkpoint_dir) if settings.checkpoint_dir else None
        try:
            self.continuing = Continuing(settings)
        except OSError as err:
            raise ConfigError(f"setting 'fleet_key_file': {err}") from err
        if not self.continuing.enabled:
            log.info("continuations off: %s", self.continuing.why_off())
        moved = Moved(self.metrics.continuations, self.metrics.continuation_seconds)
        self.rounds = Rounds(settings.slice_tokens, ended=self.round_ended)
        self.generation = Generation(
            backend,
            settings.context_length,
            self.metrics.tokens,
            hidden,
            continuing=self.continuing,
            moved=moved,
            rounds=self.rounds,
            end_id=end_id(settings.checkpoint_dir) if settings.checkpoint_dir else None,
        )
        self._checkpoint_files = files_fingerprint(settings.checkpoint_dir) if settings.checkpoint_dir else ()
        try:
            self.chat_template = chat.Template(settings.chat_template, settings.chat_bos_token,
                                               settings.chat_eos_token)  # fmt: skip
        except ValueError as err:
            raise ConfigError(f"setting 'chat_template': {err}") from err

    def follow_checkpoint(self) -> None:
        """Another revision checked out under checkpoint_dir (a rollout's or a rollback's, with the
        gateway left running) changes the tokenizer's files: read the special tokens again and
        verify the local tokenizer again before it tokenizes. Called with every request and health
        check: a few stat() calls when nothing changed."""
        if not self.settings.checkpoint_dir:
            return
        now = files_fingerprint(self.settings.checkpoint_dir)
        if now != self._checkpoint_files:
            self._checkpoint_files = now
            self.generation.hide(special_ids(self.settings.checkpoint_dir))
            self.vocabulary = vocabulary_size(self.settings.checkpoint_dir)
            self.generation.end_id = end_id(self.settings.checkpoint_dir)
            self.backend.invalidate()
            log.info("the checkpoint's tokenizer files changed: special tokens read again, tokenizer to verify again")

    def round_ended(self, size: int, took: float) -> None:
        """A round of slices ended (rounds.py): its size and time in the metrics, and admission's
        estimate of a lighter key's wait (a round) kept current."""
        self.metrics.round_slices.observe(size)
        self.metrics.round_seconds.observe(took)
        self.admission.round_s = self.rounds.round_s

    def seat(self, held: Held, gone: Optional[Callable[[], Awaitable[bool]]] = None) -> "Place":
        """A generation's place in the rounds: its request's slots, and for a whole answer its
        client (a stream's leaving cancels it)."""
        return Place(self, held, gone)

    async def answered(self, job: Job, held: Held, gone: Optional[Callable[[], Awaitable[bool]]] = None) -> Result:
        """One generation's whole answer on `held` slots, given back at its end (Abandoned when
        its client left)."""
        try:
            return await self.generation.result(job, self.seat(held, gone))
        finally:
            held.release()

    def left(self, route: str, generations: int) -> None:
        """A stream whose client went away: Starlette cancels it at once (it listens for the
        disconnect), the cancellation closes run() and with it the gRPC stream to tritonserver,
        and nothing more is decoded or sent; FT's backend never asks whether a request was
        cancelled, so the slice in flight runs to its end (the whole generation with rounds off)."""
        self.metrics.disconnects.inc()
        self.metrics.abandoned.labels("stream").inc(generations)
        self.metrics.requests.labels(route, "499").inc()

    def abandoned(self, route: str, generations: int) -> JSONResponse:
        """A whole answer whose client left: its generations stopped at a slice boundary, counted;
        the answer (status 499, nginx's "client closed request") reaches nobody."""
        self.metrics.abandoned.labels("whole").inc(generations)
        self.metrics.requests.labels(route, "499").inc()
        return JSONResponse({"error": {"message": "the client closed the request", "type": "invalid_request_error",
                                       "code": "client_closed_request"}}, status_code=499)  # fmt: skip

    def fingerprint(self) -> Optional[str]:
        """OpenAI's system_fingerprint: the revision whose shards tritonserver loaded ("fp_" and its
        first 12 characters, a commit's short name), as read before this host's last inference;
        null while unknown. A generation continued on another host keeps it: a peer of another
        revision refuses to continue (internal.py)."""
        revision = self.backend.transport.revision
        return f"fp_{revision[:12]}" if revision else None

    def fail(self, err: ApiError, route: str) -> JSONResponse:
        return answer_error(self.metrics, err, route)

    def jobs(self, body: CompletionRequest) -> list[Job]:
        """A completions request's jobs: one per prompt (a list of prompts is a batch), each checked
        as job() checks one."""
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        first = self.job(body)
        for i, prompt in enumerate(prompts[1:], start=1):
            if not prompt:
                raise ApiError(400, f"prompt {i} of the list is empty", param="prompt")
        return [first] + [dataclasses.replace(first, prompt=prompt) for prompt in prompts[1:]]

    def job(self, body: GenerateRequest) -> Job:
        """What a request asks to generate (its first prompt), or the 400 that says what is wrong."""
        self.follow_checkpoint()
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
        n, best_of = getattr(body, "n", 1), getattr(body, "best_of", None)
        most, param = self.settings.max_best_of, "best_of" if best_of else "n"
        if (best_of or n) > most:
            off = "; beam search is off here" if most == 1 else ""
            raise ApiError(400, f"{param} {best_of or n} is over this gateway's limit of {most} (FT's beam width, "
                           f"which its GPU memory is planned for{off})", param=param)  # fmt: skip
        least = min_length(body.min_tokens, body.ignore_eos, body.max_tokens, best_of or n)
        try:
            params = sampling(float(body.temperature), body.top_k, float(body.top_p), body.seed,
                              fallback_seed=secrets.randbits(63), log_probs=getattr(body, "logprobs", None) is not None,
                              min_length=least, **of_request(body))  # fmt: skip
        except SamplingError as err:
            raise ApiError(400, str(err), param=err.param) from err
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        if not prompt:
            raise ApiError(400, "the prompt is empty", param="prompt")
        length_penalty = getattr(body, "length_penalty", None)  # None: the guides' 1.0
        banned = banned_ids(body.logit_bias, self.vocabulary)
        return Job(prompt=prompt, max_tokens=body.max_tokens, params=params, stops=stop_list(body.stop),
                   echo=getattr(body, "echo", False), logprobs=getattr(body, "logprobs", None), n=n,
                   best_of=best_of or n, length_penalty=1.0 if length_penalty is None else float(length_penalty),
                   bad_words=bad_words(body.bad_words), banned_ids=banned)  # fmt: skip

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
        same = {name: getattr(body, name) for name in CHAT_AS_GENERATE}
        return GenerateRequest(prompt=prompt, max_tokens=chat.max_tokens(body), **same)

    async def completion(self, body: CompletionRequest, caller: str,
                         gone: Optional[Callable[[], Awaitable[bool]]] = None) -> Any:  # fmt: skip
        """/v1/completions: a generation slot per prompt for `caller` (or its refusal), then the
        whole answer, or its stream. `gone`: whether the client left (a whole answer's
        generations stop at the next slice boundary then)."""
        arrived = time.monotonic()
        jobs = self.jobs(body)  # one per prompt; choices numbered as OpenAI numbers them (prompt, then n)
        held = await self.admission.hold(caller, len(jobs))
        if body.stream and (body.best_of or body.n) == 1:
            return await self.streamed(body, jobs, held, arrived)
        ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            if (body.best_of or body.n) > 1:
                searched = await all_of([self.generation.search(job) for job in jobs])
                results = [r for found, _billed in searched for r in found]
                billed = {key: sum(b[key] for _, b in searched) for key in searched[0][1]}
            else:
                results = await all_of([self.generation.result(job, self.seat(held, gone)) for job in jobs])
                billed = usage(*results)
        except Abandoned as err:
            err.generations = len(jobs)
            raise
        finally:
            held.release()
        model = self.settings.model
        choices = [completion_chunk(ident, created, model, r.text, r.finish_reason, logprobs=r.logprobs,
                                    index=i)["choices"][0] for i, r in enumerate(results)]  # fmt: skip
        answer = {"id": ident, "object": "text_completion", "created": created, "model": model,
                  "system_fingerprint": self.fingerprint(), "choices": choices, "usage": billed}  # fmt: skip
        return self.whole(answer, arrived)

    async def chat(self, body: chat.ChatRequest, caller: str,
                   gone: Optional[Callable[[], Awaitable[bool]]] = None) -> Any:  # fmt: skip
        """/v1/chat/completions: the conversation as the completion it is (chat_prompt), a slot
        for `caller`, then chat's whole answer or its stream."""
        arrived = time.monotonic()
        job = self.job(self.chat_prompt(body))
        held = await self.admission.hold(caller)
        if body.stream:
            return await self.streamed(body, [job], held, arrived)
        result = await self.answered(job, held, gone)
        answer = chat.answer(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), self.settings.model, result.text,
                             finish=result.finish_reason, usage=usage(result),
                             fingerprint=self.fingerprint())  # fmt: skip
        return self.whole(answer, arrived)

    async def generate(self, body: GenerateRequest, caller: str,
                       gone: Optional[Callable[[], Awaitable[bool]]] = None) -> dict[str, Any]:  # fmt: skip
        """/generate (the tutorial's form): a slot for `caller`, then the text."""
        job = self.job(body)
        result = await self.answered(job, await self.admission.hold(caller), gone)
        return {"model": self.settings.model, "prompt": body.prompt, "text": result.text,
                "finish_reason": result.finish_reason, "usage": usage(result)}  # fmt: skip

    def whole(self, answer: dict[str, Any], arrived: float) -> JSONResponse:
        """A whole answer (completions' or chat's), judged for goodput (its first text is all of
        it) and carrying what it spent of its key's tokens per minute for the load balancers."""
        done = time.monotonic()
        self.judge(arrived, done, done, answer["usage"]["completion_tokens"])
        return JSONResponse(answer, headers={TOKENS_HEADER: str(answer["usage"]["total_tokens"])})

    def judge(self, arrived: float, first: float, done: float, tokens: int) -> None:
        """Counts an answer in goodput when it met the fleet's objectives: its first text within
        slo_ttft_ms of its arrival, and a mean time between tokens within slo_itl_ms."""
        between = (done - first) / (tokens - 1) if tokens > 1 else 0.0
        if first - arrived <= self.settings.slo_ttft_ms / 1000 and between <= self.settings.slo_itl_ms / 1000:
            self.metrics.good.inc()

    def ended(self, route: str, status: str, began: float, first: Optional[float], results: list[Result]) -> None:
        """A stream's end in the metrics: its status and time, and whether it met the objectives
        (`first`: when its first text went out, None without text)."""
        self.metrics.requests.labels(route, status).inc()
        done = time.monotonic()
        self.metrics.latency.labels(route).observe(done - began)
        if status == "200" and first is not None:
            self.judge(began, first, done, sum(r.completion_tokens for r in results))

    async def streamed(self, body: AnyRequest, jobs: list[Job], slots: Held,
                       arrived: Optional[float] = None) -> StreamingResponse:  # fmt: skip
        """The stream of `jobs` (stream() below), which gives `slots` back when it ends (here, when it
        cannot begin). `arrived`: when the request came (before its wait for slots)."""
        began = time.monotonic() if arrived is None else arrived
        try:
            items, firsts = await merged([self.generation.run(job, seat=self.seat(slots)) for job in jobs])
            try:
                decoupled = await self.backend.decoupled()
            except InferenceServerException as err:
                decoupled = self.backend.transport.was_decoupled  # gone since: the generation went on elsewhere
                if decoupled is None or not self.continuing.enabled:
                    await items.aclose()
                    raise triton_error(err) from err
        except BaseException:
            slots.release()
            raise
        # What the stream may spend of its key's tokens per minute, counted as it starts (HAProxy
        # reads it from the headers): its prompts and the completions it may have.
        spend = sum(count.prompt + job.max_tokens * job.n for count, job in zip(firsts, jobs))
        response = self.stream(body, items, len(jobs), decoupled, began, slots=slots)
        response.headers[TOKENS_HEADER] = str(spend)
        return response

    def stream(self, body: AnyRequest, items: AsyncIterator[tuple[int, str, Optional[Result], Count]], count: int,
               decoupled: bool, began: float, *, slots: Held):  # fmt: skip
        """Server-sent events in OpenAI's chunk shape (completions' or chat's), then [DONE], from
        `items`: (choice index, text delta, the Result with a choice's last item, the tokens so
        far) of `count` choices, their first items already awaited (merged() makes them of several
        generations). With stream_options.include_usage, as OpenAI specifies it: every chunk
        carries "usage": null, and one more chunk before [DONE] has no choices and the usage of
        every choice; with continuous_usage_stats too (vLLM's extra, which GuideLLM asks), every
        chunk carries the usage so far of every choice instead of null. The request's generation
        slots (`slots`) are given back when the stream ends, however it ends."""
        chatting = isinstance(body, chat.ChatRequest)
        route = "/v1/chat/completions" if chatting else "/v1/completions"
        ident, created = f"{'chatcmpl' if chatting else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        options = body.stream_options or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        extra = ({"system_fingerprint": self.fingerprint()} | ({} if decoupled else {"ftfleet_streaming": BUFFERED})
                 | ({"usage": None} if include_usage else {}))  # fmt: skip
        counts = [Count(0, 0)] * count  # each choice's tokens so far

        def so_far() -> dict[str, Any]:
            if not continuous:
                return extra
            return {**extra, "usage": usage_of(sum(c.prompt for c in counts), sum(c.completion for c in counts))}

        def piece(index: int, text: str, finish: Optional[str], **more: Any) -> dict[str, Any]:
            if chatting:
                return chat.chunk(ident, created, self.settings.model, {"content": text} if text else {}, finish,
                                  index=index, **more)  # fmt: skip
            return completion_chunk(ident, created, self.settings.model, text, finish, index=index, **more)

        async def events():
            status, seen_text, held, results, first = "200", False, [""] * count, [], 0.0
            if chatting:  # OpenAI's first chat chunk names the role
                yield sse_event(chat.chunk(ident, created, self.settings.model, {"role": "assistant", "content": ""},
                                        None, **extra))  # fmt: skip
            try:
                async for index, new, result, tokens in items:
                    counts[index], delta = tokens, new
                    if not decoupled:  # buffered: all of a choice's text in one chunk (run() may yield
                        held[index] += new  # a trailing partial character apart), then its end
                        delta = held[index] if result is not None else ""
                    if delta:
                        if not seen_text:
                            first = time.monotonic()
                            self.metrics.first_token.observe(first - began)
                            seen_text = True
                        yield sse_event(piece(index, delta, None, **so_far()))
                    if result is not None:
                        yield sse_event(piece(index, "", result.finish_reason, **so_far()))
                        results.append(result)
                if include_usage:
                    yield sse_event({**piece(0, "", None), "choices": [], "usage": usage(*results)})
            except ApiError as err:  # after the first chunk: an error event in OpenAI's shape
                status = str(err.status)
                self.metrics.errors.labels(status, err.kind).inc()
                yield sse_event({"error": {"message": err.message, "type": err.kind, "code": err.code}})
            except asyncio.CancelledError:  # the client went away (left())
                self.left(route, count - len(results))
                raise
            finally:
                slots.release()
            yield "data: [DONE]\n\n"
            self.ended(route, status, began, first if seen_text else None, results)

        async def release() -> None:  # a coroutine: Starlette runs a plain function in a thread
            slots.release()

        headers = {"Cache-Control": "no-cache", "X-FTFleet-Streaming": "tokens" if decoupled else "buffered"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers,
                                 background=BackgroundTask(release))  # fmt: skip


class Place(Clients):
    """A generation's Seat in the rounds (rounds.py): its client, as any seat's, and its request's
    admission slots, which it lends to a lighter key when admission says so."""

    def __init__(self, gateway: Gateway, held: Held, gone: Optional[Callable[[], Awaitable[bool]]]) -> None:
        super().__init__(gone)
        self.gateway, self.held = gateway, held

    def should_lend(self) -> bool:
        return self.held.should_lend()

    async def lend(self) -> None:
        self.gateway.metrics.lent.inc()
        await self.held.lend()


T = TypeVar("T")


async def all_of(calls: list[Awaitable[T]]) -> list[T]:
    """Every call's result in order, run at once; the first failure cancels the others and is raised
    (asyncio.gather would leave them running)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def merged(runs: list[AsyncIterator[tuple[str, Optional[Result], Count]]]) -> tuple[AsyncIterator, list[Count]]:
    """Several generations' items as one stream of (index, delta, result, count): each run's items in
    their order, the runs interleaved as their items come; and each run's first count (its prompt's
    tokens). Each run's first item is awaited before this returns, so that an error before any text
    is still a plain HTTP error."""

    async def close(pending: dict) -> None:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)  # a cancelled __anext__ lets go of its run
        for run in runs:
            await run.aclose()

    try:
        firsts = await all_of([run.__anext__() for run in runs])
    except BaseException:
        await close({})
        raise

    async def items():
        pending: dict[asyncio.Future, int] = {}
        try:
            for index, (delta, result, count) in enumerate(firsts):
                yield index, delta, result, count
                if result is None:
                    pending[asyncio.ensure_future(runs[index].__anext__())] = index
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    index = pending.pop(task)
                    delta, result, count = task.result()
                    yield index, delta, result, count
                    if result is None:
                        pending[asyncio.ensure_future(runs[index].__anext__())] = index
        finally:
            await close(pending)

    return items(), [count for _, _, count in firsts]

"""One generation loop that every route shares: the prompt's tokens, the model's steps, the text
decoded step by step, stop sequences, log probabilities and usage. It takes a Job (serving.py makes
one from a completions, chat or /generate request) and gives text deltas and a Result (it
puts them into OpenAI's shapes); it never sees an HTTP request, and it reaches tritonserver only
through the transport (triton.py). Its failures are the gateway's errors (errors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
from prometheus_client import Counter, Histogram
from tritonclient.utils import InferenceServerException

from .continuing import Clock, Continuation, Continuing, broken
from .errors import ApiError, PeerFailed, failure_cause, upstream, upstream_down
from .rounds import Clients, Rounds, Seat
from .sampling import Sampling
from .tokenizing import Tokenizing
from .tokens import sequences_of, word_list_of
from .triton import Step, Tokens, closing


@dataclass
class Result:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    logprobs: dict[str, list] | None = None  # OpenAI's choice.logprobs, when asked


class Count(NamedTuple):
    """The tokens of one generation so far: its prompt's and its completion's."""

    prompt: int
    completion: int


@dataclass(frozen=True)
class Job:
    """What to generate, checked: the prompt, its limits and sampling, and what to return."""

    prompt: str
    max_tokens: int
    params: Sampling
    stops: list[str]
    echo: bool = False  # OpenAI's echo: the prompt, then the completion
    logprobs: int | None = None  # OpenAI's logprobs (0 or 1), or None
    n: int = 1  # the best n of best_of beams (FT's beam search)
    best_of: int = 1
    length_penalty: float = 1.0  # FT's len_penalty, for beam search
    bad_words: tuple[str, ...] = ()  # never generated (FT's bad_words_list), as text
    banned_ids: tuple[int, ...] = ()  # never generated, as token ids (logit_bias -100)


def checked_words(words: str | list[str] | None, param: str, most: int) -> list[str]:
    """Stop or bad words as a list, checked: at most `most`, none empty, none with a comma."""
    found = [words] if isinstance(words, str) else list(words or [])
    if len(found) > most:
        raise ApiError(400, f"{param} takes at most {most} sequences", param=param)
    for s in found:
        if not s:
            raise ApiError(400, f"{param} sequences must not be empty", param=param)
        if "," in s:
            # The model repository's preprocessing takes stop and bad words as comma-separated text.
            raise ApiError(400, f"{param} sequence {s!r} holds a comma, which the model's preprocessing cannot "
                           "express (it splits its word lists on commas)", param=param)  # fmt: skip
    return found


def stop_list(stop: str | list[str] | None) -> list[str]:
    return checked_words(stop, "stop", 4)  # OpenAI's limit


BAD_WORDS_MOST = 64


def min_length(min_tokens: int, ignore_eos: bool, max_tokens: int, beams: int) -> int:
    """vLLM's min_tokens and ignore_eos as FT's min_length (0: none). FT masks the end id's logit
    while the token being chosen is numbered below min_length (batchApplyMinLengthPenalty, after
    the temperature and the repetition penalty), so the first min_tokens tokens are never the end
    of text with min_length = min_tokens + 1, and none of max_tokens with max_tokens + 1. Only the
    sampling layers read it per request; beam search (best_of or n above 1) is refused."""
    if min_tokens > max_tokens:
        raise ApiError(400, f"min_tokens {min_tokens} is over max_tokens {max_tokens}", param="min_tokens")
    wanted = max_tokens if ignore_eos else min_tokens
    if wanted and beams > 1:
        raise ApiError(400, "min_tokens and ignore_eos apply to sampling and greedy decoding, not to FT's beam "
                       "search (best_of or n above 1)", param="ignore_eos" if ignore_eos else "min_tokens")  # fmt: skip
    return wanted + 1 if wanted else 0


def bad_words(words: str | list[str] | None) -> tuple[str, ...]:
    """The bad_words extra (vLLM's name): text the model must never generate (FT's bad_words_list)."""
    return tuple(checked_words(words, "bad_words", BAD_WORDS_MOST))


def banned_ids(logit_bias: dict[str, float] | None, vocabulary: int | None = None) -> tuple[int, ...]:
    """OpenAI's logit_bias as far as FT can apply it: -100 (the token never comes) becomes a bad
    word of that one token; 0 changes nothing; FT has no other bias, so any other value is refused.
    A token id past the model's vocabulary (when known) is refused: FT would index past its logits."""
    banned = []
    for key, bias in (logit_bias or {}).items():
        if not key.isdigit():
            raise ApiError(400, f"logit_bias: {key!r} is not a token id", param="logit_bias")
        if vocabulary is not None and int(key) >= vocabulary:
            raise ApiError(400, f"logit_bias: token id {key} is past the model's vocabulary of {vocabulary} "
                           f"(ids 0 to {vocabulary - 1})", param="logit_bias")  # fmt: skip
        if not -100 <= bias <= 100:
            raise ApiError(400, f"logit_bias: {bias} for token {key} is outside -100..100", param="logit_bias")
        if bias == -100:
            banned.append(int(key))
        elif bias != 0:
            raise ApiError(400, f"logit_bias: {bias} for token {key}: the FT model can only ban a token (-100, "
                           "as its bad words) or leave it (0)", param="logit_bias")  # fmt: skip
    if len(banned) > BAD_WORDS_MOST:
        raise ApiError(400, f"logit_bias bans at most {BAD_WORDS_MOST} tokens", param="logit_bias")
    return tuple(sorted(banned))


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    cuts = [text.find(s) for s in stops if s in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


def common_prefix(a: str, b: str) -> int:
    """How many leading characters a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class TextSoFar:
    """A streamed completion's text, decoded a window at a time: each step decodes the tokens since
    the last text it added (and a few prompt tokens before the first), twice, without and with the
    new ones, and adds the difference. Decoding the whole sequence at every step instead costs
    O(answer x sequence): 26 ms of one core for a 256-token answer to a 513-token prompt with the
    lab's tokenizer, against 0.7 ms this way (docs/performance.md, "On a GPU").

    Windows keep what a tokenizer needs from the left (a SentencePiece word's leading space, a
    byte-level character's first bytes); a step whose text ends in a partial character (U+FFFD)
    or does not extend the window's earlier text adds nothing and waits for the next token. The
    indices are positions in the visible sequence (Generation._visible)."""

    CONTEXT = 6  # prompt tokens decoded before the first new one

    def __init__(self, prompt_count: int) -> None:
        self.start, self.read, self.text = max(0, prompt_count - self.CONTEXT), prompt_count, ""

    def window(self, length: int) -> tuple[int, list[int]]:
        """Where this step's window starts and the two lengths to decode from there."""
        return self.start, [self.read - self.start, length - self.start]

    def advance(self, before: str, after: str, length: int) -> bool:
        """Adds the new text (the window decoded with the new tokens, `after`, past `before`)
        where it is whole; False where the step adds nothing yet."""
        if len(after) <= len(before) or not after.startswith(before) or after.endswith("\ufffd"):
            return False
        self.text += after[len(before) :]
        self.start, self.read = self.read, length
        return True


class Decoder(Protocol):
    """What decodes a sequence: the local backend (tokenizing.py) or, once a generation moved to
    another host and this gateway decodes with its own postprocessing model, that host's."""

    async def detokenize_prefixes(self, output_ids: np.ndarray, lengths: list[int]) -> list[str]: ...

    async def detokenize(self, output_ids: np.ndarray, length: int) -> str: ...


class Moved:
    """The continuations' metrics: continued (with the time each added: from the failure to the
    first step from the other host) and failed (a broken generation that no host continued)."""

    def __init__(self, count: Counter, seconds: Histogram) -> None:
        self.count, self.seconds = count, seconds

    def continued(self, took: float) -> None:
        self.count.labels("continued").inc()
        self.seconds.observe(took)

    def failed(self) -> None:
        self.count.labels("failed").inc()


class Moving:
    """One generation's moves: none yet, or its Continuation, and what decodes its steps."""

    def __init__(self, backend: Tokenizing) -> None:
        self.moved: Continuation | None = None
        self.decoder: Decoder = backend
        self.clock, self.cause = Clock(), ""


class Generation:
    def __init__(self, backend: Tokenizing, context_length: int, tokens_counter: Counter,
                 hidden: frozenset[int] = frozenset(), *, continuing: Continuing | None = None,
                 moved: Moved | None = None, rounds: Rounds | None = None,
                 end_id: int | None = None) -> None:  # fmt: skip
        self.backend, self.context_length, self.tokens_counter = backend, context_length, tokens_counter
        # The special tokens' ids (tokens.special_ids): the model may generate them (its end of
        # text, with which FT stops), but their text is no part of an answer.
        self.hide(hidden)
        # Where a generation goes on when the local tritonserver fails during it (continuing.py).
        self.continuing, self.moved = continuing, moved
        # The model's rounds of slices (rounds.py; off: each generation whole), and FT's end id,
        # after which a slice that ends at its length is not carried on (tokens.end_id).
        self.rounds, self.end_id = rounds or Rounds(0), end_id

    def hide(self, ids: frozenset[int]) -> None:
        """The ids whose text no answer carries (tokens.special_ids)."""
        self.hidden = np.array(sorted(ids), dtype=np.uint32)

    async def run(self, job: Job, *, whole: bool = False,
                  seat: Seat | None = None) -> AsyncIterator[tuple[str, Result | None, Count]]:  # fmt: skip
        """Text deltas as the model produces them, each with the tokens counted so far (the
        prompt's, the completion's: vLLM's continuous usage); the last item carries the Result.
        For a whole answer without stop sequences (`whole`) only the last step is decoded: one
        postprocessing call instead of one per step of a decoupled model. `seat`: the
        generation's request and client as the rounds see them (rounds.py), none for a
        generation outside admission."""
        params, stops = job.params, job.stops
        last_only = whole and not stops
        with upstream():
            tokens = await self._tokens(job)
            echo = job.prompt if job.echo else ""
            if echo:
                yield echo, None, Count(tokens.count, 0)
            sent, text, length, stopped = 0, "", tokens.count, False
            hold, last, so_far = max((len(s) for s in stops), default=1) - 1, None, TextSoFar(tokens.count)
            moving = Moving(self.backend)
            async with closing(self._steps(tokens, job, moving, seat or Clients())) as steps:
                async for step in steps:
                    length, last = step.sequence_length, step
                    if last_only or not await self._advance(tokens, step, so_far, moving.decoder):
                        continue
                    text, stopped = cut_at_stop(so_far.text, stops)
                    # Send what can no longer change: not a possible stop's start.
                    safe = len(text) if stopped else max(sent, len(text) - hold)
                    if safe > sent:
                        yield text[sent:safe], None, Count(tokens.count, length - tokens.count)
                        sent = safe
                    if stopped:
                        break
            if not stopped and last is not None:
                # The whole completion decoded once: a partial character at the end, or a
                # tokenizer whose windows did not add up, ends as the whole sequence reads.
                text, stopped = cut_at_stop(await self._completion_text(tokens, last, moving.decoder), stops)
            logprobs = None
            if params.log_probs and last:
                logprobs = await self._logprobs(tokens, last, text, job, moving.decoder)
        completion = length - tokens.count
        self.tokens_counter.labels("out").inc(completion)
        if len(text) > sent:
            yield text[sent:], None, Count(tokens.count, completion)
        finish = "stop" if stopped or completion < job.max_tokens else "length"
        yield "", Result(text=echo + text, prompt_tokens=tokens.count, completion_tokens=completion,
                         finish_reason=finish, logprobs=logprobs), Count(tokens.count, completion)  # fmt: skip

    def steps(self, tokens: Tokens, max_tokens: int, params: Sampling, seat: Seat) -> AsyncIterator[Step]:
        """The model's steps from the local tritonserver: in slices, a round at a time, when
        rounds are on; whole otherwise."""
        if self.rounds.on:
            return self.rounds.steps(
                self.backend.generate,
                tokens,
                max_tokens,
                params,
                seat=seat,
                end_id=self.end_id,
                context=self.context_length,
            )
        return self.backend.generate(tokens, max_tokens, params)

    async def _steps(self, tokens: Tokens, job: Job, moving: Moving, seat: Seat) -> AsyncIterator[Step]:
        """The model's steps for this job; when the local tritonserver fails during them (broken),
        the rest from another host (continuing.py), at most the gateway's `continuations` times
        per request. Decoding moves with them where this gateway has no local tokenizer."""
        source, last = self.steps(tokens, job.max_tokens, job.params, seat), None
        while True:
            try:
                async with closing(source):
                    async for step in source:
                        took = moving.clock.took()
                        if took is not None and self.moved is not None:
                            self.moved.continued(took)
                        last = step
                        yield step
                return
            except (InferenceServerException, OSError, PeerFailed) as err:
                cause = failure_cause(err)
                if moving.moved is not None and isinstance(err, PeerFailed) and not err.broken:
                    self._failed()
                    raise PeerFailed(f"{moving.cause}; {err}", broken=False) from err
                if not broken(err) or self.continuing is None or not self.continuing.enabled:
                    raise
                if moving.moved is not None and moving.moved.count >= self.continuing.most:
                    self._failed()
                    raise PeerFailed(f"{cause}; the generation was continued on another host "
                                     f"{moving.moved.count} time(s) already, the most allowed (continuations)",
                                     broken=False) from err  # fmt: skip
                moving.clock.failed()
                if moving.moved is None:
                    moving.cause = f"the generation's tritonserver failed ({cause})"
                    moving.moved = self.continuing.start(self.backend.transport.revision)
                    moving.decoder = self.backend if self.backend.decodes_offline else moving.moved
                source = moving.moved.steps(tokens, last, job.max_tokens, job.params)

    def _failed(self) -> None:
        if self.moved is not None:
            self.moved.failed()

    async def _tokens(self, job: Job) -> Tokens:
        """The prompt's tokens, or the 400 when prompt and max_tokens exceed the context."""
        tokens = await self.backend.tokenize(job.prompt, job.stops, job.max_tokens, job.bad_words)
        if job.banned_ids:  # logit_bias's bans join the bad words as one-token sequences
            words = sequences_of(tokens.bad_ids) if tokens.bad_ids is not None else []
            tokens.bad_ids = word_list_of(words + [[i] for i in job.banned_ids])
        if tokens.count + job.max_tokens > self.context_length:
            raise ApiError(400, f"the prompt has {tokens.count} tokens and max_tokens is {job.max_tokens}: "
                           f"together over the model's context of {self.context_length} tokens",
                           param="prompt", code="context_length_exceeded")  # fmt: skip
        self.tokens_counter.labels("in").inc(tokens.count)
        return tokens

    async def search(self, job: Job) -> tuple[list[Result], dict[str, int]]:
        """n > 1 or best_of > 1 (temperature 0, not streamed): FT's beam search with best_of beams,
        the n best returned, each cut at a stop; usage counts every beam's tokens, as OpenAI bills
        best_of."""
        params, stops = job.params, job.stops
        with upstream():
            tokens = await self._tokens(job)
            try:
                beams = await self.backend.search(tokens, job.max_tokens, params, job.best_of, job.length_penalty)
            except (InferenceServerException, OSError) as err:
                if not broken(err):
                    raise
                # Its beams change until the last step: no partial answer to go on from. The whole
                # request is retryable (nothing was sent): HAProxy sends it to another host.
                cause = failure_cause(err)
                raise upstream_down(f"{cause}; a beam search (best_of or n above 1) is not continued on another "
                                    "host: retry the request") from err  # fmt: skip
            results = []
            for step in beams[: job.n]:
                text, stopped = cut_at_stop(await self._completion_text(tokens, step), stops)
                completion = step.sequence_length - tokens.count
                finish = "stop" if stopped or completion < job.max_tokens else "length"
                logprobs = await self._logprobs(tokens, step, text, job) if params.log_probs else None
                results.append(Result(text=(job.prompt if job.echo else "") + text, prompt_tokens=tokens.count,
                                      completion_tokens=completion, finish_reason=finish,
                                      logprobs=logprobs))  # fmt: skip
        generated = sum(step.sequence_length - tokens.count for step in beams)
        self.tokens_counter.labels("out").inc(generated)
        return results, {"prompt_tokens": tokens.count, "completion_tokens": generated,
                         "total_tokens": tokens.count + generated}  # fmt: skip

    def _visible(self, tokens: Tokens, step) -> tuple[np.ndarray, list[int]]:
        """The sequence with the special tokens the model generated left out (the prompt's stay:
        the client sent them), as [1, 1, L'], and for each k the length of the prompt and the
        first k generated tokens in it."""
        ids = step.output_ids.reshape(-1)[: step.sequence_length]
        generated = ids[tokens.count :]
        keep = ~np.isin(generated, self.hidden)
        sequence = np.concatenate([ids[: tokens.count], generated[keep]]).astype(np.uint32).reshape(1, 1, -1)
        return sequence, (tokens.count + np.concatenate([[0], np.cumsum(keep)])).tolist()

    async def _advance(self, tokens: Tokens, step, so_far: TextSoFar, decoder: Decoder) -> bool:
        """This step's new text added to `so_far` (one decoding call, of its window)."""
        sequence, lengths = self._visible(tokens, step)
        start, window = so_far.window(lengths[-1])
        before, after = await decoder.detokenize_prefixes(sequence[:, :, start:], window)
        return so_far.advance(before, after, lengths[-1])

    async def _completion_text(self, tokens: Tokens, step, decoder: Decoder | None = None) -> str:
        """The new text: the whole sequence decoded less the prompt's text (decoding the new ids
        alone would drop a SentencePiece tokenizer's leading space), special tokens left out. The
        prompt's text comes with the first step's call (two prefixes of one sequence, one
        postprocessing call)."""
        decoder = decoder or self.backend
        sequence, lengths = self._visible(tokens, step)
        if tokens.text is None:
            tokens.text, full = await decoder.detokenize_prefixes(sequence, [tokens.count, lengths[-1]])
        else:
            full = await decoder.detokenize(sequence, lengths[-1])
        if full.startswith(tokens.text):
            return full[len(tokens.text) :]
        return await decoder.detokenize(sequence[:, :, tokens.count :], lengths[-1] - tokens.count)

    async def _logprobs(self, tokens: Tokens, step, text: str, job: Job,
                        decoder: Decoder | None = None) -> dict[str, list]:  # fmt: skip
        """OpenAI's logprobs from FT's output_log_probs: each new token as the text it adds (the
        completion decoded up to it and after it, in one postprocessing call), its log probability,
        its offset in the text; the tokens past a stop sequence left out. With logprobs 1 (greedy
        only) top_logprobs holds the chosen token, which is the most likely one."""
        if step.log_probs is None:
            raise ApiError(502, "tritonserver answered no output_log_probs although is_return_log_probs was sent",
                           kind="server_error", code="upstream_error")  # fmt: skip
        new = step.sequence_length - tokens.count
        sequence, lengths = self._visible(tokens, step)
        fulls = await (decoder or self.backend).detokenize_prefixes(sequence, lengths)
        tokens.text = fulls[0] if tokens.text is None else tokens.text
        so_far = [f[len(tokens.text) :] if f.startswith(tokens.text) else f for f in fulls]
        offsets = [common_prefix(part, text) for part in so_far]
        kept = [k for k in range(new) if offsets[k] < len(text) or (k == 0 and not text)]
        pieces = [text[offsets[k] : max(offsets[k], offsets[k + 1])] for k in kept]
        values = [float(step.log_probs[k]) for k in kept]
        top = [{piece: value} for piece, value in zip(pieces, values)] if job.logprobs else None
        return {"tokens": pieces, "token_logprobs": values, "top_logprobs": top,
                "text_offset": [offsets[k] for k in kept]}  # fmt: skip

    async def result(self, job: Job, seat: Seat | None = None) -> Result:
        result = None
        async for _delta, last, _count in self.run(job, whole=True, seat=seat):
            result = last
        assert result is not None  # run() ends with its Result
        return result

"""Rounds: the gateway schedules FasterTransformer in slices.

FT runs a batch to its end and cannot stop or pre-empt a generation: a request that arrives while a
batch decodes waits for all of it, a short answer's place stays empty until the longest one in its
batch ends, and a client that leaves keeps its GPU decoding. So the gateway asks tritonserver for at
most `slice_tokens` (S) new tokens at a time and carries each generation on from its prompt and the
tokens generated so far, with the continuation's sampling inputs (sampling.continued:
the seed advanced by the tokens generated, min_length shortened by them; stop and bad words and the
repetition penalty, which FT applies over the whole sequence, carried as they are). It starts the
next slices of its running generations together, with the requests admitted meanwhile, so that
Triton's dynamic batcher forms one FT batch of them: a round.

    rounds off:   |A B C ............ 128 steps ............|D E ............ 128 steps ...
    rounds on:    |A B C  32|A B C D E  32|A B C D E  32|A B C D E  32|D E  32| ...

A newcomer waits at most for the round in flight (S steps of its batch), not for a whole
generation; a finished answer's place is taken at the next round; a client that left costs at most
the slice in flight. Each slice begins with a context phase over its prompt and the tokens generated
so far (FT keeps no cache between requests): the price, measured in docs/performance.md.

Greedy decoding gives the tokens of a whole generation; a sampled one draws as a continuation does
(reproducible for a seed, not the whole generation's draws). Beam search stays whole (its beams
change until the last step). Serving gives each generation a Seat (its request's admission slots
and its client), asked at every boundary whether the client is gone and whether the slot should be
lent to a lighter key (admission.py)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import numpy as np

from .sampling import Sampling, continued
from .triton import Step, Tokens

# A round takes slices sent within this long after it started (they reach Triton's dynamic batcher
# together with the round's: prod's queue delay is 10 ms); later ones wait for the next round.
JOIN_S = 0.005
# How much each ended round moves the estimate of a round's time (round_s).
ROUND_WEIGHT = 0.2


class Abandoned(Exception):
    """The client left: the generation stopped at a slice boundary (`generations`: its request's,
    all stopped)."""

    def __init__(self, message: str = "the client left", generations: int = 1) -> None:
        super().__init__(message)
        self.generations = generations


Generate = Callable[[Tokens, int, Sampling], AsyncIterator[Step]]


class Seat(Protocol):
    """What serving tells the rounds about one generation at each slice boundary."""

    async def gone(self) -> bool:
        """Whether the client left (then the generation stops)."""
        ...

    def should_lend(self) -> bool:
        """Whether the generation's slot should go to a lighter key's waiting request now."""
        ...

    async def lend(self) -> None:
        """Gives the slot back and waits for one again, in admission's fair order."""
        ...


class Rounds:
    """One model's rounds: the slices granted and not ended (`running`), those waiting for the
    next round (`ready`), and how long rounds take lately (`round_s`)."""

    def __init__(self, slice_tokens: int, ended: Callable[[int, float], None] = lambda _size, _took: None) -> None:
        if slice_tokens < 0:
            raise ValueError("rounds: slice_tokens must be >= 0 (0: rounds off)")
        self.slice_tokens, self.ended = slice_tokens, ended
        self.running = 0
        self.size = 0  # slices granted in the round in flight
        self.opened = -math.inf  # when the round in flight started (monotonic seconds)
        self.round_s = 0.0
        self.width = 0  # the round in flight's input width (tokens): its slices' common shape
        self.ready: list[tuple[asyncio.Future, int]] = []  # the next round's tickets, each with its length
        self._starting = False

    @property
    def on(self) -> bool:
        return self.slice_tokens > 0

    def ticket(self, length: int) -> asyncio.Future:
        """A place in a round for a slice whose input is `length` tokens: granted at once when
        nothing runs or the round in flight began within JOIN_S (and nobody waits for the next),
        otherwise with the next round. Granted, it holds the width to pad the input to: the
        round's longest (Triton batches only requests of one shape, and FT takes right-padded
        rows with their own input_lengths), or its own length where it is longer than that."""
        ticket = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        if not self.ready and (self.running == 0 or now - self.opened <= JOIN_S):
            if self.running == 0:
                self.opened, self.size, self.width = now, 0, length
            self.running += 1
            self.size += 1
            ticket.set_result(max(self.width, length))
        else:
            self.ready.append((ticket, length))
        return ticket

    async def wait(self, ticket: asyncio.Future) -> int:
        """The width, once the ticket is granted; a cancelled wait gives its place back."""
        try:
            return await ticket
        except asyncio.CancelledError:
            self.cancel(ticket)
            raise

    def cancel(self, ticket: asyncio.Future) -> None:
        """A ticket not used: out of the queue, or, granted, its slice counted as ended."""
        if ticket.done() and not ticket.cancelled():
            self.end()
            return
        ticket.cancel()
        self.ready = [(waiting, length) for waiting, length in self.ready if waiting is not ticket]

    def end(self) -> None:
        """A granted slice ended (its last step came, it failed or it was abandoned): the round
        ends with its last slice, and the next starts with the tickets waiting for it."""
        self.running -= 1
        if self.running:
            return
        took = time.monotonic() - self.opened
        self.round_s = took if not self.round_s else self.round_s + ROUND_WEIGHT * (took - self.round_s)
        self.ended(self.size, took)
        if self.ready and not self._starting:
            self._starting = True
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._starting = False
        waiting = [(ticket, length) for ticket, length in self.ready if not ticket.done()]
        if self.running or not waiting:
            return
        self.ready = []
        self.opened, self.running, self.size = time.monotonic(), len(waiting), len(waiting)
        self.width = max(length for _, length in waiting)
        for ticket, _ in waiting:
            ticket.set_result(self.width)

    async def steps(self, generate: Generate, tokens: Tokens, max_tokens: int, params: Sampling, *, seat: Seat,
                    end_id: int | None = None, context: int = 0) -> AsyncIterator[Step]:  # fmt: skip
        """The generation's steps, a slice of at most slice_tokens at a time, each as the whole
        generation's step would be: the sequence from the prompt on, and with log probabilities
        those of every new token so far. It ends at max_tokens, at a slice that ended before its
        length (FT's end id or a stop word) or at a slice whose last token is `end_id`. A slice's
        input is padded (with `end_id`, as FT's examples pad) to its round's width where that and
        the slice's tokens stay within `context` (0: never padded)."""
        so_far = _SoFar(tokens, pad=end_id or 0)
        ticket: asyncio.Future | None = self.ticket(tokens.count)  # this generation's place; None while it has none
        try:
            while ticket is not None:
                held, ticket = ticket, None
                if so_far.generated:
                    held = await self._boundary(held, seat, len(so_far.sequence))
                width = await self.wait(held)
                ask = min(self.slice_tokens, max_tokens - so_far.generated)
                part = so_far.tokens(width if width + ask <= context else 0)
                source = generate(part, ask, continued(params, so_far.generated))
                granted = True
                try:
                    async for answered in source:
                        step, new = so_far.step(answered, part)
                        if new >= ask:  # the slice's last step: its place goes back before its text is read
                            self.end()
                            granted = False
                            if so_far.generated + new < max_tokens and not so_far.ends_with(step, end_id):
                                ticket = self.ticket(step.sequence_length)
                        yield step
                        if not granted:
                            break
                finally:
                    if granted:
                        self.end()
                    await source.aclose()
                so_far.carry()
        finally:
            if ticket is not None:
                self.cancel(ticket)

    async def _boundary(self, ticket: asyncio.Future, seat: Seat, length: int) -> asyncio.Future:
        """Between slices: Abandoned when the client left; the slot lent to a lighter key when
        admission says so (and a fresh ticket once it is back). The ticket is given back before
        either, and on any failure here."""
        try:
            gone = await seat.gone()
            lend = not gone and seat.should_lend()
        except BaseException:
            self.cancel(ticket)
            raise
        if gone:
            self.cancel(ticket)
            raise Abandoned("the client left")
        if lend:
            self.cancel(ticket)
            await seat.lend()
            return self.ticket(length)
        return ticket


class _SoFar:
    """A sliced generation's sequence so far (prompt and generated ids) and the log probabilities
    of its generated tokens; each slice's steps in the whole generation's terms."""

    def __init__(self, tokens: Tokens, pad: int) -> None:
        self.prompt_tokens, self.prompt, self.pad = tokens, tokens.count, pad
        self.sequence = tokens.ids.reshape(-1)[: tokens.count].astype(np.uint32)
        self.earlier = np.zeros(0, dtype=np.float32)
        self.last: Step | None = None

    @property
    def generated(self) -> int:
        return len(self.sequence) - self.prompt

    def tokens(self, width: int = 0) -> Tokens:
        """The next slice's input: the sequence so far, right-padded to `width` (its input_lengths
        the sequence's), the request's stop and bad words."""
        ids = self.sequence
        if width > len(ids):
            ids = np.concatenate([ids, np.full(width - len(ids), self.pad, dtype=np.uint32)])
        return Tokens(ids=ids.reshape(1, -1), count=len(self.sequence), stop_ids=self.prompt_tokens.stop_ids,
                      bad_ids=self.prompt_tokens.bad_ids)  # fmt: skip

    def step(self, answered: Step, part: Tokens) -> tuple[Step, int]:
        """A slice's step as the whole generation's (log probabilities from its first token on),
        and how many tokens the slice has added. FT counts a padded row's sequence_length from
        the input's width (its batch's max_input_length) while its output_ids hold the prompt,
        then the new tokens (gatherTree removes the padding): the slice's padding (`part`, its
        input) comes off the length."""
        length = answered.sequence_length - (part.ids.shape[-1] - part.count)
        new = length - len(self.sequence)
        log_probs = answered.log_probs
        if log_probs is not None:
            tail = np.asarray(log_probs, dtype=np.float32).reshape(-1)[:new]
            log_probs = np.concatenate([self.earlier, tail])
        step = Step(answered.output_ids, length, log_probs)
        self.last = step
        return step, new

    @staticmethod
    def ends_with(step: Step, end_id: int | None) -> bool:
        return end_id is not None and int(step.output_ids.reshape(-1)[step.sequence_length - 1]) == end_id

    def carry(self) -> None:
        """The slice's last step becomes the sequence the next slice goes on from."""
        if self.last is not None:
            self.sequence = self.last.output_ids.reshape(-1)[: self.last.sequence_length].astype(np.uint32)
            if self.last.log_probs is not None:
                self.earlier = np.asarray(self.last.log_probs, dtype=np.float32)[: self.generated]


class Clients:
    """A Seat outside admission (a continuation for a peer: its slot is the origin's): it never
    lends, and stops when `gone` says its client left (serving's Place adds the slots)."""

    def __init__(self, gone: Callable[[], Awaitable[bool]] | None = None) -> None:
        self._gone = gone

    async def gone(self) -> bool:
        return bool(self._gone and await self._gone())

    def should_lend(self) -> bool:
        return False

    async def lend(self) -> None:
        return None

"""Admission: how many generations this gateway lets reach its tritonserver at once, who waits for
a slot and in which order, and who is told no at once.

FT decodes one batch at a time per model instance: requests past what it batches queue inside
tritonserver, where every client's time to first token grows together and a client that gives up
has still cost GPU time. Here a request takes a slot per generation it asks (a list of prompts:
one each) for as long as it is answered (a stream: until its end or its client leaves). With no
slot free it waits, at most `wait_s` (the fleet's time-to-first-token objective: a request that
cannot start within it would miss it anyway) and behind at most `queue` others; otherwise it is
refused at once with 503 and Retry-After, in OpenAI's error shape, so that HAProxy or the client
tries again where there is room. It is also refused at once when the wait it would have is over
`wait_s` (it would only wait to be refused): told from when the running generations started and
how long generations have held their slots lately.

Fair between keys: a freed slot goes to the waiting key that holds the fewest slots (the oldest
of its requests first), so a key that floods waits behind every other key's requests instead of
ahead of them. A full queue makes room for a key that holds and waits for less than the key with
the most: that key's newest waiter is refused (429, over its share). And a key that already holds
its share of the slots (their number over the keys holding or waiting) is refused at once with 429
while every slot is taken, rather than queued: what it asks past its share it gets from what the
others leave.

With rounds (rounds.py) a running generation gives its slot up at a slice boundary when a request
of a key holding at least two fewer slots waits (should_lend): it waits for one again in the same
fair order (retake: never refused, it has begun), so a key that floods gives way within a round and
takes back what the others leave. A waiting request's expected wait is then at most a round."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import ApiError, busy

OVERLOADED, OVER_SHARE, WAITED = "overloaded", "over_share", "wait_timeout"
REASONS = (OVERLOADED, WAITED, OVER_SHARE)
# How much each finished generation moves the estimate of how long one holds its slot.
HOLD_WEIGHT = 0.2


def refusal(reason: str, message: str) -> ApiError:
    """The answer to a request refused for `reason`: 429 for a key over its share, 503 otherwise;
    both with Retry-After and the reason in REFUSED_HEADER."""
    if reason == OVER_SHARE:
        return busy(reason, message, 429, "rate_limit_error")
    return busy(reason, message)


@dataclass
class _Waiter:
    key: str
    count: int
    since: float
    started: float = 0.0  # when its slots were given to it
    resumed: bool = False  # a generation that lent its slot (retake): never pushed out
    ready: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def granted(self) -> bool:
        """Whether its slots were given to it (not pushed out, not waiting still)."""
        return self.ready.done() and not self.ready.cancelled() and self.ready.exception() is None


class Admission:
    """The slots of one gateway. slots 0: no bound (every request goes through at once)."""

    def __init__(self, slots: int, wait_s: float, queue: int,
                 refused: Callable[[str], None] = lambda _reason: None) -> None:  # fmt: skip
        if slots < 0 or queue < 0 or wait_s < 0:
            raise ValueError("admission: slots, wait and queue must be >= 0")
        self.slots, self.wait_s, self.queue, self.refused = slots, wait_s, queue, refused
        self.taken = 0
        # Seconds a generation has held its slot lately (a moving average; 0 until one has ended).
        self.hold_s = 0.0
        # Seconds a round of slices takes lately (rounds.py sets it; 0: rounds off): with rounds a
        # lighter key's request waits at most that long for a heavier key to lend it a slot.
        self.round_s = 0.0
        self.started: list[float] = []  # when each taken slot was taken (monotonic seconds)
        self.held: collections.Counter[str] = collections.Counter()
        self.waiting: dict[str, collections.deque[_Waiter]] = collections.defaultdict(collections.deque)

    @property
    def waiters(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    def active(self) -> set[str]:
        """The keys that hold or wait for a slot."""
        return {k for k, n in self.held.items() if n} | {k for k, q in self.waiting.items() if q}

    def share(self, key: str) -> int:
        """Each key's share of the slots: their number over the keys that hold or wait for one, `key` too."""
        return max(1, math.ceil(self.slots / len(self.active() | {key})))

    def _refuse(self, reason: str, message: str) -> ApiError:
        self.refused(reason)
        return refusal(reason, message)

    async def hold(self, key: str, count: int = 1) -> Held:
        """`count` slots for `key` (see take), given back by the Held's release()."""
        return Held(self, key, count, await self.take(key, count))

    async def take(self, key: str, count: int = 1) -> float:
        """`count` slots for `key` (at most all of them), now or after a wait; ApiError when refused.
        Returns when they were taken (0 without a bound)."""
        if not self.slots:
            return 0.0
        count = min(count, self.slots)
        if self.taken + count <= self.slots and not self.waiters:
            return self._hold(key, count)
        if self.active() - {key} and self.held[key] + count > self.share(key):
            raise self._refuse(OVER_SHARE, f"every one of this host's {self.slots} generation slots is taken and "
                               f"this key holds {self.held[key]}, its share: retry, or send fewer at once")  # fmt: skip
        if self.waiters >= self.queue and not self._make_room(key):
            raise self._refuse(OVERLOADED, f"this host is at capacity: {self.slots} generations run and "
                               f"{self.waiters} wait; retry shortly or on another host")  # fmt: skip
        expected = self.expected_wait(key, count)
        if expected > self.wait_s:
            raise self._refuse(OVERLOADED, f"this host is at capacity: a slot would come free in about "
                               f"{expected * 1000:.0f} ms, past the fleet's time-to-first-token objective "
                               f"of {self.wait_s * 1000:.0f} ms; retry shortly or on another host")  # fmt: skip
        waiter = _Waiter(key, count, time.monotonic())
        self.waiting[key].append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.ready), self.wait_s)
        except asyncio.TimeoutError:
            if waiter.granted():
                return waiter.started  # given its slots just as the wait ran out: keep them
            if waiter.ready.done() and not waiter.ready.cancelled():
                raise waiter.ready.exception() from None  # pushed out just as it ran out: counted then
            self._forget(waiter)
            raise self._refuse(
                WAITED,
                f"no generation slot came free within {self.wait_s * 1000:.0f} ms (the "
                "fleet's time-to-first-token objective); retry shortly or on another host",
            ) from None
        except asyncio.CancelledError:  # the client left while it waited
            if waiter.granted():
                self.give_back(key, count)
            else:
                self._forget(waiter)
            raise
        # A waiter pushed out by a lighter key is told so through its future.
        waiter.ready.result()
        return waiter.started

    def expected_wait(self, key: str, count: int = 1, now: float | None = None) -> float:
        """Seconds until `count` slots would come to a new request of `key`: each running
        generation is expected to end a hold after it started (at once if it is past that); the
        waiters served before it (the keys holding fewer, then those holding as many: they are
        older) take the first slots that free, and a slot serves a round more per hold."""
        if not self.hold_s or not self.started:
            return 0.0
        now = time.monotonic() if now is None else now
        mine = self.held[key]
        ahead = sum(w.count for k, q in self.waiting.items() if self.held[k] <= mine for w in q)
        needed = ahead + count - (self.slots - self.taken)  # slots that must free before its last one
        if needed <= 0:
            return 0.0
        if self.round_s and self.lendable(key) >= needed:
            return self.round_s
        ends = sorted(max(now, started + self.hold_s) for started in self.started)
        rounds, index = divmod(needed - 1, len(ends))
        return ends[index] + rounds * self.hold_s - now

    def lendable(self, key: str) -> int:
        """The slots the other keys would lend to a waiting request of `key` at their next slice
        boundaries: each holds at least two more than `key`, and lends until one more is left."""
        mine = self.held[key]
        return sum(held - mine - 1 for k, held in self.held.items() if k != key and held >= mine + 2)

    def should_lend(self, key: str) -> bool:
        """At a slice boundary: whether a generation of `key` should give its slot to a waiting
        request of a key that holds at least two fewer (which the fair order serves first; two, so
        that the two keys do not hand it back and forth)."""
        if not self.slots or not self.waiters:
            return False
        mine = self.held[key]
        return any(self.held[k] + 2 <= mine for k, queue in self.waiting.items() if k != key and queue)

    async def retake(self, key: str) -> float:
        """One slot for a generation of `key` that lent its own: waits in the fair order without a
        bound and is never refused (it has begun); returns when it was taken."""
        if not self.slots:
            return 0.0
        waiter = _Waiter(key, 1, time.monotonic(), resumed=True)
        self.waiting[key].append(waiter)
        self._wake()
        try:
            await asyncio.shield(waiter.ready)
        except asyncio.CancelledError:
            if waiter.granted():
                self.give_back(key, 1)
            else:
                self._forget(waiter)
            raise
        return waiter.started

    def give_back(self, key: str, count: int = 1, since: float | None = None) -> None:
        """`count` slots of `key` back, taken at `since`: a generation's end (Held.release), which
        the hold estimate learns from. None: slots given back unused (a waiter granted them as its
        client left)."""
        if not self.slots:
            return
        count = min(count, self.slots)
        now = time.monotonic()
        if since is not None:
            held_s = now - since
            self.hold_s = held_s if not self.hold_s else self.hold_s + HOLD_WEIGHT * (held_s - self.hold_s)
        for _ in range(count):
            if since is not None and since in self.started:
                self.started.remove(since)
            elif self.started:
                self.started.pop()  # the newest: what an unused grant was given
        self.taken -= count
        self.held[key] -= count
        if self.held[key] <= 0:
            del self.held[key]
        self._wake()

    def _hold(self, key: str, count: int) -> float:
        now = time.monotonic()
        self.taken += count
        self.held[key] += count
        self.started.extend([now] * count)
        return now

    def _wake(self) -> None:
        """Free slots to the waiting keys that hold the fewest, each key's oldest request first."""
        while True:
            keys = [k for k, q in self.waiting.items() if q]
            if not keys:
                return
            key = min(keys, key=lambda k: (self.held[k], self.waiting[k][0].since))
            waiter = self.waiting[key][0]
            if self.taken + waiter.count > self.slots:
                return
            self.waiting[key].popleft()
            self._tidy(key)
            waiter.started = self._hold(key, waiter.count)
            waiter.ready.set_result(None)

    def _forget(self, waiter: _Waiter) -> None:
        with contextlib.suppress(ValueError):
            self.waiting.get(waiter.key, collections.deque()).remove(waiter)
        self._tidy(waiter.key)

    def _tidy(self, key: str) -> None:
        """A key's queue goes once empty: a key seen once keeps nothing here."""
        if not self.waiting.get(key):
            self.waiting.pop(key, None)

    def _make_room(self, key: str) -> bool:
        """With the queue full: the newest waiter of the key that holds and waits for the most,
        refused as over its share, when that is more than `key` holds and waits for."""

        def weight(k: str) -> int:
            return self.held[k] + sum(w.count for w in self.waiting.get(k, ()))

        def pushable(k: str) -> bool:
            return any(not w.resumed for w in self.waiting[k])

        heaviest = max((k for k, q in self.waiting.items() if pushable(k)), key=weight, default=None)
        if heaviest is None or heaviest == key or weight(heaviest) <= weight(key):
            return False
        queue = self.waiting[heaviest]
        pushed = next(w for w in reversed(queue) if not w.resumed)
        queue.remove(pushed)
        self._tidy(heaviest)
        self.refused(OVER_SHARE)
        pushed.ready.set_exception(refusal(OVER_SHARE, "this key's request waited while others asked within their "
                                           "share: retry, or send fewer at once"))  # fmt: skip
        return True


class Held:
    """The slots one request holds, given back once: by whichever comes first of the end of its
    answer and the end of its response (a stream's generator never started when its client left
    before the first byte: the response's background task gives them back then)."""

    def __init__(self, admission: Admission, key: str, count: int, since: float) -> None:
        self.admission, self.key, self.count, self.since, self.released = admission, key, count, since, False

    def should_lend(self) -> bool:
        return not self.released and self.count > 0 and self.admission.should_lend(self.key)

    async def lend(self) -> None:
        """One of its slots to a lighter key now, and back once the fair order gives one again."""
        self.admission.give_back(self.key, 1)
        self.count -= 1
        await self.admission.retake(self.key)
        if self.released:  # the request ended while this generation waited: nothing holds it now
            self.admission.give_back(self.key, 1)
            return
        self.count += 1

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.give_back(self.key, self.count, self.since)

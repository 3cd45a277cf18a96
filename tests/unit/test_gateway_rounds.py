"""Rounds (ftgateway/rounds.py) against a fake FT: slices that add up to the whole generation,
rounds that send their slices together, a newcomer joining at the next boundary, a client's leaving
stopping the generation within a slice, and a flooding key lending its slot to a lighter one
(admission.py). The real stack: tests/test_rounds.py (tritonserver's stand-in and its statistics)
and the GPU figures in docs/performance.md."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest

from ftgateway.admission import Admission
from ftgateway.rounds import Abandoned, Clients, Rounds
from ftgateway.sampling import Sampling
from ftgateway.triton import Step, Tokens

END = 0
GREEDY = Sampling(runtime_top_k=1, runtime_top_p=0.0, temperature=1.0, random_seed=5, log_probs=True, min_length=9)


def next_token(sequence: list[int]) -> int:
    """A deterministic model: the next token from the whole sequence (as greedy FT's is)."""
    return (sum(sequence) * 31 + len(sequence) * 7) % 50


@dataclass
class FakeFT:
    """FT's decoupled answers: one step per token, the sequence from the prompt on, each new
    token's log probability; it stops after END. A row right-padded past its input length is
    answered as FT answers it: sequence_length counted from the input's width, output_ids the
    prompt, the new tokens, then `end` (gatherTree). Records each request (its input length,
    tokens asked, sampling) and when it was sent, and how many steps it decoded."""

    step_s: float = 0.0
    end: int = END
    sent: list[tuple[float, int, int, Sampling]] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)  # each request's input_ids width (padding included)
    decoded: int = 0

    async def generate(self, tokens: Tokens, ask: int, params: Sampling):
        sequence = tokens.ids.reshape(-1)[: tokens.count].tolist()
        self.sent.append((asyncio.get_running_loop().time(), tokens.count, ask, params))
        self.widths.append(tokens.ids.shape[-1])
        padding = tokens.ids.shape[-1] - tokens.count
        probs = []
        for _ in range(ask):
            await asyncio.sleep(self.step_s)
            token = next_token(sequence)
            sequence.append(token)
            probs.append(-token / 100)
            self.decoded += 1
            ids = np.array(sequence + [self.end] * padding, dtype=np.uint32).reshape(1, 1, -1)
            yield Step(ids, len(sequence) + padding, np.array(probs + [0.0] * (ask - len(probs)), dtype=np.float32))
            if token == self.end:
                return


def prompt(ids: list[int]) -> Tokens:
    return Tokens(ids=np.array([ids], dtype=np.uint32), count=len(ids), stop_ids=None)


async def last_step(steps) -> tuple[Step, int]:
    last, count = None, 0
    async for step in steps:
        last, count = step, count + 1
    return last, count


def whole(ids: list[int], max_tokens: int) -> Step:
    return asyncio.run(last_step(FakeFT().generate(prompt(ids), max_tokens, GREEDY)))[0]


@pytest.mark.parametrize("slice_tokens", [1, 3, 7, 64])
@pytest.mark.parametrize(("ids", "max_tokens"), [([3, 4, 5], 20), ([1, 2], 40), ([9], 1)])
def test_slices_add_up_to_the_whole_generation(slice_tokens, ids, max_tokens):
    expected = whole(ids, max_tokens)
    fake = FakeFT()
    rounds = Rounds(slice_tokens)
    got, steps = asyncio.run(last_step(rounds.steps(fake.generate, prompt(ids), max_tokens, GREEDY, seat=Clients(),
                                                    end_id=END)))  # fmt: skip
    assert got.output_ids.reshape(-1)[: got.sequence_length].tolist() == expected.output_ids.reshape(-1).tolist()
    new = got.sequence_length - len(ids)
    assert got.log_probs.tolist() == pytest.approx(expected.log_probs[:new].tolist())  # continuous, once each
    assert steps == new  # a step per token, none repeated
    assert all(ask <= slice_tokens for _, _, ask, _ in fake.sent)
    assert (rounds.running, rounds.ready) == (0, [])


def test_an_end_id_that_closes_a_slice_ends_the_generation():
    """A slice whose last token is the end id: FT counts it in the length, so the slice looks whole;
    the generation still ends there (no slice past the end of text)."""
    ids, end = [1], 13
    tokens = whole(ids, 60).output_ids.reshape(-1).tolist()[len(ids) :]
    at = tokens.index(end) + 1  # tokens generated with the end id: 5
    fake = FakeFT(end=end)
    got, _ = asyncio.run(last_step(Rounds(at).steps(fake.generate, prompt(ids), 60, GREEDY, seat=Clients(),
                                                    end_id=end)))  # fmt: skip
    assert len(fake.sent) == 1
    assert got.sequence_length == len(ids) + at
    fake = FakeFT(end=end)  # without the end id known, a second slice would begin past it
    asyncio.run(last_step(Rounds(at).steps(fake.generate, prompt(ids), 60, GREEDY, seat=Clients())))
    assert len(fake.sent) == 2


def test_each_slice_carries_the_sampling_on():
    fake = FakeFT()
    asyncio.run(last_step(Rounds(4).steps(fake.generate, prompt([7, 7]), 12, GREEDY, seat=Clients())))
    seeds = [(count, params.random_seed, params.min_length) for _, count, _, params in fake.sent]
    assert seeds == [(2, 5, 9), (6, 9, 5), (10, 13, 0)]  # seed + generated; min_length 9 - 8 = 1: none


def test_a_round_sends_its_slices_together_and_a_newcomer_joins_at_the_boundary():
    """Three generations of 12 in slices of 4 take three rounds; a newcomer that arrives while the
    first round decodes is sent with the second, not after the first generations' end. Told by
    the order of the slices sent, never by the clock: a loaded machine stretches every step."""

    async def main():
        fake, rounds = FakeFT(step_s=0.01), Rounds(4)
        first = [asyncio.ensure_future(last_step(rounds.steps(fake.generate, prompt([i + 5]), 12, GREEDY,
                                                              seat=Clients()))) for i in range(3)]  # fmt: skip
        while len(fake.sent) < 3:  # the first round is sent and decodes its 4 steps
            await asyncio.sleep(0)
        late = asyncio.ensure_future(last_step(rounds.steps(fake.generate, prompt([9, 9]), 4, GREEDY, seat=Clients())))
        await asyncio.gather(*first, late)
        return fake.sent

    counts = [count for _, count, *_ in asyncio.run(main())]  # the tokens each slice was sent with
    # Rounds: the three prompts of 1 token; then their 1 + 4 with the newcomer's 2; then 1 + 8.
    assert counts[:3] == [1, 1, 1]
    assert sorted(counts[3:7]) == [2, 5, 5, 5]
    assert counts[7:] == [9, 9, 9]


def test_a_rounds_slices_share_one_width_for_tritons_batcher():
    """Triton batches only requests of one shape: a round's inputs are right-padded to its longest
    (input_lengths stay each one's own), within the context; the answers are unchanged (FT's
    sequence_length of a padded row counts the padding: it comes off). The first
    round, whose slices joined it one by one as they came, keeps each newcomer's own length where
    it is longer than the first's."""

    async def main(context: int):
        fake, rounds = FakeFT(step_s=0.01), Rounds(4)
        prompts = [[5], [6, 6, 6], [7, 7]]
        runs = [last_step(rounds.steps(fake.generate, prompt(ids), 8, GREEDY, seat=Clients(), context=context))
                for ids in prompts]  # fmt: skip
        found = await asyncio.gather(*runs)
        return fake, [step.output_ids.reshape(-1)[: step.sequence_length].tolist() for step, _ in found], prompts

    fake, got, prompts = asyncio.run(main(context=64))
    assert got == [whole(ids, 8).output_ids.reshape(-1).tolist() for ids in prompts]
    assert [count for _, count, _, _ in fake.sent] == [1, 3, 2, 5, 7, 6]  # the real lengths, as input_lengths
    assert fake.widths == [1, 3, 2, 7, 7, 7]  # the second round one shape: its longest input
    fake, _, _ = asyncio.run(main(context=0))  # no context known: never padded
    assert fake.widths == [1, 3, 2, 5, 7, 6]


class Leaving:
    """A seat whose client leaves once `after` steps were read."""

    def __init__(self, after: int) -> None:
        self.after, self.read = after, 0

    async def gone(self) -> bool:
        return self.read >= self.after

    def should_lend(self) -> bool:
        return False

    async def lend(self) -> None:
        raise AssertionError("never asked")


def test_a_client_that_leaves_stops_its_generation_at_the_next_boundary():
    async def main():
        fake, seat = FakeFT(), Leaving(after=5)
        rounds = Rounds(4)

        async def read() -> None:
            async for _step in rounds.steps(fake.generate, prompt([2]), 64, GREEDY, seat=seat):
                seat.read += 1

        with pytest.raises(Abandoned):
            await read()
        return fake.decoded, rounds

    decoded, rounds = asyncio.run(main())
    assert decoded == 8  # it left after 5: the slice in flight (to 8) ends, no other starts (not 64)
    assert (rounds.running, rounds.ready) == (0, [])


class Held:
    """A seat over admission's slots (serving's Place without the metrics)."""

    def __init__(self, held) -> None:
        self.held = held

    async def gone(self) -> bool:
        return False

    def should_lend(self) -> bool:
        return self.held.should_lend()

    async def lend(self) -> None:
        await self.held.lend()


def test_a_flooding_key_lends_its_slot_at_a_boundary_and_takes_it_back():
    async def main():
        fake, rounds = FakeFT(step_s=0.01), Rounds(2)
        admission = Admission(slots=2, wait_s=5, queue=8)
        order = []

        async def generation(key: str, ids: list[int], tokens: int) -> None:
            held = await admission.hold(key)
            try:
                async for step in rounds.steps(fake.generate, prompt(ids), tokens, GREEDY, seat=Held(held)):
                    order.append((key, step.sequence_length - len(ids)))
            finally:
                held.release()

        flood = [asyncio.ensure_future(generation("flood", [i + 1], 8)) for i in range(2)]
        await asyncio.sleep(0.005)
        lighter = asyncio.ensure_future(generation("light", [4, 4], 2))
        await asyncio.gather(*flood, lighter)
        return order, admission

    order, admission = asyncio.run(main())
    light_done = order.index(("light", 2))
    # The lighter key is served within a round or two (4 flood tokens at most), not after 16.
    assert sum(1 for key, _ in order[:light_done] if key == "flood") <= 8
    assert sorted(n for key, n in order if key == "flood")[-2:] == [8, 8]  # both flood answers whole
    assert (admission.taken, admission.waiters, dict(admission.held)) == (0, 0, {})

"""The gateway's own CPU per streamed answer, Triton aside: ftgateway.generation's Generation.run
over a backend that answers at once (every step of a precomputed greedy answer, decoupled as FT
streams it) and decodes with the lab's tokenizer in process, as the gateway does when it
tokenizes itself. What is left is the gateway's work per answer: turning steps into text deltas.

    python3 -m benchmarks.gateway_text_bench [--prompt 513] [--tokens 256] [--answers 50] [--slice 0]

--slice S runs the answer in rounds of S-token slices (ftgateway/rounds.py), each a request of
its own to the backend. Prints milliseconds of CPU per answer and per token (docs/performance.md,
"On a GPU" and "Rounds").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter
from tokenizers import Tokenizer

from ftgateway.generation import Generation, Job
from ftgateway.rounds import Rounds
from ftgateway.sampling import sampling
from ftgateway.triton import Step, Tokens

ROOT = Path(__file__).resolve().parents[1]


class Backend:
    """Tokenizing's surface as Generation uses it, with the answer known in advance."""

    def __init__(self, tokenizer: Tokenizer, ids: list[int], prompt: int) -> None:
        self.tokenizer, self.ids, self.prompt = tokenizer, np.array(ids, dtype=np.uint32), prompt

    async def tokenize(self, prompt: str, stop: list[str], max_tokens: int, bad: tuple = ()) -> Tokens:
        return Tokens(ids=self.ids[: self.prompt].reshape(1, -1), count=self.prompt, stop_ids=None)

    async def generate(self, tokens: Tokens, max_tokens: int, params):
        """The steps after `tokens` (the prompt, or a slice's sequence so far), at most max_tokens,
        as FT answers them: a right-padded input's length counted from its width, its ids the
        sequence and then end ids (0)."""
        pad = tokens.ids.shape[-1] - tokens.count
        for length in range(tokens.count + 1, min(tokens.count + max_tokens, len(self.ids)) + 1):
            ids = np.concatenate([self.ids[:length], np.zeros(pad, dtype=np.uint32)])
            yield Step(output_ids=ids.reshape(1, 1, -1), sequence_length=length + pad)

    async def detokenize_prefixes(self, output_ids: np.ndarray, lengths: list[int]) -> list[str]:
        ids = output_ids.reshape(-1).tolist()
        return [self.tokenizer.decode(ids[:n]) for n in lengths]

    async def detokenize(self, output_ids: np.ndarray, length: int) -> str:
        return (await self.detokenize_prefixes(output_ids, [length]))[0]


async def answer(generation: Generation, job: Job) -> int:
    chunks = 0
    async for delta, _last, _count in generation.run(job):
        chunks += bool(delta)
    return chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=513, help="prompt tokens")
    parser.add_argument("--tokens", type=int, default=256, help="answer tokens")
    parser.add_argument("--answers", type=int, default=50)
    parser.add_argument("--slice", type=int, default=0, help="slice tokens (0: rounds off)")
    args = parser.parse_args()
    tokenizer = Tokenizer.from_file(str(ROOT / "lab" / "models" / "tiny-gpt2" / "tokenizer.json"))
    rng = random.Random(0)
    ids = [rng.randrange(1, tokenizer.get_vocab_size()) for _ in range(args.prompt + args.tokens)]
    counter = Counter("bench_tokens", "tokens", ["kind"], registry=CollectorRegistry())
    generation = Generation(Backend(tokenizer, ids, args.prompt), args.prompt + args.tokens + 1, counter,
                            rounds=Rounds(args.slice))  # fmt: skip
    job = Job(prompt="", max_tokens=args.tokens, params=sampling(0.0, 0, 1.0, None, 0), stops=[])
    asyncio.run(answer(generation, job))  # warm-up
    began = time.process_time()
    chunks = [asyncio.run(answer(generation, job)) for _ in range(args.answers)]
    cpu = (time.process_time() - began) / args.answers
    print(json.dumps({"prompt": args.prompt, "tokens": args.tokens, "slice": args.slice, "answers": args.answers,
                      "chunks_per_answer": chunks[0], "cpu_ms_per_answer": round(1000 * cpu, 2),
                      "cpu_ms_per_token": round(1000 * cpu / args.tokens, 3)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

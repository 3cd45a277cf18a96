"""OpenAI's sampling parameters as the FT model's inputs, checked: what the gateway asks of FT's
decoding (greedy, top-k, top-p, temperature, seed, repetition penalty, log probabilities), apart
from how it reaches tritonserver (triton.py)."""

from __future__ import annotations

from dataclasses import dataclass

UINT64_MAX = 2**64 - 1
# Greedy decoding with log probabilities: FT's top-p path with this top_p takes the most likely
# token (it holds at least 1/vocabulary of the mass, over 1e-6 for any vocabulary under a
# million) and reports its full log probability, where the top-k path (top_k 1) reports 0.
GREEDY_TOP_P = 1e-6


class SamplingError(ValueError):
    """A sampling request the FT model cannot honour: the message says which parameter and why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Sampling:
    """The fastertransformer model's sampling inputs."""

    runtime_top_k: int
    runtime_top_p: float
    temperature: float
    random_seed: int
    repetition_penalty: float = 1.0
    log_probs: bool = False  # FT's is_return_log_probs
    min_length: int = 0  # FT's min_length: the end id is masked below it (0: none; generation.min_length)


def sampling(
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int | None,
    fallback_seed: int,
    *,
    repetition_penalty: float = 1.0,
    log_probs: bool = False,
    min_length: int = 0,
) -> Sampling:
    """OpenAI's parameters -> FT's.

    - temperature 0 is greedy decoding: FT's top_k 1, top_p 0 (its greedy path; temperature then has
      no effect, and is sent as 1.0).
    - otherwise FT samples with top-k and/or top-p at that temperature; top_k 0 means no top-k cut,
      top_p 1 no nucleus cut. FT treats top_k 0 with top_p 0 as greedy, so top_p 0 with top_k 0
      and a temperature above 0 is refused rather than silently made greedy.
    - seed: FT's random_seed (uint64); without one, sampling takes `fallback_seed` (a fresh one per
      request), so that two requests do not repeat each other.
    - repetition_penalty: FT's multiplicative penalty on every token already in the sequence,
      prompt included (1 is none), greedy or sampled.
    - log_probs: FT's is_return_log_probs; greedy then takes FT's top-p path with GREEDY_TOP_P,
      the same most likely token with its full log probability.
    """
    if not 0 < repetition_penalty <= 10:
        raise SamplingError("repetition_penalty", "repetition_penalty must be above 0 and at most 10 (1 is none)")
    if temperature < 0 or temperature > 2:
        raise SamplingError("temperature", "temperature must be between 0 and 2")
    if top_k < 0:
        raise SamplingError("top_k", "top_k must be 0 (no top-k cut) or a positive number of tokens")
    if not 0.0 <= top_p <= 1.0:
        raise SamplingError("top_p", "top_p must be between 0 and 1")
    if seed is not None and not 0 <= seed <= UINT64_MAX:
        raise SamplingError("seed", "seed must be between 0 and 2**64-1 (FT's random_seed is a uint64)")
    if temperature == 0:
        return Sampling(runtime_top_k=0 if log_probs else 1, runtime_top_p=GREEDY_TOP_P if log_probs else 0.0,
                        temperature=1.0, random_seed=seed or 0, repetition_penalty=float(repetition_penalty),
                        log_probs=log_probs, min_length=min_length)  # fmt: skip
    if top_k == 0 and top_p == 0.0:
        raise SamplingError("top_p", "top_p 0 with top_k 0 would be greedy decoding in FT: use temperature 0 for that")
    return Sampling(runtime_top_k=top_k, runtime_top_p=float(top_p), temperature=float(temperature),
                    random_seed=fallback_seed if seed is None else seed,
                    repetition_penalty=float(repetition_penalty), log_probs=log_probs,
                    min_length=min_length)  # fmt: skip

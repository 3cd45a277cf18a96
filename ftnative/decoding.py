"""FT's decoding over a model's logits: sampling (DynamicDecodeLayer with top-k or top-p, beam
width 1) and beam search (OnlineBeamSearchLayer), with FT's order of bad words, temperature and
repetition penalty. decode.Model takes it as its base: what the forward pass gives (logits), this
turns into tokens and their log probabilities."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


class Decoding:
    """Generation for a class that has `logits(ids) -> np.ndarray` (the next token's logits)."""

    def logits(self, ids: list[int]) -> np.ndarray:
        raise NotImplementedError

    def generate(self, ids: list[int], max_new_tokens: int, **sampling: Any) -> list[int]:
        """New tokens after `ids` (stream()'s keywords): greedy when top_k is 1, or 0 with top_p 0,
        else sampled with `seed`. Stops after end_id or a stop sequence (both included), like FT."""
        return list(self.stream(ids, max_new_tokens, **sampling))

    def stream(self, ids: list[int], max_new_tokens: int, **sampling: Any) -> Iterator[int]:
        """generate()'s tokens one at a time, as they are decoded."""
        for step in self.steps(ids, max_new_tokens, **sampling):
            yield step.token

    def steps(
        self,
        ids: list[int],
        max_new_tokens: int,
        *,
        top_k: int = 1,
        top_p: float = 0.0,
        temperature: float = 1.0,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        seed: int = 0,
        end_id: int | None = None,
        stop: list[list[int]] | None = None,
        bad: list[list[int]] | None = None,
        top_p_decay: float | None = None,
        top_p_min: float | None = None,
        top_p_reset_id: int | None = None,
        min_length: int = 0,
    ) -> Iterator[Step]:
        """One token at a time with its log probabilities, as FT's DynamicDecodeLayer (beam width 1)
        decodes it. Per step: bad words banned (invokeBanBadWords: a word's last token when the
        sequence ends with the rest of it); logits divided by the temperature, then the repetition
        penalty over every token of the sequence, prompt included (BaseSamplingLayer: divided when
        positive, multiplied when negative), or instead the presence penalty (subtracted once from
        each such token's logit: FT's additive type); then the full softmax, and
        - top_k > 0 (TopKSamplingLayer): the k most likely tokens, one drawn with u * top_p * (their
          mass) walked down them (top_p 0 counts as 1; top_k 1 is greedy); output_log_probs is the
          token's log probability given the top-k set, cum_log_probs adds its full log probability;
        - top_k 0 (TopPSamplingLayer, greedy when top_p is 0 too): tokens by probability, the first
          whose cumulative probability reaches u * top_p; both log probabilities are the full one;
          after the step top_p becomes max(top_p * top_p_decay, top_p_min), or its first value
          again when the token is top_p_reset_id (computeToppDecay).
        While the token being chosen is numbered below min_length (1 for the first), end_id cannot
        be chosen: its logit is masked after the penalties (batchApplyMinLengthPenalty).
        u comes from numpy's generator seeded with `seed`: reproducible, not curand's stream."""
        rng = np.random.default_rng(seed)
        k, p = top_k, top_p
        if k == 0 and p == 0.0:
            k = 1
        if k > 0 and p == 0.0:
            p = 1.0
        runtime_p = p
        sequence, cum = list(ids), 0.0
        stops = [s for s in (stop or []) if s]
        banned = [w for w in (bad or []) if w]
        for new in range(1, max_new_tokens + 1):
            masked = end_id if end_id is not None and new < min_length else None
            logprobs = self._log_probs(sequence, banned, temperature, repetition_penalty, masked,
                                       presence=presence_penalty)  # fmt: skip
            order = np.argsort(-logprobs, kind="stable")
            if k > 0:
                order = order[:k]
                probs = np.exp(logprobs[order])
                mass = probs.sum()
                pick = _first_reaching(np.cumsum(probs), rng.random() * p * mass)
                token = int(order[pick])
                output_log_prob = math.log(probs[pick]) - math.log(mass)  # FT: logf(exp_logit) - logf(s_sum)
            else:
                probs = np.exp(logprobs[order])
                token = int(order[_first_reaching(np.cumsum(probs), rng.random() * runtime_p)])
                output_log_prob = logprobs[token]
                if top_p_decay is not None:
                    runtime_p = p if token == top_p_reset_id else max(runtime_p * top_p_decay, top_p_min or 0.0)
            cum += float(logprobs[token])
            sequence.append(token)
            yield Step(token, float(output_log_prob), cum)
            if end_id is not None and token == end_id:
                return
            if any(new >= len(s) and sequence[-len(s) :] == s for s in stops):
                return

    def _log_probs(self, sequence: list[int], banned: list[list[int]], temperature: float, penalty: float,
                   masked: int | None = None, *, presence: float = 0.0):  # fmt: skip
        """The next token's log probabilities after FT's processing of the logits: bad words
        banned (DynamicDecodeLayer), then the temperature and the repetition penalty (the sampling
        and beam-search layers alike), then the end id `masked` below min_length (the sampling
        layers), then the full softmax."""
        logits = self.logits(sequence).astype(np.float64)
        for word in banned:
            prefix = word[:-1]
            if not prefix or sequence[len(sequence) - len(prefix) :] == prefix:
                logits[word[-1]] = -np.inf
        if temperature != 1.0:
            logits = logits * (1.0 / (temperature + 1e-6))
        if penalty != 1.0 or presence != 0.0:  # FT takes one of the two (BaseSamplingLayer refuses both)
            seen = np.unique(np.asarray(sequence, dtype=np.int64))
            values = logits[seen]
            if penalty != 1.0:
                logits[seen] = np.where(values < 0, values * penalty, values / penalty)
            else:
                logits[seen] = values - presence
        if masked is not None:
            logits[masked] = -np.inf
        logprobs = logits - logits.max()
        return logprobs - np.log(np.exp(logprobs).sum())

    def beam_search(
        self,
        ids: list[int],
        max_new_tokens: int,
        beam_width: int,
        *,
        len_penalty: float = 0.0,
        diversity_rate: float = 0.0,
        temperature: float = 1.0,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        end_id: int | None = None,
        stop: list[list[int]] | None = None,
        bad: list[list[int]] | None = None,
    ) -> list[Beam]:
        """The beam_width beams, best first, as FT's GPT decoders search (DynamicDecodeLayer with
        OnlineBeamSearchLayer, no beam hypotheses: those are BART's and T5's). Each step, every
        live beam proposes its beam_width best next tokens by cum_log_probs + log probability;
        the k-th proposal of a beam is ranked by that sum divided by length ** len_penalty (the
        length counting the prompt, +1 for the new token; len_penalty 0: no division) plus
        beam_search_diversity_rate * k (batch_topk_kernel), and the best beam_width proposals are
        the next beams. A finished beam (end_id, or a stop word) proposes only end_id at log
        probability 0, ranked at its own length, so it keeps its place while it stays among the
        best. Only beam 0 starts (the others' cum_log_probs begin at -1e20)."""
        stops = [s for s in (stop or []) if s]
        banned = [w for w in (bad or []) if w]
        beams = [Beam(list(ids), 0.0 if b == 0 else -1e20, [], False) for b in range(beam_width)]

        def ranked(cum: float, length: int) -> float:
            return cum if len_penalty == 0.0 or length == 1 else cum / float(length) ** len_penalty

        for _ in range(max_new_tokens):
            proposals = []  # (rank score, beam, token, cum after it)
            for b, beam in enumerate(beams):
                if beam.finished:
                    proposals.append((ranked(beam.cum, len(beam.tokens)), b, end_id, beam.cum))
                    continue
                y = beam.cum + self._log_probs(beam.tokens, banned, temperature, repetition_penalty,
                                               presence=presence_penalty)  # fmt: skip
                for k, token in enumerate(np.argsort(-y, kind="stable")[:beam_width]):
                    score = ranked(float(y[token]), len(beam.tokens) + 1) + diversity_rate * k
                    proposals.append((score, b, int(token), float(y[token])))
            proposals.sort(key=lambda p: -p[0])  # stable: ties keep beam order, as FT's block reduce roughly does
            chosen = []
            for _score, b, token, cum in proposals[:beam_width]:
                parent = beams[b]
                if parent.finished:
                    chosen.append(parent)
                    continue
                tokens = [*parent.tokens, token]
                finished = token == end_id or any(tokens[-len(w) :] == w for w in stops)
                chosen.append(Beam(tokens, cum, [*parent.log_probs, cum - parent.cum], finished))
            beams = chosen
            if all(beam.finished for beam in beams):
                break
        return beams


@dataclass(frozen=True)
class Beam:
    """One beam: its tokens (prompt included), cum_log_probs, each new token's log probability
    (output_log_probs) and whether it has finished."""

    tokens: list[int]
    cum: float
    log_probs: list[float]
    finished: bool


@dataclass(frozen=True)
class Step:
    """One decoded token, FT's output_log_probs entry for it and cum_log_probs after it."""

    token: int
    log_prob: float
    cum_log_prob: float


def _first_reaching(cumulative: np.ndarray, threshold: float) -> int:
    """The first index whose cumulative probability reaches `threshold` (the last one if none)."""
    return min(int(np.searchsorted(cumulative, threshold, side="left")), len(cumulative) - 1)

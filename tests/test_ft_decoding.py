"""The reference decoder decodes as FT's DynamicDecodeLayer does, proven against transformers.

Where both implement the same rule the answers must agree token for token (and log probabilities
within 1e-4): the presence penalty (FT's additive one, from transformers' raw logits), the
repetition penalty (FT's BaseSamplingLayer, transformers' RepetitionPenaltyLogitsProcessor), bad
words (invokeBanBadWords, NoBadWordsLogitsProcessor), the log probability of each chosen token
(FT's softmax before sampling, transformers' scores). Where FT differs, the test pins FT's rule:
with top-k sampling output_log_probs is the log probability given the top-k set (0 for greedy),
cum_log_probs the full one; top_p_decay shrinks top_p after every token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]

from ftnative.convert import convert  # noqa: E402
from ftnative.decode import load  # noqa: E402
from tests.test_ftnative import PROMPT, make_model  # noqa: E402

NEW = 24


@pytest.fixture(scope="module", params=["gpt", "llama"])
def pair(request, tmp_path_factory):
    """A tiny model and its shards at tp 2, decoded rank by rank."""
    directory = tmp_path_factory.mktemp(request.param)
    model = make_model(directory / "hf", request.param, seed=7)
    model.generation_config.eos_token_id = None  # always NEW tokens on both sides
    return model, load(convert(directory / "hf", directory / "ft", request.param, 2, "fp32", log=lambda _m: None))


def hf_generate(model, **kwargs):
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_scores=True, **kwargs)  # fmt: skip
    scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0].numpy()
    return out.sequences[0, len(PROMPT) :].tolist(), scores


def test_repetition_penalty_equals_transformers(pair):
    model, ours = pair
    plain, _ = hf_generate(model)
    expected, _ = hf_generate(model, repetition_penalty=1.8)
    assert expected != plain  # the penalty changes this model's answer: the comparison has teeth
    assert ours.generate(PROMPT, NEW, repetition_penalty=1.8) == expected


def test_presence_penalty_is_subtracted_once_from_each_token_in_the_sequence(pair):
    """FT's additive penalty (OpenAI's presence_penalty): every token already in the sequence,
    prompt included, has the penalty subtracted from its logit once, however often it occurs
    (batchApplyRepetitionPenalty's Additive type, after the temperature). Computed here from
    transformers' raw logits at each step."""
    model, ours = pair
    plain, _ = hf_generate(model)
    sequence = list(PROMPT)
    with torch.no_grad():
        for _ in range(NEW):
            logits = model(torch.tensor([sequence])).logits[0, -1].double()
            logits[sorted(set(sequence))] -= 1.5
            sequence.append(int(torch.argmax(logits)))
    expected = sequence[len(PROMPT) :]
    assert expected != plain  # the penalty changes this model's answer: the comparison has teeth
    assert ours.generate(PROMPT, NEW, presence_penalty=1.5) == expected


def test_bad_words_equal_transformers(pair):
    model, ours = pair
    plain, _ = hf_generate(model)
    # a one-token bad word that greedy decoding would write, and a two-token one it writes later
    bad = [[plain[0]], plain[3:5]]
    expected, _ = hf_generate(model, bad_words_ids=bad)
    assert expected != plain
    assert ours.generate(PROMPT, NEW, bad=bad) == expected


def test_log_probabilities_equal_transformers_scores(pair):
    model, ours = pair
    expected, scores = hf_generate(model)
    # top-p sampling with a tiny top_p takes the most likely token, and FT's output_log_probs is then
    # the token's full log probability: transformers' normalized score
    steps = list(ours.steps(PROMPT, NEW, top_k=0, top_p=1e-6))
    assert [s.token for s in steps] == expected
    np.testing.assert_allclose([s.log_prob for s in steps], scores, atol=1e-4)
    np.testing.assert_allclose(steps[-1].cum_log_prob, scores.sum(), atol=1e-4)
    # greedy is top-k with k 1: FT's output_log_probs is log P(token | top-1) = 0, cum_log_probs the full sum
    greedy = list(ours.steps(PROMPT, NEW, top_k=1))
    assert [s.token for s in greedy] == expected
    assert all(s.log_prob == 0.0 for s in greedy)
    np.testing.assert_allclose(greedy[-1].cum_log_prob, scores.sum(), atol=1e-4)


def test_temperature_and_repetition_penalty_shape_the_log_probabilities(pair):
    """FT divides the logits by the temperature, then penalises repeats, and the log probabilities
    are those of the processed logits. transformers applies temperature only when sampling, so its
    own processors are applied here to its raw logits at each step (for a multiplicative penalty
    and a positive temperature the order of the two does not matter)."""
    model, ours = pair
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                             repetition_penalty=1.3, return_dict_in_generate=True, output_logits=True)  # fmt: skip
    sequence = out.sequences[0]
    penalty = transformers.RepetitionPenaltyLogitsProcessor(1.3)
    temperature = transformers.TemperatureLogitsWarper(0.7)
    expected = []
    for step, raw in enumerate(out.logits):
        so_far = sequence[: len(PROMPT) + step].unsqueeze(0)
        processed = temperature(so_far, penalty(so_far, raw.clone()))
        expected.append(float(torch.log_softmax(processed, -1)[0, sequence[len(PROMPT) + step]]))
    steps = list(ours.steps(PROMPT, NEW, top_k=0, top_p=1e-6, temperature=0.7, repetition_penalty=1.3))
    assert [s.token for s in steps] == sequence[len(PROMPT) :].tolist()
    np.testing.assert_allclose([s.log_prob for s in steps], expected, atol=1e-4)


def test_top_p_decay_narrows_to_the_most_likely_token(pair):
    """top_p_decay 0 with top_p_min tiny: after the first (sampled) token top_p is ~0, so every
    later token is the most likely one (computeToppDecay); a reset token restores top_p."""
    _, ours = pair
    for seed in range(5):
        steps = [s.token for s in ours.steps(PROMPT, NEW, top_k=0, top_p=0.95, seed=seed, top_p_decay=0.0,
                                             top_p_min=1e-9)]  # fmt: skip
        assert steps[1:] == ours.generate([*PROMPT, steps[0]], NEW - 1), seed
    sampled = {tuple(ours.generate(PROMPT, NEW, top_k=0, top_p=0.95, seed=seed)) for seed in range(5)}
    assert len(sampled) > 1  # without the decay the same seeds sample different answers


def test_sampling_is_reproducible_by_seed(pair):
    _, ours = pair
    first = ours.generate(PROMPT, NEW, top_k=8, top_p=0.9, temperature=0.9, seed=42)
    assert first == ours.generate(PROMPT, NEW, top_k=8, top_p=0.9, temperature=0.9, seed=42)
    assert len({tuple(ours.generate(PROMPT, NEW, top_k=8, seed=s)) for s in range(6)}) > 1


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_search_equals_transformers(pair, length_penalty):
    """FT's GPT beam search (beam_width 3) against transformers' num_beams 3, every beam and its
    cum_log_probs: without an end token both keep the best beams by their sum of log probabilities
    and all beams have one length, so the length penalty does not reorder them."""
    model, ours = pair
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False, num_beams=3,
                             num_return_sequences=3, length_penalty=length_penalty, pad_token_id=0,
                             return_dict_in_generate=True, output_scores=True)  # fmt: skip
    beams = ours.beam_search(PROMPT, NEW, 3, len_penalty=length_penalty)
    assert [b.tokens[len(PROMPT) :] for b in beams] == [s[len(PROMPT) :].tolist() for s in out.sequences]
    assert beams[0].cum >= list(ours.steps(PROMPT, NEW))[-1].cum_log_prob  # at least as likely as greedy
    # transformers' sequences_scores: the sum divided by the GENERATED length ** penalty (FT ranks a
    # finished beam against live ones by the length with the prompt: the two differ there)
    length = NEW if length_penalty else 1
    np.testing.assert_allclose([b.cum / length**length_penalty for b in beams], out.sequences_scores.numpy(),
                               atol=1e-4, rtol=1e-5)  # fmt: skip
    assert all(len(b.log_probs) == NEW and abs(sum(b.log_probs) - b.cum) < 1e-6 for b in beams)


def test_beam_search_diversity_rate_penalises_a_beams_lower_proposals(pair):
    """beam_search_diversity_rate adds rate * k to the k-th proposal of each beam (FT's
    batch_topk_kernel): 0 changes nothing, a strong negative rate spreads the beams over
    different parents, so the set of beams changes."""
    _, ours = pair
    plain = ours.beam_search(PROMPT, NEW, 3)
    assert [b.tokens for b in ours.beam_search(PROMPT, NEW, 3, diversity_rate=0.0)] == [b.tokens for b in plain]
    diverse = ours.beam_search(PROMPT, NEW, 3, diversity_rate=-5.0)
    assert [b.tokens for b in diverse] != [b.tokens for b in plain]

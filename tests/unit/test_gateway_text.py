"""A streamed completion's text decoded a window at a time (ftgateway.generation.TextSoFar) adds up
to the whole sequence decoded, with real tokenizers: the lab's byte-level BPEs (GPT-2's and
GPT-NeoX's kind) and a LLaMA-like SentencePiece one (Metaspace, byte fallback, the leading space
stripped) trained here."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from ftgateway.generation import TextSoFar

ROOT = Path(__file__).resolve().parents[2]
TEXT = [
    "Every role does one job and documents its own variables in its defaults.",
    "Ansible automation that takes bare GPU hosts to serving large language models — vite, naïve café ünd 日本語.",
    "Tokens stream from FasterTransformer through Triton to the gateway, which sends text as it becomes whole.",
]


def sentencepiece_like() -> Tokenizer:
    """LLaMA's tokenizer.json shape: BPE over Metaspace pieces with byte fallback; decoding turns
    '▁' into spaces, fuses bytes and strips the first leading space."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])  # fmt: skip
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", *bytes_])
    tokenizer.train_from_iterator(TEXT * 20, trainer)
    return tokenizer


TOKENIZERS = {
    "tiny-gpt2": lambda: Tokenizer.from_file(str(ROOT / "lab/models/tiny-gpt2/tokenizer.json")),
    "tiny-neox": lambda: Tokenizer.from_file(str(ROOT / "lab/models/tiny-neox/tokenizer.json")),
    "sentencepiece-like": sentencepiece_like,
}


def stream(tokenizer: Tokenizer, prompt: list[int], new: list[int]) -> list[tuple[str, str]]:
    """Each step as the gateway runs it: (the text so far, the whole completion decoded) where
    the step added text."""
    so_far, prompt_text, added = TextSoFar(len(prompt)), tokenizer.decode(prompt), []
    for k in range(1, len(new) + 1):
        ids = prompt + new[:k]
        start, lengths = so_far.window(len(ids))
        before, after = (tokenizer.decode(ids[start : start + n]) for n in lengths)
        if so_far.advance(before, after, len(ids)):
            whole = tokenizer.decode(ids)
            added.append((so_far.text, whole[len(prompt_text) :] if whole.startswith(prompt_text) else None))
    return added


@pytest.mark.parametrize("name", TOKENIZERS)
def test_the_windows_add_up_to_the_whole_decode_for_text(name):
    tokenizer = TOKENIZERS[name]()
    for line in TEXT:
        ids = tokenizer.encode(line).ids
        for cut in (1, 3, len(ids) // 2):
            steps = stream(tokenizer, ids[:cut], ids[cut:])
            assert steps, f"{name}: no step added text"
            assert all(text == whole for text, whole in steps), f"{name}, prompt of {cut}: {steps[-3:]}"
            assert steps[-1][0] == tokenizer.decode(ids)[len(tokenizer.decode(ids[:cut])) :]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_the_windows_add_up_for_random_ids(name):
    """Random ids: partial characters, orphan bytes and special tokens mid-answer."""
    tokenizer, rng = TOKENIZERS[name](), random.Random(7)
    size = tokenizer.get_vocab_size()
    for _ in range(30):
        prompt = [rng.randrange(size) for _ in range(rng.randrange(0, 12))]
        new = [rng.randrange(size) for _ in range(40)]
        for text, whole in stream(tokenizer, prompt, new):
            assert whole is None or text == whole, (prompt, new)


def test_a_partial_character_waits_for_its_last_byte():
    tokenizer = TOKENIZERS["tiny-gpt2"]()
    ids = tokenizer.encode("a 日").ids
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd"), "the fixture needs a character split over tokens"
    so_far = TextSoFar(1)
    start, lengths = so_far.window(len(ids) - 1)
    before, after = (tokenizer.decode(ids[start : start + n]) for n in lengths)
    assert not so_far.advance(before, after, len(ids) - 1)
    assert so_far.text == ""
    start, lengths = so_far.window(len(ids))
    before, after = (tokenizer.decode(ids[start : start + n]) for n in lengths)
    assert so_far.advance(before, after, len(ids))
    assert so_far.text == " 日"


def test_a_window_that_does_not_extend_its_earlier_text_adds_nothing():
    so_far = TextSoFar(10)
    assert so_far.window(12) == (4, [6, 8])
    assert not so_far.advance("abc", "abd", 12)
    assert not so_far.advance("abc", "abc", 12)
    assert so_far.advance("abc", "abcde", 12)
    assert (so_far.text, so_far.window(13)) == ("de", (10, [2, 3]))

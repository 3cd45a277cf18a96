"""The model's own tokenizer in the gateway's process: what the model repository's preprocessing
and postprocessing models compute, without a call to tritonserver for each prompt and each
streamed step.

Those models run transformers' AutoTokenizer on the checkpoint's files; for a checkpoint with a
tokenizer.json that is the Rust `tokenizers` library on the same file, which this uses directly
(encode with the special tokens its post-processor adds, decode keeping special tokens, as
transformers' decode() does by default). What transformers may add on top (its
clean_up_tokenization_spaces, whose default changed between releases; a slow tokenizer class) is
not guessed: the gateway compares this tokenizer with the two models on probe texts before it
uses it (tokenizing.py) and keeps calling the models where any differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# Texts whose tokens and decoding tell tokenizers apart: spaces before punctuation and
# contractions (transformers' clean-up), leading and repeated spaces, digits, newlines, and
# characters of several bytes (Korean for KoGPT, a CJK ideograph, an emoji).
PROBES = (
    "Every role of a fleet , isn't it ? Yes . It 's 2026 !",
    " leading space and  two   spaces\nnew line\ttab",
    "한국어 문장입니다. 模型 ✓ 🚀 café naïve",
    "<|endoftext|> </s> <s> plain words after special tokens",
)


# The checkpoint's files that the gateway reads for tokenizing and special tokens.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json",
                   "generation_config.json", "tokenizer.model")  # fmt: skip


def files_fingerprint(directory: str | Path) -> tuple:
    """What TOKENIZER_FILES are in `directory` now (each one's inode, size and modification time):
    a checkout of another revision that changes any of them changes this."""
    found = []
    for name in TOKENIZER_FILES:
        try:
            st = (Path(directory) / name).stat()
        except OSError:
            found.append((name, None))
            continue
        found.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def vocabulary_size(directory: str | Path) -> int | None:
    """The model's vocabulary (config.json's vocab_size): the token ids a request may name are
    below it. None where config.json does not say."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    size = config.get("vocab_size") if isinstance(config, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def end_id(directory: str | Path) -> int | None:
    """FT's end id: config.json's eos_token_id, as the conversion writes it into config.ini
    (ftdomain.ft.model). None where config.json does not give one id."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("eos_token_id") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def special_ids(directory: str | Path) -> frozenset[int]:
    """The ids whose text no answer carries (as vLLM's and TGI's skip_special_tokens): the special
    tokens the tokenizer declares (tokenizer.json's added tokens, tokenizer_config.json's
    added_tokens_decoder), the ids config.json and generation_config.json give for bos, eos and
    pad, and the early LLaMA conversions' <unk>, <s>, </s> (0, 1, 2 of their tokenizer.model)."""
    path = Path(directory)

    def read(name: str) -> dict:
        try:
            data = json.loads((path / name).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    ids = {int(t["id"]) for t in read("tokenizer.json").get("added_tokens") or [] if t.get("special")}
    tokenizer_config = read("tokenizer_config.json")
    decoder = tokenizer_config.get("added_tokens_decoder") or {}
    ids |= {int(key) for key, token in decoder.items() if isinstance(token, dict) and token.get("special")}
    for name in ("config.json", "generation_config.json"):
        config = read(name)
        for field in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = config.get(field)
            for one in value if isinstance(value, list) else [value]:
                if isinstance(one, int) and not isinstance(one, bool) and one >= 0:
                    ids.add(one)
    if tokenizer_config.get("tokenizer_class") == "LLaMATokenizer":
        ids |= {0, 1, 2}
    return frozenset(ids)


class LocalTokenizer:
    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415 - only where a tokenizer.json exists

        self.directory = Path(directory)
        self.tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))

    @classmethod
    def load(cls, directory: str) -> tuple[LocalTokenizer | None, str]:
        """The tokenizer, or None and why not (the gateway then calls the models)."""
        if not directory:
            return None, "no tokenizer_dir set"
        path = Path(directory)
        if not (path / "tokenizer.json").is_file():
            return None, f"{path} has no tokenizer.json (a slow tokenizer: the models tokenize)"
        config_file = path / "tokenizer_config.json"
        try:
            config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        except (OSError, ValueError) as err:
            return None, f"{config_file}: {err}"
        if config.get("tokenizer_class") == "LLaMATokenizer":  # the models load the slow LlamaTokenizer
            return None, "early LLaMA tokenizer (LLaMATokenizer): the models tokenize"
        try:
            return cls(path), "tokenizer.json"
        except Exception as err:  # a file tokenizers cannot read: the models still can
            return None, f"{path / 'tokenizer.json'}: {err}"

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=special).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def word_list(self, words: list[str]) -> np.ndarray:
        """FT's stop_words_list or bad_words_list for one request of these words (word_list_of)."""
        return word_list_of([self.encode(word, special=False) for word in words])


def word_list_of(sequences: list[list[int]]) -> np.ndarray:
    """FT's stop_words_list or bad_words_list for one request, [1, 2, w]: the sequences' ids one
    after the other, then their end offsets, padded with 0 and -1 (the preprocessing model's layout)."""
    ids, offsets = [], []
    for sequence in sequences:
        ids += sequence
        offsets.append(len(ids))
    width = max(1, len(ids), len(offsets))
    out = np.zeros((1, 2, width), dtype=np.int32)
    out[:, 1, :] = -1
    out[0, 0, : len(ids)] = ids
    out[0, 1, : len(offsets)] = offsets
    return out


def sequences_of(word_list: np.ndarray) -> list[list[int]]:
    """The id sequences of one request's FT word list ([1, 2, w] or [2, w]): word_list_of's inverse."""
    ids, offsets = word_list.reshape(2, -1)
    sequences, start = [], 0
    for end in offsets:
        if end < 0:
            break
        sequences.append([int(i) for i in ids[start:end]])
        start = int(end)
    return sequences

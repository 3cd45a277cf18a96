"""ftgateway.tokenizing: the local tokenizer's verification against the models after the
transport's resets, and through an outage of tritonserver (no server: a transport that answers
as the preprocessing model would, or cannot be reached)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

from ftgateway import tokenizing
from ftgateway.tokenizing import Tokenizing


class Local:
    """A local tokenizer: one id per character."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(map(chr, ids))

    def word_list(self, words: list[str]) -> np.ndarray:
        return np.array([len(w) for w in words])


class Transport:
    """tritonserver's models as the gateway's transport sees them: equal to Local, or gone."""

    def __init__(self) -> None:
        self.resets, self.down = 0, False

    async def tokenize(self, probe: str, stops: list[str], _count: int) -> SimpleNamespace:
        if self.down:
            raise OSError("connection refused")
        return SimpleNamespace(ids=np.array([Local().encode(probe)]), stop_ids=Local().word_list(stops))

    async def detokenize_prefixes(self, sequence: np.ndarray, lengths: list[int]) -> list[str]:
        ids = sequence.reshape(-1).tolist()
        return [Local().decode(ids[:n]) for n in lengths]


def test_a_verified_tokenizer_is_not_loaded_again_through_an_outage(monkeypatch) -> None:
    loads = []

    def load(directory: str):
        loads.append(directory)
        return Local(), ""

    monkeypatch.setattr(tokenizing.LocalTokenizer, "load", staticmethod(load))
    transport = Transport()
    backend = Tokenizing(transport, "/srv/tokenizer")

    async def main() -> list:
        seen = [await backend.use_local(), backend.tokenizing_locally]
        transport.resets, transport.down = 1, True  # tritonserver gone: the transport reset
        seen += [await backend.use_local() for _ in range(3)]
        seen.append(backend.tokenizing_locally)  # decodes offline, not verified against this server
        transport.down = False
        transport.resets = 2  # back: compared again
        seen += [await backend.use_local(), backend.tokenizing_locally]
        return seen

    assert asyncio.run(main()) == [True, True, True, True, True, False, True, True]
    assert loads == ["/srv/tokenizer"]  # read once: its files did not change

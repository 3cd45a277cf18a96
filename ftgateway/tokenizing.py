"""Who tokenizes: the model's tokenizer in this process (tokens.py), or the model repository's
preprocessing and postprocessing models through the transport (triton.py).

The local tokenizer is used once it has been found equal to the two models on probe texts (ids,
stop words, decoded text), and verified again whenever the transport forgot what it had read from
tritonserver (a failed call, a tritonserver that is not ready: it may serve another repository when
it comes back). Serving (generation.py) calls this layer; the transport only moves tensors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import numpy as np
from tritonclient.utils import InferenceServerException

from .sampling import Sampling
from .tokens import PROBES, LocalTokenizer
from .triton import Step, Tokens, Triton

log = logging.getLogger("uvicorn.error")  # uvicorn's own log: the unit's journal

STOPS = [" isn't", " ?"]  # the probes' stop words; no comma: the preprocessing model splits on commas


class Tokenizing:
    """The backend as serving sees it: the transport, with tokenizing and detokenizing done here
    where the local tokenizer agrees with the models, by the models otherwise."""

    def __init__(self, transport: Triton, tokenizer_dir: str = "") -> None:
        self.transport, self.tokenizer_dir = transport, tokenizer_dir
        self.local: LocalTokenizer | None = None
        self.reason = "not verified yet"
        self._verified_at: int | None = None  # the transport's resets when last verified
        self._ok = False
        self._verifying = asyncio.Lock()

    def invalidate(self) -> None:
        """The tokenizer's files changed (another revision checked out): load and verify it again
        on next use, as after the transport's reset."""
        self._verified_at, self._ok = None, False

    async def use_local(self) -> bool:
        """Whether to tokenize in this process; checked on first use and after the transport reset."""
        if not self.tokenizer_dir:
            return False
        if self._verified_at != self.transport.resets:
            async with self._verifying:
                if self._verified_at != self.transport.resets:
                    seen = self.transport.resets
                    # A tokenizer verified before, whose files did not change (invalidate() was
                    # not called), is compared again as it is: loading it again reads nothing new.
                    verified = self.decodes_offline
                    if not verified:
                        self.local, self.reason = LocalTokenizer.load(self.tokenizer_dir)
                    try:
                        differs = await self._differs() if self.local else self.reason
                    except (InferenceServerException, OSError):
                        if not verified:
                            raise
                        # tritonserver is gone (a generation continues on another host): the
                        # verified tokenizer decodes until it is back and can be compared again.
                        return True
                    self.reason = differs or "equal to the preprocessing and postprocessing models"
                    self._ok, self._verified_at = not differs, seen
                    log.info("tokenizer in the gateway: %s (%s)", "on" if self._ok else "off", self.reason)
        return self._ok

    @property
    def decodes_offline(self) -> bool:
        """Whether the local tokenizer was found equal to the models for the checkpoint's files as
        they are: it may decode while tritonserver is away (its verdict stands until they change)."""
        return self._ok and self._verified_at is not None and self.local is not None

    async def _differs(self) -> str:
        """What the local tokenizer does differently from the models on the probes ("" if nothing)."""
        assert self.local is not None
        for probe in PROBES:
            remote = await self.transport.tokenize(probe, STOPS, 1)
            ids = self.local.encode(probe)
            if remote.ids.reshape(-1).tolist() != ids:
                return f"tokens of {probe!r} differ from the preprocessing model's"
            if not np.array_equal(remote.stop_ids, self.local.word_list(STOPS)):
                return "stop words' tokens differ from the preprocessing model's"
            sequence = np.array(ids, dtype=np.uint32).reshape(1, 1, -1)
            lengths = list(range(len(ids) + 1))
            if await self.transport.detokenize_prefixes(sequence, lengths) != [
                self.local.decode(ids[:n]) for n in lengths
            ]:
                return f"decoding {probe!r} differs from the postprocessing model's"
        return ""

    @property
    def tokenizing_locally(self) -> bool:
        return self._ok and self._verified_at == self.transport.resets

    async def tokenize(self, prompt: str, stop: list[str], max_tokens: int, bad: tuple[str, ...] = ()) -> Tokens:
        if await self.use_local():
            assert self.local is not None
            ids = self.local.encode(prompt)
            return Tokens(ids=np.array([ids], dtype=np.uint32), count=len(ids),
                          stop_ids=self.local.word_list(stop) if stop else None,
                          bad_ids=self.local.word_list(list(bad)) if bad else None)  # fmt: skip
        return await self.transport.tokenize(prompt, stop, max_tokens, bad)

    async def detokenize(self, output_ids: np.ndarray, length: int) -> str:
        return (await self.detokenize_prefixes(output_ids, [length]))[0]

    async def detokenize_prefixes(self, output_ids: np.ndarray, lengths: list[int]) -> list[str]:
        """One sequence ([1, 1, L]) decoded up to each of `lengths`."""
        if await self.use_local():
            assert self.local is not None
            ids = output_ids.reshape(-1).tolist()
            return [self.local.decode(ids[:n]) for n in lengths]
        return await self.transport.detokenize_prefixes(output_ids, lengths)

    # The rest is the transport's.
    async def ready(self) -> tuple[bool, str]:
        return await self.transport.ready()

    async def decoupled(self) -> bool:
        return await self.transport.decoupled()

    async def search(self, tokens: Tokens, max_tokens: int, params: Sampling, beam_width: int,
                     len_penalty: float) -> list[Step]:  # fmt: skip
        return await self.transport.search(tokens, max_tokens, params, beam_width, len_penalty)

    def generate(self, tokens: Tokens, max_tokens: int, params: Sampling) -> AsyncIterator[Step]:
        return self.transport.generate(tokens, max_tokens, params)

    async def close(self) -> None:
        await self.transport.close()

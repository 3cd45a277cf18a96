"""A generation that outlives its tritonserver: when the local tritonserver fails during a
generation (killed, out of memory, a driver reset, restarting), the rest of it comes from another
host of the same model, and the client's stream or request goes on as if nothing happened.

The other host's gateway (a peer, its address from the inventory) runs the prompt followed by
every token generated so far as a new request, for the tokens still owed, with the same sampling
inputs (the seed advanced by the tokens generated, so that a sampled continuation is reproducible;
greedy decoding gives the very tokens the uninterrupted run would have). The two gateways speak
JSON over HTTP(S), the fleet's TLS where the gateways serve it:

    POST /internal/v1/continue    {model, ids, max_tokens, sampling, stop_ids, bad_ids}
        -> 200 once the peer's model answered its first step, then one JSON line per step:
           {"ids": [the new tokens so far]} (with "log_probs" when asked), or {"error": {...}}
    POST /internal/v1/detokenize  {model, ids, lengths} -> {"texts": [...]}

The second serves a gateway that decodes with the model repository's postprocessing model (no
local tokenizer): its own is gone with its tritonserver. Both routes take the fleet's key
(fleet_key_file), never a client's, so that a key's limits count the request once.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import random
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
from tritonclient.utils import InferenceServerException

from .config import Peer, Settings
from .errors import UNAVAILABLE, UNLOADING, PeerFailed, bearer_token
from .sampling import Sampling, continued
from .triton import Step, Tokens

CONTINUE, DETOKENIZE = "/internal/v1/continue", "/internal/v1/detokenize"
# A broken stream to tritonserver (killed mid-generation: "Socket closed", "Stream removed"): gRPC
# reports it as one of these. A request the server refused (INVALID_ARGUMENT) or one that ran out
# of time (DEADLINE_EXCEEDED) would fare no better elsewhere.
BROKEN = (*UNAVAILABLE, "StatusCode.CANCELLED", "StatusCode.UNKNOWN", "StatusCode.INTERNAL")
BROKEN_INTERNAL = ("Stream removed", "RST_STREAM", "Socket closed", "Broken pipe", "Connection reset")


def broken(err: BaseException) -> bool:
    """Whether a failure of the local tritonserver is one that another host may continue past:
    the server went away or restarts, not a refusal of this request or a timeout."""
    if isinstance(err, InferenceServerException):
        status, message = str(err.status()), err.message() or ""
        if any(words in message for words in UNLOADING):
            return True
        if status == "StatusCode.INTERNAL":
            return any(words in message for words in BROKEN_INTERNAL)
        return status in BROKEN
    if isinstance(err, PeerFailed):
        return err.broken
    return isinstance(err, OSError) and not isinstance(err, TimeoutError)


def _word_list(array: np.ndarray | None) -> list | None:
    return None if array is None else array.reshape(2, -1).tolist()


class Continuing:
    """The origin's side: the peers, the fleet key, at most `most` continuations per request."""

    def __init__(self, settings: Settings) -> None:
        self.model, self.peers, self.most = settings.model, settings.peers, settings.continuations
        self.timeout, self.ca_file = settings.request_timeout_s, settings.peer_ca_file
        self.key = Path(settings.fleet_key_file).read_text().strip() if settings.fleet_key_file else ""
        self._clients: dict[str, httpx.AsyncClient] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.peers and self.key and self.most > 0)

    def why_off(self) -> str:
        if not self.peers:
            return "no other host serves this model (peers)"
        if not self.key:
            return "no fleet key (fleet_key_file)"
        return "continuations is 0"

    def authorized(self, header: str) -> bool:
        """Whether an Authorization header carries the fleet key (the internal routes' only key)."""
        return bool(self.key) and hmac.compare_digest(bearer_token(header), self.key)

    def client(self, peer: Peer) -> httpx.AsyncClient:
        """One client per peer, made inside the server's event loop and kept (its connections too)."""
        if peer.url not in self._clients:
            verify: ssl.SSLContext | bool = True
            if peer.url.startswith("https://"):
                verify = ssl.create_default_context(cafile=self.ca_file or None)
            self._clients[peer.url] = httpx.AsyncClient(
                base_url=peer.url, verify=verify, headers={"Authorization": f"Bearer {self.key}"},
                timeout=httpx.Timeout(self.timeout, connect=2.0))  # fmt: skip
        return self._clients[peer.url]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    def start(self, revision: str | None = None) -> Continuation:
        """One request's continuations, of the generation that `revision` began (a peer that serves
        another revision refuses it: an answer is all one revision's)."""
        return Continuation(self, revision)


class Continuation:
    """One request's continuations: the peers tried, the one that continues now (whose
    postprocessing decodes when this gateway has no local tokenizer), and how many there were."""

    def __init__(self, continuing: Continuing, revision: str | None = None) -> None:
        self.continuing, self.revision, self.count = continuing, revision, 0
        self.tried: list[str] = []
        self.peer: Peer | None = None

    def _extensions(self, peer: Peer) -> dict[str, str]:
        return {"sni_hostname": peer.tls_name} if peer.tls_name and peer.url.startswith("https://") else {}

    def _candidates(self) -> list[Peer]:
        """The peers not tried yet for this request, in random order (spreading the failed host's
        requests over the others)."""
        rest = [p for p in self.continuing.peers if p.url not in self.tried]
        random.shuffle(rest)
        return rest

    async def steps(self, tokens: Tokens, last: Step | None, max_tokens: int, params: Sampling) -> AsyncIterator[Step]:
        """The rest of the generation from the first peer that takes it, as steps of the local
        model's shape: the whole sequence from the prompt on, the log probabilities of every new
        token. PeerFailed when no peer takes it, or when the one that took it fails mid-way."""
        self.count += 1
        ids = (tokens.ids.reshape(-1)[: tokens.count] if last is None
               else last.output_ids.reshape(-1)[: last.sequence_length]).astype(np.uint32)  # fmt: skip
        generated = len(ids) - tokens.count
        earlier = None if last is None or last.log_probs is None else np.asarray(last.log_probs).reshape(-1)[:generated]
        owed = max_tokens - generated
        if owed <= 0:  # every token was generated; only tritonserver's last word was lost
            return
        body = {"model": self.continuing.model, "ids": ids.tolist(), "max_tokens": owed,
                "sampling": dataclasses.asdict(continued(params, generated)),
                "stop_ids": _word_list(tokens.stop_ids), "bad_ids": _word_list(tokens.bad_ids),
                "revision": self.revision}  # fmt: skip
        reasons = []
        for peer in self._candidates():
            self.tried.append(peer.url)
            client = self.continuing.client(peer)
            try:
                request = client.build_request("POST", CONTINUE, json=body, extensions=self._extensions(peer))
                answer = await client.send(request, stream=True)
            except httpx.HTTPError as err:
                reasons.append(f"{peer.url}: {type(err).__name__}: {err}")
                continue
            if answer.status_code != 200:
                text = (await answer.aread()).decode(errors="replace")
                await answer.aclose()
                reasons.append(f"{peer.url}: HTTP {answer.status_code} {_message(text)}")
                if answer.status_code == 400:  # the request itself: no peer would take it
                    raise PeerFailed(f"the generation cannot go on on another host: {_message(text)}", broken=False)
                continue
            self.peer = peer
            async for step in self._read(answer, peer, ids, earlier):
                yield step
            return
        raise PeerFailed("no other host of the model could continue the generation"
                         + (f": {'; '.join(reasons)}" if reasons else ""), broken=False)  # fmt: skip

    async def _read(self, answer: httpx.Response, peer: Peer, ids: np.ndarray,
                    earlier: np.ndarray | None) -> AsyncIterator[Step]:  # fmt: skip
        try:
            async for line in answer.aiter_lines():
                if not line:
                    continue
                item = json.loads(line)
                if "error" in item:
                    raise PeerFailed(f"{peer.url} failed mid-way: {item['error'].get('message')}", broken=True)
                new = np.asarray(item["ids"], dtype=np.uint32)
                output = np.concatenate([ids, new]).reshape(1, 1, -1)
                log_probs = None
                if item.get("log_probs") is not None:
                    log_probs = np.concatenate([earlier if earlier is not None else np.zeros(0, np.float32),
                                                np.asarray(item["log_probs"], dtype=np.float32)])  # fmt: skip
                yield Step(output_ids=output, sequence_length=output.shape[-1], log_probs=log_probs)
        except httpx.HTTPError as err:
            raise PeerFailed(f"{peer.url} went away mid-way: {type(err).__name__}: {err}", broken=True) from err
        finally:
            await answer.aclose()

    async def detokenize_prefixes(self, output_ids: np.ndarray, lengths: list[int]) -> list[str]:
        """The continuing peer's postprocessing of one sequence up to each of `lengths`."""
        peer = self.peer
        if peer is None:
            raise PeerFailed("no peer continues this generation: nothing can decode it", broken=False)
        client = self.continuing.client(peer)
        body = {"model": self.continuing.model, "ids": output_ids.reshape(-1).tolist(), "lengths": lengths}
        try:
            answer = await client.post(DETOKENIZE, json=body, extensions=self._extensions(peer))
        except httpx.HTTPError as err:
            raise PeerFailed(f"{peer.url} could not decode: {type(err).__name__}: {err}", broken=False) from err
        if answer.status_code != 200:
            raise PeerFailed(f"{peer.url} could not decode: HTTP {answer.status_code} {_message(answer.text)}",
                             broken=False)  # fmt: skip
        return list(answer.json()["texts"])

    async def detokenize(self, output_ids: np.ndarray, length: int) -> str:
        return (await self.detokenize_prefixes(output_ids, [length]))[0]


def _message(text: str) -> str:
    """An error answer's message (OpenAI's shape), or its text cut short."""
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:200]


class Clock:
    """The time a continuation added: from the local failure to the first step from a peer."""

    def __init__(self) -> None:
        self.since: float | None = None

    def failed(self) -> None:
        self.since = time.monotonic()

    def took(self) -> float | None:
        """Seconds since the failure, once (None when nothing failed since the last call)."""
        if self.since is None:
            return None
        took, self.since = time.monotonic() - self.since, None
        return took

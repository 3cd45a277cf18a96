"""The model repository's steps over gRPC: preprocessing -> fastertransformer -> postprocessing.

The gateway runs the three steps itself (the ensemble takes the sampling inputs too, as upstream's,
but streaming token by token needs the steps apart); whether it tokenizes in its own process
instead of calling the first and last is tokenizing.py's choice, not the transport's. When the
fastertransformer model is decoupled (triton_model_repo_decoupled), it answers a stream of
responses, one per generated step, each with the sequence so far; otherwise one response with the
whole sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from .sampling import Sampling, ft_inputs

MODELS = ("preprocessing", "fastertransformer", "postprocessing")


@contextlib.asynccontextmanager
async def closing(steps: AsyncIterator) -> AsyncIterator:
    """An async generator closed when the block ends, however it ends (contextlib.aclosing is
    Python 3.10's; hosts have 3.9). A generation whose reader stopped (a client that left, a
    slice's end) closes each layer under it at once, down to _answers, whose gRPC call is then
    released and cancelled (grpc cancels a call it collects; nothing holds it), rather than
    whenever the collector gets to a chain of generators held in a reference cycle."""
    try:
        yield steps
    finally:
        await steps.aclose()


# Triton's types of the sampling inputs (sampling.Sampling's fields) as numpy's.
NUMPY = {"UINT32": np.uint32, "UINT64": np.uint64, "INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_}


# gRPC waits longer and longer between attempts to reach a server that refuses (up to 120 s by
# default): a tritonserver back after minutes (a restart limit, a large model's load) was served
# again only up to two minutes later (seen on the lab). At most 2 s here: the server is local.
RECONNECT_BACKOFF_MS = (500, 2000)


# The fastertransformer config's parameter that names the revision its shards were made from.
REVISION_PARAMETER = "ftfleet_revision"


def channel_args() -> list[tuple[str, int]]:
    """tritonclient's own channel options (message sizes, keepalive), with a short reconnect backoff."""
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
    ]


def _tensor(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _length_tensor(lengths: list[int], declared: str) -> grpcclient.InferInput:
    """sequence_length as the postprocessing model declares it: INT32 for GPT, GPT-J and BLOOM
    (as FT answers it), UINT32 for the others (ftdomain/ft/interface.py)."""
    kind = "INT32" if declared.removeprefix("TYPE_") == "INT32" else "UINT32"
    return _tensor("sequence_length", np.array([lengths], dtype=np.int32 if kind == "INT32" else np.uint32), kind)


@dataclass
class Tokens:
    ids: np.ndarray  # [1, n] uint32
    count: int
    stop_ids: np.ndarray | None  # [1, 2, w] int32 (FT's stop_words_list) or None
    bad_ids: np.ndarray | None = None  # [1, 2, w] int32 (FT's bad_words_list) or None
    # The prompt as the model's tokenizer decodes its ids: filled by the first detokenization of
    # a step (the same postprocessing call), not by a call of its own.
    text: str | None = None


@dataclass
class Step:
    output_ids: np.ndarray  # [1, 1, L] uint32, prompt included
    sequence_length: int
    log_probs: np.ndarray | None = None  # FT's output_log_probs of each new token, when asked


class Triton:
    def __init__(self, url: str, timeout_s: float, final_response: bool = True) -> None:
        self.url, self.timeout = url, timeout_s
        # Whether tritonserver marks a decoupled answer's last response (triton_final_response,
        # from Triton 23.06 on). Without it the answer's end is read from the answer (_answers).
        self.final_response = final_response
        self._client: grpcclient.InferenceServerClient | None = None
        # Read from tritonserver once and kept until a call fails or the health check finds it
        # not ready: a restarted tritonserver may serve another repository (a decoupled model or
        # not, another family's postprocessing inputs), and it is unavailable while it restarts.
        # `resets` counts those times (tokenizing.py verifies the local tokenizer again after one).
        self._post_inputs: dict[str, str] | None = None
        self._decoupled: bool | None = None
        self.resets = 0
        # What decoupled() read last, kept when tritonserver goes away: how a generation that
        # another host continues is streamed to its client (continuing.py).
        self.was_decoupled: bool | None = None
        # The revision the loaded fastertransformer model was converted from (its config's
        # ftfleet_revision parameter, which role triton_model_repo writes), read with decoupled:
        # what answered, for OpenAI's system_fingerprint and a continuation's peer. None: not read
        # yet, or a repository written without it.
        self.revision: str | None = None
        self._watcher: asyncio.Task | None = None

    def _forget(self) -> None:
        self._post_inputs = self._decoupled = None
        self.resets += 1

    @property
    def client(self) -> grpcclient.InferenceServerClient:
        """Made on first use, inside the server's event loop (a gRPC aio channel belongs to one loop)."""
        if self._client is None:
            self._client = grpcclient.InferenceServerClient(self.url, channel_args=channel_args())
            # tritonclient keeps its channel private; its state is what tells a lost connection.
            self._watcher = asyncio.ensure_future(self._watch(self._client._channel))
        return self._client

    async def _watch(self, channel: grpc.aio.Channel) -> None:
        """Forgets what was read whenever the channel's connection is lost: a tritonserver restarted
        behind a drained host (no health check sees it down, no call fails: the channel just
        connects again) may have loaded another repository (a rollout's new revision)."""
        state = channel.get_state()
        while True:
            await channel.wait_for_state_change(state)
            now = channel.get_state()
            if state == grpc.ChannelConnectivity.READY and now != grpc.ChannelConnectivity.READY:
                self._forget()
            state = now

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    async def ready(self) -> tuple[bool, str]:
        """Ready when the server and the three models answer ready (what /healthz reports)."""
        try:
            if not await self.client.is_server_ready(client_timeout=5):
                self._forget()
                return False, "tritonserver is not ready"
            for model in MODELS:
                if not await self.client.is_model_ready(model, client_timeout=5):
                    self._forget()
                    return False, f"model {model} is not ready"
        except InferenceServerException as err:
            self._forget()
            return False, f"tritonserver at {self.url}: {err.message()}"
        return True, "ready"

    async def decoupled(self) -> bool:
        """Whether the fastertransformer model streams (decoupled): read once, not per request;
        forgotten with the other reads when tritonserver fails or restarts (_forget)."""
        if self._decoupled is None:
            config = (await self.client.get_model_config("fastertransformer", as_json=True,
                                                         client_timeout=10)).get("config", {})  # fmt: skip
            revision = config.get("parameters", {}).get(REVISION_PARAMETER, {}).get("string_value", "")
            self.revision = revision or None
            policy = config.get("model_transaction_policy", {})
            self._decoupled = self.was_decoupled = bool(policy.get("decoupled", False))
        return self._decoupled

    async def loaded_revision(self) -> str | None:
        """The revision of the repository tritonserver loaded (read with decoupled())."""
        await self.decoupled()
        return self.revision

    async def tokenize(self, prompt: str, stop: list[str], max_tokens: int, bad: tuple[str, ...] = ()) -> Tokens:
        """The preprocessing model's tokens of the prompt, the stop words and the bad words."""
        inputs = [
            _tensor("QUERY", np.array([[prompt.encode()]], dtype=object), "BYTES"),
            _tensor("REQUEST_OUTPUT_LEN", np.array([[max_tokens]], dtype=np.uint32), "UINT32"),
            _tensor("BAD_WORDS_DICT", np.array([[",".join(bad).encode()]], dtype=object), "BYTES"),
            _tensor("STOP_WORDS_DICT", np.array([[",".join(stop).encode()]], dtype=object), "BYTES"),
        ]
        try:
            result = await self.client.infer("preprocessing", inputs, client_timeout=self.timeout)
        except InferenceServerException:
            self._forget()
            raise
        count = int(result.as_numpy("REQUEST_INPUT_LEN").reshape(-1)[0])
        ids = result.as_numpy("INPUT_ID")[:, :count].astype(np.uint32)
        stop_ids = result.as_numpy("STOP_WORDS_IDS").astype(np.int32) if stop else None
        bad_ids = result.as_numpy("BAD_WORDS_IDS").astype(np.int32) if bad else None
        return Tokens(ids=ids, count=count, stop_ids=stop_ids, bad_ids=bad_ids)

    async def _postprocessing_inputs(self) -> dict[str, str]:
        """The postprocessing model's inputs, name to data type (they differ by family, as
        upstream's do: sequence_length is INT32 where FT answers it so), read once (see _forget)."""
        if self._post_inputs is None:
            config = await self.client.get_model_config("postprocessing", as_json=True, client_timeout=10)
            self._post_inputs = {i["name"]: i.get("data_type", "") for i in config.get("config", {}).get("input", [])}
        return self._post_inputs

    async def detokenize_prefixes(self, output_ids: np.ndarray, lengths: list[int]) -> list[str]:
        """The postprocessing model's decoding of one sequence ([1, 1, L]) up to each of `lengths`,
        in one call: the prefixes go to it as beams of one batch row."""
        declared = await self._postprocessing_inputs()
        beams = np.repeat(output_ids.reshape(1, 1, -1), len(lengths), axis=1)
        inputs = [
            _tensor("TOKENS_BATCH", beams.astype(np.uint32), "UINT32"),
            _length_tensor(lengths, declared.get("sequence_length", "TYPE_UINT32")),
        ]
        if "RESPONSE_INPUT_LENGTHS" in declared:  # GPT and BLOOM declare it (unused, as upstream's)
            inputs.append(_tensor("RESPONSE_INPUT_LENGTHS", np.zeros((1, len(lengths)), dtype=np.int32), "INT32"))
        try:
            result = await self.client.infer("postprocessing", inputs, client_timeout=self.timeout)
        except InferenceServerException:
            self._forget()
            raise
        return [text.decode(errors="replace") for text in result.as_numpy("OUTPUT").reshape(-1)]

    def _ft_inputs(self, tokens: Tokens, max_tokens: int, params: Sampling) -> list[grpcclient.InferInput]:
        one = lambda value, dtype: np.array([[value]], dtype=dtype)  # noqa: E731 - [1, 1] scalars
        inputs = [
            _tensor("input_ids", tokens.ids, "UINT32"),
            _tensor("input_lengths", one(tokens.count, np.uint32), "UINT32"),
            _tensor("request_output_len", one(max_tokens, np.uint32), "UINT32"),
            *(_tensor(name, one(value, NUMPY[dtype]), dtype) for name, dtype, value in ft_inputs(params)),
        ]
        if tokens.stop_ids is not None:
            inputs.append(_tensor("stop_words_list", tokens.stop_ids, "INT32"))
        if tokens.bad_ids is not None:
            inputs.append(_tensor("bad_words_list", tokens.bad_ids, "INT32"))
        return inputs

    async def _answers(self, inputs: list[grpcclient.InferInput], longest: int) -> AsyncIterator:
        """The fastertransformer model's answers that carry tokens: one, or with a decoupled model
        one per step until Triton's final response. Where Triton does not mark it (before 23.06),
        until the answer has ended: FT answers once a step for the whole batch, and a sequence
        grows by a token each step until it ends (its length, its end id or a stop word), FT's last
        response repeating the last step; so it is over once the longest sequence (the beams')
        reaches `longest` tokens, prompt included, or a response brings no new token. FT counts a
        right-padded input's length from its width (rounds.py), so `longest` is the width's."""
        try:
            decoupled = await self.decoupled()
        except InferenceServerException:
            decoupled = False  # the inference below reports what is wrong
        try:
            if not decoupled:
                yield await self.client.infer("fastertransformer", inputs, client_timeout=self.timeout)
                return

            async def requests():
                request = {"model_name": "fastertransformer", "inputs": inputs}
                if self.final_response:
                    request["enable_empty_final_response"] = True
                yield request

            try:
                before = None
                async for result, error in self.client.stream_infer(requests(), stream_timeout=self.timeout):
                    if error is not None:
                        raise error
                    final = result.get_response().parameters.get("triton_final_response")
                    if result.as_numpy("output_ids") is not None:
                        length = int(result.as_numpy("sequence_length").max())
                        if not self.final_response and before is not None and length <= before:
                            return  # no new token: the sequence has ended
                        yield result
                        before = length
                        if not self.final_response and length >= longest:
                            return
                    if final is not None and final.bool_param:
                        return
            except grpc.RpcError as err:
                # The stream's own failures (tritonserver killed mid-stream: UNAVAILABLE, "Stream
                # removed") come as gRPC's error, not tritonclient's: the same error either way.
                raise InferenceServerException(err.details(), status=str(err.code()), debug_details=None) from err
        except InferenceServerException:
            self._forget()
            raise

    async def search(self, tokens: Tokens, max_tokens: int, params: Sampling, beam_width: int,
                     len_penalty: float) -> list[Step]:  # fmt: skip
        """FT's beam search: the beam_width beams, best first (ranked with len_penalty), from the
        model's last answer."""
        width = _tensor("beam_width", np.array([[beam_width]], dtype=np.uint32), "UINT32")
        penalty = _tensor("len_penalty", np.array([[len_penalty]], dtype=np.float32), "FP32")
        last = None
        inputs = [*self._ft_inputs(tokens, max_tokens, params), width, penalty]
        async for result in self._answers(inputs, tokens.ids.shape[-1] + max_tokens):
            last = result
        if last is None:
            raise InferenceServerException("the fastertransformer model answered no beams")
        return _beams(last)

    async def generate(self, tokens: Tokens, max_tokens: int, params: Sampling) -> AsyncIterator[Step]:
        """The sequence so far, once per step the model answers (once in all unless decoupled)."""
        inputs = self._ft_inputs(tokens, max_tokens, params)
        async with closing(self._answers(inputs, tokens.ids.shape[-1] + max_tokens)) as answers:
            async for result in answers:
                yield _step(result)


def _beams(result) -> list[Step]:
    """Every beam of an answer, best first (FT orders them)."""
    output_ids = result.as_numpy("output_ids")  # [1, beams, L]
    output_ids = output_ids.reshape(1, 1, -1) if output_ids.ndim < 3 else output_ids
    lengths = result.as_numpy("sequence_length").reshape(-1)
    if lengths.size and int(lengths.max()) > output_ids.shape[-1]:
        # FT's streamed GPT-NeoX did so before the recipe's edit: say it, rather than decode a
        # sequence that is not there.
        raise InferenceServerException(f"the fastertransformer model answered sequence_length {int(lengths.max())}"
                                       f" past its {output_ids.shape[-1]} output_ids")  # fmt: skip
    log_probs = result.as_numpy("output_log_probs")  # [1, beams, request_output_len] when asked
    return [Step(output_ids=output_ids[:1, b : b + 1], sequence_length=int(lengths[b]),
                 log_probs=None if log_probs is None else log_probs.reshape(len(lengths), -1)[b])
            for b in range(len(lengths))]  # fmt: skip


def _step(result) -> Step:
    return _beams(result)[0]

"""The gateway's reading of the fastertransformer model's answers (ftgateway.triton): what FT
sends back becomes steps and beams, and an answer that contradicts itself is an error, not text."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from ftgateway.sampling import Sampling
from ftgateway.triton import Tokens, Triton, _beams


class Answer:
    """An inference result as tritonclient gives it: tensors by name (as_numpy)."""

    def __init__(self, **tensors: np.ndarray) -> None:
        self.tensors = tensors

    def as_numpy(self, name: str):
        return self.tensors.get(name)


def test_beams_come_best_first_with_their_lengths_and_log_probs():
    ids = np.array([[[5, 6, 7, 8, 9], [5, 6, 7, 3, 0]]], dtype=np.uint32)
    log_probs = np.array([[[-0.1, -0.2, -0.3], [-0.4, -0.5, -0.6]]], dtype=np.float32)
    answer = Answer(output_ids=ids, sequence_length=np.array([[5, 4]], dtype=np.int32), output_log_probs=log_probs)
    beams = _beams(answer)
    assert [b.sequence_length for b in beams] == [5, 4]
    assert beams[1].output_ids.reshape(-1).tolist() == [5, 6, 7, 3, 0]
    assert beams[1].log_probs.tolist() == pytest.approx([-0.4, -0.5, -0.6])


def test_a_sequence_length_past_the_output_ids_is_an_error():
    # FT's streamed GPT-NeoX answered so before the recipe's GptNeoX.cc edit (docs/gpu-tier.md).
    answer = Answer(output_ids=np.arange(12, dtype=np.uint32).reshape(1, 1, 12),
                    sequence_length=np.array([[14]], dtype=np.uint32))  # fmt: skip
    with pytest.raises(InferenceServerException, match="sequence_length 14 past its 12 output_ids"):
        _beams(answer)


class Streamed(Answer):
    """A decoupled response: tensors, and the response parameters Triton sends (none before 23.06)."""

    def __init__(self, flag: bool | None = None, **tensors: np.ndarray) -> None:
        super().__init__(**tensors)
        self.flag = flag

    def get_response(self):
        param = type("Param", (), {"bool_param": self.flag})()
        return type("Response", (), {"parameters": {} if self.flag is None else {"triton_final_response": param}})()


def step(ids: list[int], flag: bool | None = None) -> Streamed:
    return Streamed(flag, output_ids=np.array([[ids]], dtype=np.uint32),
                    sequence_length=np.array([[len(ids)]], dtype=np.uint32))  # fmt: skip


class Stream:
    """A gRPC stream of FT's answers, then (as a Triton before 23.06 may leave it) silence: reading
    past the given responses waits forever, so a transport that does not see the end hangs."""

    def __init__(self, responses: list) -> None:
        self.responses, self.read, self.asked = responses, 0, None

    def stream_infer(self, requests, stream_timeout=None):
        async def answers():
            async for request in requests:
                self.asked = request
            for response in self.responses:
                self.read += 1
                yield response, None
            await asyncio.Event().wait()  # never set: the stream stays open

        return answers()


GREEDY = Sampling(runtime_top_k=1, runtime_top_p=0.0, temperature=1.0, random_seed=0)


def transport(responses: list, final_response: bool) -> tuple[Triton, Stream]:
    triton = Triton("127.0.0.1:1", 5, final_response=final_response)
    stream = Stream(responses)
    triton._client, triton._decoupled = stream, True
    return triton, stream


def tokens(count: int) -> Tokens:
    return Tokens(ids=np.zeros((1, count), dtype=np.uint32), count=count, stop_ids=None)


async def steps_of(triton: Triton, prompt: int, max_tokens: int) -> list[int]:
    async def read():
        return [s.sequence_length async for s in triton.generate(tokens(prompt), max_tokens, GREEDY)]

    return await asyncio.wait_for(read(), timeout=5)


@pytest.mark.parametrize(
    ("responses", "max_tokens", "lengths", "read"),
    [
        # 4 new tokens of 4 asked after a prompt of 2: over at the 4th, no final response awaited
        ([step([1, 2, 3]), step([1, 2, 3, 4]), step([1, 2, 3, 4, 5]), step([1, 2, 3, 4, 5, 6])], 4, [3, 4, 5, 6], 4),
        # the end id (or a stop word) after 2 of 8: the batch goes on, this sequence does not grow
        ([step([1, 2, 7]), step([1, 2, 7, 9]), step([1, 2, 7, 9]), step([1, 2, 7, 9])], 8, [3, 4], 3),
        # an answer with the prompt alone first, then its steps
        ([step([1, 2]), step([1, 2, 5]), step([1, 2, 5, 6])], 2, [2, 3, 4], 3),
    ],
    ids=["length", "ended-in-a-batch", "from-the-prompt"],
)  # fmt: skip
def test_without_the_final_flag_a_decoupled_answer_ends_when_its_sequence_does(responses, max_tokens, lengths, read):
    triton, stream = transport(responses, final_response=False)
    assert asyncio.run(steps_of(triton, 2, max_tokens)) == lengths
    assert stream.read == read
    assert "enable_empty_final_response" not in stream.asked  # a Triton before 23.06 does not know it


def test_without_the_final_flag_a_padded_input_ends_at_its_width_plus_the_tokens_asked():
    """A round's slice right-padded from 2 to 4 ids: FT counts its lengths from the width (4 + n)
    and its output_ids hold the prompt, the new tokens, then end ids. All 3 asked tokens are read."""
    padded = Tokens(ids=np.array([[1, 2, 0, 0]], dtype=np.uint32), count=2, stop_ids=None)
    answers = [Streamed(output_ids=np.array([[[1, 2, *new, 0, 0]]], dtype=np.uint32),
                        sequence_length=np.array([[4 + len(new)]], dtype=np.uint32))
               for new in ([5], [5, 6], [5, 6, 7])]  # fmt: skip
    triton, stream = transport(answers, final_response=False)

    async def read():
        return [s.sequence_length async for s in triton.generate(padded, 3, GREEDY)]

    assert asyncio.run(asyncio.wait_for(read(), timeout=5)) == [5, 6, 7]
    assert stream.read == 3


def test_with_the_final_flag_the_answer_ends_at_tritons_final_response():
    responses = [step([1, 2, 7]), step([1, 2, 7, 9]), step([1, 2, 7, 9], flag=True)]
    triton, stream = transport(responses, final_response=True)
    assert asyncio.run(steps_of(triton, 2, 8)) == [3, 4, 4]
    assert stream.asked["enable_empty_final_response"] is True

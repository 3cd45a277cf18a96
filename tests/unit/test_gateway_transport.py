"""The gateway's reading of the fastertransformer model's answers (ftgateway.triton): what FT
sends back becomes steps and beams, and an answer that contradicts itself is an error, not text."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from ftgateway.triton import _beams


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
    # FT's streamed GPT-NeoX answered so before the recipe's GptNeoX.cc edit (docs/testing.md).
    answer = Answer(output_ids=np.arange(12, dtype=np.uint32).reshape(1, 1, 12),
                    sequence_length=np.array([[14]], dtype=np.uint32))  # fmt: skip
    with pytest.raises(InferenceServerException, match="sequence_length 14 past its 12 output_ids"):
        _beams(answer)

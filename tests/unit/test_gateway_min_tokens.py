"""vLLM's min_tokens and ignore_eos as FT's min_length, and the CPU stand-in's decoding with it:
the end id is masked while the token being chosen is numbered below min_length."""

from __future__ import annotations

import numpy as np
import pytest

from ftgateway.errors import ApiError
from ftgateway.generation import min_length
from ftnative.decoding import Decoding

END = 3


class EndsAtOnce(Decoding):
    """A model whose most likely token is always the end id, then token 1."""

    def logits(self, ids: list[int]) -> np.ndarray:
        return np.array([0.0, 5.0, 0.0, 9.0, 0.0])


@pytest.mark.parametrize(("min_tokens", "ignore_eos", "max_tokens", "expected"), [
    (0, False, 16, 0),  # nothing asked: no min_length input at all
    (4, False, 16, 5),  # the first 4 tokens are never the end: tokens numbered 1 to 4 are below 5
    (16, False, 16, 17),
    (0, True, 16, 17),  # none of the 16
    (4, True, 16, 17),  # ignore_eos covers min_tokens
])  # fmt: skip
def test_min_tokens_and_ignore_eos_are_one_past_the_tokens_that_cannot_end(min_tokens, ignore_eos, max_tokens,
                                                                           expected):  # fmt: skip
    assert min_length(min_tokens, ignore_eos, max_tokens, 1) == expected


def test_more_than_max_tokens_and_beam_search_are_refused_naming_the_parameter():
    with pytest.raises(ApiError, match="min_tokens 17 is over max_tokens 16") as over:
        min_length(17, False, 16, 1)
    assert over.value.param == "min_tokens"
    with pytest.raises(ApiError, match="not to FT's beam search") as beams:
        min_length(0, True, 16, 2)
    assert beams.value.param == "ignore_eos"
    assert min_length(0, False, 16, 4) == 0  # beams without either: nothing to refuse


@pytest.mark.parametrize(("least", "expected"), [
    (0, [END]),  # no mask: the end comes first
    (1, [END]),  # min_length 1 masks no token (the first is numbered 1)
    (2, [1, END]),
    (4, [1, 1, 1, END]),
    (9, [1, 1, 1, 1, 1, 1]),  # every token of the 6 asked
])  # fmt: skip
def test_the_stand_in_masks_the_end_id_below_min_length(least, expected):
    assert EndsAtOnce().generate([0], 6, end_id=END, min_length=least) == expected
    # without an end id there is nothing to mask, and the model's choice stands
    assert EndsAtOnce().generate([0], 2, min_length=least) == [END, END]

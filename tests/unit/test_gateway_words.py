"""FT's word lists as the gateway builds them (stop_words_list, bad_words_list: ids then end
offsets, padded with 0 and -1) and OpenAI's logit_bias as far as FT can apply it."""

from __future__ import annotations

import numpy as np
import pytest

from ftgateway.errors import ApiError
from ftgateway.generation import bad_words, banned_ids
from ftgateway.tokens import sequences_of, word_list_of


def test_a_word_list_has_the_preprocessing_models_layout_and_reads_back():
    made = word_list_of([[5, 6], [7], [8, 9, 10]])
    assert made.dtype == np.int32
    assert made.tolist() == [[[5, 6, 7, 8, 9, 10], [2, 3, 6, -1, -1, -1]]]
    assert sequences_of(made) == [[5, 6], [7], [8, 9, 10]]
    assert sequences_of(made[0]) == [[5, 6], [7], [8, 9, 10]]  # [2, w] as well as [1, 2, w]


def test_more_words_than_ids_pads_the_ids_and_an_empty_list_is_one_column():
    assert word_list_of([[1], [2], [3]]).tolist() == [[[1, 2, 3], [1, 2, 3]]]
    assert word_list_of([]).tolist() == [[[0], [-1]]]
    assert sequences_of(word_list_of([])) == []


def test_logit_bias_bans_at_minus_100_ignores_0_and_refuses_the_rest():
    assert banned_ids({"50": -100, "7": 0, "3": -100}) == (3, 50)
    assert banned_ids(None) == ()
    for bias, words in (({"50": 5}, "can only ban"), ({"x": -100}, "not a token id"),
                        ({"-1": -100}, "not a token id"), ({"5": 101}, "outside -100..100")):  # fmt: skip
        with pytest.raises(ApiError, match=words) as err:
            banned_ids(bias)
        assert err.value.param == "logit_bias"
    with pytest.raises(ApiError, match="at most 64"):
        banned_ids({str(i): -100 for i in range(65)})


def test_bad_words_are_checked_as_stop_words_are():
    assert bad_words(" hosts") == (" hosts",)
    assert bad_words(None) == ()
    for words, message in (([""], "must not be empty"), (["a,b"], "comma"), (["w"] * 65, "at most 64")):
        with pytest.raises(ApiError, match=message):
            bad_words(words)

"""The sampling contract (ftgateway/sampling.py): each parameter declared once, and what the
request models, the transport and a continuation read from it."""

from __future__ import annotations

import dataclasses

import pytest

from ftdomain.ft.interface import _SAMPLING
from ftgateway import chat, protocol
from ftgateway.errors import ApiError
from ftgateway.sampling import DIRECT, INPUTS, UINT64_MAX, Sampling, SamplingError, continued, ft_inputs, sampling

PLAIN = Sampling(runtime_top_k=1, runtime_top_p=0.0, temperature=1.0, random_seed=5)


def test_ft_gets_no_tensor_for_an_input_at_its_own_default():
    sent = {name for name, _dtype, _value in ft_inputs(PLAIN)}
    assert sent == {"runtime_top_k", "runtime_top_p", "temperature", "random_seed"}
    asked = dataclasses.replace(PLAIN, presence_penalty=0.5, log_probs=True, min_length=3)
    assert {(n, d, v) for n, d, v in ft_inputs(asked)} >= {("presence_penalty", "FP32", 0.5),
                                                             ("is_return_log_probs", "BOOL", True),
                                                             ("min_length", "INT32", 3)}  # fmt: skip


def test_every_input_is_one_the_model_repository_declares():
    declared = dict(_SAMPLING)
    assert {how.tensor: how.dtype for _name, how in INPUTS}.items() <= declared.items()


def test_a_continuation_carries_each_input_as_it_says():
    asked = dataclasses.replace(PLAIN, random_seed=UINT64_MAX, min_length=6, presence_penalty=1.5)
    after = continued(asked, 2)
    assert (after.random_seed, after.min_length, after.presence_penalty) == (1, 4, 1.5)
    assert continued(asked, 5).min_length == 0  # 6 - 5 = 1: no token is held back any more
    assert {how.carried for _name, how in INPUTS} == {"same", "advanced", "shortened"}


def test_the_request_models_take_every_direct_parameter_with_its_default():
    for model in (protocol.GenerateRequest, protocol.CompletionRequest, chat.ChatRequest):
        fields = model.model_fields
        assert {p.name: fields[p.name].default for p in DIRECT} == {p.name: p.default for p in DIRECT}, model
    assert {p.name for p in DIRECT} <= {f.name for f in dataclasses.fields(Sampling)}


@pytest.mark.parametrize(
    ("passed", "param", "words"),
    [
        ({"repetition_penalty": 0}, "repetition_penalty", "above 0 and at most 10"),
        ({"repetition_penalty": 11}, "repetition_penalty", "at most 10"),
        ({"presence_penalty": -2.5}, "presence_penalty", "at least -2 and at most 2"),
        ({"presence_penalty": 1, "repetition_penalty": 1.2}, "repetition_penalty", "cannot be combined"),
    ],
)
def test_a_direct_parameter_out_of_its_range_or_beside_its_exclusive_one_is_refused(passed, param, words):
    with pytest.raises(SamplingError, match=words) as refused:
        sampling(0.0, 0, 1.0, None, 1, **passed)
    assert refused.value.param == param


def test_direct_parameters_reach_sampling_greedy_or_not_and_unknown_ones_are_a_bug():
    assert sampling(0.0, 0, 1.0, None, 1, presence_penalty=-1.5).presence_penalty == -1.5
    assert sampling(0.7, 40, 0.9, 3, 1, repetition_penalty=1.3).repetition_penalty == 1.3
    with pytest.raises(TypeError, match="frequency_penalty"):
        sampling(0.0, 0, 1.0, None, 1, frequency_penalty=0.5)


@pytest.mark.parametrize(("asked", "param"), [({"best_of": 3, "n": 1}, "best_of"), ({"n": 3}, "n")])
def test_beams_past_the_gateways_limit_are_refused_naming_the_parameter(asked, param):
    """best_of (or n) is FT's beam width, which the GPU memory plan counts for every request of a
    batch (gateway_max_best_of): more beams than the gateway's limit are a 400, as many are served."""
    from ftgateway.app import Gateway  # noqa: PLC0415
    from ftgateway.config import Settings  # noqa: PLC0415
    from ftgateway.protocol import CompletionRequest  # noqa: PLC0415

    gateway = Gateway(Settings(model="m", allow_anonymous=True, max_best_of=2), backend=None)
    with pytest.raises(ApiError, match=rf"{param} 3 is over this gateway's limit of 2 \(FT's beam width") as refused:
        gateway.job(CompletionRequest(model="m", prompt="x", temperature=0, **asked))
    assert (refused.value.status, refused.value.param) == (400, param)
    assert gateway.job(CompletionRequest(model="m", prompt="x", temperature=0, best_of=2, n=2)).best_of == 2
    off = Gateway(Settings(model="m", allow_anonymous=True, max_best_of=1), backend=None)
    with pytest.raises(ApiError, match="beam search is off here"):
        off.job(CompletionRequest(model="m", prompt="x", temperature=0, n=2, best_of=2))

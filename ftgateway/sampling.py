"""The sampling contract: every sampling parameter the gateway takes, declared once.

A request's parameter becomes one of FT's inputs (a field of `Sampling`), and each field says
which tensor of the fastertransformer model it is, at which value FT's own default applies (no
tensor is sent), and what a continuation does with it (the same, advanced or shortened by the
tokens generated). The routes' request models take the parameters that pass to FT as they are
from `DIRECT` (`SamplingFields`), the transport (triton.py) sends `ft_inputs`, a continuation on
another host or in the next slice (continuing.py, rounds.py) sends `continued`. The parameters
that combine (temperature, top_k, top_p, seed, logprobs, min_tokens with ignore_eos) map in
`sampling`. Adding a parameter that passes as it is: a `Param` in DIRECT and a field of
`Sampling` here, the tensor in the model repository's interface (ftdomain/ft/interface.py), and
the CPU stand-in's decoding of it (ftnative)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel, StrictFloat, StrictInt, create_model

UINT64_MAX = 2**64 - 1
# The most beams FT's online beam search takes (best_of, n): the protocol's bound and the highest
# max_best_of a gateway's settings may allow.
BEAMS_MOST = 16
# Greedy decoding with log probabilities: FT's top-p path with this top_p takes the most likely
# token (it holds at least 1/vocabulary of the mass, over 1e-6 for any vocabulary under a
# million) and reports its full log probability, where the top-k path (top_k 1) reports 0.
GREEDY_TOP_P = 1e-6
Number = Union[StrictInt, StrictFloat]


class SamplingError(ValueError):
    """A sampling request the FT model cannot honour: the message says which parameter and why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Input:
    """How a field of Sampling reaches FT: its tensor and type; `omit`, the value at which FT's own
    default applies, so no tensor is sent (None: always sent); `carried`, what a continuation
    after n generated tokens sends: "same", "advanced" (+ n, FT's uint64 wrapping: a sampled
    continuation from the same point draws the same) or "shortened" (- n; 1 or less is none: a
    count from the request's first token)."""

    tensor: str
    dtype: str
    omit: Any = None
    carried: str = "same"


def _ft(tensor: str, dtype: str, **how: Any) -> dict[str, Input]:
    return {"ft": Input(tensor, dtype, **how)}


@dataclass(frozen=True)
class Sampling:
    """The fastertransformer model's sampling inputs, one value per request."""

    runtime_top_k: int = field(metadata=_ft("runtime_top_k", "UINT32"))
    runtime_top_p: float = field(metadata=_ft("runtime_top_p", "FP32"))
    temperature: float = field(metadata=_ft("temperature", "FP32"))
    random_seed: int = field(metadata=_ft("random_seed", "UINT64", carried="advanced"))
    repetition_penalty: float = field(default=1.0, metadata=_ft("repetition_penalty", "FP32", omit=1.0))
    presence_penalty: float = field(default=0.0, metadata=_ft("presence_penalty", "FP32", omit=0.0))
    log_probs: bool = field(default=False, metadata=_ft("is_return_log_probs", "BOOL", omit=False))
    # The end id is masked below it (0: none; generation.min_length).
    min_length: int = field(default=0, metadata=_ft("min_length", "INT32", omit=0, carried="shortened"))


INPUTS: tuple[tuple[str, Input], ...] = tuple((f.name, f.metadata["ft"]) for f in dataclasses.fields(Sampling))


def ft_inputs(params: Sampling) -> list[tuple[str, str, Any]]:
    """(tensor, type, value) of each input FT gets for these parameters: those at FT's own default
    left out (a request without them batches with others that lack them too)."""
    values = ((how, getattr(params, name)) for name, how in INPUTS)
    return [(how.tensor, how.dtype, value) for how, value in values if how.omit is None or value != how.omit]


def continued(params: Sampling, generated: int) -> Sampling:
    """The sampling inputs of a continuation after `generated` tokens (each field's `carried`)."""
    changes: dict[str, Any] = {}
    for name, how in INPUTS:
        value = getattr(params, name)
        if how.carried == "advanced":
            changes[name] = (value + generated) % (UINT64_MAX + 1)
        elif how.carried == "shortened":
            changes[name] = value - generated if value - generated > 1 else 0
    return dataclasses.replace(params, **changes)


@dataclass(frozen=True)
class Param:
    """A request's parameter that FT takes as it is: its name in the request (OpenAI's, or another
    OpenAI-compatible server's), its default, its range (`low` excluded where `open_low`), the
    field of Sampling it sets, and a parameter FT refuses beside it at other than its default."""

    name: str
    default: float
    low: float
    high: float
    open_low: bool = False
    excludes: str = ""
    what: str = ""

    def problem(self, value: float) -> str | None:
        below = value <= self.low if self.open_low else value < self.low
        if below or value > self.high:
            bounds = f"above {self.low:g}" if self.open_low else f"at least {self.low:g}"
            return f"{self.name} must be {bounds} and at most {self.high:g} ({self.what})"
        return None


DIRECT: tuple[Param, ...] = (
    # Not OpenAI's, but FT's, and accepted by other OpenAI-compatible servers (vLLM, TGI).
    Param("repetition_penalty", 1.0, 0.0, 10.0, open_low=True, excludes="presence_penalty",
          what="FT's multiplicative penalty on every token already in the sequence, prompt included; 1 is none"),
    # OpenAI's: FT subtracts it from the logit of every token already in the sequence, prompt
    # included, once however often the token occurs (FT's additive penalty, BaseSamplingLayer).
    Param("presence_penalty", 0.0, -2.0, 2.0, excludes="repetition_penalty",
          what="subtracted from the logit of each token already in the sequence, prompt included; 0 is none"),
)  # fmt: skip

# The request models' fields of DIRECT (protocol.GenerateRequest and chat.ChatRequest take them).
SamplingFields: type[BaseModel] = create_model(
    "SamplingFields", __base__=BaseModel, **{p.name: (Number, p.default) for p in DIRECT}
)


def of_request(request: Any) -> dict[str, float]:
    """DIRECT's values of a request model (SamplingFields), by name: `sampling`'s `passed`."""
    return {p.name: float(getattr(request, p.name)) for p in DIRECT}


def direct(passed: Mapping[str, float]) -> dict[str, float]:
    """DIRECT's values (a default for each one not given), checked: SamplingError names the first
    wrong one, or the first of two that FT takes only one of."""
    if unknown := set(passed) - {p.name for p in DIRECT}:
        raise TypeError(f"not sampling parameters: {sorted(unknown)}")
    values = {p.name: float(passed.get(p.name, p.default)) for p in DIRECT}
    for p in DIRECT:
        if (problem := p.problem(values[p.name])) is not None:
            raise SamplingError(p.name, problem)
        other = next((q for q in DIRECT if q.name == p.excludes), None)
        if other is not None and values[p.name] != p.default and values[other.name] != other.default:
            raise SamplingError(p.name, f"{p.name} and {other.name} cannot be combined: FT applies one of them")
    return values


def sampling(
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int | None,
    fallback_seed: int,
    *,
    log_probs: bool = False,
    min_length: int = 0,
    **passed: float,
) -> Sampling:
    """OpenAI's parameters -> FT's.

    - temperature 0 is greedy decoding: FT's top_k 1, top_p 0 (its greedy path; temperature then has
      no effect, and is sent as 1.0).
    - otherwise FT samples with top-k and/or top-p at that temperature; top_k 0 means no top-k cut,
      top_p 1 no nucleus cut. FT treats top_k 0 with top_p 0 as greedy, so top_p 0 with top_k 0
      and a temperature above 0 is refused rather than silently made greedy.
    - seed: FT's random_seed (uint64); without one, sampling takes `fallback_seed` (a fresh one per
      request), so that two requests do not repeat each other.
    - log_probs: FT's is_return_log_probs; greedy then takes FT's top-p path with GREEDY_TOP_P,
      the same most likely token with its full log probability.
    - `passed`: DIRECT's parameters by name (repetition_penalty, presence_penalty), checked.
    """
    values = direct(passed)
    if temperature < 0 or temperature > 2:
        raise SamplingError("temperature", "temperature must be between 0 and 2")
    if top_k < 0:
        raise SamplingError("top_k", "top_k must be 0 (no top-k cut) or a positive number of tokens")
    if not 0.0 <= top_p <= 1.0:
        raise SamplingError("top_p", "top_p must be between 0 and 1")
    if seed is not None and not 0 <= seed <= UINT64_MAX:
        raise SamplingError("seed", "seed must be between 0 and 2**64-1 (FT's random_seed is a uint64)")
    if temperature == 0:
        return Sampling(runtime_top_k=0 if log_probs else 1, runtime_top_p=GREEDY_TOP_P if log_probs else 0.0,
                        temperature=1.0, random_seed=seed or 0, log_probs=log_probs, min_length=min_length,
                        **values)  # fmt: skip
    if top_k == 0 and top_p == 0.0:
        raise SamplingError("top_p", "top_p 0 with top_k 0 would be greedy decoding in FT: use temperature 0 for that")
    return Sampling(runtime_top_k=top_k, runtime_top_p=float(top_p), temperature=float(temperature),
                    random_seed=fallback_seed if seed is None else seed, log_probs=log_probs,
                    min_length=min_length, **values)  # fmt: skip

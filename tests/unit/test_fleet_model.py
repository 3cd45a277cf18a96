"""fleet_model definitions: every problem named, defaults filled in."""

from __future__ import annotations

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.model import fleet_model_problems, fleet_model_resolved, fleet_source_label

KOGPT = {
    "name": "kogpt",
    "family": "gptj",
    "source": {"url": "https://huggingface.co/kakaobrain/kogpt", "revision": "KoGPT6B-ryan1.5b-float16"},
}


def test_valid_definition_has_no_problem():
    assert fleet_model_problems(KOGPT) == []


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("kogpt", "fleet_model='kogpt': must be a dict"),
        ({**KOGPT, "name": ""}, "fleet_model.name='': must be a non-empty string"),
        ({**KOGPT, "family": "opt"}, "fleet_model.family='opt': unknown model family (valid: bloom, gpt, gptj"),
        ({**KOGPT, "source": "hf"}, "fleet_model.source='hf': must be a dict with url and revision"),
        ({**KOGPT, "source": {"url": "u"}}, "fleet_model.source.revision=None: must be a non-empty string"),
        ({**KOGPT, "source": {**KOGPT["source"], "commit": "abc"}}, "must be a full 40-character commit id"),
        ({**KOGPT, "source": {**KOGPT["source"], "token_required": "yes"}}, "token_required='yes': must be true or"),
        ({**KOGPT, "data_type": "int8"}, "fleet_model.data_type='int8': must be one of fp32, fp16, bf16"),
        ({**KOGPT, "checkpoint_dtype": "fp8"}, "fleet_model.checkpoint_dtype='fp8'"),
        ({**KOGPT, "weight_dtype": "fp16"}, "fleet_model.weight_dtype='fp16': the gptj converter writes fp32 only"),
        ({**KOGPT, "source": {"path": "models/llama"}}, "fleet_model.source.path='models/llama': must be an absolute"),
        ({**KOGPT, "source": {"path": "/m", "revision": "main"}}, "fleet_model.source has path and revision:"),
        ({**KOGPT, "name": "a b", "source": {"path": "/m"}}, "fleet_model.name='a b': must be letters"),
    ],
)
def test_each_problem_is_named(model, problem):
    problems = fleet_model_problems(model)
    assert any(problem in p for p in problems), problems


def test_resolved_fills_defaults():
    resolved = fleet_model_resolved(KOGPT)
    assert resolved["weight_dtype"] == "fp32"  # the GPT-J converter writes fp32 only
    assert (resolved["checkpoint_dtype"], resolved["data_type"]) == ("fp16", "fp16")
    assert resolved["source"]["commit"] == ""
    assert resolved["source"]["token_required"] is False
    llama = fleet_model_resolved({**KOGPT, "family": "llama", "data_type": "bf16"})
    assert (llama["weight_dtype"], llama["data_type"]) == ("fp16", "bf16")


def test_resolved_refuses_an_invalid_definition():
    with pytest.raises(AnsibleFilterError, match=r"^fleet_model_resolved: fleet_model\.family='opt'"):
        fleet_model_resolved({**KOGPT, "family": "opt"})


def test_a_directory_source_needs_no_git_fields():
    model = {**KOGPT, "source": {"path": "/srv/models/kogpt"}}
    assert fleet_model_problems(model) == []
    resolved = fleet_model_resolved(model)
    assert resolved["source"] == {"path": "/srv/models/kogpt", "token_required": False}
    assert fleet_source_label(model) == "/srv/models/kogpt (a directory on the controller)"
    assert fleet_source_label(KOGPT) == "https://huggingface.co/kakaobrain/kogpt @ KoGPT6B-ryan1.5b-float16"

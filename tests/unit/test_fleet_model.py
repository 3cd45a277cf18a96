"""fleet_model definitions: every problem named, defaults filled in."""

from __future__ import annotations

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.archive import (
    fleet_archive_controller_problems,
    fleet_archive_id,
    fleet_archive_listing,
    fleet_archive_weights_problems,
)
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


SLIM = {
    "name": "gptj-6b",
    "family": "gptj",
    "source": {"archive": "https://the-eye.eu/public/AI/GPT-J-6B/step_383500_slim.tar.zstd", "sha256": "ab" * 32,
               "tokenizer": "/srv/tokenizers/gpt-j-6b"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"archive": "step_383500_slim.tar.zstd"}, "source.archive='step_383500_slim.tar.zstd': must be a URL"),
        ({"archive": "https://h/x.zip"}, "must end with one of .tar.zstd, .tar.zst, .tar.gz, .tgz, .tar.xz, .tar"),
        ({"sha256": "AB" * 32}, "must be the archive's sha256, 64 lowercase hex digits"),
        ({"sha256": None}, "fleet_model.source.sha256=None"),
        ({"revision": "main"}, "fleet_model.source has archive and revision: a checkpoint comes from one source kind"),
        ({"config": [1]}, "fleet_model.source.config=[1]: must be a dict"),
        ({"tokenizer": None}, "fleet_model.source.tokenizer=None: the archive has no tokenizer"),
        ({"tokenizer": "tok"}, "fleet_model.source.tokenizer='tok'"),
    ],
)
def test_each_problem_of_an_archive_source_is_named(source, problem):
    problems = fleet_model_problems({**SLIM, "source": {**SLIM["source"], **source}})
    assert any(problem in p for p in problems), problems


def test_an_archive_source_is_gptjs_and_its_identity_follows_archive_and_shape():
    assert fleet_model_problems(SLIM) == []
    assert any(
        "fleet_model.family='llama' with source.archive" in p for p in fleet_model_problems({**SLIM, "family": "llama"})
    )
    resolved = fleet_model_resolved(SLIM)
    assert resolved["source"]["config"]["n_layer"] == 28  # GPT-J-6B's shape where the inventory gives none
    assert fleet_source_label(SLIM).endswith("(a slim GPT-J archive, sha256 abababababab...)")
    smaller = {**SLIM["source"], "config": {"n_layer": 2}}
    assert fleet_model_resolved({**SLIM, "source": smaller})["source"]["config"]["n_layer"] == 2
    ids = {
        fleet_archive_id(SLIM["source"]),
        fleet_archive_id(smaller),
        fleet_archive_id({**SLIM["source"], "sha256": "cd" * 32}),
    }
    assert len(ids) == 3
    assert all(len(i) == 40 for i in ids)
    assert fleet_archive_weights_problems("native") == []
    assert "imports JAX" in fleet_archive_weights_problems("upstream")[0]


def test_an_archive_sources_tokenizer_and_path_are_checked_on_the_controller(tmp_path):
    source = {**SLIM["source"], "tokenizer": str(tmp_path / "missing")}
    assert "no such directory on the controller" in fleet_archive_controller_problems(source)[0]
    (tmp_path / "tok").mkdir()
    source["tokenizer"] = str(tmp_path / "tok")
    assert "none of tokenizer.json, vocab.json in it" in fleet_archive_controller_problems(source)[0]
    (tmp_path / "tok" / "tokenizer.json").write_text('{"added_tokens": [{"id": 50256, "content": "<|endoftext|>"}]}')
    (tmp_path / "tok" / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}')
    assert fleet_archive_controller_problems(source) == []
    assert (
        "no such file on the controller" in fleet_archive_controller_problems({**source, "archive": "/nowhere.tar"})[0]
    )
    listing = fleet_archive_listing(source)
    assert listing["tokenizer"] == {"eos": ["<|endoftext|>", 50256]}
    assert listing["files"] == []
    assert listing["commit"] == fleet_archive_id(source)

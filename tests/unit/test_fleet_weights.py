"""fleet_checkpoint_weights: the weights' format and size from a repository's file list."""

from __future__ import annotations

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.weights import fleet_checkpoint_weights, fleet_checkpoint_weights_problems

GB = 1_000_000_000


def lfs(name: str, size: int) -> dict:
    return {"name": name, "bytes": size, "lfs": True}


def git(name: str, size: int = 600) -> dict:
    return {"name": name, "bytes": size, "lfs": False}


SMALL = [git("config.json"), git("tokenizer.json", 1_400_000), git("README.md", 4000), git(".gitattributes", 1500)]
# The layouts of inventories/prod's models (sizes as their pointers give them, rounded).
KOGPT_FP16 = [*SMALL, lfs("pytorch_model.bin", 12_219_000_000)]
LLAMA_7B_HF = [
    *SMALL,
    git("pytorch_model.bin.index.json", 25_000),
    *(lfs(f"pytorch_model-{i:05d}-of-00033.bin", 405_000_000) for i in range(1, 34)),
]
BOTH = [*SMALL, lfs("model.safetensors", 548_000_000), lfs("pytorch_model.bin", 548_000_000),
        lfs("tf_model.h5", 498_000_000), lfs("flax_model.msgpack", 497_000_000)]  # fmt: skip
SHARDED_ST = [*SMALL, git("model.safetensors.index.json", 30_000),
              lfs("model-00001-of-00002.safetensors", 9 * GB),
              lfs("model-00002-of-00002.safetensors", 4 * GB)]  # fmt: skip


@pytest.mark.parametrize(
    ("files", "engine", "family", "expected"),
    [
        (KOGPT_FP16, "native", "gptj",
         {"format": "bin", "layout": "single", "read_bytes": 12_219_000_000, "fetch_bytes": 12_219_000_000}),
        (KOGPT_FP16, "upstream", "gptj", {"format": "bin", "layout": "single"}),
        (LLAMA_7B_HF, "native", "llama",
         {"format": "bin", "layout": "sharded", "read_bytes": 25_000 + 33 * 405_000_000,
          "fetch_bytes": 33 * 405_000_000}),
        # both formats: safetensors is read (ftnative prefers it), but git-lfs fetches every object
        (BOTH, "native", "gpt", {"format": "safetensors", "layout": "single", "read_bytes": 548_000_000,
                                 "fetch_bytes": 548_000_000 * 2 + 498_000_000 + 497_000_000,
                                 "other_formats": ["flax_model.msgpack", "tf_model.h5"]}),
        # FT's GPT-J converter reads pytorch_model.bin even where safetensors exist
        (BOTH, "upstream", "gptj", {"format": "bin", "layout": "single"}),
        (SHARDED_ST, "native", "gptneox", {"format": "safetensors", "layout": "sharded", "fetch_bytes": 13 * GB}),
    ],
)  # fmt: skip
def test_format_and_sizes(files, engine, family, expected):
    weights = fleet_checkpoint_weights(files, engine, family)
    assert {k: weights[k] for k in expected} == expected
    assert fleet_checkpoint_weights_problems(files, engine, family) == []


def test_lfs_include_limits_what_is_fetched():
    weights = fleet_checkpoint_weights(BOTH, "native", "gpt", "*.safetensors,*.json")
    assert weights["fetch_bytes"] == 548_000_000


@pytest.mark.parametrize(
    ("files", "engine", "family", "include", "problem"),
    [
        ([*SMALL, lfs("tf_model.h5", GB)], "native", "gpt", "",
         "no weights that a converter reads (it has tf_model.h5): expected model.safetensors, pytorch_model.bin"),
        (SMALL, "native", "gpt", "", "no weights that a converter reads: expected"),
        (SHARDED_ST, "upstream", "gptj", "",
         "fleet_convert_engine=upstream: the gptj converter cannot read its weights (safetensors (sharded)); FT's "
         "GPT-J converter reads one unsharded pytorch_model.bin; fix: set fleet_convert_engine: native"),
        (LLAMA_7B_HF, "upstream", "gptj", "", "cannot read its weights (bin (sharded))"),
        (BOTH, "native", "gpt", "*.bin",
         "model_checkpoint_lfs_include='*.bin' leaves out model.safetensors, which the converter reads"),
    ],
)  # fmt: skip
def test_problems_name_the_variable_and_the_fix(files, engine, family, include, problem):
    problems = fleet_checkpoint_weights_problems(files, engine, family, include)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("bad", [None, "pytorch_model.bin", [{"name": "x"}], [{"name": 1, "bytes": 2}]])
def test_bad_input_names_the_filter(bad):
    with pytest.raises(AnsibleFilterError, match="fleet_checkpoint_weights: expected a list"):
        fleet_checkpoint_weights(bad, "native", "gpt")

"""What a checkpoint's weights are, from its repository's file list, before anything is fetched."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_checkpoint_weights
short_description: The weight format and sizes of a checkpoint, from its repository's file list
description:
  - Reads the top-level file list of a model's git repository (name, bytes, whether the file is a
    git-lfs pointer; preflight's fetch-model-config makes it from the pointers, so no weight is
    downloaded) and says which weights a converter would read, their format and size, and how many
    bytes git-lfs would fetch.
  - C(fleet_checkpoint_weights_problems) returns one sentence per problem, e.g. weights in a format
    the chosen conversion engine cannot read, with the fix.
options:
  _input:
    description: The file list, each a dict with name, bytes and lfs.
    type: list
    elements: dict
    required: true
  engine:
    description: The conversion engine (fleet_convert_engine), native or upstream.
    type: str
    required: true
  family:
    description: The model family (gptj, gpt, gptneox, bloom, llama).
    type: str
    required: true
  lfs_include:
    description: git lfs pull --include patterns, comma-separated (model_checkpoint_lfs_include); empty for all.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Size the checkpoint from its file list
  ansible.builtin.set_fact:
    weights: "{{ listing.files | fleet_checkpoint_weights('native', 'gptj') }}"
"""

RETURN = r"""
_value:
  description: >-
    format (safetensors, bin or none), layout (single or sharded), files (the weight files a
    converter reads), read_bytes (their size), fetch_bytes (every LFS object git-lfs pulls),
    other_formats (weights in formats no engine here reads).
  type: dict
"""

import fnmatch
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # Ansible loads plugins by path; the registry is a sibling module
    sys.path.insert(0, _HERE)
from ft_families import AnsibleFilterError

_FORMATS = {
    # format: (single file, index, shard pattern)
    "safetensors": ("model.safetensors", "model.safetensors.index.json", r"model-\d+-of-\d+\.safetensors"),
    "bin": ("pytorch_model.bin", "pytorch_model.bin.index.json", r"pytorch_model-\d+-of-\d+\.bin"),
}
# Weights that neither engine reads: TensorFlow, Flax, GGUF, raw PyTorch pickles under other names.
_OTHER = re.compile(r".*\.(h5|msgpack|gguf|ckpt|pt|pth|onnx)$|tf_model\..*|flax_model\..*")

# Which formats each engine reads, per family. The native engine (ftnative.checkpoint) reads both,
# single or sharded. FT's GPT-J converter does torch.load(ckpt_dir + "/pytorch_model.bin"): one
# unsharded .bin only; the other upstream converters load through transformers' from_pretrained.
_ANY = frozenset({("safetensors", "single"), ("safetensors", "sharded"), ("bin", "single"), ("bin", "sharded")})
_READS = {
    "native": dict.fromkeys(("gptj", "gpt", "gptneox", "bloom", "llama"), _ANY),
    "upstream": {"gptj": frozenset({("bin", "single")}), **dict.fromkeys(("gpt", "gptneox", "bloom", "llama"), _ANY)},
}


def _check(files: Any) -> list[Mapping[str, Any]]:
    if not isinstance(files, list) or not all(
        isinstance(f, Mapping) and isinstance(f.get("name"), str) and isinstance(f.get("bytes"), int) for f in files
    ):
        raise AnsibleFilterError(
            f"fleet_checkpoint_weights: expected a list of {{name, bytes, lfs}} dicts, got {files!r:.200}"
        )
    return files


def _layouts(names: set[str]) -> list[tuple[str, str, list[str]]]:
    """Every (format, layout, files) present, safetensors first (what ftnative.checkpoint prefers)."""
    found = []
    for fmt, (single, index, shard) in _FORMATS.items():
        shards = sorted(n for n in names if re.fullmatch(shard, n))
        if index in names and shards:
            found.append((fmt, "sharded", [index, *shards]))
        elif single in names:
            found.append((fmt, "single", [single]))
    return found


def _included(name: str, patterns: str) -> bool:
    wanted = [p.strip() for p in (patterns or "").split(",") if p.strip()]
    return not wanted or any(fnmatch.fnmatch(name, p) for p in wanted)


def fleet_checkpoint_weights(files: Any, engine: str, family: str, lfs_include: str = "") -> dict[str, Any]:
    files = _check(files)
    names = {f["name"] for f in files}
    sizes = {f["name"]: f["bytes"] for f in files}
    readable = _READS.get(engine, {}).get(family, set())
    layouts = _layouts(names)
    chosen = next(((fmt, layout, used) for fmt, layout, used in layouts if (fmt, layout) in readable), None)
    if chosen is None and layouts:
        chosen = layouts[0]
    fmt, layout, used = chosen or ("none", "none", [])
    return {
        "format": fmt,
        "layout": layout,
        "files": used,
        "read_bytes": sum(sizes[n] for n in used),
        "fetch_bytes": sum(f["bytes"] for f in files if f.get("lfs") and _included(f["name"], lfs_include)),
        "available": [f"{f} ({lay})" for f, lay, _ in layouts],
        "other_formats": sorted(n for n in names if _OTHER.fullmatch(n)),
    }


def fleet_checkpoint_weights_problems(files: Any, engine: str, family: str, lfs_include: str = "") -> list[str]:
    weights = fleet_checkpoint_weights(files, engine, family, lfs_include)
    readable = _READS.get(engine, {}).get(family, set())
    problems = []
    if weights["format"] == "none":
        others = f" (it has {', '.join(weights['other_formats'])})" if weights["other_formats"] else ""
        problems.append(
            f"no weights that a converter reads{others}: expected model.safetensors, pytorch_model.bin or their "
            "sharded form with an index json; fix: point fleet_model.source at the PyTorch checkpoint of the model"
        )
    elif (weights["format"], weights["layout"]) not in readable:
        fix = (
            "fix: set fleet_convert_engine: native (it reads safetensors and .bin, single or sharded)"
            if engine == "upstream"
            else "fix: convert the checkpoint to safetensors or pytorch_model.bin"
        )
        problems.append(
            f"fleet_convert_engine={engine}: the {family} converter cannot read its weights "
            f"({', '.join(weights['available'])}); FT's GPT-J converter reads one unsharded pytorch_model.bin; {fix}"
            if engine == "upstream" and family == "gptj"
            else f"fleet_convert_engine={engine}: cannot read {', '.join(weights['available'])}; {fix}"
        )
    if weights["format"] != "none":
        lfs = {f["name"] for f in files if f.get("lfs")}  # the others are in git itself, always checked out
        missing = [n for n in weights["files"] if n in lfs and not _included(n, lfs_include)]
        if missing:
            problems.append(
                f"model_checkpoint_lfs_include={lfs_include!r} leaves out {', '.join(missing)}, which the converter "
                "reads; fix: include them (or leave the variable empty)"
            )
    return problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_checkpoint_weights": fleet_checkpoint_weights,
            "fleet_checkpoint_weights_problems": fleet_checkpoint_weights_problems,
        }

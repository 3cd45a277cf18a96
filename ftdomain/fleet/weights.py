"""What a checkpoint's weights are, from its repository's file list, before anything is fetched."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError

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

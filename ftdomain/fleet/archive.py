"""A slim GPT-J checkpoint in an archive (fleet_model.source.archive): the mesh-transformer-jax
step_383500 archive that the GPT-J guide converts with FT's gptj_ckpt_convert.py.

The archive holds the weights only (shard_N/ directories of npz parts; ftnative.jaxslim reads
them): the model's shape comes from the inventory (source.config, Hugging Face GPT-J keys over
GPT-J-6B's), the tokenizer from a directory on the controller (source.tokenizer). Model_checkpoint
downloads the archive on the host (or copies it from the controller), checks its sha256, unpacks
it and writes config.json and the tokenizer's files beside the shards: the native converter then
reads it as it reads a Hugging Face checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.model import tokenizer_special_ids

# EleutherAI/gpt-j-6b's config.json (the shape of the slim step_383500 checkpoint): what
# source.config overrides.
GPTJ_6B_CONFIG = {
    "architectures": ["GPTJForCausalLM"],
    "model_type": "gptj",
    "activation_function": "gelu_new",
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "layer_norm_epsilon": 1e-05,
    "n_embd": 4096,
    "n_head": 16,
    "n_inner": None,
    "n_layer": 28,
    "n_positions": 2048,
    "rotary_dim": 64,
    "tie_word_embeddings": False,
    "vocab_size": 50400,
}
# What tar unpacks here (GNU tar; zstd needs the zstd program, which model_checkpoint installs).
SUFFIXES = (".tar.zstd", ".tar.zst", ".tar.gz", ".tgz", ".tar.xz", ".tar")
URL = re.compile(r"(https?|ftp|file)://\S+")
SHA256 = re.compile(r"[0-9a-f]{64}")
# The tokenizer files that transformers' AutoTokenizer reads for GPT-J (GPT-2's BPE).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")


def _where(key: str) -> str:
    return f"fleet_model.source.{key}"


def fleet_archive_problems(source: Mapping[str, Any], family: Any) -> list[str]:
    """Why source (with an archive key) cannot be used, as sentences with the fix; empty when it can."""
    problems = []
    archive = source.get("archive")
    if not isinstance(archive, str) or not (URL.fullmatch(archive) or archive.startswith("/")):
        problems.append(
            f"{_where('archive')}={archive!r}: must be a URL (https://, http://, ftp://, file://) or an absolute path "
            "on the controller"
        )
    elif not archive.split("?")[0].endswith(SUFFIXES):
        problems.append(f"{_where('archive')}={archive!r}: must end with one of {', '.join(SUFFIXES)} (how it unpacks)")
    sha = source.get("sha256")
    if not isinstance(sha, str) or not SHA256.fullmatch(sha):
        problems.append(
            f"{_where('sha256')}={sha!r}: must be the archive's sha256, 64 lowercase hex digits "
            "(sha256sum ARCHIVE); an archive is never used unchecked"
        )
    mixed = sorted(k for k in ("url", "revision", "commit", "path") if source.get(k))
    if mixed:
        problems.append(
            f"fleet_model.source has archive and {', '.join(mixed)}: a checkpoint comes from one source kind "
            "(git: url, revision; a directory: path; an archive: archive, sha256); fix: keep one"
        )
    if family != "gptj":
        problems.append(
            f"fleet_model.family={family!r} with source.archive: an archive holds a slim GPT-J checkpoint of "
            "mesh-transformer-jax; fix: family gptj, or a Hugging Face checkpoint (url and revision, or path)"
        )
    config = source.get("config", {})
    if not isinstance(config, Mapping):
        problems.append(f"{_where('config')}={config!r}: must be a dict of Hugging Face GPT-J config keys")
    tokenizer = source.get("tokenizer")
    if not isinstance(tokenizer, str) or not tokenizer.startswith("/"):
        problems.append(
            f"{_where('tokenizer')}={tokenizer!r}: the archive has no tokenizer; must be the absolute path of a "
            "directory on the controller with GPT-J's tokenizer files (tokenizer.json or vocab.json and "
            "merges.txt, e.g. from EleutherAI/gpt-j-6b)"
        )
    return problems


def fleet_archive_config(source: Mapping[str, Any]) -> dict[str, Any]:
    """The config.json written beside the shards: GPT-J-6B's with source.config over it."""
    return {**GPTJ_6B_CONFIG, **(source.get("config") or {})}


def fleet_archive_id(source: Mapping[str, Any]) -> str:
    """What stands for the commit (the shards' and the registry's key): 40 hex digits of a sha256
    over the archive's sha256 and the config, so another archive or shape makes new shards."""
    if not isinstance(source, Mapping) or not SHA256.fullmatch(str(source.get("sha256", ""))):
        raise AnsibleFilterError(f"fleet_archive_id: expected a source with archive and sha256, got {source!r:.200}")
    key = json.dumps({"sha256": source["sha256"], "config": fleet_archive_config(source)}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def _tokenizer_dir(path: str) -> list[str]:
    """The directory's names, or AnsibleFilterError when it is no tokenizer directory."""
    if not os.path.isdir(path):
        raise AnsibleFilterError(f"{_where('tokenizer')}={path}: no such directory on the controller")
    names = os.listdir(path)
    if not any(name in names for name in TOKENIZER_FILES):
        raise AnsibleFilterError(
            f"{_where('tokenizer')}={path}: none of {', '.join(TOKENIZER_FILES)} in it; fix: point it at GPT-J's "
            "tokenizer files"
        )
    return names


def _tokenizer(path: str) -> dict[str, Any]:
    """The bos/eos tokens of the tokenizer directory (tokenizer_special_ids)."""
    _tokenizer_dir(path)

    def read(name: str) -> Any:
        try:
            with open(os.path.join(path, name), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    return tokenizer_special_ids(read)


def fleet_archive_controller_problems(source: Mapping[str, Any]) -> list[str]:
    """What the controller lacks for the source, as sentences with the fix (empty when nothing):
    source.tokenizer readable, and the archive itself where it is a path on the controller."""
    problems = []
    archive = source["archive"]
    if archive.startswith("/") and not os.path.isfile(archive):
        problems.append(f"{_where('archive')}={archive}: no such file on the controller; fix: the archive's path, "
                        "or its URL (each host downloads it)")  # fmt: skip
    try:
        _tokenizer_dir(source["tokenizer"])
    except AnsibleFilterError as err:
        problems.append(str(err))
    return problems


def fleet_archive_listing(source: Mapping[str, Any]) -> dict[str, Any]:
    """What preflight reads from a git source, for an archive: the config (from the inventory),
    the identity, the tokenizer's special tokens (from source.tokenizer); no files (the archive is
    not read on the controller)."""
    return {
        "config": fleet_archive_config(source),
        "files": [],
        "commit": fleet_archive_id(source),
        "tokenizer": _tokenizer(source["tokenizer"]),
    }


def fleet_archive_tokenizer_files(source: Mapping[str, Any]) -> list[str]:
    """The top-level files of source.tokenizer, sorted: what is copied beside the shards."""
    path = source["tokenizer"]
    names = _tokenizer_dir(path)
    return sorted(n for n in names if os.path.isfile(os.path.join(path, n)) and not n.startswith("."))


def fleet_archive_weights(parameters: int) -> dict[str, Any]:
    """What fleet_checkpoint_weights says of a git source, for an archive: bfloat16 weights of
    `parameters` values (the archive is at most that: zstd hardly shrinks them)."""
    size = int(parameters) * 2
    return {"format": "jax-slim", "layout": "sharded", "files": [], "read_bytes": size, "fetch_bytes": size,
            "available": ["jax-slim (sharded)"], "other_formats": []}  # fmt: skip


def fleet_archive_weights_problems(engine: str) -> list[str]:
    if engine != "native":
        return [
            f"fleet_convert_engine={engine}: FT's converter of a slim GPT-J (gptj_ckpt_convert.py) imports JAX, "
            "which FT's image does not have; fix: set fleet_convert_engine: native (ftnative.jaxslim reads the "
            "archive with numpy)"
        ]
    return []

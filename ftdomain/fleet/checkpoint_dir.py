"""A checkpoint in a directory on the controller (fleet_model.source.path): what preflight reads
from it, and the identity that stands in for a git commit in the caches and the registry."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.model import tokenizer_special_ids

# Files preflight parses (config.json, the tokenizer's): larger ones are weights, never read here.
SMALL = 64 << 20
# Meta's own LLaMA release: what the LLaMA guide starts from, before transformers' converter.
META_LLAMA = ("params.json", "consolidated.00.pth")


def _walk(path: str) -> list[list[Any]]:
    entries = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in names:
            full = os.path.join(root, name)
            info = os.stat(full)
            entries.append([os.path.relpath(full, path), info.st_size, info.st_mtime_ns])
    return sorted(entries)


class _Refused(Exception):
    pass


def _directory(path: Any) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise _Refused(f"fleet_model.source.path={path!r}: must be an absolute path to a directory on the controller")
    if not os.path.isdir(path):
        raise _Refused(f"fleet_model.source.path={path}: no such directory on the controller")
    return path


def _identity(entries: list[list[Any]]) -> str:
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:40]


def _read(path: Any) -> dict[str, Any]:
    path = _directory(path)
    entries = _walk(path)
    top = {name: size for name, size, _ in entries if os.sep not in name}
    if "config.json" not in top:
        if all(name in top for name in META_LLAMA):
            raise _Refused(
                f"fleet_model.source.path={path}: Meta's original LLaMA weights (params.json, consolidated.*.pth), "
                "not a transformers checkpoint; fix: convert them with transformers' "
                "convert_llama_weights_to_hf.py (docs/models.md) and point source.path at its output"
            )
        raise _Refused(
            f"fleet_model.source.path={path}: no config.json in it; fix: point it at a transformers checkpoint"
        )

    def read(name: str) -> Any:
        if top.get(name, SMALL) >= SMALL:
            return None
        try:
            with open(os.path.join(path, name), encoding="utf-8") as handle:
                return json.load(handle)
        except ValueError:
            return None

    config = read("config.json")
    if not isinstance(config, dict):
        raise _Refused(f"fleet_model.source.path={path}: config.json is not a JSON object")
    return {
        "config": config,
        "files": [{"name": name, "bytes": size, "lfs": False} for name, size in sorted(top.items())],
        "commit": _identity(entries),
        "tokenizer": tokenizer_special_ids(read),
    }


def fleet_checkpoint_dir_problems(path: Any) -> list[str]:
    """Why the directory cannot be read as a checkpoint, as sentences; empty when it can."""
    try:
        _read(path)
    except _Refused as refused:
        return [str(refused)]
    return []


def fleet_checkpoint_dir(path: Any) -> dict[str, Any]:
    try:
        return _read(path)
    except _Refused as refused:
        raise AnsibleFilterError(str(refused)) from None


def fleet_checkpoint_dir_id(path: Any) -> str:
    try:
        return _identity(_walk(_directory(path)))
    except _Refused as refused:
        raise AnsibleFilterError(str(refused)) from None


def fleet_checkpoint_dir_files(path: Any) -> list[str]:
    """Every file of the directory as "relative/path size", sorted (.git left out): what a
    complete copy holds, no more and no less."""
    try:
        return [f"{name} {size}" for name, size, _ in _walk(_directory(path))]
    except _Refused as refused:
        raise AnsibleFilterError(str(refused)) from None

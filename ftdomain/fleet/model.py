"""Validation of a fleet_model definition from the inventory, problem by problem."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.archive import fleet_archive_config, fleet_archive_problems
from ftdomain.ft.families import DTYPE_BYTES, FAMILIES

DEFAULTS = {"checkpoint_dtype": "fp16", "data_type": "fp16"}


def default_weight_dtype(family: str) -> str:
    """fp16 where the family's converter writes it (half the disk of fp32), else its only dtype."""
    allowed = FAMILIES[family].weight_dtypes
    return "fp16" if "fp16" in allowed else allowed[0]


def _str_problem(model: Mapping[str, Any], key: str, where: str = "fleet_model") -> list[str]:
    value = model.get(key)
    if not isinstance(value, str) or not value.strip():
        return [f"{where}.{key}={value!r}: must be a non-empty string"]
    return []


# The name goes into paths, unit names (triton-<name>.service) and container names.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# What git clones: a URL of these schemes, or scp-like user@host:path.
GIT_URL = re.compile(r"(https?|ssh|git|file)://\S+|[\w.-]+@[\w.-]+:\S+")
# A branch or tag name as git allows it (git check-ref-format, simplified).
GIT_REF = re.compile(r"(?!.*\.\.)(?!.*//)(?!/)[^\s~^:?*\[\\]+(?<![/.])")


def _format_problems(model: Mapping[str, Any], source: Mapping[str, Any]) -> list[str]:
    problems = []
    name, url, revision = model.get("name"), source.get("url"), source.get("revision")
    if isinstance(name, str) and name.strip() and not SAFE_NAME.fullmatch(name):
        problems.append(
            f"fleet_model.name={name!r}: must be letters, digits and ._- (at most 64, starting with a letter or "
            "digit): it names directories, the systemd unit and the container; fix: e.g. llama-7b"
        )
    if isinstance(url, str) and url.strip() and not GIT_URL.fullmatch(url):
        problems.append(
            f"fleet_model.source.url={url!r}: not a git URL (https://, ssh://, git://, file:// or user@host:path); "
            "fix: e.g. https://huggingface.co/gpt2"
        )
    if isinstance(revision, str) and revision.strip() and not GIT_REF.fullmatch(revision):
        problems.append(f"fleet_model.source.revision={revision!r}: not a branch or tag name git accepts")
    return problems


def _path_problems(source: Mapping[str, Any]) -> list[str]:
    """A checkpoint in a directory on the controller: an absolute path, and nothing of git's."""
    path = source.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        return [f"fleet_model.source.path={path!r}: must be an absolute path to a directory on the controller"]
    mixed = sorted(k for k in ("url", "revision", "commit") if source.get(k))
    if mixed:
        return [
            f"fleet_model.source has path and {', '.join(mixed)}: a checkpoint comes from a git source (url, "
            "revision, commit) or from a directory (path), not both; fix: keep one"
        ]
    return []


def fleet_source_kind(source: Any) -> str:
    """git (url, revision), path (a directory on the controller) or archive (a slim GPT-J archive)."""
    if isinstance(source, Mapping) and "archive" in source:
        return "archive"
    if isinstance(source, Mapping) and "path" in source:
        return "path"
    return "git"


def fleet_source_label(model: Mapping[str, Any]) -> str:
    """Where a valid model's checkpoint comes from, for messages: url @ revision, the directory or the archive."""
    source = model["source"]
    kind = fleet_source_kind(source)
    if kind == "archive":
        return f"{source['archive']} (a slim GPT-J archive, sha256 {source['sha256'][:12]}...)"
    if kind == "path":
        return f"{source['path']} (a directory on the controller)"
    return f"{source['url']} @ {source['revision']}"


def _source_problems(model: Mapping[str, Any], source: Any, family: Any) -> list[str]:
    if not isinstance(source, Mapping):
        return [f"fleet_model.source={source!r}: must be a dict with url and revision, path, or archive"]
    if "archive" in source:
        return fleet_archive_problems(source, family) + _format_problems(model, {})
    if "path" in source:
        return _path_problems(source) + _format_problems(model, {})
    problems = _str_problem(source, "url", "fleet_model.source")
    problems += _str_problem(source, "revision", "fleet_model.source")
    problems += _format_problems(model, source)
    commit = source.get("commit") or ""
    if not isinstance(commit, str) or (commit and not re.fullmatch(r"[0-9a-f]{40}", commit)):
        problems.append(f"fleet_model.source.commit={commit!r}: must be a full 40-character commit id or empty")
    if not isinstance(source.get("token_required", False), bool):
        problems.append(f"fleet_model.source.token_required={source.get('token_required')!r}: must be true or false")
    return problems


def fleet_model_problems(model: Any) -> list[str]:
    if not isinstance(model, Mapping):
        return [f"fleet_model={model!r}: must be a dict (name, family, source, ...); see docs/variables.md"]
    problems = _str_problem(model, "name")
    family = model.get("family")
    if family not in FAMILIES:
        problems.append(f"fleet_model.family={family!r}: unknown model family (valid: {', '.join(sorted(FAMILIES))})")
    problems += _source_problems(model, model.get("source"), family)
    for key in ("checkpoint_dtype", "data_type"):
        value = model.get(key, DEFAULTS[key])
        if value not in DTYPE_BYTES:
            problems.append(f"fleet_model.{key}={value!r}: must be one of {', '.join(DTYPE_BYTES)}")
    if family in FAMILIES:
        allowed = FAMILIES[family].weight_dtypes
        weight = model.get("weight_dtype") or default_weight_dtype(family)
        if weight not in allowed:
            problems.append(
                f"fleet_model.weight_dtype={weight!r}: the {family} converter writes {', '.join(allowed)} only"
            )
    return problems


def fleet_model_resolved(model: Any) -> dict[str, Any]:
    """fleet_model with its defaults filled in (dtypes, source.commit, source.token_required).
    Call it on a model that fleet_model_problems accepts."""
    problems = fleet_model_problems(model)
    if problems:
        raise AnsibleFilterError("fleet_model_resolved: " + "; ".join(problems))
    kind = fleet_source_kind(model["source"])
    if kind == "archive":
        source = {**model["source"], "config": fleet_archive_config(model["source"]), "token_required": False}
    elif kind == "path":
        source = {"path": model["source"]["path"], "token_required": False}
    else:
        source = {"commit": "", "token_required": False, **model["source"]}
    return {
        **DEFAULTS,
        "weight_dtype": default_weight_dtype(model["family"]),
        **model,
        "source": {**source, "commit": source["commit"] or ""} if "commit" in source else source,
    }

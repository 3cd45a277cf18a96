"""What every check of a host's inputs shares: how a value is shown, read and counted."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

PROJECT = Path(__file__).resolve().parents[2]


SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")


def show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def read_yaml(path: Path) -> Any:
    """A YAML file through libyaml where PyYAML has it: Ansible forks a worker per host and task,
    so every host's check reads these files afresh (pure-Python parsing took 3.6 s of 4.2 per host;
    docs/performance.md, "A thousand hosts")."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def plain(value: Any) -> Any:
    """The value as plain dicts and lists. Ansible hands a filter its variables' mappings and lists
    as lazy containers, which template on access; ArgumentSpecValidator deep-copies what it
    validates, and a deep copy of a lazy container costs a copy of its templating state: most of
    this check's time per host before (docs/performance.md, "A thousand hosts")."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [plain(item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def int_problems(values: Mapping[str, Any], low: int, names: tuple[str, ...], high: int | None = None) -> list[str]:
    problems = []
    for name in names:
        value = values.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and (value < low or (high and value > high)):
            span = f"{low}-{high}" if high else f">= {low}"
            problems.append(f"{name}={value}: out of range (valid: {span}); fix: set it in host_vars or group_vars")
    return problems


def whole(value: Any) -> int | None:
    """An integer as the inventory writes one (not a bool, not 1.5), else None."""
    if isinstance(value, bool) or not re.fullmatch(r"-?\d+", str(value).strip()):
        return None
    return int(str(value).strip())


def decimal(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def count_problem(value: Any, low: int) -> str:
    """What is wrong with a limit that must be a whole number >= low (0 meaning none), or ""."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        return ""
    return f"must be a whole number >= {low}" + ("" if low else " (0: no limit)")


def did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"did you mean {close[0]}?" if close else "see ansible-doc -t role -r roles <role>"

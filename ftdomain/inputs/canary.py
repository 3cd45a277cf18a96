"""fleet_canary_*: role canary's inputs (docs/operations.md "Canary")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ftdomain.inputs.common import decimal, show, whole


def canary_problems(v: Mapping[str, Any]) -> list[str]:
    """fleet_canary_*: role canary's inputs (docs/operations.md "Canary")."""
    problems = []
    bounds = {  # name: (parse, lowest, highest, what)
        "fleet_canary_hosts": (whole, 0, None, "a whole number >= 0 (0: no canary)"),
        "fleet_canary_weight": (whole, 1, 100, "a whole number from 1 to 100 (percent of a host's weight)"),
        "fleet_canary_seconds": (whole, 10, None, "a whole number of seconds >= 10"),
        "fleet_canary_max_error_ratio": (decimal, 0.0, 1.0, "a number from 0 to 1 (0.01: 1 % of the answers)"),
        "fleet_canary_max_p95_ratio": (
            decimal,
            1.0,
            None,
            "a number >= 1 (1.5: half as slow again as the other hosts)",
        ),
        "fleet_canary_max_restarts": (whole, 0, None, "a whole number >= 0"),
    }
    for name, (parse, low, high, what) in bounds.items():
        if name not in v:
            continue
        value = parse(v[name])
        if value is None or value < low or (high is not None and value > high):
            problems.append(f"{name}={show(v[name])}: must be {what}")
    prompts = v.get("fleet_canary_golden_prompts", [])
    if not isinstance(prompts, list):
        wanted = "a list of {prompt, expected} or {prompt, expected_prefix} or {prompt, expected_regex}"
        return [*problems, f"fleet_canary_golden_prompts={show(prompts)}: must be {wanted}"]
    for i, item in enumerate(prompts):
        problems += _golden_problems(f"fleet_canary_golden_prompts[{i}]", item)
    if prompts and v.get("fleet_gateway") is False:
        problems.append(
            "fleet_canary_golden_prompts: the golden prompts are asked through the gateway; fix: fleet_gateway: true"
        )
    return problems


EXPECTATIONS = ("expected", "expected_prefix", "expected_regex")
ONE_OF = "expected (the whole completion) or expected_prefix or expected_regex"


def _golden_problems(where: str, item: Any) -> list[str]:
    """What is wrong with one golden prompt: a prompt, exactly one expectation (a regular
    expression that compiles), max_tokens >= 1, nothing else."""
    if not isinstance(item, Mapping):
        return [f"{where}={show(item)}: must be a mapping with prompt and {ONE_OF}"]
    problems = []
    unknown = sorted(set(item) - {"prompt", "max_tokens", *EXPECTATIONS})
    wants = [k for k in EXPECTATIONS if k in item]
    if unknown:
        problems.append(
            f"{where}: unknown key(s) {', '.join(unknown)}; fix: prompt, "
            "expected or expected_prefix or expected_regex, max_tokens"
        )
    if not isinstance(item.get("prompt"), str) or not item.get("prompt"):
        problems.append(f"{where}: prompt must be a text that is not empty")
    if len(wants) != 1 or not isinstance(item[wants[0]], str):
        problems.append(f"{where}: needs exactly one of {ONE_OF}, as text")
    elif wants == ["expected_regex"]:
        try:
            re.compile(item["expected_regex"])
        except re.error as err:
            problems.append(f"{where}: expected_regex={show(item['expected_regex'])}: not a regular expression ({err})")
    tokens = whole(item.get("max_tokens", 16))
    if tokens is None or tokens < 1:
        problems.append(f"{where}: max_tokens={show(item.get('max_tokens'))}: must be a whole number >= 1")
    return problems

"""What every filter shares about the values Ansible hands it: one reading of a boolean.

Ansible templates a boolean variable into a string in older versions and in `vars:` expressions
("True", "yes", "on"), and the inventory may write one as a string or a number: every filter reads
them through `truthy`, as Ansible's own `bool` filter reads them."""

from __future__ import annotations

from typing import Any

TRUE_WORDS = frozenset(("1", "true", "yes", "on", "y", "t"))


def truthy(value: Any, default: bool = False) -> bool:
    """A variable's truth: booleans and numbers as Python reads them, strings as Ansible's `bool`
    filter does (1, true, yes, on, y, t in any case; any other string is false), None as `default`."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in TRUE_WORDS
    return bool(value)

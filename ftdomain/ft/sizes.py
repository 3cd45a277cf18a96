"""A model's sizes as FT reads them: positive integers, present where a filter needs them, and the
tensor-parallel split they allow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError


def whole_number(value: Any, what: str, filter_name: str, minimum: int = 0, said: str = "") -> int:
    """`value` as an int of at least `minimum` (ints and integer strings), or an error naming it
    and what it must be (`said`, else "a whole number >= minimum")."""
    wanted = said or f"a whole number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise AnsibleFilterError(f"{filter_name}: {what} must be {wanted}, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise AnsibleFilterError(f"{filter_name}: {what} must be {wanted}, got {value!r}") from None
    if number < minimum:
        raise AnsibleFilterError(f"{filter_name}: {what} must be {wanted}, got {value!r}")
    return number


def positive_int(value: Any, what: str, filter_name: str) -> int:
    """`value` as a positive int (ints and integer strings), or an error naming it."""
    return whole_number(value, what, filter_name, 1, "a positive integer")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def require_params(params: Any, keys: tuple[str, ...], filter_name: str) -> dict[str, int]:
    """Positive-int sizes `keys` from an ft_model_params result, or an error naming what is missing."""
    if not isinstance(params, Mapping):
        raise AnsibleFilterError(
            f"{filter_name}: params must be the dict ft_model_params returns, got {type(params).__name__}"
        )
    missing = [k for k in keys if k not in params]
    if missing:
        raise AnsibleFilterError(
            f"{filter_name}: params lack {', '.join(missing)} (pass the result of ft_model_params)"
        )
    return {k: positive_int(params[k], f"params.{k}", filter_name) for k in keys}


def split_tp(params: Any, tp: Any, filter_name: str) -> int:
    """`tp` as a positive int that divides head_num and inter_size, or an error naming the filter."""
    tp_n = positive_int(tp, "tensor_para_size", filter_name)
    sizes = require_params(params, ("head_num", "inter_size"), filter_name)
    for key in ("head_num", "inter_size"):
        if sizes[key] % tp_n:
            raise AnsibleFilterError(
                f"{filter_name}: tensor_para_size {tp_n} does not divide {key} {sizes[key]} "
                "(check it with ft_check_parallelism first)"
            )
    return tp_n

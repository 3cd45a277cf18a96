"""Access to the family registry in filter_plugins/, from the repository or a deployed copy."""

from __future__ import annotations

import sys
from pathlib import Path

_PLUGINS = Path(__file__).resolve().parent.parent / "filter_plugins"
if str(_PLUGINS) not in sys.path:
    sys.path.insert(0, str(_PLUGINS))

from ft_families import (  # noqa: E402
    DTYPE_BYTES,
    FAMILIES,
    AnsibleFilterError,
    Dims,
    Family,
    Tensor,
    dims,
    shard_shape,
    weight_files,
)
from ft_layout import ft_config_ini, ft_expected_files  # noqa: E402
from ft_model import ft_model_params, ft_parallelism_problems  # noqa: E402

__all__ = [
    "DTYPE_BYTES",
    "FAMILIES",
    "AnsibleFilterError",
    "Dims",
    "Family",
    "Tensor",
    "dims",
    "ft_config_ini",
    "ft_expected_files",
    "ft_model_params",
    "ft_parallelism_problems",
    "shard_shape",
    "weight_files",
]

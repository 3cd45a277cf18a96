"""Every input a later stage relies on, checked at once: the problems of one host's settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.model import fleet_model_problems, fleet_model_resolved
from ftdomain.fleet.monitoring import monitoring_input_problems
from ftdomain.inputs.common import int_problems, plain, show
from ftdomain.inputs.derived import role_defaults
from ftdomain.inputs.fleet import fleet_problems
from ftdomain.inputs.gateway import gateway_problems
from ftdomain.inputs.gpus import gpu_problems
from ftdomain.inputs.roles import path_problems, role_of, spec_problems, tp_problems, unknown_fleet
from ftdomain.inputs.server import (
    build_recipe_problems,
    server_problems,
    triton_model_repo_problems,
)


def fleet_input_problems(provided: Any, gpus: Any = None) -> list[str]:
    if not isinstance(provided, Mapping):
        raise AnsibleFilterError(f"fleet_input_problems: expected a dict of variables, got {type(provided).__name__}")
    provided = plain(provided)
    problems, converted = spec_problems(provided)
    values = {**role_defaults(), **provided, **converted}
    problems += unknown_fleet(provided) + fleet_problems(values)
    problems += server_problems(values) + tp_problems(values) + path_problems(provided, values)
    problems += int_problems(values, 1, ("ft_gemm_tune_batch_size", "ft_gemm_tune_beam_width",
                                          "ft_gemm_tune_max_input_len", "ft_convert_workers", "ft_convert_timeout",
                                          "ft_gemm_tune_timeout", "container_image_progress_interval",
                                          "container_image_timeout", "nvidia_driver_reboot_timeout"))  # fmt: skip
    problems += monitoring_input_problems(values)
    branch = values.get("nvidia_driver_branch")
    if branch is not None and not re.fullmatch(r"\d{3}", str(branch)):
        problems.append(f"nvidia_driver_branch={show(branch)}: must be a driver branch such as '535'")
    model = values.get("fleet_model")
    if isinstance(model, Mapping) and model and values.get("fleet_gateway") is True:
        problems += gateway_problems(values)
    if isinstance(model, Mapping) and model and not fleet_model_problems(model):
        problems += triton_model_repo_problems(values, fleet_model_resolved(model))
    problems += build_recipe_problems(values)
    if isinstance(gpus, Mapping):
        problems += gpu_problems(values, gpus)
    return problems


def fleet_input_names(names: Any) -> list[str]:
    """From a list of variable names, those this check reads: fleet_* and every role's prefix."""
    if not isinstance(names, list | tuple):
        raise AnsibleFilterError(f"fleet_input_names: expected a list of names, got {type(names).__name__}")
    return sorted(n for n in names if isinstance(n, str)
                  and (n.startswith("fleet_") or n == "monitoring_targets" or role_of(n)))  # fmt: skip


def ft_model_params_problems(hf_config: Any, family: Any) -> list[str]:
    """What ft_model_params refuses in a config.json, as a list (empty when it converts)."""
    from ftdomain.ft.model import ft_model_params  # noqa: PLC0415 - sibling plugin, loaded by path

    try:
        ft_model_params(hf_config, family)
    except AnsibleFilterError as err:
        return [str(err).removeprefix("ft_model_params: ")]
    return []

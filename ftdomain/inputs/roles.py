"""Role variables against their roles' argument specs: types, choices, names no role documents,
fleet_* names no one documents, paths, and the tp the converter and the tuner are given."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ftdomain.inputs.common import did_you_mean, show
from ftdomain.inputs.derived import fleet_names, role_outputs, role_specs


def role_of(name: str) -> str | None:
    roles = {role for role, _ in role_specs().values()}
    matches = [r for r in roles if name.startswith(r + "_")]
    return max(matches, key=len) if matches else None


def spec_problems(provided: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Type and choice problems of the role variables set, unknown role variables, and the values
    converted to their documented types."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: PLC0415 - Ansible's own

    specs, problems, values = role_specs(), [], {}
    for name, value in sorted(provided.items()):
        role = role_of(name)
        if role is None or (name not in specs and name in role_outputs()):
            continue
        if name not in specs:
            documented = [n for n, (r, _) in specs.items() if r == role]
            problems.append(
                f"{name}={show(value)}: no such variable in role {role}; fix: {did_you_mean(name, documented)}"
            )
            continue
        result = ArgumentSpecValidator({name: specs[name][1]}).validate({name: value})
        for message in result.error_messages:
            problems.append(f"{name}={show(value)}: {message}; fix: see ansible-doc -t role -r roles {specs[name][0]}")
        if not result.error_messages:
            values[name] = result.validated_parameters[name]
    return problems, values


def unknown_fleet(provided: Mapping[str, Any]) -> list[str]:
    """fleet_* names no one documents; those of a role (fleet_shared_*, fleet_status_*) its spec
    judges (spec_problems)."""
    known = sorted(fleet_names())
    return [
        f"{name}={show(value)}: no such fleet variable; fix: {did_you_mean(name, known)} (docs/variables.md)"
        for name, value in sorted(provided.items())
        if name.startswith("fleet_") and role_of(name) is None and name not in known
    ]


def path_problems(provided: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, (_, spec) in sorted(role_specs().items()):
        value = values.get(name)
        if name not in provided or not isinstance(value, str) or not value:
            continue
        container_path = name.endswith("container_dir") or name.endswith("_root") or name == "ft_convert_python"
        if (spec.get("type") == "path" or container_path) and not os.path.expanduser(value).startswith("/"):
            problems.append(f"{name}={value!r}: must be an absolute path; fix: e.g. /srv/ftfleet/...")
    return problems


def tp_problems(v: Mapping[str, Any]) -> list[str]:
    tp = v.get("fleet_tensor_para_size")
    return [
        f"{name}={v[name]} but fleet_tensor_para_size={tp}: shards and tuning must be made for the serving "
        f"tensor-parallel size; fix: remove {name} (it follows fleet_gpu_devices)"
        for name in ("ft_convert_tp", "ft_gemm_tune_tp")
        if name in v and str(v[name]) != str(tp)
    ]

"""Ansible's filters of ftdomain.inputs.checks: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_input_problems
short_description: Every problem of a host's inputs (fleet_* and role variables), as sentences
description:
  - Takes the variables defined for a host whose names carry the fleet_ prefix or a role's
    prefix (what the inventory, group_vars and extra vars set), and returns a list of problems,
    each naming the variable, its value, what is wrong and the fix. An empty list means the
    inputs are usable. Never raises for a bad input.
  - Checks each role variable against its role's meta/argument_specs.yml (type, choices,
    element type) and flags names with a role's prefix that no role documents (typos); checks
    fleet_* variables (types, absolute and safe paths, GPU list, parallel sizes, container
    versions, engine); numbers within their ranges (ports, timeouts, batch sizes, int8 modes),
    constraints across variables (distinct ports, the converter's and the tuner's tp equal the
    serving tp, batching modes, int8 with the family and data type), and, given the host's GPUs,
    that the CUDA of the containers that build FT can build for their architecture and that bf16
    runs on them.
  - Values a variable does not set come from its role's defaults/main.yml where that is a
    literal (templated defaults follow the fleet_* inputs checked here).
options:
  _input:
    description: Variable name -> value, for the host.
    type: dict
    required: true
  gpus:
    description: The host's ansible_local.gpus fact (role gpu_facts); GPU checks are skipped without it.
    type: dict
"""

EXAMPLES = r"""
- name: Collect the problems of the host's inputs
  ansible.builtin.set_fact:
    problems: "{{ provided | fleet_input_problems(ansible_local.gpus | default({})) }}"
"""

RETURN = r"""
_value:
  description: Problems, each "variable=value - what is wrong; fix - what to do" (empty when all is well).
  type: list
  elements: str
"""

from typing import Any

from ftdomain.inputs.checks import fleet_input_names, fleet_input_problems, ft_model_params_problems
from ftdomain.inputs.gateway import gateway_problems
from ftdomain.inputs.server import triton_model_repo_problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_input_names": fleet_input_names,
            "fleet_input_problems": fleet_input_problems,
            "gateway_problems": gateway_problems,
            "ft_model_params_problems": ft_model_params_problems,
            "triton_model_repo_problems": triton_model_repo_problems,
        }

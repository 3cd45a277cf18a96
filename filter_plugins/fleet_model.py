"""Ansible's filters of ftdomain.fleet.model: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_model_problems
short_description: Every problem of a fleet_model definition, as sentences
description:
  - Checks the model a host serves (the inventory's C(fleet_model)) and returns one sentence per
    problem, naming the key, its value and what would be valid; an empty list when it is valid.
    Used by the preflight role, which reports all problems of a host at once.
options:
  _input:
    description: The fleet_model dict.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Collect the model definition's problems
  ansible.builtin.set_fact:
    problems: "{{ fleet_model | fleet_model_problems }}"
"""

RETURN = r"""
_value:
  description: Problems, empty when the definition is valid.
  type: list
  elements: str
"""

from typing import Any

from ftdomain.fleet.model import fleet_model_problems, fleet_model_resolved, fleet_source_kind, fleet_source_label


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_model_problems": fleet_model_problems,
            "fleet_model_resolved": fleet_model_resolved,
            "fleet_source_label": fleet_source_label,
            "fleet_source_kind": fleet_source_kind,
        }

"""Ansible's filters of ftdomain.fleet.memory and ftdomain.ft.memory: their names and documentation
(ansible-doc reads them here), the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_memory_plan
short_description: What one GPU of a host holds at FasterTransformer's peak, against its memory
description:
  - fleet_memory_plan computes, per GPU, the bytes FT allocates for a full batch at the longest
    request the gateway lets in (weights, key/value cache, the context phase's buffers, decoding's,
    and the runtime's own as preflight_gpu_overhead_mib), from the model's config.json and the
    host's settings, and compares it with the smallest assigned GPU; with the largest
    max_batch_size and the longest context that would fit. docs/models.md, "GPU memory".
  - ft_memory_plan and ft_memory_fit are the same figures for explicit settings.
options:
  _input:
    description: >-
      fleet_memory_plan - the host's variables (fleet_* and the roles' prefixed ones; the roles'
      defaults fill the rest); ft_memory_plan, ft_memory_fit - the family name.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Plan a host's GPU memory
  ansible.builtin.set_fact:
    plan: "{{ provided | fleet_memory_plan(fleet_model | fleet_model_resolved, config_json, ansible_local.gpus) }}"

- name: GPT-J-6B at fp16, 64 requests of 2048 tokens on one GPU
  ansible.builtin.debug:
    msg: "{{ ('gptj' | ft_memory_plan(params, settings)).total_mib }}"
  vars:
    settings: {data_type: fp16, max_batch_size: 64, context: 2048}
"""

RETURN = r"""
_value:
  description: >-
    fleet_memory_plan - plan, fit, capacity_mib, gpu_mib, summary, problem ('' when it fits);
    ft_memory_plan - bytes per part, total_bytes, total_mib and the settings; ft_memory_fit -
    max_batch_size and context that fit, capacity_mib.
  type: dict
"""

from typing import Any

from ftdomain.fleet.memory import fleet_memory_plan
from ftdomain.ft.memory import ft_memory_fit, ft_memory_plan


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_memory_plan": fleet_memory_plan,
            "ft_memory_plan": ft_memory_plan,
            "ft_memory_fit": ft_memory_fit,
        }

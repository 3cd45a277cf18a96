"""Ansible's filters of ftdomain.ft.interface: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_triton_interface
short_description: What each Triton model of a family's repository declares
description:
  - Returns, for a model family, the inputs, outputs and parameter names of the four models of
    its Triton repository (preprocessing, fastertransformer, postprocessing, ensemble), as
    fastertransformer_backend's all_models declares them for that family (LLaMA, void-main's
    backend), plus the project's own additions, which are all optional inputs or parameters so a
    client written for upstream works unchanged. The templates of role triton_model_repo render
    these lists; tests/unit/test_triton_interface.py compares the rendered configs with a table of
    upstream's declarations.
options:
  _input:
    description: The model family (gptj, gpt, gptneox, bloom, llama).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The fastertransformer model's inputs for GPT-J
  ansible.builtin.debug:
    msg: "{{ ('gptj' | ft_triton_interface).fastertransformer.inputs | map(attribute='name') }}"
"""

RETURN = r"""
_value:
  description: >-
    preprocessing, fastertransformer, postprocessing, ensemble: each a dict of inputs and
    outputs (lists of {name, data_type, dims, optional, reshape}) and parameters (names).
  type: dict
"""

from typing import Any

from ftdomain.ft.interface import ft_triton_interface


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ft_triton_interface": ft_triton_interface}

"""Ansible's filters of ftdomain.ft.model: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_model_params
short_description: FasterTransformer parameters of a checkpoint, from its config.json
description:
  - Reads the Hugging Face config.json of a checkpoint (already parsed) with the key names of
    its family and returns the sizes FT needs - head_num, size_per_head, inter_size, num_layer,
    vocab_size, start_id, end_id, model_type - plus the family's own (rotary_embedding,
    use_gptj_residual, layernorm_eps, max_pos_seq_len, the BLOOM layout flags).
  - ft_check_parallelism (same file) checks tensor/pipeline parallel sizes against them.
options:
  _input:
    description: The parsed config.json of the checkpoint.
    type: dict
    required: true
  family:
    description: gptj, gpt, gptneox, llama or bloom.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the checkpoint's shape
  ansible.builtin.set_fact:
    __params: "{{ (lookup('file', ckpt ~ '/config.json') | from_json) | ft_model_params('gptj') }}"

- name: Refuse a tensor-parallel size the model cannot split into
  ansible.builtin.debug:
    msg: "{{ __params | ft_check_parallelism(tp, pp, gpu_count) }}"
"""

RETURN = r"""
_value:
  description: The FT parameters (ft_model_params), or the params unchanged (ft_check_parallelism).
  type: dict
  sample: {family: gptj, model_type: GPT-J, head_num: 16, size_per_head: 256, inter_size: 16384,
           num_layer: 28, vocab_size: 50400, start_id: 50256, end_id: 50256, rotary_embedding: 64,
           hidden_size: 4096, model_name: gptj}
"""

from typing import Any

from ftdomain.ft.model import (
    ft_check_parallelism,
    ft_kernel_problems,
    ft_model_params,
    ft_parallelism_problems,
    ft_token_id_problems,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ft_model_params": ft_model_params,
            "ft_check_parallelism": ft_check_parallelism,
            "ft_parallelism_problems": ft_parallelism_problems,
            "ft_kernel_problems": ft_kernel_problems,
            "ft_token_id_problems": ft_token_id_problems,
        }

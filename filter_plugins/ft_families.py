"""Ansible's filters of ftdomain.ft.families: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_family
short_description: The registry facts of a FasterTransformer model family
description:
  - Returns what the project knows about a family - the backend model_type, the config.ini
    section and its required keys, the upstream converter script, the weight dtypes the
    converter can write, whether int8_mode is supported, and which FT/FTB source flavour
    (C(nvidia) or C(void-main)) builds the images for it.
options:
  _input:
    description: Family name - one of gptj, gpt, gptneox, llama, bloom.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Pick the image flavour for the model this host serves
  ansible.builtin.set_fact:
    ft_image_flavour: "{{ (fleet_model_family | ft_family).flavour }}"
"""

RETURN = r"""
_value:
  description: The family's facts.
  type: dict
  sample:
    name: gptj
    model_type: GPT-J
    ini_section: gptj
    ini_required_keys: [model_name, head_num, size_per_head, inter_size, num_layer, vocab_size,
                        rotary_embedding, start_id, end_id]
    converter: examples/pytorch/gptj/utils/huggingface_gptj_ckpt_convert.py
    weight_dtypes: [fp32]
    int8: false
    flavour: nvidia
"""

from collections.abc import Callable
from typing import Any

from ftdomain.ft.families import ft_family


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"ft_family": ft_family}

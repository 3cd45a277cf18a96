"""Ansible's filters of ftdomain.ft.layout: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_expected_files
short_description: The files and sizes of a correct FasterTransformer shard directory
description:
  - ft_expected_files returns every weight file the FT backend opens in a C(<tp>-gpu)
    directory, with its exact size in bytes, so a conversion can be verified before serving
    (FT only warns on a missing or short file, then serves garbage).
  - ft_shard_dir returns C(<model_dir>/fastertransformer/1/<tp>-gpu).
  - ft_config_ini returns the config.ini text the backend needs, every required key present.
options:
  _input:
    description: The family name (ft_expected_files), the model's Triton repository directory
      (ft_shard_dir) or the ft_model_params result (ft_config_ini).
    required: true
"""

EXAMPLES = r"""
- name: Verify a conversion
  ansible.builtin.stat:
    path: "{{ model_dir | ft_shard_dir(tp) }}/{{ item.name }}"
  loop: "{{ 'gptj' | ft_expected_files(params, tp, 'fp32') }}"

- name: Write config.ini
  ansible.builtin.copy:
    content: "{{ params | ft_config_ini('gptj', 'fp32', tp) }}"
    dest: "{{ model_dir | ft_shard_dir(tp) }}/config.ini"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: >-
    ft_expected_files - a list of {name, bytes} sorted by name; ft_shard_dir - a path;
    ft_config_ini - the text of config.ini.
  type: raw
"""

from typing import Any

from ftdomain.ft.layout import (
    ft_config_ini,
    ft_expected_files,
    ft_parameter_count,
    ft_shard_dir,
    ft_weight_bytes_per_gpu,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ft_shard_dir": ft_shard_dir,
            "ft_expected_files": ft_expected_files,
            "ft_config_ini": ft_config_ini,
            "ft_weight_bytes_per_gpu": ft_weight_bytes_per_gpu,
            "ft_parameter_count": ft_parameter_count,
        }

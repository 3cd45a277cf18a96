"""Ansible's filters of ftdomain.ft.commands: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ft_converter_argv
short_description: argv lists for the upstream FT converter and for gpt_gemm
description:
  - ft_converter_argv(family, ckpt_dir, out_dir, tp, weight_dtype) returns the argv that runs
    the family's Hugging Face converter from the FT source tree as the seeds do (script path
    relative to the FT tree, then flags). Every converter writes into C(<out_dir>/<tp>-gpu).
    The GPT-J converter converts C(--n-layers) layers, 28 unless told; pass C(num_layer) so
    a model of another depth is converted whole.
  - ft_converter_imports(family) returns what the family's converter imports beyond the FT
    image, as dicts of statement (the import line), requirements (the pip requirements that
    provide it, with environment markers; empty when the image must bring it) and cflags (to
    build one from source).
  - ft_gemm_argv(params, batch_size, beam_width, max_input_len, data_type, tp) returns the argv
    of gpt_gemm (one binary for every decoder family), with the FULL head count and inter size:
    gpt_gemm divides by the tensor-parallel size itself.
options:
  _input:
    description: The family (ft_converter_argv) or the ft_model_params result (ft_gemm_argv).
    required: true
"""

EXAMPLES = r"""
- name: Convert inside the FT image
  ansible.builtin.command:
    argv: "{{ ['python3'] + ('gptj' | ft_converter_argv('/ckpt', '/out', 1, 'fp32')) }}"

- name: Tune GEMMs
  ansible.builtin.command:
    argv: "{{ params | ft_gemm_argv(8, 1, 32, 'fp16', 1) }}"
"""

RETURN = r"""
_value:
  description: The argv list, every element a string.
  type: list
  elements: str
  sample: [gpt_gemm, "8", "1", "32", "16", "256", "16384", "50400", "1", "1"]
"""

from typing import Any

from ftdomain.ft.commands import ft_converter_argv, ft_converter_imports, ft_gemm_argv


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ft_converter_argv": ft_converter_argv,
            "ft_converter_imports": ft_converter_imports,
            "ft_gemm_argv": ft_gemm_argv,
        }

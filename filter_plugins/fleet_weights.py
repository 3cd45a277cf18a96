"""Ansible's filters of ftdomain.fleet.weights: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_checkpoint_weights
short_description: The weight format and sizes of a checkpoint, from its repository's file list
description:
  - Reads the top-level file list of a model's git repository (name, bytes, whether the file is a
    git-lfs pointer; preflight's fetch-model-config makes it from the pointers, so no weight is
    downloaded) and says which weights a converter would read, their format and size, and how many
    bytes git-lfs would fetch.
  - C(fleet_checkpoint_weights_problems) returns one sentence per problem, e.g. weights in a format
    the chosen conversion engine cannot read, with the fix.
options:
  _input:
    description: The file list, each a dict with name, bytes and lfs.
    type: list
    elements: dict
    required: true
  engine:
    description: The conversion engine (fleet_convert_engine), native or upstream.
    type: str
    required: true
  family:
    description: The model family (gptj, gpt, gptneox, bloom, llama).
    type: str
    required: true
  lfs_include:
    description: git lfs pull --include patterns, comma-separated (model_checkpoint_lfs_include); empty for all.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Size the checkpoint from its file list
  ansible.builtin.set_fact:
    weights: "{{ listing.files | fleet_checkpoint_weights('native', 'gptj') }}"
"""

RETURN = r"""
_value:
  description: >-
    format (safetensors, bin or none), layout (single or sharded), files (the weight files a
    converter reads), read_bytes (their size), fetch_bytes (every LFS object git-lfs pulls),
    other_formats (weights in formats no engine here reads).
  type: dict
"""

from typing import Any

from ftdomain.fleet.weights import fleet_checkpoint_weights, fleet_checkpoint_weights_problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_checkpoint_weights": fleet_checkpoint_weights,
            "fleet_checkpoint_weights_problems": fleet_checkpoint_weights_problems,
        }

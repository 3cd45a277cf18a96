"""Ansible's filters of ftdomain.fleet.archive: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_archive_listing
short_description: What preflight and model_checkpoint need of a slim GPT-J archive source
description:
  - For C(fleet_model.source) with C(archive) (a mesh-transformer-jax slim GPT-J checkpoint in a
    tar archive, from a URL or a path on the controller, with its C(sha256)).
  - C(fleet_archive_listing) returns what preflight reads from a git source - C(config) (GPT-J-6B's
    config.json with C(source.config) over it), C(files) (empty - the archive is not read on the
    controller), C(commit) (the identity) and C(tokenizer) (the bos/eos tokens of C(source.tokenizer)).
  - C(fleet_archive_config) returns the config.json written beside the shards.
  - C(fleet_archive_id) returns the identity that stands for the commit - 40 hex digits of a sha256
    over the archive's sha256 and the config.
  - C(fleet_archive_tokenizer_files) returns the top-level files of C(source.tokenizer), copied beside the shards;
    C(fleet_archive_controller_problems) says what the controller lacks - that directory, or the archive where
    it is a path there (empty when nothing).
  - C(fleet_archive_weights) (the model's parameter count) returns what C(fleet_checkpoint_weights) returns for a
    git source; C(fleet_archive_weights_problems) (the engine) says why an engine cannot convert it.
options:
  _input:
    description: >-
      fleet_model.source (fleet_archive_weights - the parameter count;
      fleet_archive_weights_problems - fleet_convert_engine).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the archive's config and identity
  ansible.builtin.set_fact:
    listing: "{{ fleet_model.source | fleet_archive_listing }}"
"""

RETURN = r"""
_value:
  description: The listing, config, identity, file names, weights or problems.
  type: raw
"""

from typing import Any

from ftdomain.fleet.archive import (
    fleet_archive_config,
    fleet_archive_controller_problems,
    fleet_archive_id,
    fleet_archive_listing,
    fleet_archive_tokenizer_files,
    fleet_archive_weights,
    fleet_archive_weights_problems,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_archive_listing": fleet_archive_listing,
            "fleet_archive_config": fleet_archive_config,
            "fleet_archive_id": fleet_archive_id,
            "fleet_archive_tokenizer_files": fleet_archive_tokenizer_files,
            "fleet_archive_controller_problems": fleet_archive_controller_problems,
            "fleet_archive_weights": fleet_archive_weights,
            "fleet_archive_weights_problems": fleet_archive_weights_problems,
        }

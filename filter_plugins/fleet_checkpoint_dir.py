"""Ansible's filters of ftdomain.fleet.checkpoint_dir: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_checkpoint_dir
short_description: Read a checkpoint directory on the controller as preflight reads a git source
description:
  - C(fleet_checkpoint_dir) returns what preflight reads from a git source, from a directory
    instead - C(config) (config.json), C(files) (the top-level files, each name, bytes, lfs false),
    C(tokenizer) (the bos/eos tokens and ids of its tokenizer files) and C(commit) (the identity).
  - C(fleet_checkpoint_dir_id) returns the identity alone - the first 40 hex digits of a sha256
    over every file's relative path, size and modification time (as rsync compares files), .git
    left out - without reading any file's content. It stands where the commit stands for a git
    source - the shards' and the registry's keys - so a changed file makes new shards.
  - C(fleet_checkpoint_dir_files) returns every file as "relative/path size", sorted, .git left
    out - what a complete copy of the directory holds.
  - C(fleet_checkpoint_dir_problems) returns why the directory cannot be read, as sentences with
    the fix (no such directory, no config.json, Meta's original LLaMA files); empty when it can.
  - All run on the controller (filters do); the directory is never read on a host.
options:
  _input:
    description: The directory, an absolute path.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the checkpoint
  ansible.builtin.set_fact:
    listing: "{{ fleet_model.source.path | fleet_checkpoint_dir }}"
"""

RETURN = r"""
_value:
  description: The listing (fleet_checkpoint_dir) or the identity (fleet_checkpoint_dir_id).
  type: raw
"""

from typing import Any

from ftdomain.fleet.checkpoint_dir import (
    fleet_checkpoint_dir,
    fleet_checkpoint_dir_files,
    fleet_checkpoint_dir_id,
    fleet_checkpoint_dir_problems,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_checkpoint_dir": fleet_checkpoint_dir,
            "fleet_checkpoint_dir_id": fleet_checkpoint_dir_id,
            "fleet_checkpoint_dir_files": fleet_checkpoint_dir_files,
            "fleet_checkpoint_dir_problems": fleet_checkpoint_dir_problems,
        }

"""Ansible's filters of ftdomain.fleet.artifacts: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_artifact_plans
short_description: What each of the play's hosts does for an artifact they may share through a registry
description:
  - Called once per play (run_once), it reads each host's variables once, so its cost grows with
    the number of hosts, not with its square (a per-host election over every host's variables took
    55 s for 200 hosts; docs/performance.md, "A thousand hosts").
  - The peers of a host are the play's hosts (in play order) whose variable I(key) (the artifact's
    name or inputs hash) equals its own; hosts without I(key) take no part. A peer has the artifact
    when its variable I(have) is true; the registry has it when the peer's variable I(in_registry)
    is true.
  - Each host gets C(have) when it has the artifact (C(push) instead when the registry lacks it and
    this is the first peer that has it); without a registry C(make); else C(pull) when the registry
    has it; else C(make) on the first peer that lacks it when no peer has it, and C(wait) on every
    other peer (the maker, or the peer that pushes, goes first: the linear strategy runs each task
    on every host before the next task, so a later pull finds the artifact pushed).
  - C(source) names the peer the others wait for (the first that has it, else the first that
    lacks it).
options:
  _input:
    description: The play's host names, in play order (ansible_play_hosts).
    type: list
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
  key:
    description: The variable that names the artifact on each host.
    type: str
    required: true
  have:
    description: The boolean variable that says whether a host has the artifact.
    type: str
    required: true
  in_registry:
    description: The boolean variable that says whether the registry has the host's artifact.
    type: str
  registry:
    description: Whether the fleet has a registry.
    type: bool
  make:
    description: The word for making it here (build, convert, tune).
    type: str
  place:
    description: >-
      The variable that names the machine a host runs on (fleet_machine). Hosts with the same
      artifact on one machine (several models on one host, docs/placement.md) share it: the first
      of them in play order takes part in the election, and each other gets C(mate) with that host
      as C(source) (it does nothing: the artifact is on its machine once that host is done).
    type: str
"""

EXAMPLES = r"""
- name: Elect, once for the play's hosts
  ansible.builtin.set_fact:
    __plans: >-
      {{ ansible_play_hosts | fleet_artifact_plans(hostvars, '__ref', '__local', '__in_registry',
         registry=true, make='convert') }}
  run_once: true

- name: Take this host's part
  ansible.builtin.set_fact:
    __plan: "{{ __plans[inventory_hostname].plan }}"
"""

RETURN = r"""
_value:
  description: "host -> {plan: have|push|<make>|pull|wait|mate, source: the host the others wait for, or ''}"
  type: dict
"""

from typing import Any

from ftdomain.fleet.artifacts import fleet_artifact_plans


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_artifact_plans": fleet_artifact_plans}

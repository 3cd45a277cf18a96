"""Who makes a shared artifact (an image, a set of shards, a tuned gemm_config.in) and who takes
it from the registry: one election, used by container_image, ft_convert and ft_gemm_tune."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: fleet_artifact_plan
short_description: What this host does for an artifact the play's hosts may share through a registry
description:
  - The peers are the play's hosts (in play order) whose variable I(key) (the artifact's name or
    inputs hash) equals this host's. A peer has the artifact when its variable I(have) is true.
  - Returns C(have) when this host has it (C(push) instead when the registry lacks it and this is
    the first peer that has it); without a registry C(make); else C(pull) when the registry has it;
    else C(make) on the first peer that lacks it when no peer has it, and C(wait) on every other
    peer (the maker, or the peer that pushes, goes first: the linear strategy runs each task on
    every host before the next task, so a later pull finds the artifact pushed).
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
  me:
    description: This host's name (inventory_hostname).
    type: str
    required: true
  key:
    description: The variable that names the artifact on each host.
    type: str
    required: true
  have:
    description: The boolean variable that says whether a host has the artifact.
    type: str
    required: true
  registry:
    description: Whether the fleet has a registry.
    type: bool
  in_registry:
    description: Whether the registry has the artifact.
    type: bool
  make:
    description: The word for making it here (build, convert, tune).
    type: str
"""

EXAMPLES = r"""
- name: Elect
  ansible.builtin.set_fact:
    __plan: >-
      {{ ansible_play_hosts | fleet_artifact_plan(hostvars, inventory_hostname, '__ref', '__local',
         registry=true, in_registry=false, make='convert') }}
"""

RETURN = r"""
_value:
  description: "{plan: have|push|<make>|pull|wait, source: the host the others wait for, or ''}"
  type: dict
"""


def _true(value: Any) -> bool:
    """A fact's truth: booleans, and the strings older Ansible templates booleans into."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def fleet_artifact_plan(
    hosts: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    me: str,
    key: str,
    have: str,
    registry: bool = False,
    in_registry: bool = False,
    make: str = "make",
) -> dict[str, str]:
    mine = hostvars[me][key]
    peers = [host for host in hosts if key in hostvars[host] and hostvars[host][key] == mine]
    if me not in peers:  # ansible_play_hosts leaves out a host that failed earlier; the caller has not
        peers.append(me)
    holders = [host for host in peers if _true(hostvars[host].get(have, False))]
    lackers = [host for host in peers if host not in holders]
    pusher = holders[0] if holders else ""
    maker = lackers[0] if lackers else ""
    registry, in_registry = _true(registry), _true(in_registry) and _true(registry)
    if me in holders:
        plan = "push" if registry and not in_registry and pusher == me else "have"
    elif not registry:
        plan = make
    elif in_registry:
        plan = "pull"
    elif pusher or maker != me:
        plan = "wait"
    else:
        plan = make
    return {"plan": plan, "source": pusher or maker}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_artifact_plan": fleet_artifact_plan}

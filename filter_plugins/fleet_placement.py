"""Ansible's filters of ftdomain.fleet.placement: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_placement_problems
short_description: Every problem of the placement of models on machines, per host, in one pass
description:
  - A host whose fleet_machine names another inventory host is a slot of that machine. Its
    machine must be a GPU host that is no slot itself and serves a model, at the same address
    (ansible_host), with the same fleet_gateway.
  - On a machine, the models that its host and its slots serve must have distinct names (they
    name units, containers and directories), use distinct GPUs (fleet_gpu_devices) and distinct
    ports (tritonserver's HTTP, gRPC and metrics ports, the gateway's, and the machine's node and
    DCGM exporter ports).
  - Reads each host's fleet_machine once, and the other variables only of machines with slots:
    linear in the hosts (docs/performance.md).
  - fleet_machine_leader says whether a host does its machine's shared work (packages, the
    gateway's user and virtualenv, an image loaded from an archive): the machine's own host, or,
    when a run leaves it out (--limit), the first of its slots in play order.
options:
  _input:
    description: The GPU hosts (groups.gpu_hosts), or for fleet_machine_leader the host's name.
    type: list
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the placement of every machine, once
  ansible.builtin.set_fact:
    __placement: "{{ groups['gpu_hosts'] | fleet_placement_problems(hostvars) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: host -> [problem, ...] for hosts with problems (fleet_placement_problems); a bool (fleet_machine_leader)
  type: dict
"""

from typing import Any

from ftdomain.fleet.placement import fleet_machine_leader, fleet_placement_problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fleet_placement_problems": fleet_placement_problems, "fleet_machine_leader": fleet_machine_leader}

"""HAProxy's frontends and backends, made from the inventory: one per model that hosts serve."""

from __future__ import annotations

DOCUMENTATION = r"""
name: load_balancer_backends
short_description: One frontend port and one backend (its hosts' gateways) per served model
description:
  - Takes a list of host names (groups.gpu_hosts) and hostvars; every host with a fleet_model
    joins the backend of its model (named model_<name>), as a server named after the host at
    lb_member_address, or <ansible_host or the host's name>:<gateway_port or 8080>.
  - Each model gets the port named in ports, or base_port plus its index among the served models
    in sorted order. Refuses two models on one port and a port out of range.
options:
  _input:
    description: Host names.
    type: list
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
  ports:
    description: Model name -> frontend port.
    type: dict
  base_port:
    description: The first port for models not in ports.
    type: int
"""

EXAMPLES = r"""
- name: Show the backends
  ansible.builtin.debug:
    msg: "{{ groups.gpu_hosts | load_balancer_backends(hostvars, {}, 8090) }}"
"""

RETURN = r"""
_value:
  description: "[{model, backend, port, servers: [{name, address}]}], sorted by model."
  type: list
  elements: dict
"""

from collections.abc import Mapping
from typing import Any

from ft_families import AnsibleFilterError


def load_balancer_backends(hosts: Any, hostvars: Any, ports: Any = None, base_port: Any = 8090) -> list[dict]:
    if not isinstance(hosts, list | tuple):
        raise AnsibleFilterError(f"load_balancer_backends: expected a list of hosts, got {type(hosts).__name__}")
    ports = dict(ports or {})
    if not isinstance(base_port, int) or isinstance(base_port, bool) or not 1 <= base_port <= 65535:
        raise AnsibleFilterError(f"load_balancer_backends: base_port must be a port (1-65535), got {base_port!r}")
    members: dict[str, list[dict[str, str]]] = {}
    for host in hosts:
        v = hostvars[host]
        model = v.get("fleet_model") or {}
        if not isinstance(model, Mapping) or not model.get("name"):
            continue
        address = v.get("lb_member_address") or f"{v.get('ansible_host') or host}:{v.get('gateway_port') or 8080}"
        members.setdefault(str(model["name"]), []).append({"name": str(host), "address": str(address)})
    backends, taken = [], {}
    for index, model in enumerate(sorted(members)):
        port = ports.get(model, base_port + index)
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise AnsibleFilterError(f"load_balancer_backends: load_balancer_ports[{model!r}]={port!r}: not a port")
        if port in taken:
            raise AnsibleFilterError(
                f"load_balancer_backends: models {taken[port]!r} and {model!r} both on port {port}; "
                "fix: distinct ports in load_balancer_ports"
            )
        taken[port] = model
        backends.append({"model": model, "backend": f"model_{model}", "port": port,
                         "servers": sorted(members[model], key=lambda s: s["name"])})  # fmt: skip
    return backends


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"load_balancer_backends": load_balancer_backends}

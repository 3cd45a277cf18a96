"""Ansible's filters of ftdomain.fleet.keepalived: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: keepalived_plan
short_description: Each load balancer's VRRP instances, priority and peers, from the inventory
description:
  - keepalived_instances turns load_balancer_vip (an address with its prefix, "10.0.0.100/24",
    or a list of them) into VRRP instances - name, address, prefix, virtual_router_id
    (keepalived_router_id for the first, then one more per address). An empty load_balancer_vip
    gives none (keepalived off).
  - keepalived_plan takes the load balancers (groups.lb_hosts), hostvars and one host, and
    returns that host's part - its own address (keepalived_address, else an IP ansible_host,
    else the facts' ansible_default_ipv4), its priority
    (keepalived_priority, else 200 less 10 per place in the sorted group), its peers' addresses
    (the others, for unicast VRRP) and the instances.
  - load_balancer_peers gives HAProxy's peers section - each load balancer's name and address.
  - keepalived_problems returns what preflight refuses for one load balancer - a virtual address
    that does not parse or carries no prefix, that is outside the network of a load balancer's own
    address, or that is the own address of a host of the inventory; virtual router ids out of
    range or used twice; priorities equal or out of range; fewer than two load balancers; an
    address a peer cannot be reached at (unicast needs IPs); an authentication password longer than
    VRRP's 8 characters.
options:
  _input:
    description: The load balancers' names (groups.lb_hosts), or load_balancer_vip for keepalived_instances.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: This load balancer's VRRP plan
  ansible.builtin.set_fact:
    plan: "{{ groups.lb_hosts | keepalived_plan(hostvars, inventory_hostname, {}) }}"
"""

RETURN = r"""
_value:
  description: Instances (keepalived_instances), a plan (keepalived_plan) or problems (keepalived_problems).
  type: raw
"""

from typing import Any

from ftdomain.fleet.keepalived import keepalived_instances, keepalived_plan, keepalived_problems, load_balancer_peers


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "keepalived_instances": keepalived_instances,
            "keepalived_plan": keepalived_plan,
            "keepalived_problems": keepalived_problems,
            "load_balancer_peers": load_balancer_peers,
        }

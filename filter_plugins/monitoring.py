"""Ansible's filters of ftdomain.fleet.monitoring: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_scrape_configs
short_description: Prometheus scrape_configs for every layer of the fleet, from the inventory
description:
  - Takes groups and hostvars and returns Prometheus scrape_configs, one job per layer, each
    target labelled instance=<inventory name> (and model=<fleet_model.name> on GPU hosts), so
    that operators read host names, never addresses.
  - gateway (every gpu_hosts host with a fleet_model and fleet_gateway), triton (tritonserver's
    metrics port), dcgm (hosts where dcgm_exporter_enabled, else fleet_require_gpus, is true),
    node (node exporter on every host of gpu_hosts, lb_hosts and monitoring_hosts), haproxy
    (HAProxy's Prometheus endpoint on lb_hosts), prometheus and alertmanager (monitoring_hosts).
  - A target's address is the host's monitoring_targets[job] where set (the lab's published
    loopback ports), else <ansible_host or the host's name>:<port>, the port from the host's
    variable for it (gateway_port, triton_server_metrics_port, dcgm_exporter_port,
    node_exporter_port, load_balancer_metrics_port, prometheus_port, alertmanager_port) or ports.
  - A gateway that serves HTTPS (gateway_tls_cert) is scraped over HTTPS, verified against
    ca_file with its gateway_tls_name (else its inventory name).
  - monitoring_targets_summary turns scrape_configs into "job: host (address), ..." lines.
  - monitoring_input_problems takes a host's variables and returns what preflight refuses of the
    monitoring stage's: durations that are not Prometheus durations, ratios outside (0, 1],
    thresholds that are not positive numbers, ports out of range, monitoring_targets that are not
    host:port.
  - monitoring_reach_problems(values, host, groups) returns, for a host that another host's
    Prometheus scrapes, each scraped port the inventory binds to a loopback address (without a
    monitoring_targets address for that job): such a target is down for ever and its alerts fire.
options:
  _input:
    description: Ansible's groups.
    type: dict
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
  ports:
    description: Job -> the default port, where a host does not set its own.
    type: dict
    required: true
  ca_file:
    description: The CA file on the monitoring host that verifies HTTPS gateways.
    type: str
"""

EXAMPLES = r"""
- name: Show the scrape configs
  ansible.builtin.debug:
    msg: "{{ groups | monitoring_scrape_configs(hostvars, {'gateway': 8080, 'triton': 8002}) }}"
"""

RETURN = r"""
_value:
  description: "[{job_name, scheme, static_configs: [{targets: [address], labels: {instance, model}}]}]"
  type: list
  elements: dict
"""

from typing import Any

from ftdomain.fleet.monitoring import (
    monitoring_input_problems,
    monitoring_reach_problems,
    monitoring_scrape_configs,
    monitoring_targets_summary,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_scrape_configs": monitoring_scrape_configs,
            "monitoring_targets_summary": monitoring_targets_summary,
            "monitoring_input_problems": monitoring_input_problems,
            "monitoring_reach_problems": monitoring_reach_problems,
        }

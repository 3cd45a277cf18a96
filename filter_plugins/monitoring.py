"""Prometheus's scrape targets, made from the inventory: every layer of every host, labelled by host and model."""

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
  - monitoring_targets_summary turns scrape_configs into "job: n targets" lines (for the run's log).
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

from collections.abc import Mapping
from typing import Any

from ft_families import AnsibleFilterError

# Job -> the host variable that moves its port.
PORT_VARS = {
    "gateway": "gateway_port",
    "triton": "triton_server_metrics_port",
    "dcgm": "dcgm_exporter_port",
    "node": "node_exporter_port",
    "haproxy": "load_balancer_metrics_port",
    "prometheus": "prometheus_port",
    "alertmanager": "alertmanager_port",
}


def _members(groups: Mapping, name: str) -> list[str]:
    return list(groups.get(name) or [])


def _flag(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _address(host: str, v: Mapping, job: str, ports: Mapping) -> str:
    targets = v.get("monitoring_targets") or {}
    if not isinstance(targets, Mapping):
        raise AnsibleFilterError(
            f"monitoring_scrape_configs: {host}: monitoring_targets must be a mapping of job to address"
        )
    if targets.get(job):
        return str(targets[job])
    port = v.get(PORT_VARS[job]) or ports.get(job)
    if not port:
        raise AnsibleFilterError(
            f"monitoring_scrape_configs: no port for job {job!r} (host {host}); fix: ports[{job!r}]"
        )
    return f"{v.get('ansible_host') or host}:{port}"


def monitoring_scrape_configs(groups: Any, hostvars: Any, ports: Any, ca_file: str = "") -> list[dict]:
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError(f"monitoring_scrape_configs: expected groups (a mapping), got {type(groups).__name__}")
    ports = dict(ports or {})
    jobs: dict[str, list[dict]] = {job: [] for job in PORT_VARS}
    tls: dict[str, dict] = {}

    def add(job: str, host: str, labels: dict[str, str] | None = None) -> None:
        v = hostvars[host]
        jobs[job].append({"targets": [_address(host, v, job, ports)], "labels": {"instance": host, **(labels or {})}})

    for host in _members(groups, "gpu_hosts"):
        v = hostvars[host]
        model = v.get("fleet_model") or {}
        name = str(model.get("name")) if isinstance(model, Mapping) and model.get("name") else ""
        labels = {"model": name} if name else {}
        if name and _flag(v.get("fleet_gateway"), True):
            add("gateway", host, labels)
            if v.get("gateway_tls_cert"):
                tls[host] = {"ca_file": ca_file, "server_name": str(v.get("gateway_tls_name") or host)}
        if name:
            add("triton", host, labels)
        if _flag(v.get("dcgm_exporter_enabled"), _flag(v.get("fleet_require_gpus"), True)):
            add("dcgm", host, labels)
    everyone = _members(groups, "gpu_hosts") + _members(groups, "lb_hosts") + _members(groups, "monitoring_hosts")
    for host in dict.fromkeys(everyone):
        add("node", host)
    for host in _members(groups, "lb_hosts"):
        add("haproxy", host)
    for host in _members(groups, "monitoring_hosts"):
        add("prometheus", host)
        add("alertmanager", host)

    configs = []
    for job, targets in jobs.items():
        if job == "gateway" and tls:
            configs += _gateway_jobs(targets, tls, ca_file)
        elif targets:
            configs.append({"job_name": job, "static_configs": targets})
    return configs


def _gateway_jobs(targets: list[dict], tls: dict[str, dict], ca_file: str) -> list[dict]:
    """The plain gateways in one job; each HTTPS gateway in a job of its own (one job, one
    tls_config: each is verified with its own name), relabelled job="gateway"."""
    if not ca_file:
        raise AnsibleFilterError(
            f"monitoring_scrape_configs: gateways {sorted(tls)} serve HTTPS; fix: prometheus_gateway_ca "
            "(the CA that issued their certificates)"
        )
    plain = [t for t in targets if t["labels"]["instance"] not in tls]
    configs = [{"job_name": "gateway", "static_configs": plain}] if plain else []
    for t in targets:
        host = t["labels"]["instance"]
        if host in tls:
            relabel = [{"target_label": "job", "replacement": "gateway"}]
            configs.append({"job_name": f"gateway_tls_{host}", "scheme": "https", "tls_config": tls[host],
                            "static_configs": [t], "relabel_configs": relabel})  # fmt: skip
    return configs


def monitoring_targets_summary(configs: Any) -> list[str]:
    """'job: host (address), ...' per scrape config."""
    lines = []
    for config in configs or []:
        targets = [f"{s['labels']['instance']} ({s['targets'][0]})" for s in config.get("static_configs", [])]
        lines.append(f"{config['job_name']}: {', '.join(targets)}")
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_scrape_configs": monitoring_scrape_configs,
            "monitoring_targets_summary": monitoring_targets_summary,
        }

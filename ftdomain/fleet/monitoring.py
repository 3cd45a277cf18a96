"""Prometheus's scrape targets, made from the inventory: every layer of every host, labelled by host and model."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.values import truthy

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


# Job -> the variable that says which address its port listens on, on the host it runs on.
BIND_VARS = {
    "gateway": "gateway_bind_address",
    "triton": "triton_server_metrics_bind_address",
    "dcgm": "dcgm_exporter_bind_address",
    "node": "node_exporter_listen_address",
    "haproxy": "load_balancer_metrics_bind_address",
    "prometheus": "prometheus_listen_address",
    "alertmanager": "alertmanager_listen_address",
}
# Group -> the jobs Prometheus scrapes on each of its hosts (monitoring_scrape_configs).
GROUP_JOBS = {
    "gpu_hosts": ("gateway", "triton", "dcgm", "node"),
    "lb_hosts": ("haproxy", "node"),
    "monitoring_hosts": ("prometheus", "alertmanager", "node"),
}


def _loopback(address: str) -> bool:
    address = address.strip().strip("[]").lower()
    return address in {"localhost", "::1"} or address.startswith("127.")


def monitoring_reach_problems(values: Any, host: str, groups: Any) -> list[str]:
    """The scrape targets on `host` that Prometheus on another host cannot reach: a port the
    inventory binds to a loopback address, with no monitoring_targets address of its own. Such a
    target reads as down for ever, and its alerts fire for every model (the class of failure the
    lab's shared loopback once hid)."""
    v = values if isinstance(values, Mapping) else {}
    groups = groups if isinstance(groups, Mapping) else {}
    monitors = [m for m in _members(groups, "monitoring_hosts") if m != host]
    if not monitors:
        return []
    targets = v.get("monitoring_targets") if isinstance(v.get("monitoring_targets"), Mapping) else {}
    jobs = dict.fromkeys(job for group, js in GROUP_JOBS.items() if host in _members(groups, group) for job in js)
    problems = []
    for job in jobs:
        var = BIND_VARS[job]
        address = v.get(var)
        if isinstance(address, str) and _loopback(address) and not targets.get(job):
            problems.append(
                f"{var}={address!r}: Prometheus on {', '.join(monitors)} scrapes {job} on {host}, and a loopback "
                f"address keeps it from other hosts (the target would be down for ever and its alerts fire); fix: "
                f"bind it to '' (every address) or {host}'s own address, or give monitoring_targets.{job} an "
                f"address Prometheus reaches"
            )
    return problems


def _members(groups: Mapping, name: str) -> list[str]:
    return list(groups.get(name) or [])


def _model_name(v: Mapping) -> str:
    model = v.get("fleet_model") or {}
    return str(model.get("name")) if isinstance(model, Mapping) and model.get("name") else ""


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


def _gpu_host_targets(groups: Mapping, hostvars: Any, add, tls: dict, ca_file: str) -> tuple[set, dict]:
    """Each GPU host's gateway and tritonserver, and each machine's DCGM exporter once: another
    model on a machine (fleet_machine) leaves the machine's exporters to the machine's host, whose
    DCGM series then get each GPU's model (_gpu_model_relabels). Returns those hosts and, per
    machine with several models, each model's GPUs."""
    slots = set()  # other models on a machine (fleet_machine): the machine's host runs its exporters
    gpu_models: dict[str, dict[str, list]] = {}  # machine -> model -> its GPUs, where it has several models
    machines = []
    for host in _members(groups, "gpu_hosts"):
        v = hostvars[host]
        name = _model_name(v)
        labels = {"model": name} if name else {}
        if str(v.get("fleet_machine") or host) != host:
            slots.add(host)
            gpu_models.setdefault(str(v["fleet_machine"]), {})[name] = list(v.get("fleet_gpu_devices") or [])
        elif truthy(v.get("dcgm_exporter_enabled"), truthy(v.get("fleet_require_gpus"), True)):
            machines.append((host, name, list(v.get("fleet_gpu_devices") or [])))
        if name and truthy(v.get("fleet_gateway"), True):
            add("gateway", host, labels)
            if v.get("gateway_tls_cert"):
                tls[host] = {"ca_file": ca_file, "server_name": str(v.get("gateway_tls_name") or host)}
        if name:
            add("triton", host, labels)
    for host, name, gpus in machines:
        if host in gpu_models:  # several models: each GPU's series gets its model (_gpu_model_relabels)
            gpu_models[host][name] = gpus
            add("dcgm", host)
        else:
            add("dcgm", host, {"model": name} if name else {})
    return slots, gpu_models


class _EachHostOnce:
    """Ansible's hostvars, each host read once: a read builds the host's variables anew (its
    group_vars folders globbed, docs/performance.md), and a scrape configuration needs a GPU host
    for four or five jobs."""

    def __init__(self, hostvars: Any) -> None:
        self._hostvars = hostvars
        self._read: dict[str, Any] = {}

    def __getitem__(self, host: str) -> Any:
        if host not in self._read:
            self._read[host] = self._hostvars[host]
        return self._read[host]


def monitoring_scrape_configs(groups: Any, hostvars: Any, ports: Any, ca_file: str = "") -> list[dict]:
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError(f"monitoring_scrape_configs: expected groups (a mapping), got {type(groups).__name__}")
    hostvars = _EachHostOnce(hostvars)
    ports = dict(ports or {})
    jobs: dict[str, list[dict]] = {job: [] for job in PORT_VARS}
    tls: dict[str, dict] = {}

    def add(job: str, host: str, labels: dict[str, str] | None = None) -> None:
        v = hostvars[host]
        jobs[job].append({"targets": [_address(host, v, job, ports)], "labels": {"instance": host, **(labels or {})}})

    slots, gpu_models = _gpu_host_targets(groups, hostvars, add, tls, ca_file)
    everyone = _members(groups, "gpu_hosts") + _members(groups, "lb_hosts") + _members(groups, "monitoring_hosts")
    for host in dict.fromkeys(everyone):
        if host not in slots:
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
        elif job == "dcgm" and targets and gpu_models:
            relabels = _gpu_model_relabels(gpu_models)
            configs.append({"job_name": job, "static_configs": targets, "metric_relabel_configs": relabels})
        elif targets:
            configs.append({"job_name": job, "static_configs": targets})
    return configs


def _gpu_model_relabels(gpu_models: Mapping[str, Mapping[str, list]]) -> list[dict]:
    """On a machine with several models, one DCGM exporter reports every GPU: each series gets
    the model of its GPU (label gpu, the index) from the machine's placement."""
    rules = []
    for machine, models in gpu_models.items():
        for model, gpus in models.items():
            indices = "|".join(str(int(g)) for g in gpus if str(g).strip().isdigit())
            if model and indices:
                rules.append({"source_labels": ["instance", "gpu"], "regex": f"{re.escape(machine)};({indices})",
                              "target_label": "model", "replacement": model})  # fmt: skip
    return rules


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


# Prometheus's duration: units from the largest, each at most once (model.ParseDuration).
DURATION = re.compile(r"(?!$)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
DURATIONS = ("prometheus_scrape_interval", "prometheus_evaluation_interval", "prometheus_retention",
             "prometheus_alert_host_down_for", "prometheus_alert_model_down_for", "prometheus_alert_error_ratio_for",
             "prometheus_alert_latency_for", "prometheus_alert_ttft_for", "prometheus_alert_gpu_memory_for",
             "prometheus_alert_gpu_temperature_for", "prometheus_alert_disk_for")  # fmt: skip
RATIOS = ("prometheus_alert_error_ratio", "prometheus_alert_gpu_memory_ratio", "prometheus_alert_disk_free_ratio")
POSITIVE = ("prometheus_alert_latency_p95_seconds", "prometheus_alert_ttft_p95_seconds",
            "prometheus_alert_gpu_temperature_celsius")  # fmt: skip
PORTS = ("node_exporter_port", "dcgm_exporter_port", "prometheus_port", "alertmanager_port")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _port_problem(name: str, port: Any, low: int = 1) -> list[str]:
    if isinstance(port, int) and not isinstance(port, bool) and low <= port <= 65535:
        return []
    return [f"{name}={port!r}: must be a port (1-65535)" + (", or 0 for none" if low == 0 else "")]


def _targets_problems(targets: Any) -> list[str]:
    if not isinstance(targets, Mapping):
        return ["monitoring_targets: must be a mapping of job to host:port"]
    problems = []
    for job, address in targets.items():
        if job not in PORT_VARS:
            problems.append(f"monitoring_targets.{job}: no such job (jobs: {', '.join(PORT_VARS)})")
        elif not re.fullmatch(r"[^\s:/]+:\d{1,5}|\[[0-9a-fA-F:.]+\]:\d{1,5}", str(address)):
            problems.append(f"monitoring_targets.{job}={address!r}: must be host:port")
    return problems


def monitoring_input_problems(values: Any) -> list[str]:
    """What preflight refuses of the monitoring stage's variables (each names the fix)."""
    v = values if isinstance(values, Mapping) else {}
    problems = [f"{name}={v[name]!r}: not a Prometheus duration; fix: e.g. 30s, 5m, 1h30m, 15d"
                for name in DURATIONS if name in v and not DURATION.fullmatch(str(v[name]))]  # fmt: skip
    for name in RATIOS:
        number = _number(v[name]) if name in v else 0.5
        if number is None or not 0 < number <= 1:
            problems.append(f"{name}={v[name]!r}: must be a share between 0 and 1 (0.05 is 5%)")
    for name in POSITIVE:
        number = _number(v[name]) if name in v else 1
        if number is None or number <= 0:
            problems.append(f"{name}={v[name]!r}: must be a positive number")
    for name in PORTS:
        problems += _port_problem(name, v.get(name, 1))
    problems += _port_problem("load_balancer_metrics_port", v.get("load_balancer_metrics_port", 0), low=0)
    return problems + _targets_problems(v.get("monitoring_targets", {}))

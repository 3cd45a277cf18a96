"""Prometheus's scrape targets from the inventory: every layer of every host, labelled by host and
model; a host added or removed changes its own targets and nothing else."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from test_artifact_plan import Counted
from test_fleet_inputs import GOOD

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.monitoring import (
    BIND_VARS,
    monitoring_input_problems,
    monitoring_reach_problems,
    monitoring_scrape_configs,
    monitoring_targets_summary,
)
from ftdomain.inputs.checks import fleet_input_names, fleet_input_problems

ROOT = Path(__file__).resolve().parents[2]

PORTS = {"gateway": 8080, "triton": 8002, "dcgm": 9400, "node": 9100, "haproxy": 8405, "prometheus": 9090,
         "alertmanager": 9093}  # fmt: skip
GROUPS = {"gpu_hosts": ["gpu-a", "gpu-b", "gpu-c"], "lb_hosts": ["lb-1"], "monitoring_hosts": ["mon-1"]}
HOSTVARS = {
    "gpu-a": {"fleet_model": {"name": "kogpt"}},
    "gpu-b": {"fleet_model": {"name": "kogpt"}, "ansible_host": "gpu-b.internal", "triton_server_metrics_port": 9002},
    "gpu-c": {"fleet_model": {"name": "llama7b"}, "fleet_gateway": False},
    "lb-1": {},
    "mon-1": {},
}


def targets(configs: list[dict]) -> dict[str, list[tuple[str, dict]]]:
    return {c["job_name"]: [(s["targets"][0], s["labels"]) for s in c["static_configs"]] for c in configs}


def test_every_layer_of_every_host_with_host_and_model_labels():
    got = targets(monitoring_scrape_configs(GROUPS, HOSTVARS, PORTS))
    assert got == {
        "gateway": [("gpu-a:8080", {"instance": "gpu-a", "model": "kogpt"}),
                    ("gpu-b.internal:8080", {"instance": "gpu-b", "model": "kogpt"})],
        "triton": [("gpu-a:8002", {"instance": "gpu-a", "model": "kogpt"}),
                   ("gpu-b.internal:9002", {"instance": "gpu-b", "model": "kogpt"}),
                   ("gpu-c:8002", {"instance": "gpu-c", "model": "llama7b"})],
        "dcgm": [("gpu-a:9400", {"instance": "gpu-a", "model": "kogpt"}),
                 ("gpu-b.internal:9400", {"instance": "gpu-b", "model": "kogpt"}),
                 ("gpu-c:9400", {"instance": "gpu-c", "model": "llama7b"})],
        "node": [("gpu-a:9100", {"instance": "gpu-a"}), ("gpu-b.internal:9100", {"instance": "gpu-b"}),
                 ("gpu-c:9100", {"instance": "gpu-c"}), ("lb-1:9100", {"instance": "lb-1"}),
                 ("mon-1:9100", {"instance": "mon-1"})],
        "haproxy": [("lb-1:8405", {"instance": "lb-1"})],
        "prometheus": [("mon-1:9090", {"instance": "mon-1"})],
        "alertmanager": [("mon-1:9093", {"instance": "mon-1"})],
    }  # fmt: skip


def test_each_hosts_variables_are_read_once_whatever_its_jobs():
    """A GPU host has four or five jobs (gateway, triton, dcgm, node): one read of its variables,
    not one per job (docs/performance.md, the Prometheus configuration at 1000 hosts)."""
    counted = Counted(HOSTVARS)
    assert monitoring_scrape_configs(GROUPS, counted, PORTS) == monitoring_scrape_configs(GROUPS, HOSTVARS, PORTS)
    assert counted.lookups == len(HOSTVARS)


def test_a_host_added_or_removed_changes_its_own_targets_only():
    before = monitoring_scrape_configs(GROUPS, HOSTVARS, PORTS)
    groups = {**GROUPS, "gpu_hosts": [*GROUPS["gpu_hosts"], "gpu-d"]}
    hostvars = {**HOSTVARS, "gpu-d": {"fleet_model": {"name": "llama7b"}}}
    after = monitoring_scrape_configs(groups, hostvars, PORTS)
    added = {job: [t for t in rows if t not in targets(before)[job]] for job, rows in targets(after).items()}
    assert {job: rows for job, rows in added.items() if rows} == {
        job: [(f"gpu-d:{PORTS[job]}", {"instance": "gpu-d", **({} if job == "node" else {"model": "llama7b"})})]
        for job in ("gateway", "triton", "dcgm", "node")
    }
    # removed again: exactly the first configuration
    assert monitoring_scrape_configs(GROUPS, HOSTVARS, PORTS) == before


def test_a_host_in_several_groups_is_one_node_target_and_overrides_win():
    groups = {"gpu_hosts": ["gpu-a"], "lb_hosts": ["lab-lb"], "monitoring_hosts": ["lab-lb"]}
    hostvars = {"gpu-a": {"fleet_model": {"name": "tiny"}, "fleet_require_gpus": False,
                          "monitoring_targets": {"gateway": "127.0.0.1:18080"}},
                "lab-lb": {"monitoring_targets": {"node": "127.0.0.1:19100"}}}  # fmt: skip
    got = targets(monitoring_scrape_configs(groups, hostvars, PORTS))
    assert got["node"] == [("gpu-a:9100", {"instance": "gpu-a"}), ("127.0.0.1:19100", {"instance": "lab-lb"})]
    assert got["gateway"] == [("127.0.0.1:18080", {"instance": "gpu-a", "model": "tiny"})]
    assert "dcgm" not in got  # no GPUs on purpose, no stand-in asked for
    hostvars["gpu-a"]["dcgm_exporter_enabled"] = True
    assert targets(monitoring_scrape_configs(groups, hostvars, PORTS))["dcgm"] == [
        ("gpu-a:9400", {"instance": "gpu-a", "model": "tiny"})]  # fmt: skip


def test_https_gateways_are_verified_with_their_names():
    hostvars = copy.deepcopy(HOSTVARS)
    hostvars["gpu-a"].update(gateway_tls_cert="PEM", gateway_tls_name="gw-a.example.com")
    with pytest.raises(AnsibleFilterError, match="prometheus_gateway_ca"):
        monitoring_scrape_configs(GROUPS, hostvars, PORTS)
    configs = {c["job_name"]: c for c in monitoring_scrape_configs(GROUPS, hostvars, PORTS, "/etc/prometheus/ca.pem")}
    assert [s["labels"]["instance"] for s in configs["gateway"]["static_configs"]] == ["gpu-b"]
    tls = configs["gateway_tls_gpu-a"]
    assert tls["scheme"] == "https"
    assert tls["tls_config"] == {"ca_file": "/etc/prometheus/ca.pem", "server_name": "gw-a.example.com"}
    assert tls["relabel_configs"] == [{"target_label": "job", "replacement": "gateway"}]


def test_bad_input_is_refused_with_the_fix():
    with pytest.raises(AnsibleFilterError, match="expected groups"):
        monitoring_scrape_configs(["gpu-a"], HOSTVARS, PORTS)
    with pytest.raises(AnsibleFilterError, match="monitoring_targets must be a mapping"):
        monitoring_scrape_configs({"lb_hosts": ["lb-1"]}, {"lb-1": {"monitoring_targets": ["x"]}}, PORTS)
    with pytest.raises(AnsibleFilterError, match=r"no port for job 'haproxy'"):
        monitoring_scrape_configs({"lb_hosts": ["lb-1"]}, {"lb-1": {}}, {"node": 9100})


def test_the_summary_names_hosts_and_addresses():
    configs = monitoring_scrape_configs({"lb_hosts": ["lb-1"]}, {"lb-1": {}}, PORTS)
    assert monitoring_targets_summary(configs) == ["node: lb-1 (lb-1:9100)", "haproxy: lb-1 (lb-1:8405)"]


def test_the_defaults_and_the_labs_settings_pass():
    assert monitoring_input_problems({}) == []
    lab = {"prometheus_scrape_interval": "5s", "prometheus_alert_host_down_for": "30s", "prometheus_retention": "15d",
           "prometheus_alert_error_ratio": 0.05, "prometheus_alert_gpu_memory_ratio": 1,
           "prometheus_alert_latency_p95_seconds": "30", "prometheus_port": 19090, "load_balancer_metrics_port": 0,
           "monitoring_targets": {"node": "127.0.0.1:19100", "gateway": "[::1]:8080"}}  # fmt: skip
    assert monitoring_input_problems(lab) == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("prometheus_alert_host_down_for", "2 minutes", "not a Prometheus duration"),
        ("prometheus_scrape_interval", "", "not a Prometheus duration"),
        ("prometheus_retention", "5m15d", "not a Prometheus duration"),  # units from the largest
        ("prometheus_alert_error_ratio", 5, "between 0 and 1"),
        ("prometheus_alert_disk_free_ratio", 0, "between 0 and 1"),
        ("prometheus_alert_gpu_memory_ratio", "most", "between 0 and 1"),
        ("prometheus_alert_ttft_p95_seconds", -1, "positive"),
        ("prometheus_alert_gpu_temperature_celsius", True, "positive"),
        ("node_exporter_port", 70000, "must be a port"),
        ("load_balancer_metrics_port", -1, "or 0 for none"),
        ("monitoring_targets", ["127.0.0.1:9100"], "mapping of job"),
        ("monitoring_targets", {"nodes": "127.0.0.1:9100"}, "no such job"),
        ("monitoring_targets", {"node": "http://127.0.0.1:9100"}, "must be host:port"),
    ],
)
def test_preflight_refuses_bad_monitoring_settings(name, value, message):
    problems = monitoring_input_problems({name: value})
    assert len(problems) == 1, problems
    assert problems[0].startswith(name), problems
    assert message in problems[0], problems


def test_preflight_reads_them_with_every_other_input():
    assert "monitoring_targets" in fleet_input_names(["monitoring_targets", "unrelated"])
    problems = fleet_input_problems({**GOOD, "prometheus_alert_error_ratio": 7})
    assert any(p.startswith("prometheus_alert_error_ratio=7") for p in problems), problems
    assert fleet_input_problems(GOOD) == []


@pytest.mark.parametrize(
    ("host", "values", "refused"),
    [
        # production's shape: tritonserver's metrics on loopback (the gateway's default before
        # 2026-11-25 published all three ports on 127.0.0.1), scraped from mon-1
        ("gpu-a", {"triton_server_metrics_bind_address": "127.0.0.1"}, ["triton_server_metrics_bind_address"]),
        ("gpu-a", {"gateway_bind_address": "localhost", "node_exporter_listen_address": "[::1]"},
         ["gateway_bind_address", "node_exporter_listen_address"]),
        ("lb-1", {"load_balancer_metrics_bind_address": "127.0.0.2"}, ["load_balancer_metrics_bind_address"]),
        ("lb-1", {"triton_server_metrics_bind_address": "127.0.0.1"}, []),  # no tritonserver on a load balancer
        ("gpu-a", {"triton_server_metrics_bind_address": ""}, []),  # every address
        ("gpu-a", {"triton_server_metrics_bind_address": "10.0.0.5"}, []),  # the host's own
        # the lab: every target published on this machine's loopback and named in monitoring_targets
        ("gpu-a", {"triton_server_metrics_bind_address": "127.0.0.1",
                   "monitoring_targets": {"triton": "127.0.0.1:18002"}}, []),
        ("mon-1", {"prometheus_listen_address": "127.0.0.1"}, []),  # the only monitoring host scrapes itself
    ],
)  # fmt: skip
def test_a_target_on_loopback_that_another_hosts_prometheus_scrapes_is_refused(host, values, refused):
    problems = monitoring_reach_problems(values, host, GROUPS)
    assert [p.split("=")[0] for p in problems] == refused, problems
    for problem in problems:
        assert "mon-1" in problem
        assert "fix:" in problem


def test_without_a_monitoring_host_elsewhere_nothing_is_refused():
    assert monitoring_reach_problems({"gateway_bind_address": "127.0.0.1"}, "gpu-a", {"gpu_hosts": ["gpu-a"]}) == []


@pytest.mark.parametrize("role_var", sorted(BIND_VARS.values()))
def test_no_scraped_port_binds_to_loopback_by_default(role_var):
    """Every role default of the scraped ports' addresses lets another host in (an inventory that
    sets loopback is what preflight refuses)."""
    import yaml  # noqa: PLC0415

    roles = {"gateway": "gateway", "triton": "triton_server", "dcgm": "dcgm_exporter", "node": "node_exporter",
             "load": "load_balancer", "prometheus": "prometheus", "alertmanager": "alertmanager"}  # fmt: skip
    role = roles[role_var.split("_")[0]]
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    value = defaults[role_var]
    if value == "{{ load_balancer_bind_address }}":
        value = defaults["load_balancer_bind_address"]
    assert value in ("", "0.0.0.0", "::"), (role_var, value)


def test_several_models_on_one_machine_keep_host_and_model_apart():
    """A second model on gpu-a (host neox.gpu-a, fleet_machine gpu-a): its own gateway and
    tritonserver targets with its model; the machine's node and DCGM exporters once, under the
    machine's name, each GPU's series labelled with the model that holds it."""
    groups = {**GROUPS, "gpu_hosts": ["gpu-a", "neox.gpu-a", "gpu-b"]}
    neox = {"fleet_model": {"name": "neox"}, "fleet_machine": "gpu-a", "ansible_host": "gpu-a",
            "fleet_gpu_devices": [2, 3], "gateway_port": 8081, "triton_server_metrics_port": 8102}  # fmt: skip
    hostvars = {
        **HOSTVARS,
        "gpu-a": {"fleet_model": {"name": "kogpt"}, "fleet_gpu_devices": [0, 1]},
        "neox.gpu-a": neox,
    }
    configs = monitoring_scrape_configs(groups, hostvars, PORTS)
    got = targets(configs)
    assert ("gpu-a:8081", {"instance": "neox.gpu-a", "model": "neox"}) in got["gateway"]
    assert ("gpu-a:8102", {"instance": "neox.gpu-a", "model": "neox"}) in got["triton"]
    assert got["dcgm"] == [("gpu-a:9400", {"instance": "gpu-a"}),
                           ("gpu-b.internal:9400", {"instance": "gpu-b", "model": "kogpt"})]  # fmt: skip
    assert [t for t, _ in got["node"]] == ["gpu-a:9100", "gpu-b.internal:9100", "lb-1:9100", "mon-1:9100"]
    dcgm = next(c for c in configs if c["job_name"] == "dcgm")
    rule = {"source_labels": ["instance", "gpu"], "target_label": "model"}
    assert dcgm["metric_relabel_configs"] == [
        {**rule, "regex": "gpu\\-a;(2|3)", "replacement": "neox"},
        {**rule, "regex": "gpu\\-a;(0|1)", "replacement": "kogpt"},
    ]
    # A fleet without a second model on any machine keeps its configuration as it was.
    assert "metric_relabel_configs" not in next(c for c in monitoring_scrape_configs(GROUPS, HOSTVARS, PORTS)
                                                if c["job_name"] == "dcgm")  # fmt: skip

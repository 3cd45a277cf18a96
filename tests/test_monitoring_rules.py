"""The fleet's alert and recording rules under promtool (Debian's, from scripts/ensure-promtool).

The rules are rendered as the prometheus role renders them, with its default thresholds, and
`promtool test rules` runs tests/monitoring/*.test.yml against them: each alert fires when and
only when it should, with the labels and text an operator reads, and the recording rules compute
what the report draws. `promtool check rules` also checks every rendered file, and a threshold
moved in the inventory moves the rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "prometheus"
PROMTOOL = ROOT / ".venv" / "bin" / "promtool"


def promtool() -> str:
    found = str(PROMTOOL) if PROMTOOL.exists() else shutil.which("promtool")
    assert found, "promtool is missing: make test-setup installs it (scripts/ensure-promtool)"
    return found


def render(dest: Path, **overrides: object) -> Path:
    """The role's two rule files in dest, its alert template rendered as the role's template task
    does ([[ ]] for the role's variables; Prometheus's own {{ }} left as they are)."""
    values = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()), **overrides}
    values["ansible_managed"] = "Ansible managed"
    env = jinja2.Environment(variable_start_string="[[", variable_end_string="]]", undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)  # fmt: skip
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    template = env.from_string((ROLE / "templates" / "ftfleet-alerts.yml.j2").read_text())
    (dest / "ftfleet-alerts.yml").write_text(template.render(**values))
    shutil.copy(ROLE / "files" / "ftfleet-recording.yml", dest / "ftfleet-recording.yml")
    return dest


def test_the_rules_pass_promtools_checks(tmp_path):
    rules = render(tmp_path)
    done = subprocess.run([promtool(), "check", "rules", str(rules / "ftfleet-recording.yml"),
                           str(rules / "ftfleet-alerts.yml")], capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 18 rules found" in done.stdout, done.stdout
    assert "SUCCESS: 12 rules found" in done.stdout, done.stdout


@pytest.mark.parametrize("tests", sorted(p.name for p in (ROOT / "tests" / "monitoring").glob("*.test.yml")))
def test_the_alerts_fire_when_they_should(tmp_path, tests):
    rules = render(tmp_path)
    shutil.copy(ROOT / "tests" / "monitoring" / tests, rules / tests)
    done = subprocess.run([promtool(), "test", "rules", tests], cwd=rules, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_threshold_from_the_inventory_moves_its_rule(tmp_path):
    """The same series under a 40 C limit: the cool GPU of the tests alerts too."""
    rules = render(tmp_path, prometheus_alert_gpu_temperature_celsius=40, prometheus_alert_host_down_for="5m")
    alerts = {r["alert"]: r for g in yaml.safe_load((rules / "ftfleet-alerts.yml").read_text())["groups"]
              for r in g["rules"]}  # fmt: skip
    assert alerts["GpuTemperatureHigh"]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 40"
    assert alerts["FleetHostDown"]["for"] == "5m"
    assert alerts["FleetHostDown"]["annotations"]["summary"] == "{{ $labels.job }} on {{ $labels.instance }} is down"
    test = yaml.safe_load((ROOT / "tests" / "monitoring" / "alerts.test.yml").read_text())
    gpus = next(t for t in test["tests"] if any(a["alertname"] == "GpuTemperatureHigh" for a in t["alert_rule_test"]))
    gpus["alert_rule_test"] = [{"eval_time": "6m", "alertname": "GpuTemperatureHigh", "exp_alerts": [
        {"exp_labels": {"severity": "warning", "gpu": g, "UUID": f"GPU-{g}", "instance": "gpu-a", "model": "kogpt"},
         "exp_annotations": {"summary": f"GPU {g} of gpu-a at {t} C", "description": "The GPU is hotter than 40 C."}}
        for g, t in (("0", 90), ("1", 50))]}]  # fmt: skip
    gpus.pop("promql_expr_test", None)
    (rules / "moved.test.yml").write_text(yaml.safe_dump({**test, "tests": [gpus]}))
    done = subprocess.run([promtool(), "test", "rules", "moved.test.yml"], cwd=rules, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

"""The controller at fleet scale (issue: a thousand hosts). scripts/scale-bench runs the
controller's side of a run (preflight's input checks, the registry's elections, the load
balancer's and Prometheus's configurations, ftfleet's summary) against 100 generated hosts and
prints its figures (docs/performance.md has the 1000-host ones: a command a person runs). No
wall-clock bound is asserted; what pins the cost is the count of lookups
(tests/unit/test_artifact_plan.py) and, here, that every role elects once per play."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

ELECTING = ["roles/container_image/tasks/lookup.yml", "roles/ft_convert/tasks/plan.yml",
            "roles/ft_gemm_tune/tasks/plan.yml", "benchmarks/controller-election.yml"]  # fmt: skip


def test_every_election_runs_once_per_play_and_hands_each_host_its_part():
    """The per-host election read every host's facts on every host (N x N lookups); each role
    now elects in one run_once task, and the bench runs that same pair of tasks."""
    for path in ELECTING:
        tasks = yaml.safe_load((ROOT / path).read_text())
        electing = [t for t in tasks if "fleet_artifact_plans" in json.dumps(t)]
        assert len(electing) == 1, path
        assert electing[0].get("run_once") is True, path
        after = tasks[tasks.index(electing[0]) + 1]
        assert "[inventory_hostname]" in json.dumps(after["ansible.builtin.set_fact"]), path
    per_host = [str(p) for p in (ROOT / "roles").rglob("*.yml") if "fleet_artifact_plan(" in p.read_text()]
    assert per_host == []


def test_the_benchs_tasks_per_host_are_those_of_its_playbook():
    """scale-bench divides each part's time by its tasks per host to compare it with the plain
    task, and counts them from benchmarks/controller.yml: an include counts, run_once tasks do not
    (a table written by hand went stale: after #35 the preflight part ran 6 per host and was still
    divided by 3, and the elections were divided by 7 for 5)."""
    import importlib.machinery  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    loader = importlib.machinery.SourceFileLoader("scale_bench", str(ROOT / "scripts" / "scale-bench"))
    bench = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(bench)
    assert bench.TASKS == {"plain": 1, "preflight inputs": 3, "elections": 5, "load balancer configuration": 2,
                           "Prometheus configuration": 2}  # fmt: skip


@pytest.mark.scale
def test_the_controller_handles_a_hundred_hosts(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "scale-bench"), "--hosts", "100", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, check=False)  # fmt: skip
    print(done.stdout)
    # exits non-zero when a play fails (the rendered configurations name every host, the inputs
    # pass preflight) or an election ran more than once
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())["seconds"]["100"]
    assert list(figures) == ["inventory", "plain", "preflight inputs", "elections", "load balancer configuration",
                             "Prometheus configuration", "ftfleet summary"]  # fmt: skip

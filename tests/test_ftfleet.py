"""ftfleet: what a run changed, counted from ansible-runner's events (never from its text), the
report it writes, its exit codes. The lab's end-to-end use (make lab runs `ftfleet apply`; a
max_batch_size change on one host) is in test_fresh_machine.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ansible_runner
from conftest import BIN, ROOT, run_playbook

from ftfleet import view
from ftfleet.cli import markdown
from ftfleet.events import Run, stage_of_play

PLAY = """
- name: Demo stage
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
      changed_when: inventory_hostname == 'h1'
      notify: Restart it
    - name: Change something secret
      ansible.builtin.command: "true"
      changed_when: inventory_hostname == 'h2'
      no_log: true
    - name: Say something
      ansible.builtin.debug:
        msg: "hello from {{ inventory_hostname }}"
    - name: Check something
      ansible.builtin.assert:
        that: inventory_hostname != 'h3'
        success_msg: "{{ inventory_hostname }} passes"
    - name: Check quietly
      ansible.builtin.assert:
        that: true
    - name: Check each item quietly
      ansible.builtin.assert:
        that: item > 0
      loop: [1, 2]
    - name: Poll a long step
      ansible.builtin.shell: |
        echo "built step $(wc -l < {{ tmp }}/{{ inventory_hostname }})"
        echo x >> {{ tmp }}/{{ inventory_hostname }}
        test $(wc -l < {{ tmp }}/{{ inventory_hostname }}) -ge 3
      register: poll
      until: poll.rc == 0
      retries: 5
      delay: 0
      changed_when: false
    - name: Break on h2
      ansible.builtin.fail:
        msg: broken on purpose
      when: inventory_hostname == 'h2'
  handlers:
    - name: Restart it
      ansible.builtin.debug:
        msg: restarted
      changed_when: true
"""


def test_stages_come_from_site_yml():
    assert list(dict.fromkeys(stage_of_play().values())) == [
        "preflight",
        "gpu_hosts",
        "images",
        "models",
        "serve",
        "monitoring",
    ]


def test_a_run_is_counted_from_its_events(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY.replace("{{ tmp }}", str(tmp_path)))
    for host in ("h1", "h2"):
        (tmp_path / host).write_text("")
    inventory = "\n".join(f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}"
                          for h in ("h1", "h2"))  # fmt: skip
    run, seen = Run(), []

    def handle(event):
        handled = run.handle(event)
        if event["event"] == "runner_retry":
            seen.append((event["event_data"]["host"], run.host(event["event_data"]["host"]).progress))
        return handled

    (tmp_path / "private").mkdir()
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = ansible_runner.run(private_data_dir=str(tmp_path / "private"), project_dir=str(tmp_path),
                              playbook="play.yml", inventory=inventory, quiet=True, event_handler=handle,
                              envvars=env)  # fmt: skip
    assert done.rc == 2  # h2 failed
    # no_log hides a result's `changed`: still counted (h2's secret change)
    assert run.changed_per_stage() == {"h1": {"Demo stage": 2}, "h2": {"Demo stage": 1}}
    assert [(s.host, s.task, s.handler) for s in run.changes] == [("h1", "Change something", False),
                                                                  ("h2", "Change something secret", False),
                                                                  ("h1", "Restart it", True)]  # fmt: skip
    assert [(s.host, s.task, s.message) for s in run.failures] == [("h2", "Break on h2", "broken on purpose")]
    assert {"host": "h1", "stage": "Demo stage", "message": "hello from h1"} in run.notes
    # An assert's own success_msg is a note (the gate's "lab-node1 answers ..."); Ansible's default is not.
    assert {"host": "h2", "stage": "Demo stage", "message": "h2 passes"} in run.notes
    assert not [n for n in run.notes if n["message"] in ("All assertions passed", "All items completed")]
    # A long step shows its own progress: the try and the last line it printed, not a retry line.
    assert ("h1", "try 1/6: built step 0") in seen  # Ansible counts the first try too: 5 retries, 6 tries
    assert ("h1", "try 2/6: built step 1") in seen
    report = run.report(command="test")
    assert report["hosts"]["h2"]["failed"] == 1
    assert report["changes"][2] == {"host": "h1", "stage": "Demo stage", "role": "", "task": "Restart it",
                                    "duration": report["changes"][2]["duration"], "handler": True}  # fmt: skip


def test_the_live_view_shows_what_runs_and_who_waits():
    from rich.console import Console  # noqa: PLC0415

    def shown(run: Run) -> str:
        console = Console(record=True, width=160, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(view.live(run, "apply"))
        return console.export_text()

    run = Run(stages={})
    run.handle({"event": "runner_on_start", "event_data": {"host": "h1", "task": "Build the image"}})
    run.handle({"event": "runner_retry", "event_data": {"host": "h1", "res": {"attempts": 2, "retries": 9,
                "stdout_lines": ["Step 3/7 : RUN make " + "-j" * 100]}}})  # fmt: skip
    text = shown(run)
    assert "Build the image" in text
    assert "try 2/9: Step 3/7 : RUN make" in text
    assert len([line for line in text.splitlines() if "h1" in line]) == 1  # a long progress line stays one row
    run.handle({"event": "runner_on_ok", "event_data": {"host": "h1", "task": "Build the image",
                                                         "res": {"changed": True}}})  # fmt: skip
    assert "waiting (last: Build the image)" in shown(run)


def ftfleet(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200"}
    return subprocess.run([str(BIN / "ftfleet"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip


def test_help_and_usage_errors():
    done = ftfleet("--help")
    assert done.returncode == 0
    for word in ("plan", "apply", "status", "bench", "Exit codes", "runs/"):
        assert word in done.stdout
    bench = ftfleet("bench", "--help")  # bench.py's own options pass through
    assert bench.returncode == 0, bench.stderr
    assert "--concurrency" in bench.stdout
    assert "HAProxy" in bench.stdout
    assert ftfleet("apply", "--no-such-option").returncode == 64
    assert ftfleet().returncode == 64


def test_a_failed_preflight_gives_exit_2_and_a_report(tmp_path):
    """ftfleet plan on a host with a bad input: preflight stops it, the report says where and why."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"node1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "gpu_facts_fact_path": str(tmp_path / "facts"), "fleet_require_gpus": False,
        "fleet_model": {}, "fleet_gpu_devices": [0, 0]}}}}}}))  # fmt: skip
    done = ftfleet("plan", "-i", str(inventory), "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    [run_dir] = (tmp_path / "runs").iterdir()
    assert run_dir.name.endswith("-plan")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["result"] == "failed"
    [failure] = report["failures"]
    assert failure["host"] == "node1"
    assert failure["stage"] == "preflight"
    assert "fleet_gpu_devices=[0, 0]: index 0 is listed twice" in failure["message"]
    # On a new host the plan would install only the gpus fact (preflight reads it, in check mode too).
    assert report["changed"] == {"node1": {"preflight": 3}}
    assert {step["role"] for step in report["changes"]} == {"gpu_facts"}
    assert (run_dir / "artifacts" / "ansible" / "job_events").is_dir()
    summary = (run_dir / "summary.md").read_text()
    assert "# ftfleet plan: failed" in summary
    assert "| node1 | preflight |" in summary
    assert "plan: failed, 3 changed task(s)" in " ".join(done.stdout.split())


def test_a_loops_diffs_are_kept_per_item(tmp_path):
    """--diff on a task with a loop: each item's diff comes in its own event."""
    (tmp_path / "play.yml").write_text(f"""
- name: Demo stage
  hosts: all
  gather_facts: false
  tasks:
    - name: Write two files
      ansible.builtin.copy:
        content: "{{{{ item }}}} v2\\n"
        dest: "{tmp_path}/{{{{ item }}}}.txt"
        mode: "0644"
      loop: [a, b]
""")
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"{name} v1\n")
    (tmp_path / "private").mkdir()
    run = Run()
    done = ansible_runner.run(private_data_dir=str(tmp_path / "private"), project_dir=str(tmp_path),
                              playbook="play.yml", inventory=f"h1 ansible_connection=local "
                              f"ansible_python_interpreter={sys.executable}", quiet=True, event_handler=run.handle,
                              cmdline="--diff", envvars={"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})  # fmt: skip
    assert done.rc == 0
    assert [c.task for c in run.changes] == ["Write two files"]
    shown = [view.unified(entry) for entry in run.diffs]
    assert any("-a v1" in d and "+a v2" in d for d in shown), shown
    assert any("-b v1" in d and "+b v2" in d for d in shown), shown


def test_a_failed_loop_says_which_item_failed_and_why(tmp_path):
    """A loop's failure names each failed item with its own message, not only Ansible's "One or
    more items failed"."""
    (tmp_path / "play.yml").write_text("""
- name: Demo stage
  hosts: all
  gather_facts: false
  tasks:
    - name: Check three things
      ansible.builtin.fail:
        msg: "{{ item }} is broken"
      when: item != 'fine'
      loop: [fine, disk, network]
""")
    (tmp_path / "private").mkdir()
    run = Run()
    done = ansible_runner.run(private_data_dir=str(tmp_path / "private"), project_dir=str(tmp_path),
                              playbook="play.yml", inventory=f"h1 ansible_connection=local "
                              f"ansible_python_interpreter={sys.executable}", quiet=True, event_handler=run.handle,
                              envvars={"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})  # fmt: skip
    assert done.rc == 2
    [failure] = run.failures
    assert failure.task == "Check three things"
    assert failure.message.startswith("One or more items failed"), failure.message
    assert "; disk: disk is broken; network: network is broken" in failure.message, failure.message
    assert "fine" not in failure.message


def test_status_shows_a_certificates_days_left_and_when_to_renew(tmp_path):
    """ftfleet status's last column: fleet-status's days left of a real certificate (openssl, two
    days), and the table's marks for one to renew or expired, read from the run's events as the
    status play publishes them."""
    import importlib.machinery  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    from ftfleet import cli  # noqa: PLC0415

    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=gw", "-keyout", tmp_path / "gw.key", "-out", tmp_path / "gw.crt"],
                   check=True, capture_output=True)  # fmt: skip
    path = ROOT / "roles" / "fleet_status" / "files" / "fleet-status"
    loader = importlib.machinery.SourceFileLoader("fleet_status_probe", str(path))
    probe = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(probe)
    assert probe.days_left(str(tmp_path / "gw.crt")) == 1  # 2 days less the seconds since issue
    assert probe.days_left(str(tmp_path / "missing.crt")) is None

    events = tmp_path / "artifacts" / "ansible" / "job_events"
    events.mkdir(parents=True)
    reports = {"gpu-1": {"model": "m", "unit": "active", "enabled": "enabled", "tls_days_left": 1},
               "gpu-2": {"model": "m", "tls_days_left": 90}, "gpu-3": {"model": "m", "tls_days_left": None},
               "lb-1": {"model": "load balancer", "health": "TLS", "tls_days_left": -3}}  # fmt: skip
    for i, (host, report) in enumerate(reports.items()):
        event = {"event": "runner_on_ok",
                 "event_data": {"host": host, "res": {"ansible_facts": {"fleet_status_report": report}}}}  # fmt: skip
        (events / f"{i}.json").write_text(json.dumps(event))
    table, rows = cli.status_table(tmp_path)
    assert [r["host"] for r in rows] == list(reports)
    days = dict(zip(table.columns[0]._cells, table.columns[-1]._cells, strict=True))
    assert days == {
        "gpu-1": "[bold red]1 (renew)[/]",
        "gpu-2": "90",
        "gpu-3": "-",
        "lb-1": "[bold red]expired 3 d ago[/]",
    }
    assert table.columns[-1].header == "TLS days"


def test_the_status_play_reports_a_plain_load_balancer(tmp_path):
    """playbooks/status.yml on an lb host whose HAProxy has no certificate (here: no HAProxy at
    all, the runtime API answers nothing): the row says plain HTTP, no days."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"lb_hosts": {"hosts": {"lb-x": {
        "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
        "fleet_status_lb_socket": str(tmp_path / "no.sock")}}}}}}))  # fmt: skip
    done = run_playbook("playbooks/status.yml", "-i", inventory, "-v", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    facts = [json.loads(line.split("=> ", 1)[1]) for line in done.stdout.splitlines()
             if line.startswith("ok: [lb-x] => {") and "fleet_status_report" in line]  # fmt: skip
    assert [f["ansible_facts"]["fleet_status_report"] for f in facts] == [
        {"model": "load balancer", "health": "plain HTTP", "tls_days_left": None}], out[-3000:]  # fmt: skip


def test_ftfleet_finds_ansible_cfgs_callbacks_for_a_playbook_outside_the_projects_root(tmp_path):
    """ansible-runner points Ansible at its own callback folder, which replaces ansible.cfg's
    callback_plugins path: site.yml finds callback_plugins/ beside it anyway (a playbook's own
    folder), playbooks/status.yml would not, and Ansible would skip fleet_warm with a warning."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"lb_hosts": {"hosts": {"lb-x": {
        "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
        "fleet_status_lb_socket": str(tmp_path / "no.sock")}}}}}}))  # fmt: skip
    done = ftfleet("status", "-i", str(inventory), "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [run_dir] = (tmp_path / "runs").iterdir()
    stdout = (run_dir / "artifacts" / "ansible" / "stdout").read_text()
    assert "PLAY RECAP" in stdout
    assert "Skipping callback plugin" not in stdout


def test_the_status_play_shows_the_gpus_a_model_holds_and_those_left_free(tmp_path):
    """playbooks/status.yml on a serving host with four L40S (the recorded nvidia-smi, read by the
    real gpus fact) whose model holds GPUs 0 and 1, as inventories/prod's gpu-l40s-04, and a second
    model on GPU 2 of the same machine (fleet_machine): each report says what its model leaves, and
    ftfleet status's table says GPU 3 alone is free on the machine; a host without the fact says
    nothing of them."""
    from ftfleet import cli  # noqa: PLC0415

    facts = tmp_path / "facts.d"
    facts.mkdir()
    shutil.copy(ROOT / "roles" / "gpu_facts" / "files" / "gpus.fact", facts / "gpus.fact")
    (facts / "gpus.fact").chmod(0o755)  # as role gpu_facts installs it: Ansible runs it
    (facts / "gpus.json").write_text(json.dumps({"nvidia_smi": str(ROOT / "tests/fixtures/gpus/l40sx4/nvidia-smi"),
                                                 "sysfs": str(tmp_path / "no-sysfs")}))  # fmt: skip
    host = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
            "fleet_model": {"name": "m"}, "fleet_gpu_devices": [0, 1], "fleet_tensor_para_size": 2,
            "fleet_status_interval": 0, "fleet_status_http_port": 1, "fleet_status_metrics_port": 1,
            "fleet_data_root": str(tmp_path / "data")}  # fmt: skip
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {
        "gpu-x": {**host, "fleet_status_fact_path": str(facts)},
        "gpu-y": {**host, "fleet_status_fact_path": str(tmp_path / "none.d")},
        "neox.gpu-x": {**host, "fleet_status_fact_path": str(facts), "fleet_machine": "gpu-x", "fleet_gpu_devices": [2],
                       "fleet_tensor_para_size": 1}}}}}}))  # fmt: skip
    done = run_playbook("playbooks/status.yml", "-i", inventory, "-v", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    reports = {
        line.split("]", 1)[0][5:]: json.loads(line.split("=> ", 1)[1])["ansible_facts"]["fleet_status_report"]
        for line in done.stdout.splitlines()
        if line.startswith("ok: [") and "fleet_status_report" in line
    }
    assert {h: (r["gpus"], r["gpus_total"], r["gpus_free"], r["machine"]) for h, r in reports.items()} == {
        "gpu-x": ([0, 1], 4, [2, 3], "gpu-x"), "gpu-y": ([0, 1], None, None, "gpu-y"),
        "neox.gpu-x": ([2], 4, [0, 1, 3], "gpu-x")}, out[-3000:]  # fmt: skip
    events = tmp_path / "artifacts" / "ansible" / "job_events"
    events.mkdir(parents=True)
    for i, (name, report) in enumerate(reports.items()):
        (events / f"{i}.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": name, "res": {"ansible_facts": {"fleet_status_report": report}}}}))  # fmt: skip
    table, rows = cli.status_table(tmp_path)
    column = [c.header for c in table.columns].index("free GPUs")
    assert list(table.columns[column]._cells) == ["3 of 4", "", "3 of 4"]  # gpu-x, gpu-y, neox.gpu-x
    assert {r["host"]: r["gpus_free"] for r in rows} == {"gpu-x": [3], "gpu-y": None, "neox.gpu-x": [3]}
    assert cli.free_gpus({"gpus_total": 8, "gpus_free": []}) == "none of 8"


def test_a_canarys_verdict_and_rollback_time_come_from_its_events():
    """Role canary's Verdict line (a debug message) marks the host's row and the report; a failed
    one's rollback is timed from it to the rollback's last task (events as ansible-runner gives them)."""
    run = Run()

    def ok(task: str, at: str, msg: str = "", action: str = "command") -> dict:
        return {"event": "runner_on_ok", "created": at,
                "event_data": {"host": "node1", "role": "canary", "task": task, "task_action": action,
                               "res": {"msg": msg, "changed": action != "debug"}}}  # fmt: skip

    verdict = ("canary node1 (tiny at 0123abcd): FAILED: golden prompt 'Hi': answered ' x', expected ' y'; "
               "measures over 30 s: {\"client_requests\": null}")  # fmt: skip
    for event in (
        {"event": "playbook_on_play_start", "event_data": {"play": "Judge the canaries"}},
        ok("Verdict", "2026-11-27T09:40:00.000000", verdict, "ansible.builtin.debug"),
        ok("rollback | Drain the canary in the load balancers", "2026-11-27T09:40:01.000000"),
        ok("Record that the canary serves a judged revision", "2026-11-27T09:40:12.500000"),
    ):
        run.handle(event)
    assert run.canaries["node1"]["passed"] is False
    assert run.hosts["node1"].progress == "canary FAILED, rolling back"
    report = run.report(command="apply", result="failed", run_dir="runs/x")
    assert report["canary"] == {"node1": {"passed": False, "verdict": verdict, "rollback_seconds": 12.5}}
    summary = markdown({**report, "rc": 2})
    assert "| node1 | FAILED, rolled back | FAILED: golden prompt 'Hi'" in summary

    passed = Run()
    passed.handle({"event": "playbook_on_play_start", "event_data": {"play": "Judge the canaries"}})
    said = "canary node1 (tiny at 4567): passed; measures over 30 s: {}"
    passed.handle(ok("Verdict", "2026-11-27T09:41:00.000000", said, "ansible.builtin.debug"))
    assert passed.canaries["node1"]["passed"] is True
    assert "rollback_seconds" not in passed.report()["canary"]["node1"]


def test_a_rollback_says_where_its_time_went_by_role():
    """Each task's duration from the verdict to the rollback's end, summed by the role it ran in and
    its part (role canary's own tasks by name): what a person cuts the rollback's time by."""
    run = Run()

    def ok(task: str, role: str, duration: float, msg: str = "") -> dict:
        action = "ansible.builtin.debug" if msg else "command"
        return {"event": "runner_on_ok", "created": "2026-11-28T09:40:00.000000",
                "event_data": {"host": "node1", "role": role, "task": task, "duration": duration,
                               "task_action": action, "res": {"msg": msg}}}  # fmt: skip

    run.handle({"event": "playbook_on_play_start", "event_data": {"play": "Judge the canaries"}})
    run.handle(ok("Verdict", "canary", 0.01, "canary node1 (tiny at 0123): FAILED: x; measures over 30 s: {}"))
    for task, role, took in (("rollback | Drain the canary in the load balancers", "canary", 1.24),
                             ("previous | Check out the previous revision", "model_checkpoint", 0.5),
                             ("restore | Flip the link", "ft_convert", 0.3), ("restore | Check", "ft_convert", 0.25),
                             ("service | Restart tritonserver", "triton_server", 4.0),
                             ("gate | Wait for /v2/health/ready", "triton_server", 9.06),
                             ("gate | Send a smoke inference", "triton_server", 1.5),
                             ("Include the unit's facts", "triton_server", 0.2),
                             ("Record that the canary serves a judged revision", "canary", 0.1),
                             ("service | Restart the gateway", "gateway", 2.0)):  # fmt: skip
        run.handle(ok(task, role, took))
    assert run.canaries["node1"]["rollback_steps"] == {
        "Drain the canary in the load balancers": 1.2, "model_checkpoint previous": 0.5, "ft_convert restore": 0.6,
        "triton_server service": 4.0, "triton_server gate": 10.6, "triton_server": 0.2,
        "Record that the canary serves a judged revision": 0.1,
    }  # fmt: skip


def test_plan_shows_the_gpus_a_model_would_move_from_and_to():
    """ftfleet plan's placement lines, from its diffs of the tritonserver units (before_header is
    the unit's path, the template's after_header a temporary file): a model moved, a model that
    no unit serves yet, and an unchanged label or another file that say nothing."""
    unit = "/etc/systemd/system/triton-{}.service"
    line = "ExecStart=/usr/bin/docker run --label=ftfleet.gpus={} image\n"
    diffs = [
        {"host": "gpu-4", "diff": {"before_header": unit.format("llama-7b"), "after_header": "/tmp/x",
                                   "before": line.format("0,1"), "after": line.format("0,1,2,3")}},
        {"host": "h2ogpt.gpu-4", "diff": [{"before_header": unit.format("h2ogpt"), "before": "",
                                           "after_header": "/tmp/y", "after": line.format("2,3")}]},
        {"host": "gpu-9", "diff": {"before_header": unit.format("kogpt"), "before": line.format("0") + "x=1\n",
                                   "after": line.format("0") + "x=2\n"}},
        {"host": "gpu-9", "diff": {"before_header": "/srv/ftfleet/models/kogpt/config.pbtxt", "before": "a",
                                   "after": line.format("5")}},
    ]  # fmt: skip
    moves = view.placement(diffs)
    assert moves == [{"host": "gpu-4", "model": "llama-7b", "before": "0,1", "after": "0,1,2,3"},
                     {"host": "h2ogpt.gpu-4", "model": "h2ogpt", "before": None, "after": "2,3"}]  # fmt: skip
    assert view.describe_placement(moves).splitlines() == [
        "placement: gpu-4 llama-7b: GPUs 0,1 -> 0,1,2,3",
        "placement: h2ogpt.gpu-4 h2ogpt: GPUs (none: a new model) -> 2,3",
    ]

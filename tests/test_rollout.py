"""ftfleet plan's rollout line: the serve stage's batches for Ansible's `serial` forms (checked
against Ansible's own batches), the restart times an apply records, and the estimate from them;
and the rollout's shape (playbooks/rollout.yml)."""

from __future__ import annotations

import json
import re
import sys

import yaml
from conftest import ROOT, run_playbook

from ftfleet import rollout
from ftfleet.events import Run, plays_of, rollout_plays

FORMS = [1, 3, "25%", "30%", "100%", [1, "50%"], [1, 2, "40%"], [2, 5]]


def test_the_batches_are_ansibles_for_every_form_of_serial(tmp_path):
    """One play per form, its `serial` written as the rollout (playbooks/rollout.yml) writes it, on 7 local hosts: the
    batches Ansible makes are the ones rollout.batch_sizes computes."""
    hosts = {f"h{n}": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for n in range(7)}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    plays = [{"name": f"form {i}", "hosts": "all", "gather_facts": False, "serial": f"{{{{ form_{i} | default(1) }}}}",
              "tasks": [{"ansible.builtin.debug": {"msg": f"form {i}: batch of {{{{ ansible_play_batch | length }}}}"},
                         "run_once": True}]}
             for i in range(len(FORMS))]  # fmt: skip
    playbook = tmp_path / "batches.yml"
    playbook.write_text(json.dumps(plays))
    extra = {f"form_{i}": form for i, form in enumerate(FORMS)}
    done = run_playbook(playbook, "-i", inventory, "-e", json.dumps(extra))
    assert done.returncode == 0, done.stdout[-3000:]
    seen = re.findall(r"form (\d+): batch of (\d+)", done.stdout)
    for i, form in enumerate(FORMS):
        made = [int(size) for n, size in seen if int(n) == i]
        assert made == rollout.batch_sizes(form, 7), (form, made)


def test_the_serial_comes_from_the_extra_vars_as_ansible_reads_them(tmp_path):
    (tmp_path / "vars.yml").write_text("fleet_serve_serial: [1, '25%']\n")
    assert rollout.serial_of([], tmp_path) == 1
    assert rollout.serial_of(["fleet_serve_serial=3 other=x"], tmp_path) == "3"
    assert rollout.serial_of(['{"fleet_serve_serial": "10%"}', "@vars.yml"], tmp_path) == [1, "25%"]


def test_the_estimate_waits_on_each_batchs_slowest_restart():
    hosts = [f"h{n}" for n in range(6)]
    history = {"h0": 40.0, "h1": 60.0, "h2": 50.0}
    planned = rollout.plan(hosts, {"h0", "h1", "h3", "h4"}, 2, history)
    # batches h0 h1 | h2 h3 | h4 h5: 60 (h1), then h3 and h4 never timed count as the median, 50
    assert (planned["batches"], planned["batches_restarting"], planned["seconds"]) == (3, 3, 160.0)
    assert "4 host(s) restart in 3 of 3 batch(es) of 2, 2, 2 host(s)" in rollout.describe(planned)
    assert rollout.plan(hosts, {"h5"}, "50%", {})["seconds"] is None  # nothing timed yet
    assert "no earlier `ftfleet apply`" in rollout.describe(rollout.plan(hosts, {"h5"}, "50%", {}))
    assert rollout.describe(rollout.plan(hosts, set(), 1, history)) == "serve: no host restarts"


def event(kind: str, host: str, at: str, *, role: str = "", duration: float = 0.0, play: str = "") -> dict:
    data = {"host": host, "role": role, "task": "t", "duration": duration, "res": {}} if host else {"play": play}
    return {"event": kind, "created": f"2026-11-26T10:00:{at}", "event_data": data}


def test_an_apply_records_each_restart_and_the_hosts_the_rollout_batches(tmp_path):
    names, same_hosts = rollout_plays()
    name = names[0]
    prepare = next(play for play in same_hosts if play != name)
    run = Run()
    for e in [event("playbook_on_play_start", "", "00.000", play=prepare),
              event("runner_on_skipped", "h1", "00.500", role="triton_server"),
              event("runner_on_skipped", "h2", "00.600", role="triton_server"),
              event("playbook_on_play_start", "", "01.000", play=name),
              event("runner_on_skipped", "h1", "01.100"),  # the pre_task that lets a restarting host stay
              event("runner_on_ok", "h1", "05.000", role="lb_member", duration=2.0),
              event("runner_on_ok", "h1", "30.500", role="lb_ready", duration=1.0)]:  # fmt: skip
        run.handle(e)
    assert list(run.batched) == ["h1", "h2"]
    assert run.report()["rollout"] == {"h1": 27.5}  # from 03.000 (05.000 less its 2 s) to 30.500
    runs = tmp_path / "runs"
    (runs / "20261126-100000-apply").mkdir(parents=True)
    (runs / "20261126-100000-apply" / "report.json").write_text(json.dumps(run.report()))
    (runs / "20261125-090000-apply").mkdir(parents=True)
    (runs / "20261125-090000-apply" / "report.json").write_text(json.dumps({"rollout": {"h1": 99.0, "h2": 20.0}}))
    assert rollout.restart_seconds(runs) == {"h1": 27.5, "h2": 20.0}  # the newest run's time first


def anchors_and_aliases(path) -> list[str]:
    """The YAML anchors and aliases of a file, as `&name` and `*name`."""
    found = []
    for event in yaml.parse(path.read_text()):
        if isinstance(event, yaml.AliasEvent):
            found.append(f"*{event.anchor}")
        elif getattr(event, "anchor", None):
            found.append(f"&{event.anchor}")
    return found


def test_the_rollout_reads_top_down_in_one_playbook():
    """site.yml's models and serve stages are one playbook whose entries are the rollout's steps,
    numbered in order as its header and docs/architecture.md number them; a wave's plays are
    written once and imported with explicit variables, without YAML anchors; no switch variable is
    set from outside, and both batched plays (the canaries' wave and the waiting hosts') are found
    for the report."""
    site = yaml.safe_load((ROOT / "site.yml").read_text())
    imported = [entry["ansible.builtin.import_playbook"] for entry in site]
    assert len(imported) == len(set(imported))
    assert "playbooks/rollout.yml" in imported
    assert all(set(entry) == {"name", "ansible.builtin.import_playbook"} for entry in site), site
    path = ROOT / "playbooks" / "rollout.yml"
    text = path.read_text()
    # "# N" above each step's entries: 1 to 7 in order (the load balancers' step is two plays)
    numbered = [int(n) for n in re.findall(r"^# (\d+)$", text, re.MULTILINE)]
    assert numbered == list(range(1, 8))
    assert [int(n) for n in re.findall(r"^#   (\d) ", text, re.MULTILINE)] == numbered  # the header
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    assert [int(n) for n in re.findall(r"^ \|    (\d) (?:models|serve)", architecture, re.MULTILINE)] == numbered
    waves = [entry for entry in yaml.safe_load(text) if "ansible.builtin.import_playbook" in entry]
    assert [entry["ansible.builtin.import_playbook"] for entry in waves] == ["rollout-models.yml",
                                                                            "rollout-serve.yml"] * 2  # fmt: skip
    assert all(set(entry["vars"]) == {"wave_hosts", "wave_name"} for entry in waves)
    for name in ("rollout.yml", "rollout-models.yml", "rollout-serve.yml", "tasks/rollout-turn.yml"):
        assert anchors_and_aliases(ROOT / "playbooks" / name) == [], name
    steps = [(play["tags"][0], play["name"]) for play in plays_of(path)]
    assert len({name for _, name in steps}) == len(steps), "each play's name is its own"
    order = [tag for tag, _ in steps]
    first_serve, judge = order.index("serve"), [name for _, name in steps].index("Judge the canaries")
    assert order[:first_serve] == ["models", "models"]  # elect, prepare the first wave
    assert set(order[first_serve : judge + 1]) == {"serve"}
    assert order[judge + 1 :] == ["models", "serve", "serve", "serve"]  # the rest: prepare, write, roll out, gate
    names, serving = rollout_plays()
    assert len(names) == 2
    assert all(name in serving for name in names)
    text += (ROOT / "site.yml").read_text()
    for switch in ("__fleet_serve_follows", "__models_hosts", "__serve_hosts"):
        assert switch not in text


def test_the_anchor_finder_finds_them(tmp_path):
    path = tmp_path / "a.yml"
    path.write_text("- a: &x {b: 1}\n- c: *x\n")
    assert anchors_and_aliases(path) == ["&x", "*x"]

"""What a run did, from ansible-runner's event stream: per host and stage, the current task, the
changed and failed tasks with their durations, and the progress of long steps.

Pure bookkeeping over plain event dicts (the ones ansible-runner hands to an event_handler and
writes under artifacts/<id>/job_events/), so that it is tested on recorded events."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


IMPORT = "ansible.builtin.import_playbook"
GIVEN = re.compile(r"\{\{ *(\w+) *(?:\| *default\([^)]*\) *)?\}\}")


def plays_of(path: Path, given: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The plays of a playbook, those of the playbooks it imports in their place; an import's
    vars (playbooks/rollout.yml's wave_hosts and wave_name) written into its plays' names and
    hosts, as Ansible shows them."""
    plays, given = [], given or {}
    for entry in yaml.safe_load(path.read_text()):
        if IMPORT in entry:
            plays += plays_of(path.parent / entry[IMPORT], {**given, **(entry.get("vars") or {})})
        else:
            plays.append({**entry, **{key: _given(entry[key], given) for key in ("name", "hosts") if key in entry}})
    return plays


def _given(text: Any, given: Mapping[str, Any]) -> Any:
    """`text` with each `{{ name }}` (or `{{ name | default(...) }}`) of a given variable replaced by
    its value."""
    if not isinstance(text, str):
        return text
    return GIVEN.sub(lambda m: str(given[m[1]]) if m[1] in given else m[0], text)


def stage_of_play() -> dict[str, str]:
    """Play name -> stage, in site.yml's order: the play's first tag but `always` (every play of
    site.yml is tagged with its stage; the rollout's plays with models or serve)."""
    stages: dict[str, str] = {}
    for play in plays_of(ROOT / "site.yml"):
        tags = [tag for tag in play.get("tags") or [] if tag != "always"]
        stages.setdefault(play["name"], tags[0] if tags else "")
    return stages


def rollout_plays() -> tuple[tuple[str, ...], list[str]]:
    """The rollout's plays that restart hosts in batches (their `serial` is fleet_serve_serial: one
    for the canaries and the hosts that wait for none, one for the hosts that waited), and the serve
    plays of the same hosts (every host such a play batches passes through them; one with nothing to
    restart leaves the rollout play at once, without an event)."""
    plays = plays_of(ROOT / "playbooks" / "rollout.yml")
    batched = [play for play in plays if "fleet_serve_serial" in str(play.get("serial", ""))]
    hosts = [play["hosts"] for play in batched]
    serving = [play["name"] for play in plays if play["hosts"] in hosts and "serve" in (play.get("tags") or [])]
    return tuple(play["name"] for play in batched), list(dict.fromkeys(serving))


def event_time(event: Mapping[str, Any]) -> float:
    """When an event happened: ansible-runner's `created` (UTC), else now."""
    try:
        return datetime.fromisoformat(str(event["created"])).replace(tzinfo=UTC).timestamp()
    except (KeyError, ValueError):
        return time.time()


@dataclass
class Step:
    """One task on one host that changed something or failed."""

    host: str
    stage: str
    role: str
    task: str
    duration: float
    handler: bool = False
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in ("handler", "message") or v}


@dataclass
class HostState:
    stage: str = ""
    task: str = ""
    started: float = 0.0
    progress: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    done: bool = False
    running: bool = False  # a task of this host runs now (false between its tasks, and while other hosts run)
    stages: list[str] = field(default_factory=list)  # the stages the host ran, in order


def _last_line(res: Mapping[str, Any]) -> str:
    """The most telling line of a polling task's result (an image build's log tail, a conversion's)."""
    for key in ("stdout_lines", "stderr_lines"):
        lines = [line for line in res.get(key) or [] if str(line).strip()]
        if lines:
            return str(lines[-1]).strip()
    return str(res.get("msg") or "").strip().splitlines()[-1:][0] if res.get("msg") else ""


def verdict_said(message: str) -> str:
    """What role canary's Verdict line says after naming the host, model and commit: passed or
    FAILED with the reasons, then the measures."""
    return message.split("):", 1)[-1].strip()


def _says_something(data: Mapping[str, Any], res: Mapping[str, Any]) -> bool:
    """A debug message, or an assert's own success_msg (the gate's "host answers ..."), not Ansible's default."""
    action = str(data.get("task_action", "")).rsplit(".", 1)[-1]
    message = str(res.get("msg") or "")
    if action == "debug":
        return bool(message)
    return action == "assert" and bool(message) and message not in ("All assertions passed", "All items completed")


def _message(res: Mapping[str, Any]) -> str:
    """A failed result's words; for a loop, Ansible's "One or more items failed" followed by each
    failed item and its own words (without them a report says that something failed, not what)."""
    text = str(res.get("msg") or res.get("stderr") or res.get("stdout") or "").strip()
    for item in res.get("results") or []:
        if isinstance(item, Mapping) and item.get("failed"):
            label = item.get("item")
            if isinstance(label, (dict, list)):  # a structured item: loop_control's label, if any
                label = item.get("_ansible_item_label")
            text += f"; {label}: {_message(item)}" if label is not None else f"; {_message(item)}"
    return re.sub(r"\s+", " ", text)[:2000]


@dataclass
class Run:
    """Feed it every event (run.handle is an ansible-runner event_handler); read the state."""

    stages: dict[str, str] = field(default_factory=stage_of_play)
    hosts: dict[str, HostState] = field(default_factory=dict)
    changes: list[Step] = field(default_factory=list)
    failures: list[Step] = field(default_factory=list)
    diffs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, str]] = field(default_factory=list)  # debug messages, asserts' success_msg
    stage: str = ""
    play: str = ""
    in_handlers: bool = False
    rollout: tuple[tuple[str, ...], list[str]] = field(default_factory=rollout_plays)
    # host -> [first start, last result] of its restart in the rollout play (a host with nothing
    # to restart leaves that play at its first task, which has no role)
    restarts: dict[str, list[float]] = field(default_factory=dict)
    batched: dict[str, None] = field(default_factory=dict)  # the hosts the rollout play batches, in order
    # host -> role canary's verdict on it: passed, and its message (measures, reasons)
    canaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)

    def host(self, name: str) -> HostState:
        return self.hosts.setdefault(name, HostState())

    def handle(self, event: Mapping[str, Any]) -> bool:
        kind, data = event.get("event", ""), event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name") or ""
            self.stage = self.stages.get(self.play, data.get("play") or "")
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            # Ansible starts a handler with is_conditional set (ansible-runner forwards it as a task start).
            self.in_handlers = kind == "playbook_on_handler_task_start" or bool(data.get("is_conditional"))
        elif kind == "runner_on_start":
            state = self.host(data["host"])
            state.stage, state.task, state.started, state.progress, state.running = (
                self.stage,
                data.get("task", ""),
                time.monotonic(),
                "",
                True,
            )
            if self.stage not in state.stages:
                state.stages.append(self.stage)
        elif kind in ("runner_retry", "runner_on_async_poll"):
            res = data.get("res") or {}
            retries = res.get("retries") or data.get("retries") or "?"
            tries = f"try {res['attempts']}/{retries}" if res.get("attempts") else "polling"
            line = _last_line(res)
            self.host(data["host"]).progress = f"{tries}: {line}" if line else tries
        elif kind == "runner_item_on_ok":  # a loop's item: its own diff (the task's result holds none)
            res = data.get("res") or {}
            if res.get("diff"):
                self.diffs.append({"host": data.get("host"), "stage": self.stage, "task": data.get("task") or "",
                                   "diff": res["diff"]})  # fmt: skip
        elif kind.startswith("runner_on_") and data.get("host"):
            self._result(kind, data, str(event.get("stdout") or ""))
        elif kind == "playbook_on_stats":
            for host in self.hosts.values():
                host.done, host.task, host.progress = True, "", ""
        self._timings(kind, data, event)
        return True

    def _timings(self, kind: str, data: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        """The restarts of the rollout plays; a canary's verdict and its rollback's steps."""
        if kind.startswith("runner_on_") and data.get("host") and self.play in self.rollout[1]:
            self._rollout(kind, data, event)
        if kind == "runner_on_ok" and data.get("host") in self.canaries:
            self._rollback_step(data)
            if data.get("role") == "canary":
                self._canary(data, event)

    def _rollback_step(self, data: Mapping[str, Any]) -> None:
        """Where a failed canary's rollback spends its time: each task's duration from the verdict
        on, summed by the role it ran in and the part of it (the task name's prefix, as in
        "triton_server gate": a role's validate, configure, service and gate apart); role canary's
        own by task (drain, repository files)."""
        verdict = self.canaries[data["host"]]
        if verdict["passed"] or "at" not in verdict or "rollback_seconds" in verdict or not data.get("duration"):
            return
        role, task = data.get("role") or "", str(data.get("task") or "")
        part = task.split(" | ", 1)[0] if " | " in task else ""
        step = task.removeprefix("rollback | ") if role in ("canary", "") else f"{role} {part}".strip()
        steps = verdict.setdefault("rollback_steps", {})
        steps[step] = round(steps.get(step, 0.0) + float(data["duration"]), 1)

    def _canary(self, data: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        """When the verdict came, and how long a rollback took from it to the canary serving the
        previous revision with its full weight again."""
        verdict, task = self.canaries[data["host"]], data.get("task") or ""
        if task.endswith("Verdict"):
            verdict["at"] = event_time(event)
        elif task == "Record that the canary serves a judged revision" and not verdict["passed"] and "at" in verdict:
            verdict["rollback_seconds"] = round(event_time(event) - verdict["at"], 1)

    def _rollout(self, kind: str, data: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        """The hosts the rollout play batches, and how long each restart took (from the first
        result of its roles' tasks, less that task's duration, to the last)."""
        self.batched.setdefault(data["host"])
        if self.play in self.rollout[0] and data.get("role") and kind not in ("runner_on_skipped", "runner_on_start"):
            at = event_time(event)
            self.restarts.setdefault(data["host"], [at - float(data.get("duration") or 0.0), at])[1] = at

    def _result(self, kind: str, data: Mapping[str, Any], stdout: str = "") -> None:
        state, res = self.host(data["host"]), data.get("res") or {}
        state.running = False
        if "censored" in res:
            # no_log hides the whole result, `changed` included; the event's own line still says it.
            res = {**res, "changed": re.sub(r"\x1b\[[0-9;]*m", "", stdout).lstrip().startswith("changed:")}
        step = Step(host=data["host"], stage=self.stage, role=data.get("role") or "", task=data.get("task") or "",
                    duration=round(float(data.get("duration") or 0.0), 3),
                    handler=self.in_handlers)  # fmt: skip
        if kind == "runner_on_ok":
            state.ok += 1
            if res.get("changed"):
                state.changed += 1
                self.changes.append(step)
            if res.get("diff"):
                self.diffs.append({"host": step.host, "stage": step.stage, "task": step.task, "diff": res["diff"]})
            if _says_something(data, res):
                message = " ".join(str(res["msg"]).split())
                self.notes.append({"host": step.host, "stage": step.stage, "message": message})
                if step.role == "canary" and step.task.endswith("Verdict"):
                    passed = verdict_said(message).startswith("passed")
                    self.canaries[step.host] = {"passed": passed, "verdict": message}
                    state.progress = "canary passed" if passed else "canary FAILED, rolling back"
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            state.failed += 1
            step.message = _message(res)
            self.failures.append(step)
        elif kind == "runner_on_unreachable":
            state.unreachable = True
            step.message = _message(res)
            self.failures.append(step)
        elif kind == "runner_on_skipped":
            state.skipped += 1

    def changed_per_stage(self) -> dict[str, dict[str, int]]:
        """host -> stage -> number of changed tasks, with a 0 for every stage the host ran."""
        counts = {name: dict.fromkeys(state.stages, 0) for name, state in sorted(self.hosts.items())}
        for step in self.changes:
            stages = counts.setdefault(step.host, {})
            stages[step.stage] = stages.get(step.stage, 0) + 1
        return counts

    def report(self, **about: Any) -> dict[str, Any]:
        return {
            **about,
            "seconds": round(time.monotonic() - self.began, 1),
            "hosts": {
                name: {
                    "ok": s.ok,
                    "changed": s.changed,
                    "failed": s.failed,
                    "skipped": s.skipped,
                    "unreachable": s.unreachable,
                }
                for name, s in sorted(self.hosts.items())
            },
            "changed": self.changed_per_stage(),
            "changes": [step.as_dict() for step in self.changes],
            "failures": [step.as_dict() for step in self.failures],
            "notes": self.notes,
            "rollout": {host: round(end - start, 1) for host, (start, end) in sorted(self.restarts.items())},
            "canary": {host: {k: v for k, v in c.items() if k != "at"} for host, c in sorted(self.canaries.items())},
        }

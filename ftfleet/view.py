"""The live view of a run (one row per host) and the tables printed at its end, with rich."""

from __future__ import annotations

import difflib
import re
import time
from typing import Any

from rich.table import Table
from rich.text import Text

from ftfleet.events import Run, verdict_said


def _elapsed(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def live(run: Run, title: str) -> Table:
    """Each host: its stage, the task it runs now and for how long, a long step's own progress,
    and its counts so far."""
    table = Table(title=f"{title}  {_elapsed(time.monotonic() - run.began)}", title_justify="left", expand=True)
    # Short columns keep their width; the task and a long step's progress share the rest, cut short.
    widths = {"host": max([len(h) for h in run.hosts] + [4]), "stage": 9, "task": 20, "for": 5, "ok": 4, "changed": 7,
              "failed": 6}  # fmt: skip
    for column, style in (("host", "bold"), ("stage", "cyan"), ("task", ""), ("for", "dim"), ("progress", "magenta"),
                          ("ok", "green"), ("changed", "yellow"), ("failed", "red")):  # fmt: skip
        table.add_column(column, style=style, no_wrap=True, overflow="ellipsis", min_width=widths.get(column),
                         max_width=48 if column == "progress" else None,
                         ratio={"task": 3, "progress": 2}.get(column))  # fmt: skip
    for name, state in sorted(run.hosts.items()):
        if state.unreachable or state.failed:
            status = Text("unreachable" if state.unreachable else "failed", style="bold red")
        elif state.done:
            status = Text("done", style="bold green")
        elif state.running:
            status = Text(state.task)
        else:  # its last task ended; the play waits for other hosts, or the host has no part in it
            status = Text(f"waiting (last: {state.task})", style="dim")
        took = _elapsed(time.monotonic() - state.started) if state.running else ""
        table.add_row(name, state.stage, status, took, state.progress, str(state.ok), str(state.changed),
                      str(state.failed))  # fmt: skip
    return table


def changes(run: Run) -> Table:
    """The changed (and failed) tasks per host and stage, with their durations."""
    table = Table(title="What changed", title_justify="left")
    for column in ("host", "stage", "role", "task", "seconds"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    order = list(dict.fromkeys(run.stages.values()))
    for step in sorted(
        run.changes + run.failures, key=lambda s: (s.host, order.index(s.stage) if s.stage in order else 99)
    ):
        task = Text(("handler: " if step.handler else "") + step.task)
        if step.message:
            task = Text(f"FAILED {step.task}: {step.message[:300]}", style="red")
        table.add_row(step.host, step.stage, step.role, task, f"{step.duration:.1f}")
    return table


def canaries(run: Run) -> Table:
    """Role canary's verdict on each canary: passed or failed, and why (measures, reasons)."""
    table = Table(title="Canary verdicts", title_justify="left")
    table.add_column("host")
    table.add_column("verdict")
    table.add_column("what it saw", overflow="fold")
    for host, verdict in sorted(run.canaries.items()):
        passed = verdict["passed"]
        said = Text("passed" if passed else "FAILED, rolled back", style="green" if passed else "bold red")
        table.add_row(host, said, verdict_said(verdict["verdict"]))
    return table


def per_stage(run: Run) -> Table:
    """host x stage: how many tasks changed (0 where a stage ran and changed nothing)."""
    counts = run.changed_per_stage()
    stages = [s for s in dict.fromkeys(run.stages.values()) if any(s in c for c in counts.values())]
    table = Table(title="Changed tasks per stage", title_justify="left")
    table.add_column("host")
    for stage in stages:
        table.add_column(stage, justify="right")
    for host, row in counts.items():
        table.add_row(host, *[str(row[s]) if s in row else "-" for s in stages])
    return table


GPUS_LABEL = re.compile(r"--label=ftfleet\.gpus=([0-9,]*)")  # roles/triton_server/vars/main.yml
UNIT = re.compile(r"triton-(.+)\.service$")


def placement(diffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs each model's tritonserver would move from and to, from a plan's diffs of its unit
    (the label the unit gives its container): [{host, model, before, after}], before None for a
    model that no unit serves yet."""
    moves = []
    for entry in diffs:
        for part in entry["diff"] if isinstance(entry["diff"], list) else [entry["diff"]]:
            unit = UNIT.search(str(part.get("before_header") or "")) or UNIT.search(str(part.get("after_header") or ""))
            after = GPUS_LABEL.search(str(part.get("after") or ""))
            if not unit or not after:
                continue
            before = GPUS_LABEL.search(str(part.get("before") or ""))
            if before is None or before.group(1) != after.group(1):
                moves.append({"host": entry["host"], "model": unit.group(1),
                              "before": before.group(1) if before else None, "after": after.group(1)})  # fmt: skip
    return moves


def describe_placement(moves: list[dict[str, Any]]) -> str:
    """One line per model whose GPUs would change (docs/placement.md)."""
    return "\n".join(f"placement: {m['host']} {m['model']}: GPUs {m['before'] or '(none: a new model)'} -> {m['after']}"
                     for m in moves)  # fmt: skip


def unified(entry: dict[str, Any]) -> str:
    """One task's --diff result as a unified diff (Ansible's before/after or its prepared text)."""
    parts = entry["diff"] if isinstance(entry["diff"], list) else [entry["diff"]]
    out = []
    for part in parts:
        if part.get("prepared"):
            out.append(str(part["prepared"]))
            continue
        before, after = str(part.get("before", "")), str(part.get("after", ""))
        headers = part.get("before_header", "before"), part.get("after_header", "after")
        out.extend(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), *headers))
    return "".join(out)
